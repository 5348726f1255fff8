# What the served loop (servedloop.pyx) calls in C, without a Python call: the handler of
# an fd it polls for another part (a direct job link's read) and the sender of a turn's
# job messages. loophooks.pyx says why they are a module of their own.

cdef class FdHandler:
    cdef int on_events(self, unsigned int events) except -1


cdef class MessagesOut:
    cdef int send_messages(self) except -1
