"""`AsyncDisque`: the asyncio client, on redis-py's asyncio connection pools. The typed
methods are `Disque`'s (disque.client.commands); here each returns a coroutine."""
from __future__ import annotations

import asyncio

from disque.client.base import ClientBase
from disque.client.errors import (FETCH_MOVES_ON, UNAVAILABLE, LeavingError,
                                  UnavailableError)
from disque.client.nodes import Failover
from disque.client.protocol import async_pool

ASYNC_UNAVAILABLE = (*UNAVAILABLE, asyncio.TimeoutError)


class AsyncDisque(ClientBase):
    """A Disque cluster seen from asyncio; the same arguments and methods as `Disque`.

        >>> client = AsyncDisque("disque://127.0.0.1:7711")
        >>> jid = await client.add_job("emails", b"payload", retry=30)
        >>> for job in await client.get_jobs("emails", timeout=1.0):
        ...     await job.ack()
    """

    _make_pool = staticmethod(async_pool)

    async def _run(self, args, block=None, moves_on=ASYNC_UNAVAILABLE, failover_timeout=None):
        address = (self._current if self._clock() < self._hello_due
                   else await self._ready(failover_timeout=failover_timeout))
        try:
            return await self._send(address, args, block), address
        except moves_on as exc:
            return await self._failover(args, address, exc, block, failover_timeout)

    async def _call(self, args, parse):
        reply = (await self._run(args))[0]
        return reply if parse is None else parse(reply)

    async def _fetch(self, args, block, failover_timeout=None):
        return self._jobs(*await self._run(args, block, (*FETCH_MOVES_ON, asyncio.TimeoutError),
                                           failover_timeout))

    async def _call_for_jobs(self, name, jobs, tail=(), parse=int):
        results = []
        for address, ids in self._groups(jobs):
            args = (name, *ids, *tail)
            if address is not None and address != self._current:
                try:
                    reply = await self._send(address, args)
                    results.append(reply if parse is None else parse(reply))
                    continue
                except ASYNC_UNAVAILABLE as exc:
                    self._table.mark_failed(address)
                    self._note_failure(address, exc)
            results.append(await self._call(args, parse))
        return self._sum_or_one(results)

    async def _first(self, pending):
        jobs = await pending
        return jobs[0] if jobs else None

    async def hello(self):
        await self._ready(force=True)
        return self._table.hello

    async def _send(self, address, args, block=None, control=False):
        pool = self._pool(address, control)
        conn = await pool.get_connection()
        try:
            await conn.send_command(*args)
            if block is None or self.socket_timeout is None:
                return await conn.read_response()
            timeout = self._blocking_timeout(block)
            return await conn.read_response(timeout=None if timeout == float("inf") else timeout)
        finally:
            await pool.release(conn)

    async def _hello_at(self, address):
        reply = await self._send(address, ("HELLO",), control=True)
        return self._adopt(self._hello_reply(reply, address), address)

    async def _ready(self, force=False, failover_timeout=None):
        address = self._current
        if address is not None and (force or self._clock() >= self._hello_due):
            self._hello_due = self._clock() + self.hello_interval   # one HELLO, not one per thread
            try:
                await self._hello_at(address)
            except ASYNC_UNAVAILABLE as exc:
                await self._failover(None, address, exc, failover_timeout=failover_timeout)
        elif address is None:
            await self._failover(None, None, None, failover_timeout=failover_timeout)
        return self._current

    async def _failover(self, args, failed, error, block=None, failover_timeout=None):
        if failed is not None:
            self._note_failure(failed, error)
        attempt = Failover(self._table, failed, self._failover_timeout(failover_timeout))
        attempt.last_error = error
        for step in attempt:
            if isinstance(step, float):
                await asyncio.sleep(step)
                continue
            try:
                await self._hello_at(step)
                return (None if args is None else await self._send(step, args, block)), step
            except (LeavingError, *ASYNC_UNAVAILABLE) as exc:
                attempt.failed(step, exc)
        error = attempt.last_error
        raise UnavailableError(self._unavailable_message(error, failover_timeout)) from error

    async def scan_queues(self, **filters):
        cursor = None
        while cursor != 0:
            cursor, names = await self.qscan(cursor or 0, **filters)
            for name in names:
                yield name

    async def scan_jobs(self, **filters):
        cursor = None
        while cursor != 0:
            cursor, items = await self.jscan(cursor or 0, **filters)
            for item in items:
                yield item

    async def connect(self, failover_timeout=None):
        await self._ready(force=self._current is not None, failover_timeout=failover_timeout)
        return self._current_id

    async def aclose(self):
        for pool in list(self._pools.values()):
            await pool.disconnect()
        self._pools.clear()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
