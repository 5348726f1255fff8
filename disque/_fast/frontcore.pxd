from disque._fast.resp cimport RequestParser

cdef class Slot:
    cdef public object data
    cdef public Client client

cdef class Client:
    cdef public Core fe
    cdef public object transport
    cdef public RequestParser parser
    cdef public object slots          # deque of Slot once replies are outstanding
    cdef public list backlog          # parsed commands held behind a blocking GETJOB
    cdef public object waiting        # the blocking GETJOB in progress, or None
    cdef public bint closing, closed, dirty
    cdef public long long id
    cdef public str addr
    cdef public bytes name
    cdef public bytes last_cmd
    cdef public double created
    cpdef reply(self, bytes data)
    cpdef Slot slot(self)
    cpdef flush(self)
    cpdef write(self, bytes data)
    cpdef close_after_reply(self)
    cpdef process_input(self)

cdef class Core:
    cdef public dict pending
    cdef public dict clients
    cdef public list outbox
    cdef public list dirty
    cdef public object links
    cdef public object loop
    cdef public int nworkers
    cdef public int eager_batch
    cdef public long long next_reqid
    cdef public long long next_client_id
    cdef public bint flush_scheduled
    cdef public long long commands_processed
    cdef public long long net_input_bytes
    cdef public long long net_output_bytes
    cdef public int maxclients
    cdef dict table
    cdef public dict calls           # command name -> calls (INFO commandstats)
    cdef object packb
    cdef object unpackb
    cpdef long long new_reqid(self)
    cpdef send(self, int w, list req)
    cpdef forward(self, Client client, int w, list argv)
    cpdef dispatch(self, Client client, list argv)
    cpdef deliver(self, bytes payload)
    cpdef flush_replies(self)
    cpdef int worker_of_id(self, bytes jid)
