"""The client's exceptions: one class per error code the server answers, all under
`DisqueError`, so a caller catches what it can handle by name.

Error replies are turned into these by the parser itself (`disque.client.protocol`), so
every path (sync, asyncio, a pipeline of redis-py) raises the same class. They also derive
from redis-py's `ResponseError`, which is what redis-py raises for an error reply.
"""
from __future__ import annotations

import redis.exceptions


class DisqueError(Exception):
    """Base of every exception this client raises."""


class ResponseError(DisqueError, redis.exceptions.ResponseError):
    """An error reply. `code` is its first word (ERR, NOREPL, ...), `message` the rest."""

    code = "ERR"

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s %s" % (self.code, self.message)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class NoReplicationError(ResponseError):
    """-NOREPL: too few reachable nodes, or the ADDJOB timeout came before the copies."""
    code = "NOREPL"


class PausedError(ResponseError):
    """-PAUSED: the queue is paused in input."""
    code = "PAUSED"


class OutOfMemoryError(ResponseError):
    """-OOM: the node is above maxmemory and refuses new jobs."""
    code = "OOM"


class LeavingError(ResponseError):
    """-LEAVING: the node is leaving the cluster; the client moves to another node."""
    code = "LEAVING"


class BadIdError(ResponseError):
    """-BADID: a job ID that is not 40 characters of the right shape."""
    code = "BADID"


class NoJobError(ResponseError):
    """-NOJOB: the node does not know the job (WORKING)."""
    code = "NOJOB"


class TooLateError(ResponseError):
    """-TOOLATE: half the job's TTL has elapsed, WORKING can no longer postpone it."""
    code = "TOOLATE"


class MaxLenError(ResponseError):
    """-MAXLEN: the queue already holds ADDJOB's MAXLEN jobs."""
    code = "MAXLEN"


class MisconfError(ResponseError):
    """-MISCONF: the node cannot write its AOF and refuses writes."""
    code = "MISCONF"


class LoadingError(ResponseError):
    """-LOADING: the node is still loading its AOF."""
    code = "LOADING"


class AuthenticationError(ResponseError):
    """-NOAUTH, -WRONGPASS, or a refused AUTH: the password is missing or wrong."""
    code = "NOAUTH"


class NoProtoError(ResponseError):
    """-NOPROTO: a protocol version the node does not speak."""
    code = "NOPROTO"


class WorkerRestartedError(ResponseError):
    """The node's worker process died while running the command and was restarted: the
    command may or may not have taken effect."""


class UnavailableError(DisqueError):
    """No node answered within the client's deadline (`Disque(failover_timeout=...)`)."""


BY_CODE = {cls.code: cls for cls in (
    NoReplicationError, PausedError, OutOfMemoryError, LeavingError, BadIdError, NoJobError,
    TooLateError, MaxLenError, MisconfError, LoadingError, NoProtoError)}
BY_CODE["NOAUTH"] = BY_CODE["WRONGPASS"] = AuthenticationError

# -ERR replies that mean something a caller handles apart
_ERR_PREFIXES = (
    ("invalid password", AuthenticationError),
    ("Client sent AUTH, but no password is set", AuthenticationError),
    ("worker process died", WorkerRestartedError),
)


def from_reply(text: str) -> ResponseError:
    """The exception for an error reply's text (without its leading '-')."""
    code, _, message = text.partition(" ")
    cls = BY_CODE.get(code)
    if cls is not None:
        return cls(message, code)
    if code != "ERR":
        return ResponseError(message, code)
    for prefix, cls in _ERR_PREFIXES:
        if message.startswith(prefix):
            return cls(message, code)
    return ResponseError(message, code)


# the node is gone or does not answer
CONNECTION_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                     ConnectionError, TimeoutError)
# what makes the client try another node: that, or a node restarting (still loading its
# AOF), which a producer must not wait for when another node can take its job
UNAVAILABLE = (LoadingError, *CONNECTION_ERRORS)
# a GETJOB also moves on from a node that is leaving (the original's client protocol)
FETCH_MOVES_ON = (LeavingError, *UNAVAILABLE)
