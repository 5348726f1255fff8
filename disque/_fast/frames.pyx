# cython: language_level=3, boundscheck=True, wraparound=True
"""The one reader of the <u32 length, little endian><payload> frames every stream link
between processes carries (docs/design.md, "Contracts between processes"): the worker link
(disque/contracts/worker_link.py), the hand-over channel (connection_handover.py), the peer
links (peerlinks.pyx) and the direct job links (job_links.py). The writing half is
sysio.framed, and for Python callers (the job links) `frame` with send_or_keep and
send_kept, the write path the peer links use too.

Each frame's length is checked against a limit as soon as its header is read, before
anything of it is kept: a frame above the limit is FRAMES_TOO_LONG, which the caller answers
by closing that link, so no peer can make a reader buffer without bound. Reads land in one
static C buffer (one process, one thread) and only a partial frame is copied out: a fresh
buffer per read measured as costing more than the rest of a command (glibc mmap/munmap).
Bounds checks stay on: the job links' bytes come from other hosts.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport errno, EAGAIN, EINTR

from disque._fast cimport sysio
from disque._fast.sysio cimport c_recv

cdef char read_buf[FRAMES_READ_SIZE]

READ_SIZE = FRAMES_READ_SIZE
AGAIN = FRAMES_AGAIN
TOO_LONG = FRAMES_TOO_LONG
MAX_LENGTH = 0xFFFFFFFF     # what the u32 header can say: the limit of links between our own processes


cdef inline Py_ssize_t frame_length(const unsigned char *p) noexcept:
    return (<Py_ssize_t>p[0] | (<Py_ssize_t>p[1] << 8) | (<Py_ssize_t>p[2] << 16)
            | (<Py_ssize_t>p[3] << 24))


cdef Py_ssize_t split_frames(const unsigned char *base, Py_ssize_t size, Py_ssize_t first_limit,
                             Py_ssize_t limit, list frames) except -3:
    """Append the whole frames in base[:size] to `frames` (bytes each); returns the bytes
    they took, or FRAMES_TOO_LONG when a header announces more than its limit (`first_limit`
    for the first frame, `limit` for the others)."""
    cdef Py_ssize_t pos = 0, flen, max_len = first_limit
    while size - pos >= 4:
        flen = frame_length(base + pos)
        if flen > max_len:
            return FRAMES_TOO_LONG
        if size - pos - 4 < flen:
            break
        frames.append(PyBytes_FromStringAndSize(<const char *>base + pos + 4, flen))
        pos += 4 + flen
        max_len = limit
    return pos


cdef Py_ssize_t split_more(bytearray pending, const char *data, Py_ssize_t n,
                           Py_ssize_t first_limit, Py_ssize_t limit, list frames) except -3:
    """`data` after what `pending` holds: the whole frames to `frames`, the partial one
    kept in `pending`. Returns FRAMES_TOO_LONG or 0."""
    cdef Py_ssize_t used, have = PyByteArray_GET_SIZE(pending)
    if have:
        pending += data[:n]
        used = split_frames(<const unsigned char *>PyByteArray_AS_STRING(pending), have + n,
                            first_limit, limit, frames)
        if used > 0:
            del pending[:used]
    else:
        used = split_frames(<const unsigned char *>data, n, first_limit, limit, frames)
        if 0 <= used < n:
            pending += data[used:n]
    return FRAMES_TOO_LONG if used == FRAMES_TOO_LONG else 0


cdef Py_ssize_t recv_frames(int fd, bytearray pending, Py_ssize_t first_limit, Py_ssize_t limit,
                            list frames, int flags) except -3:
    """One recv on `fd`; the frames it completes go to `frames`, a partial one stays in
    `pending` for the next call. Returns the bytes read, 0 when the peer closed (or the
    socket failed), FRAMES_AGAIN or FRAMES_TOO_LONG."""
    cdef ssize_t n = c_recv(fd, read_buf, FRAMES_READ_SIZE, flags)
    if n < 0:
        return FRAMES_AGAIN if errno == EAGAIN or errno == EINTR else 0
    if n == 0:
        return 0
    if split_more(pending, read_buf, n, first_limit, limit, frames) == FRAMES_TOO_LONG:
        return FRAMES_TOO_LONG
    return n


# ---- for Python callers ------------------------------------------------------------------

def read_frames(int fd, bytearray pending, Py_ssize_t first_limit, Py_ssize_t limit,
                list frames, int flags=0):
    """recv_frames: the bytes read, 0 (closed or failed), AGAIN or TOO_LONG."""
    return recv_frames(fd, pending, first_limit, limit, frames, flags)


def feed(bytearray pending, bytes data, Py_ssize_t limit, list frames):
    """Bytes read elsewhere (recvmsg, for descriptors): the frames they complete go to
    `frames`. Returns TOO_LONG or 0."""
    return split_more(pending, PyBytes_AS_STRING(data), len(data), limit, limit, frames)


def feed_buffer(bytearray pending, bytearray buf, Py_ssize_t n, Py_ssize_t first_limit,
                Py_ssize_t limit, list frames):
    """split_more for bytes a Python caller read into `buf` (buf[:n]; a TLS socket's
    recv_into, disque/workers/job_links.py): the whole frames to `frames`, a partial one kept
    in `pending`. Returns TOO_LONG or 0."""
    if n < 0 or n > PyByteArray_GET_SIZE(buf):
        raise ValueError("n out of the buffer")
    return split_more(pending, PyByteArray_AS_STRING(buf), n, first_limit, limit, frames)


def frame(bytes payload):
    """sysio.framed: <u32 length, little endian><payload>."""
    return sysio.framed(payload)


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
