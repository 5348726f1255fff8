"""The Python client of Disque (docs/client.md): `Disque` (blocking) and `AsyncDisque`
(asyncio), on redis-py, following the original's client protocol: several nodes, HELLO,
failover, job-ID commands sent to the job's node, and consumers that move to the node
producing their jobs. It uses only the public protocol, so it talks to any Disque."""
from disque.client.aio import AsyncDisque
from disque.client.errors import (AuthenticationError, BadIdError, DisqueError, LeavingError,
                                  LoadingError, MaxLenError, MisconfError, NoJobError,
                                  NoProtoError, NoReplicationError, OutOfMemoryError,
                                  PausedError, ResponseError, TooLateError, UnavailableError,
                                  WorkerRestartedError)
from disque.client.nodes import Hello, Node
from disque.client.replies import Job, JobInfo, QueueStat
from disque.client.servers import ServerSpecError, parse_servers
from disque.client.switching import SwitchRule
from disque.client.sync import Disque

__all__ = [
    "Disque", "AsyncDisque", "Job", "JobInfo", "QueueStat", "Hello", "Node", "SwitchRule",
    "parse_servers", "ServerSpecError",
    "DisqueError", "ResponseError", "NoReplicationError", "PausedError", "OutOfMemoryError",
    "LeavingError", "BadIdError", "NoJobError", "TooLateError", "MaxLenError", "MisconfError",
    "LoadingError", "AuthenticationError", "NoProtoError", "WorkerRestartedError",
    "UnavailableError",
]
