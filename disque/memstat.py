"""Memory figures of this process for the maxmemory checks (SPEC 9).

`used_bytes()` is the resident set size minus what glibc's malloc holds free for reuse.
After a large reply or a burst of big job bodies is freed, malloc keeps those pages (its
trim and mmap thresholds grow with the sizes it has seen), so the RSS stays high although
the memory is available again; upstream counts allocator bytes in use, which fall at once.
"""
import ctypes
import ctypes.util

import psutil

_PROC = psutil.Process()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _load_mallinfo2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2          # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_mallinfo2 = _load_mallinfo2()


def rss():
    return _PROC.memory_info().rss


def malloc_free_bytes():
    """Bytes in free chunks that malloc keeps (0 when glibc's mallinfo2 is missing)."""
    if _mallinfo2 is None:
        return 0
    return _mallinfo2().fordblks


def used_bytes():
    """RSS minus malloc's free chunks: what this process would still hold if malloc gave
    back everything it could."""
    r = rss()
    return max(0, r - min(malloc_free_bytes(), r))
