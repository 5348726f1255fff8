"""The worker runner's settings, one place for their defaults and their checks."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerSettings:
    concurrency: int = 4            # jobs run at once (threads, or asyncio tasks)
    grace: float = 30.0             # seconds to finish the jobs in hand after SIGTERM / SIGINT
    poll: float = 1.0               # longest GETJOB block, so a stop is seen within it
    job_timeout: float | None = None    # seconds a job may run before it counts as failed
    retry_delay: int = 1            # NACK DELAY after a first failure, doubling per delivery
    max_retry_delay: int = 300      # ... up to this
    first_working_after: float = 0.4    # a job still running then gets WORKING (RETRY >= 1 s)
    stats_interval: float = 30.0    # seconds between two stats lines (0: none)
    fastack: bool = False           # FASTACK instead of ACKJOB for done jobs

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.grace < 0:
            raise ValueError("grace must be >= 0")
        if not self.poll > 0:
            raise ValueError("poll must be > 0")
        if self.job_timeout is not None and not self.job_timeout > 0:
            raise ValueError("job timeout must be > 0")
        if self.retry_delay < 0 or self.max_retry_delay < self.retry_delay:
            raise ValueError("retry delays must satisfy 0 <= retry_delay <= max_retry_delay")
        if not 0 < self.first_working_after < 0.5:
            raise ValueError("first_working_after must be in (0, 0.5) s: the smallest RETRY "
                             "is 1 s and WORKING must come before half of it")
        if self.stats_interval < 0:
            raise ValueError("stats interval must be >= 0")
