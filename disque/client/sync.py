"""`Disque`: the blocking client, on redis-py connection pools (one per node). Safe to
share between threads: each command takes a connection of its node's pool."""
from __future__ import annotations

import time

from disque.client.base import ClientBase
from disque.client.errors import (FETCH_MOVES_ON, UNAVAILABLE, LeavingError,
                                  UnavailableError)
from disque.client.nodes import Failover
from disque.client.protocol import sync_pool


class Disque(ClientBase):
    """A Disque cluster seen from Python (docs/client.md).

        >>> client = Disque("127.0.0.1:7711", "127.0.0.1:7712")
        >>> jid = client.add_job("emails", b"payload", retry=30)
        >>> for job in client.get_jobs("emails", timeout=1.0):
        ...     job.ack()
    """

    _make_pool = staticmethod(sync_pool)

    # -- the I/O the typed methods use ------------------------------------------
    def _run(self, args, block=None, moves_on=UNAVAILABLE, failover_timeout=None):
        """Send to the node in use (HELLO first when due); on an error of `moves_on`, to the
        next node that answers, for at most `failover_timeout` (None: the client's).
        Returns (reply, address)."""
        address = (self._current if self._clock() < self._hello_due
                   else self._ready(failover_timeout=failover_timeout))
        try:
            return self._send(address, args, block), address
        except moves_on as exc:
            return self._failover(args, address, exc, block, failover_timeout)

    def _call(self, args, parse):
        reply = self._run(args)[0]
        return reply if parse is None else parse(reply)

    def _fetch(self, args, block, failover_timeout=None):
        return self._jobs(*self._run(args, block, FETCH_MOVES_ON, failover_timeout))

    def _call_for_jobs(self, name, jobs, tail=(), parse=int):
        results = []
        for address, ids in self._groups(jobs):
            args = (name, *ids, *tail)
            if address is None or address == self._current:
                results.append(self._call(args, parse))
                continue
            try:
                reply = self._send(address, args)
            except UNAVAILABLE as exc:
                self._table.mark_failed(address)
                self._note_failure(address, exc)
                results.append(self._call(args, parse))
            else:
                results.append(reply if parse is None else parse(reply))
        return self._sum_or_one(results)

    def _first(self, jobs):
        return jobs[0] if jobs else None

    def hello(self):
        """HELLO of the node in use, as a `Hello` (its ID, and every node with its address
        and priority); the node list is learnt from it."""
        self._ready(force=True)
        return self._table.hello

    # -- connections --------------------------------------------------------------
    def _send(self, address, args, block=None, control=False):
        pool = self._pool(address, control)
        conn = pool.get_connection()
        try:
            conn.send_command(*args)
            if block is None or self.socket_timeout is None:
                return conn.read_response()
            return self._read_blocking(conn, self._blocking_timeout(block))
        finally:
            pool.release(conn)

    @staticmethod
    def _read_blocking(conn, timeout):
        """A read allowed to outlast socket_timeout (redis-py < 8 has no per-read timeout
        on sync connections: the socket's own is set for it, as redis-py's parsers do)."""
        conn._sock.settimeout(None if timeout == float("inf") else timeout)
        try:
            return conn.read_response()
        finally:
            if conn._sock is not None:
                conn._sock.settimeout(conn.socket_timeout)

    def _hello_at(self, address):
        reply = self._send(address, ("HELLO",), control=True)
        return self._adopt(self._hello_reply(reply, address), address)

    def _ready(self, force=False, failover_timeout=None):
        """The address to use: connect on first use, HELLO again when due."""
        address = self._current
        if address is not None and (force or self._clock() >= self._hello_due):
            self._hello_due = self._clock() + self.hello_interval   # one HELLO, not one per thread
            try:
                self._hello_at(address)
            except UNAVAILABLE as exc:
                self._failover(None, address, exc, failover_timeout=failover_timeout)
        elif address is None:
            self._failover(None, None, None, failover_timeout=failover_timeout)
        return self._current

    def _failover(self, args, failed, error, block=None, failover_timeout=None):
        """Try the other nodes, best first, until one answers HELLO (and `args`, if any)
        or the deadline passes. Returns (reply, address)."""
        if failed is not None:
            self._note_failure(failed, error)
        attempt = Failover(self._table, failed, self._failover_timeout(failover_timeout))
        attempt.last_error = error
        for step in attempt:
            if isinstance(step, float):
                time.sleep(step)
                continue
            try:
                self._hello_at(step)
                return (None if args is None else self._send(step, args, block)), step
            except (LeavingError, *UNAVAILABLE) as exc:
                attempt.failed(step, exc)
        error = attempt.last_error
        raise UnavailableError(self._unavailable_message(error, failover_timeout)) from error

    # -- scans and lifetime --------------------------------------------------------
    def scan_queues(self, **filters):
        """Every queue name QSCAN yields (filters: count, minlen, maxlen, importrate)."""
        cursor = None
        while cursor != 0:
            cursor, names = self.qscan(cursor or 0, **filters)
            yield from names

    def scan_jobs(self, **filters):
        """Every job JSCAN yields (filters: count, queue, states, reply)."""
        cursor = None
        while cursor != 0:
            cursor, items = self.jscan(cursor or 0, **filters)
            yield from items

    def connect(self, failover_timeout=None):
        """Connect now (commands otherwise connect on first use); returns the node's ID.
        `failover_timeout`: how long to try the nodes (None: the client's)."""
        self._ready(force=self._current is not None, failover_timeout=failover_timeout)
        return self._current_id

    def close(self):
        for pool in list(self._pools.values()):
            pool.disconnect()
        self._pools.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
