# cython: language_level=3
"""The libc calls a process of ours makes about itself: its name, its death with its
parent, the orphans it adopts, and its C heap's free bytes and trim (disque/heap_trim.py).
In C rather than through ctypes, which a node would import (and map libffi) for these
calls alone.
`malloc_trim` and `mallinfo2` are glibc's, found at run time: without them (musl, glibc
before 2.33) `has_heap_calls` is False and the heap is left alone."""
from libc.stddef cimport size_t

cdef extern from "<sys/prctl.h>":
    int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4,
              unsigned long arg5)
    int PR_SET_NAME
    int PR_SET_PDEATHSIG
    int PR_SET_CHILD_SUBREAPER

cdef extern from "<dlfcn.h>":
    void *dlsym(void *handle, const char *symbol)
    void *RTLD_DEFAULT

cdef struct Mallinfo2:
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost

ctypedef Mallinfo2 (*mallinfo2_fn)() noexcept nogil
ctypedef int (*malloc_trim_fn)(size_t) noexcept nogil

cdef mallinfo2_fn c_mallinfo2 = <mallinfo2_fn>dlsym(RTLD_DEFAULT, "mallinfo2")
cdef malloc_trim_fn c_malloc_trim = <malloc_trim_fn>dlsym(RTLD_DEFAULT, "malloc_trim")

has_heap_calls = c_mallinfo2 != NULL and c_malloc_trim != NULL


def set_name(bytes name):
    """The name `ps -o comm` and top show (15 bytes at most)."""
    cdef bytes short = name[:15]
    prctl(PR_SET_NAME, <unsigned long><const char *>short, 0, 0, 0)


def die_with_parent(int sig):
    """Ask the kernel to send `sig` when the parent dies, even by SIGKILL."""
    prctl(PR_SET_PDEATHSIG, <unsigned long>sig, 0, 0, 0)


def become_subreaper():
    """Orphaned descendants become our children (the workers a starter forked,
    disque/worker_spawn.py), which we can then wait for."""
    if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_CHILD_SUBREAPER) failed")


def heap_free_bytes():
    """Bytes the C heap holds free (every arena's free chunks), 0 without glibc's calls."""
    if c_mallinfo2 == NULL:
        return 0
    cdef Mallinfo2 info = c_mallinfo2()
    return info.fordblks + info.fsmblks


def malloc_trim():
    """Every whole free page of the heap back to the system."""
    if c_malloc_trim != NULL:
        c_malloc_trim(0)
