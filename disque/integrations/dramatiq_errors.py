"""The Disque errors a Dramatiq broker reports as Dramatiq's connection errors.

Dramatiq's worker treats `BrokerConnectionError` as "the broker is away for now": a consumer
logs it on one line and restarts after a pause, an ACK or a dead-lettering is tried again
every few seconds. So a cluster nobody reaches, a node that lost its replicas or is still
loading, a refused password and a node worker restarted mid-command become those, with
the client's own one-line explanation (docs/frameworks.md). Any other Disque error is a
bug or a misuse and goes up unchanged.
"""
from __future__ import annotations

from contextlib import contextmanager

from dramatiq.errors import ConnectionClosed, ConnectionFailed

from disque.client.errors import (AuthenticationError, LoadingError, NoReplicationError,
                                  UnavailableError, WorkerRestartedError)

# the cluster may come back, or the command may be tried again as it is
TRANSIENT = (UnavailableError, NoReplicationError, LoadingError, WorkerRestartedError)


def describe(exc):
    """One line: the error, and for an unreachable cluster the last connection error."""
    line = str(exc)
    cause = exc.__cause__
    if isinstance(exc, UnavailableError) and cause is not None:
        line = "%s: %s" % (line, str(cause).strip() or type(cause).__name__)
    return " ".join(line.split())


@contextmanager
def as_broker_errors():
    """Run Disque calls; raise what Dramatiq's worker knows how to wait out."""
    try:
        yield
    except AuthenticationError as exc:
        raise ConnectionFailed("Disque refused the connection: %s" % describe(exc)) from exc
    except TRANSIENT as exc:
        raise ConnectionClosed("Disque unavailable: %s" % describe(exc)) from exc
