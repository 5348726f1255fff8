"""One test body for both clients: `Api` drives a `Disque` as it is and an `AsyncDisque`
through an event loop of its own, so every call of a test returns a value either way."""
from __future__ import annotations

import asyncio
import inspect

from disque.client import AsyncDisque, Disque


class Api:
    def __init__(self, kind, *servers, **options):
        self.kind = kind
        self.loop = asyncio.new_event_loop() if kind == "async" else None
        cls = AsyncDisque if kind == "async" else Disque
        self.client = cls(*servers, **options)

    def wait(self, value):
        """The value of a call: a coroutine is run to its end."""
        if inspect.isawaitable(value):
            return self.loop.run_until_complete(value)
        return value

    def collect(self, iterator):
        if inspect.isasyncgen(iterator):
            async def gather():
                return [item async for item in iterator]
            return self.loop.run_until_complete(gather())
        return list(iterator)

    def __getattr__(self, name):
        attr = getattr(self.client, name)
        if not callable(attr) or name in ("scan_queues", "scan_jobs"):
            return attr
        return lambda *a, **kw: self.wait(attr(*a, **kw))

    def close(self):
        if self.loop is not None:
            self.loop.run_until_complete(self.client.aclose())
            self.loop.close()
        else:
            self.client.close()
