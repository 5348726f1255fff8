"""The worker's end of its link to the front-end (disque/workers/link.py): a front-end that
is gone (killed -9) ends the worker loop quietly. The long fault run found a worker that
raised BrokenPipeError on its next batch of replies instead, a traceback in the node's log
for every node killed under load."""
import socket

import pytest

from disque.workers.link import WorkerUnixLink

pytestmark = pytest.mark.unit


def test_a_send_to_a_front_end_that_is_gone_closes_the_link():
    front, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = WorkerUnixLink(worker_end.detach())
    try:
        link.send(b"first batch")
        assert front.recv(100).endswith(b"first batch") and not link.closed
        front.close()
        link.send(b"replies nobody reads")      # EPIPE: no exception, the loop ends
        assert link.closed
    finally:
        link.close()


def test_a_reset_from_a_front_end_that_is_gone_closes_the_link():
    """recv_all on a link the front-end reset (it died with replies unread)."""
    import struct
    front, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = WorkerUnixLink(worker_end.detach())
    try:
        front.sendall(struct.pack("<I", 5) + b"batch")
        assert link.recv_all() == [b"batch"] and not link.closed
        link.send(b"a reply the front-end never reads")
        front.close()                   # unread data: the worker's side sees a reset
        assert link.recv_all() == [] and link.closed
    finally:
        link.close()
