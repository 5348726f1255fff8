"""Messages between the workers of a node on their peer links (docs/design.md, "Connections
served by their worker"; disque/workers/peer_links.py, disque/_fast/peerlinks.pyx).

One Unix socketpair per pair of workers. Frames <u32 length><msgpack list of entries>
(read by disque/_fast/frames.pyx), each entry one of:
  [REQUEST, reqid, argv]      run this command (route queue / id / ids, or GETJOB NOHANG)
  [REPLY, reqid, resp_bytes]  its reply, sent after the AOF record of the command is written
Both are on the per-command path: peerlinks.pyx builds the lists inline with these kinds
(tests/test_messages.py holds them to the encoders).
"""
from typing import NamedTuple

from disque._fast import frames
from disque.contracts.typed import by_kind, message

REQUEST = 0
REPLY = 1
MAX_FRAME = frames.MAX_LENGTH   # both ends are this node's processes: the header's own limit


@message(REQUEST)
class Request(NamedTuple):
    reqid: int
    argv: list


@message(REPLY)
class Reply(NamedTuple):
    reqid: int
    reply: bytes


ENTRIES = by_kind(Request, Reply)
