"""A box of messages as one link frame, msgpack written in C (disque/_fast/msgframe.pyx)."""

cdef bytes framed_box(list box)
cdef list unpack_box(bytes data)
cdef object unpack_frame(object data)


cdef class Packer:
    cdef readonly object inner          # msgpack.Packer().pack, renewed after a big message
    cpdef bytes pack(self, object obj)
