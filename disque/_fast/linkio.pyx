# cython: language_level=3, boundscheck=True, wraparound=True
"""<u32 length, little endian><payload> frames over a non-blocking socket, in one C call per
read, frame or write, for the Python side of the direct job links
(disque/workers/job_links.py), which carry a cluster's job messages under load.

read_frames is this module's own: the bytes read come from other hosts, so each frame's
length is checked against a limit before anything is kept, and bounds checks stay on.
frame, send_or_keep and send_kept give Python callers the C functions the peer links use
(disque/_fast/sysio.pxd), so both kinds of link frame and write the same way.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport errno, EAGAIN, EINTR

from disque._fast cimport sysio
from disque._fast.sysio cimport c_recv

DEF READ_SIZE = 262144
cdef char read_buf[READ_SIZE]       # one process, one thread: every read lands here

AGAIN = -1          # nothing to read now
TOO_LONG = -2       # a frame above its limit: the peer is not one of ours


cdef inline Py_ssize_t frame_length(const unsigned char *p) noexcept:
    return (<Py_ssize_t>p[0] | (<Py_ssize_t>p[1] << 8) | (<Py_ssize_t>p[2] << 16)
            | (<Py_ssize_t>p[3] << 24))


def read_frames(int fd, bytearray pending, Py_ssize_t first_limit, Py_ssize_t limit,
                list frames):
    """One recv on `fd`: the whole frames it completes are appended to `frames` (bytes),
    a partial one is kept in `pending` for the next call. The first frame may be at most
    `first_limit` bytes long, the others `limit`. Returns the bytes read, 0 when the peer
    closed (or the socket failed), AGAIN or TOO_LONG."""
    cdef ssize_t n = c_recv(fd, read_buf, READ_SIZE, 0)
    if n < 0:
        return AGAIN if errno == EAGAIN or errno == EINTR else 0
    if n == 0:
        return 0
    cdef const unsigned char *base
    cdef Py_ssize_t size, pos = 0, flen
    cdef Py_ssize_t max_len = first_limit
    cdef bint buffered = PyByteArray_GET_SIZE(pending) > 0
    if buffered:
        pending += (<char *>read_buf)[:n]
        base = <const unsigned char *>PyByteArray_AS_STRING(pending)
        size = PyByteArray_GET_SIZE(pending)
    else:
        base = <const unsigned char *>read_buf
        size = n
    while size - pos >= 4:
        flen = frame_length(base + pos)
        if flen > max_len:
            return TOO_LONG
        if size - pos - 4 < flen:
            break
        frames.append(PyBytes_FromStringAndSize(<const char *>base + pos + 4, flen))
        pos += 4 + flen
        max_len = limit
    if buffered:
        if pos:
            del pending[:pos]
    elif pos < size:
        pending += (<char *>read_buf)[pos:size]
    return n


BROKEN = sysio.OUT_BROKEN
SENT = sysio.OUT_SENT
QUEUED = sysio.OUT_QUEUED
KEPT = sysio.OUT_KEPT


def frame(bytes payload):
    """sysio.framed for Python callers: <u32 length, little endian><payload>."""
    return sysio.framed(payload)


def send_or_keep(int fd, bytes data, bytearray out):
    """sysio.send_or_keep for Python callers: BROKEN, SENT, QUEUED or KEPT."""
    return sysio.send_or_keep(fd, data, out)


def send_kept(int fd, bytearray out):
    """sysio.send_kept for Python callers: the bytes still waiting, -1 when it failed."""
    return sysio.send_kept(fd, out)
