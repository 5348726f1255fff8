"""The served loop's C hooks (disque/_fast/servedloop.pyx).

The loop polls fds of other parts (ServedLoop.extra_fds: the direct job links, the TLS
clients' sockets) and, after serving, hands the turn's job messages to the job links
(ServedLoop.job_links_out). A Python callable there costs a call with an argument tuple
per event; a subclass of these classes (joblinkpath.InEvent, joblinkpath.JobLinkPath) is
called in C instead. They live apart from both sides so that each can cimport them: the
loop knows nothing of the job links, and the job links nothing of the loop.
"""


cdef class FdHandler:
    """The handler of one polled fd: on_events(events) with epoll's event mask. Callable
    from Python with the same argument, as the plain callables of extra_fds are."""

    cdef int on_events(self, unsigned int events) except -1:
        raise NotImplementedError

    def __call__(self, unsigned int events):
        self.on_events(events)


cdef class MessagesOut:
    """What sends a turn's job messages (the worker's direct job links)."""

    cdef int send_messages(self) except -1:
        raise NotImplementedError
