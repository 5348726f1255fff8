"""A box of messages as one link frame, msgpack written in C (disque/_fast/msgframe.pyx)."""

cdef bytes framed_box(list box)
