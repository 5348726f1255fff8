# cython: language_level=3
"""The C calls the Python side of the direct job links (disque/workers/job_links.py) reads
and writes its frames with: read_frames, feed_buffer (for what a TLS socket decrypted) and
frame from disque/_fast/frames.pyx (the one frame reader, with its length limits), send_or_keep and send_kept from
disque/_fast/sysio.pxd (the write path the peer links use too), so both kinds of link frame
and write the same way.
"""
from disque._fast cimport sysio

from disque._fast.frames import AGAIN, TOO_LONG, feed_buffer, frame, read_frames  # noqa: F401

BROKEN = sysio.OUT_BROKEN
SENT = sysio.OUT_SENT
QUEUED = sysio.OUT_QUEUED
KEPT = sysio.OUT_KEPT


def send_or_keep(int fd, bytes data, bytearray out):
    """sysio.send_or_keep for Python callers: BROKEN, SENT, QUEUED or KEPT."""
    return sysio.send_or_keep(fd, data, out)


def send_kept(int fd, bytearray out):
    """sysio.send_kept for Python callers: the bytes still waiting, -1 when it failed."""
    return sysio.send_kept(fd, out)
