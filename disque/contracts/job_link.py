"""Messages on the direct job links between the workers of two nodes (docs/design.md,
"Direct job links"; disque/workers/job_links.py).

Frames are <u32 length, little endian><msgpack> (read by disque/_fast/frames.pyx, with the
limits below: the bytes come from other hosts). The first frame on a connection is the
Hello; every later one is a list of bus_messages.JobMessage ([type, flags, payload], as a
JOBS bus frame carries), built inline by disque/_fast/busrelay.pyx (group_by_link).
"""
from typing import NamedTuple

from disque.contracts.typed import message

HELLO = b"disque-job-link"
VERSION = 1
MAX_FRAME = 1 << 30             # a frame above this is not ours: the link is closed
MAX_HELLO = 256                 # nor a first frame above this (HTTP, TLS ... fail at once)


@message(HELLO)
class Hello(NamedTuple):
    version: int
    sender: bytes               # the sending node's id
    receiver: bytes             # the node id it means to reach
    worker: int                 # and that node's worker


def read_hello(msg):
    """The Hello `msg` is, None when it is none (another version or not ours)."""
    try:
        hello = Hello.decode(msg)
    except ValueError:
        return None
    if hello.version != VERSION or type(hello.sender) is not bytes or len(hello.sender) != 40:
        return None
    return hello
