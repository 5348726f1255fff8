"""The system calls and the monotonic clock the Cython cores share. Declarations and inline
functions only: each core compiles them in, with no module of their own."""
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME

cdef extern from "<sys/socket.h>" nogil:
    ssize_t c_recv "recv"(int fd, void *buf, size_t n, int flags)
    ssize_t c_send "send"(int fd, const void *buf, size_t n, int flags)
    int MSG_NOSIGNAL


cdef inline long long mono_ns() noexcept nogil:
    """CLOCK_MONOTONIC in ns: time.monotonic()'s clock, without a Python call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef inline long long mono_us() noexcept nogil:
    return mono_ns() // 1000


cdef inline long long real_ms() noexcept nogil:
    """CLOCK_REALTIME in ms: int(time.time() * 1000), without a Python call."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <long long>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
