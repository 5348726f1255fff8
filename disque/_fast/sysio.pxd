"""The system calls and the monotonic clock the Cython cores share. Declarations and inline
functions only: each core compiles them in, with no module of their own."""
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.errno cimport errno, EAGAIN, EINTR
from libc.string cimport memcpy

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_recv "recv"(int fd, void *buf, size_t n, int flags)
    ssize_t c_send "send"(int fd, const void *buf, size_t n, int flags)
    int MSG_NOSIGNAL


cdef inline void put_frame_length(unsigned char *p, Py_ssize_t n) noexcept:
    """A frame's header: its length, u32 little endian (frames.pyx frame_length reads it)."""
    p[0] = n & 0xff
    p[1] = (n >> 8) & 0xff
    p[2] = (n >> 16) & 0xff
    p[3] = (n >> 24) & 0xff


cdef inline bytes framed(bytes payload):
    """<u32 length, little endian><payload> in one bytes object: the writing half of
    disque/contracts/worker_link.py's format (frame), for the links between workers (peer
    links) and between nodes (direct job links). Calling frame() (a Python call and a second
    copy per frame) measured about 1 µs more per job on the 1,000-queue load with 2
    workers."""
    cdef Py_ssize_t n = len(payload)
    cdef bytes data = PyBytes_FromStringAndSize(NULL, n + 4)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(data)
    put_frame_length(p, n)
    memcpy(p + 4, PyBytes_AS_STRING(payload), n)
    return data


# send_or_keep's answers: what the caller does next with its poll
cdef enum:
    OUT_BROKEN = -1     # the connection failed: close it
    OUT_SENT = 0        # all of it went
    OUT_QUEUED = 1      # appended behind output already waiting (EPOLLOUT is asked for)
    OUT_KEPT = 2        # the socket took part of it: the rest waits, ask for EPOLLOUT


cdef inline int send_or_keep(int fd, bytes data, bytearray out) except -2:
    """Send `data` on a non-blocking socket whose unsent output waits in `out`, never
    blocking and never reordering: the one write path of the links between processes
    (peer links, direct job links)."""
    if PyByteArray_GET_SIZE(out):
        out += data
        return OUT_QUEUED
    cdef Py_ssize_t size = len(data)
    cdef ssize_t n = c_send(fd, PyBytes_AS_STRING(data), size, MSG_NOSIGNAL)
    if n < 0:
        if errno != EAGAIN and errno != EINTR:
            return OUT_BROKEN
        n = 0
    if n < size:
        out += data[n:]
        return OUT_KEPT
    return OUT_SENT


cdef inline Py_ssize_t send_kept(int fd, bytearray out) except -2:
    """On EPOLLOUT: send what waits in `out`; returns what still waits, -1 when the
    connection failed."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(out)
    cdef ssize_t n = c_send(fd, PyByteArray_AS_STRING(out), size, MSG_NOSIGNAL)
    if n < 0:
        if errno == EAGAIN or errno == EINTR:
            return size
        return -1
    del out[:n]
    return size - n


cdef inline long long mono_ns() noexcept nogil:
    """CLOCK_MONOTONIC in ns: time.monotonic()'s clock, without a Python call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline long long mono_us() noexcept nogil:
    return mono_ns() // 1000

