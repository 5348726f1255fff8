# cython: language_level=3
"""The pages of the interpreter's free small-object pools go back to the operating system
(docs/memory.md, "RSS").

CPython's small-object allocator (pymalloc) carves 1 MiB arenas into 16 KiB pools of one
block size each, and unmaps an arena only once every pool in it is free. After a drain a
few long-lived objects made during the burst (a counter's int, a renewed buffer's owner)
keep their arenas mapped, and every free pool in them keeps the pages it dirtied: about
5 MB per worker after 600,000 jobs, with nothing in use.

So this module wraps the arena allocator (`PyObject_SetArenaAllocator`, public API) to
know every arena mapped from then on (only mappings of ARENA_SIZE, whose pool headers
read as pymalloc writes them: the same allocator maps the threads' frame stacks), and
`give_back()` walks their pool headers: a pool that is free (no block in use) has all its
pages but the first (which holds the header pymalloc keeps its free pools' list in)
handed back with MADV_DONTNEED, and its size class set to the value of a freshly carved
pool, so that pymalloc, when it takes the pool again, initialises its blocks instead of
following a free list whose pages are now zero.

The pool header's layout is CPython's (3.10 to 3.13, the GIL build): it is checked at
import on a live object, and when it does not match (a debug allocator, PYTHONMALLOC,
another interpreter) `enabled` is False and nothing is wrapped. Everything here runs
under the GIL, as pymalloc does.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uintptr_t
from libc.stdlib cimport realloc

import os
import sys

cdef extern from "Python.h":
    ctypedef void *(*arena_alloc_fn)(void *ctx, size_t size) noexcept
    ctypedef void (*arena_free_fn)(void *ctx, void *ptr, size_t size) noexcept
    ctypedef struct PyObjectArenaAllocator:
        void *ctx
        arena_alloc_fn alloc
        arena_free_fn free
    void PyObject_GetArenaAllocator(PyObjectArenaAllocator *allocator)
    void PyObject_SetArenaAllocator(PyObjectArenaAllocator *allocator)

cdef extern from "<sys/mman.h>":
    int madvise(void *addr, size_t length, int advice) nogil
    int MADV_DONTNEED

cdef extern from "<unistd.h>":
    long sysconf(int name)
    int _SC_PAGESIZE

# Objects/obmalloc.c, struct pool_header (3.10-3.13)
ctypedef struct PoolHeader:
    unsigned int count          # a union with a pointer: 8 bytes, the count at offset 0
    unsigned int count_pad
    void *freeblock
    void *nextpool
    void *prevpool
    unsigned int arenaindex
    unsigned int szidx
    unsigned int nextoffset
    unsigned int maxnextoffset

cdef enum:
    ARENA_SIZE = 1 << 20        # USE_LARGE_ARENAS, the default with the radix tree
    POOL_SIZE = 16 << 10        # USE_LARGE_POOLS, the same
    SIZE_CLASSES = 32           # 512 bytes in steps of ALIGNMENT
    POOL_OVERHEAD = 48          # the header, rounded to the 16-byte alignment
    ALIGNMENT = 16
    DUMMY_SIZE_IDX = 0xffff     # a pool carved and not yet given a size class

cdef PyObjectArenaAllocator inner       # the allocator we wrap (mmap by default)
cdef PyObjectArenaAllocator wrapper
cdef void **arenas = NULL               # every arena mapped since the wrap
cdef size_t n_arenas = 0
cdef size_t cap_arenas = 0
cdef size_t page_size = <size_t>sysconf(_SC_PAGESIZE)


cdef void *arena_alloc(void *ctx, size_t size) noexcept:
    # the arena allocator also maps the threads' frame stacks (_PyObject_VirtualAlloc,
    # 16 KiB and up): only pymalloc's arenas are of ARENA_SIZE
    global arenas, cap_arenas, n_arenas
    cdef void *ptr = inner.alloc(inner.ctx, size)
    cdef void **grown
    if ptr == NULL or size != ARENA_SIZE:
        return ptr
    if n_arenas == cap_arenas:
        grown = <void **>realloc(arenas, (cap_arenas * 2 + 64) * sizeof(void *))
        if grown == NULL:
            return ptr          # this arena is not tracked: its pools just stay resident
        arenas = grown
        cap_arenas = cap_arenas * 2 + 64
    arenas[n_arenas] = ptr
    n_arenas += 1
    return ptr


cdef void arena_free(void *ctx, void *ptr, size_t size) noexcept:
    global n_arenas
    cdef size_t i
    if size != ARENA_SIZE:
        inner.free(inner.ctx, ptr, size)
        return
    for i in range(n_arenas):
        if arenas[i] == ptr:
            n_arenas -= 1
            arenas[i] = arenas[n_arenas]
            break
    inner.free(inner.ctx, ptr, size)


cdef inline bint carved_header(PoolHeader *h):
    """Whether `h` reads as the header pymalloc writes when it carves a pool: offsets
    within the pool, a size class or the carved-and-unsized mark."""
    if h.nextoffset < POOL_OVERHEAD or h.nextoffset > POOL_SIZE or h.maxnextoffset > POOL_SIZE:
        return False
    return h.szidx < SIZE_CLASSES or h.szidx == DUMMY_SIZE_IDX


cdef bint header_matches(object probe, size_t size):
    """Whether the pool holding `probe`, an object of `size` bytes from pymalloc, has the
    header this module reads."""
    cdef uintptr_t addr = <uintptr_t><void *>probe
    cdef PoolHeader *h = <PoolHeader *>(addr & ~(<uintptr_t>POOL_SIZE - 1))
    if h.szidx != (size - 1) // ALIGNMENT or h.count < 1 or not carved_header(h):
        return False
    return (addr - <uintptr_t>h - POOL_OVERHEAD) % ((h.szidx + 1) * ALIGNMENT) == 0


def _layout_matches():
    if os.environ.get("PYTHONMALLOC", "pymalloc") != "pymalloc":
        return False
    if not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return False
    if page_size == 0 or page_size >= POOL_SIZE or POOL_SIZE % page_size:
        return False
    probes = [PyBytes_FromStringAndSize(NULL, n) for n in (7, 100, 300)]
    return all(header_matches(p, sys.getsizeof(p)) for p in probes)


enabled = _layout_matches()
if enabled:
    PyObject_GetArenaAllocator(&inner)
    wrapper.ctx = NULL
    wrapper.alloc = arena_alloc
    wrapper.free = arena_free
    PyObject_SetArenaAllocator(&wrapper)


def tracked_arenas():
    """How many arenas are mapped since the wrap (for tests)."""
    return n_arenas


cdef inline uintptr_t first_pool(uintptr_t base):
    return (base + POOL_SIZE - 1) & ~(<uintptr_t>POOL_SIZE - 1)


cdef bint is_arena(uintptr_t base):
    """Whether every carved pool of the mapping at `base` has a header pymalloc wrote: one
    arena index for all, a size class, offsets within the pool. A frame stack of
    ARENA_SIZE (a single frame of 64K slots would need one) does not pass."""
    cdef uintptr_t pool = first_pool(base), end = base + ARENA_SIZE
    cdef PoolHeader *h
    cdef long index = -1
    while pool + POOL_SIZE <= end:
        h = <PoolHeader *>pool
        if h.nextoffset != 0:
            if index < 0:
                index = h.arenaindex
            if h.arenaindex != index or not carved_header(h):
                return False
        pool += POOL_SIZE
    return True


def give_back():
    """Hand back the pages of every free pool not handed back yet: the bytes returned."""
    cdef size_t i, given = 0
    cdef uintptr_t base, pool, end
    cdef PoolHeader *h
    if not enabled:
        return 0
    for i in range(n_arenas):
        base = <uintptr_t>arenas[i]
        if not is_arena(base):
            continue
        end = base + ARENA_SIZE
        pool = first_pool(base)
        while pool + POOL_SIZE <= end:
            h = <PoolHeader *>pool
            # nextoffset 0: never carved (its pages were never touched; reading maps
            # the zero page); szidx DUMMY_SIZE_IDX: free and handed back already
            if h.count == 0 and h.nextoffset != 0 and h.szidx != DUMMY_SIZE_IDX:
                if madvise(<void *>(pool + page_size), POOL_SIZE - page_size,
                           MADV_DONTNEED) == 0:
                    h.szidx = DUMMY_SIZE_IDX
                    given += POOL_SIZE - page_size
            pool += POOL_SIZE
    return given
