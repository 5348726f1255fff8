"""The compiler's prefetch hint, for the cores whose walks touch memory written long ago (a
spilled job, a bucket of a table of millions): a declaration only, compiled into each."""

cdef extern from *:
    void prefetch "__builtin_prefetch" (const void *addr) noexcept nogil
