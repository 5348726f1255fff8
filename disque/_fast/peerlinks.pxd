cdef class Peer:
    cdef int w, fd
    cdef object sock
    cdef bytearray inbuf, out       # input not yet a whole frame; output the socket did not take
    cdef list box                   # this loop turn's entries for that worker

cdef class PeerLinks:
    cdef public int index
    cdef public object ep           # the worker's epoll set (ServedCore.ep)
    # Hooks: bound once by disque.workers.peer_links.peer_links (PEER_HOOKS there); a C field
    # holding the bound method, None until bound (tests/test_core_hooks.py).
    cdef public object execute      # (argv) a request of another worker: its RESP reply
    cdef public object answered     # (waiter, reply) the reply to a request of ours
    cdef public dict peers          # peer worker -> Peer
    cdef public dict by_fd          # fd -> peer worker
    cdef public dict waiting        # reqid -> (peer, waiter)
    cdef long long next_reqid
    cpdef bint forward(self, int w, list argv, object waiter)
    cpdef readable(self, int fd)
    cpdef send_all(self)
    cpdef writable(self, int fd)
    cdef entries(self, Peer p, list entries)
    cdef send(self, Peer p, bytes data)
