# cython: language_level=3
"""A periodic timer as a file descriptor (Linux timerfd).

Workers and the front-end wait for I/O with an infinite timeout and get their cron tick
from this fd. Passing a finite timeout to every poll()/epoll_wait() instead arms and
cancels a kernel timer on each call, which on a VM means extra exits per command;
the periodic timerfd is re-armed by the kernel itself, once per period.
"""
from libc.errno cimport errno, EAGAIN
from posix.unistd cimport read, close

cdef extern from "<time.h>":
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec

cdef extern from "<sys/timerfd.h>":
    cdef struct itimerspec:
        timespec it_interval
        timespec it_value
    int timerfd_create(int clockid, int flags)
    int timerfd_settime(int fd, int flags, const itimerspec *new_value, itimerspec *old_value)
    int TFD_NONBLOCK
    int TFD_CLOEXEC

cdef extern from "<time.h>":
    int CLOCK_MONOTONIC


cdef class PeriodicTimer:
    cdef int fd
    cdef public int interval_ms

    def __cinit__(self, int interval_ms):
        self.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(errno, "timerfd_create failed")
        self.interval_ms = 0
        self.set_interval(interval_ms)

    def set_interval(self, int interval_ms):
        cdef itimerspec spec
        spec.it_interval.tv_sec = interval_ms // 1000
        spec.it_interval.tv_nsec = (interval_ms % 1000) * 1000000
        spec.it_value = spec.it_interval
        if timerfd_settime(self.fd, 0, &spec, NULL) < 0:
            raise OSError(errno, "timerfd_settime failed")
        self.interval_ms = interval_ms

    def fileno(self):
        return self.fd

    def drain(self):
        """Consume the expirations counter; returns how many periods passed (0 if none)."""
        cdef unsigned long long n = 0
        if read(self.fd, &n, 8) != 8:
            return 0
        return n

    def close(self):
        if self.fd >= 0:
            close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)
