cdef class Peer:
    cdef int w, fd
    cdef object sock
    cdef bytearray inbuf, out       # input not yet a whole frame; output the socket did not take
    cdef list box                   # this loop turn's entries for that worker

cdef class PeerLinks:
    cdef public int index
    cdef public object ep, execute, answered
    cdef public dict peers          # peer worker -> Peer
    cdef public dict by_fd          # fd -> peer worker
    cdef public dict waiting        # reqid -> (peer, waiter)
    cdef long long next_reqid
    cpdef bint forward(self, int w, list argv, object waiter)
    cdef entries(self, Peer p, list entries)
    cdef send(self, Peer p, bytes data)
