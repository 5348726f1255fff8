# cython: language_level=3
"""A box of messages as one link frame: <u32 length, little endian><msgpack of the box>, the
frame every peer link and direct job link carries (docs/design.md, "Direct job links").

The messages the job path sends are lists of non-negative ints, bytes and lists of those
([type, flags, serialized job], [type, flags, [job ID, aux]], a peer link's [REQUEST, id,
argv]). For those the msgpack is written here in one pass into the frame itself, the bytes
msgpack's Packer would write (tests/test_msgframe_units.py holds the two to each other);
anything else in a box (a str, None, a negative int, a dict) goes to the Packer whole. The
Packer's call (its keyword parsing, its buffer) and the copy into a frame took 3,750 of a
producer's 63,600 instructions per replicated job at one connection (callgrind,
docs/benchmarks.md).

The reader does the same the other way (`unpack_box`): a box made only of that subset is
read here into what msgpack's `unpackb` would return (lists, ints, bytes); at the first
byte of anything else it gives up and the caller hands the frame to `unpackb`, which reads
it or says why it cannot. unpackb's call alone (its keyword parsing, its Unpacker) was
1,600 of the 8,400 instructions a one-message frame cost a worker (callgrind).
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_FromUnsignedLongLong
from libc.string cimport memcpy

from disque._fast.sysio cimport framed, put_frame_length

import msgpack

PACKER_BUFFER = 256 << 10   # msgpack's Packer starts with this buffer; a bigger message grows it
cdef int MAX_DEPTH = 8                      # deeper lists go to the Packer


cdef class Packer:
    """msgpack's `Packer().pack` for a sender that lives as long as its process (a worker's
    replies, the front-end's requests, the fallback below): one Packer, since packb makes a
    new one per call, but renewed after a message past PACKER_BUFFER. A Packer keeps the
    buffer it grew for good, so one pipelined burst of 1 MB would stay in the process's
    RSS until it exits (docs/memory.md, "RSS")."""

    def __cinit__(self):
        self.inner = msgpack.Packer().pack

    cpdef bytes pack(self, object obj):
        cdef bytes data = self.inner(obj)
        if PyBytes_GET_SIZE(data) > PACKER_BUFFER:
            self.inner = msgpack.Packer().pack
        return data


cdef Packer fallback = Packer()     # what the box writer below does not write itself


cdef extern from "Python.h":
    # declared without Cython's exception checks: a value out of range is handled below
    long as_long "PyLong_AsLongAndOverflow" (object o, int *overflow) noexcept
    unsigned long long as_ulonglong "PyLong_AsUnsignedLongLong" (object o) noexcept


cdef inline int as_uint64(object o, unsigned long long *v) noexcept:
    """An int's value; 0 when it is negative or 2**64 and above (the Packer's then).
    PyLong_AsLongAndOverflow reads the digits of any int below 2**63 in a loop, where
    PyLong_AsUnsignedLongLong goes through _PyLong_AsByteArray past 30 bits (a group
    job's place, a timestamp: 290 instructions each, callgrind)."""
    cdef int overflow = 0
    cdef long x = as_long(o, &overflow)
    if overflow == 0:
        if x < 0:
            return 0
        v[0] = <unsigned long long>x
        return 1
    if overflow < 0:
        return 0
    v[0] = as_ulonglong(o)              # 2**63 and above
    if v[0] == <unsigned long long>-1 and PyErr_Occurred():
        PyErr_Clear()
        return 0
    return 1


cdef Py_ssize_t uint_size(unsigned long long v) noexcept:
    if v < 128:
        return 1
    if v < 256:
        return 2
    if v < 65536:
        return 3
    if v < 4294967296:
        return 5
    return 9


cdef Py_ssize_t packed_size(object o, int depth) except -2:
    """The msgpack size of `o`, or -1 when it holds something this module does not write."""
    cdef Py_ssize_t n, total, s, i
    cdef unsigned long long v
    if type(o) is bytes:
        n = PyBytes_GET_SIZE(o)
        return n + (2 if n < 256 else 3 if n < 65536 else 5)
    if type(o) is int:
        if not as_uint64(o, &v):
            return -1
        return uint_size(v)
    if type(o) is list:
        if depth >= MAX_DEPTH:
            return -1
        n = PyList_GET_SIZE(o)
        total = 1 if n < 16 else 3 if n < 65536 else 5
        for i in range(n):
            s = packed_size(<object>PyList_GET_ITEM(o, i), depth + 1)
            if s < 0:
                return -1
            total += s
        return total
    return -1


cdef inline unsigned char *put_be(unsigned char *p, unsigned long long v, int width) noexcept:
    cdef int i
    for i in range(width):
        p[i] = (v >> (8 * (width - 1 - i))) & 0xff
    return p + width


cdef inline unsigned char *put_long_length(unsigned char *p, Py_ssize_t n,
                                           unsigned char tag16, unsigned char tag32) noexcept:
    """A bin's or an array's length past its short form: 16 bits, else 32."""
    if n < 65536:
        p[0] = tag16
        return put_be(p + 1, n, 2)
    p[0] = tag32
    return put_be(p + 1, n, 4)


cdef unsigned char *put(object o, unsigned char *p) except NULL:
    """Writes `o`, which packed_size has accepted, at p; returns the end."""
    cdef Py_ssize_t n, i
    cdef unsigned long long v
    if type(o) is bytes:
        n = PyBytes_GET_SIZE(o)
        if n < 256:
            p[0] = 0xc4
            p[1] = <unsigned char>n
            p += 2
        else:
            p = put_long_length(p, n, 0xc5, 0xc6)
        memcpy(p, PyBytes_AS_STRING(o), n)
        return p + n
    if type(o) is int:
        as_uint64(o, &v)                # packed_size accepted it
        if v < 128:
            p[0] = <unsigned char>v
            return p + 1
        if v < 256:
            p[0] = 0xcc
            p[1] = <unsigned char>v
            return p + 2
        if v < 65536:
            p[0] = 0xcd
            return put_be(p + 1, v, 2)
        if v < 4294967296:
            p[0] = 0xce
            return put_be(p + 1, v, 4)
        p[0] = 0xcf
        return put_be(p + 1, v, 8)
    n = PyList_GET_SIZE(o)
    if n < 16:
        p[0] = 0x90 | n
        p += 1
    else:
        p = put_long_length(p, n, 0xdc, 0xdd)
    for i in range(n):
        p = put(<object>PyList_GET_ITEM(o, i), p)
    return p


cdef bytes framed_box(list box):
    """The frame of a box of messages (see the module's docstring)."""
    cdef Py_ssize_t size = packed_size(box, 0)
    if size < 0 or size > 0xFFFFFFFF:
        return framed(fallback.pack(box))
    cdef bytes data = PyBytes_FromStringAndSize(NULL, size + 4)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(data)
    put_frame_length(p, size)
    put(box, p + 4)
    return data


cdef inline unsigned long long get_be(const unsigned char *p, int width) noexcept:
    cdef unsigned long long v = 0
    cdef int i
    for i in range(width):
        v = (v << 8) | p[i]
    return v


cdef object read_item(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, int depth):
    """The object of the subset at p[at[0]:n], at[0] moved past it; None at anything else
    (nil is not in the subset: None is never an object read here)."""
    cdef Py_ssize_t i = at[0], size, k
    cdef unsigned char b
    cdef int width
    cdef list out
    if i >= n:
        return None
    b = p[i]
    if b < 0x80:                        # positive fixint
        at[0] = i + 1
        return <long>b
    if 0xcc <= b <= 0xcf:               # uint 8, 16, 32, 64
        width = 1 << (b - 0xcc)
        if n - i - 1 < width:
            return None
        at[0] = i + 1 + width
        return PyLong_FromUnsignedLongLong(get_be(p + i + 1, width))
    if 0xc4 <= b <= 0xc6:               # bin 8, 16, 32
        width = 1 << (b - 0xc4)
        if n - i - 1 < width:
            return None
        size = <Py_ssize_t>get_be(p + i + 1, width)
        i += 1 + width
        if n - i < size:
            return None
        at[0] = i + size
        return PyBytes_FromStringAndSize(<const char *>p + i, size)
    if 0x90 <= b <= 0x9f:               # fixarray
        size = b & 0x0f
        i += 1
    elif b == 0xdc or b == 0xdd:        # array 16, 32
        width = 2 if b == 0xdc else 4
        if n - i - 1 < width:
            return None
        size = <Py_ssize_t>get_be(p + i + 1, width)
        i += 1 + width
    else:
        return None
    if depth >= MAX_DEPTH or size > n - i:  # each item takes a byte at least
        return None
    at[0] = i
    out = []
    for k in range(size):
        item = read_item(p, n, at, depth + 1)
        if item is None:
            return None
        out.append(item)
    return out


cdef list unpack_box(bytes data):
    """The box a frame's msgpack holds, when all of it is of the subset the writer above
    writes; None otherwise (see the module's docstring)."""
    cdef Py_ssize_t at = 0, n = PyBytes_GET_SIZE(data)
    obj = read_item(<const unsigned char *>PyBytes_AS_STRING(data), n, &at, 0)
    if type(obj) is not list or at != n:
        return None
    return <list>obj


cdef object unpackb = msgpack.unpackb


cdef object unpack_frame(object data):
    """A frame's msgpack: unpack_box's reading of the subset, else msgpack's `unpackb`
    (lists: its default), which reads the rest or raises."""
    box = unpack_box(data) if type(data) is bytes else None
    return unpackb(data) if box is None else box


def box_of_frame_data(bytes data):
    """unpack_box for Python callers (the tests)."""
    return unpack_box(data)


def frame_of_box(list box):
    """framed_box for Python callers (the tests)."""
    return framed_box(box)
