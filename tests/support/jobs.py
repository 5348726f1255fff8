"""Small job helpers: SHOW as a dict, ADDJOB over a raw connection, queue names."""
from __future__ import annotations

import re

from support.resp_client import RawConn, Status


JOB_ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


SHOW_FIELDS = [b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry",
               b"nacks", b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed",
               b"next-requeue-within", b"next-awake-within", b"body"]


def show(conn: RawConn, job_id):
    """SHOW as a dict (None for unknown jobs)."""
    reply = conn.execute("SHOW", job_id)
    if reply is None:
        return None
    assert isinstance(reply, list) and len(reply) == 30, reply
    return dict(zip(reply[0::2], reply[1::2]))


def addjob(conn: RawConn, queue, body=b"body", timeout=0, *opts) -> bytes:
    reply = conn.execute("ADDJOB", queue, body, timeout, *opts)
    assert type(reply) is Status, reply
    return bytes(reply)


def queue_names(prefix: str, n: int):
    return [f"{prefix}-{i}" for i in range(n)]
