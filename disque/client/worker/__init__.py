"""The worker runner (docs/client.md, "The worker runner"): `Worker` runs a function on
threads, `AsyncWorker` an `async def` function as asyncio tasks; `disque-worker` is the
command line of both."""
from disque.client.worker.jobflow import JobTimeout
from disque.client.worker.settings import WorkerSettings
from disque.client.worker.stats import StatsSnapshot
from disque.client.worker.tasks import AsyncWorker
from disque.client.worker.threads import Worker

__all__ = ["Worker", "AsyncWorker", "WorkerSettings", "StatsSnapshot", "JobTimeout"]
