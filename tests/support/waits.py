"""Waiting on a condition with a deadline: tests never sleep a fixed time."""
from __future__ import annotations

import time



def wait_until(predicate, timeout=5.0, interval=0.02, message=None):
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises AssertionError (with ``message``) when the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # predicate may race with the server
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = message or f"condition not met within {timeout}s"
            if last_exc is not None:
                msg += f" (last exception: {last_exc!r})"
            raise AssertionError(msg)
        time.sleep(interval)
