# A worker's event loop for the connections it serves itself (servedloop.pyx); the command
# dispatch of those connections is servedcore.pyx's ServedCore, which extends it.
from disque._fast.consumers cimport ConsumersCore
from disque._fast.loophooks cimport MessagesOut
from disque._fast.peerlinks cimport PeerLinks
from disque._fast.resp cimport RequestParser

cdef class Epoll:
    cdef readonly int fd
    cdef int ctl(self, int op, int fd, unsigned int mask) except -1

cdef class Forwarded:
    cdef public object data

cpdef bytes take_ready(list out)

cdef class ServedClient:
    cdef public long long id
    cdef public object sock
    cdef public int fd
    cdef public RequestParser parser
    cdef public list out
    cdef public bint resp3
    cdef public bytes last_cmd
    cdef public double last_io
    cdef public int waiting         # Forwarded replies still to come
    cdef public object back         # a hand-back waiting for them: (reason, input)
    cdef public long long blocked_on    # wait id of its ADDJOB waiting for copies or its parked GETJOB, or 0
    cdef public list parked         # argv of its GETJOB parked in this worker's consumers, or None
    cdef public list held           # commands read after that command, run once it is answered
    cdef public int fwd_w           # the other worker its last commands were forwarded to
    cdef public int fwd_run         # how many in a row (a command run here resets it)
    cdef public bint following      # handed back to follow them there (BACK_FOLLOW)
    # a TLS connection (disque/workers/tls_clients.py): the C object of its TlsPump's
    # ssl.SSLObject (`TlsPump.sslobj`, disque/workers/tls_pump.py), whose read, write and
    # pending this loop calls
    cdef public object tls          # or None: plaintext
    cdef public object tls_pump     # the TlsPump itself (the pump takes it back)
    cdef public object tls_in, tls_out  # its MemoryBIOs: records received, records made
    cdef public bytes tls_pending   # records made that the socket did not take, or None
    # a big reply being made into records a chunk at a time (TLS_CHUNK), from tls_plain_at
    cdef public bytes tls_plain     # or None
    cdef public Py_ssize_t tls_plain_at
    cdef public int pump            # its pump id there
    # a plaintext reply the socket took only part of: the loop writes the rest, from
    # unsent_at, as the socket drains (replies made meanwhile wait in `out`, behind it)
    cdef public bytes unsent        # or None
    cdef public Py_ssize_t unsent_at

cdef class ServedLoop:
    cdef public int index, nworkers, link_fd, timer_fd
    cdef public object shard, channel
    cdef public PeerLinks peers     # the links to the other workers, or None
    cdef public Epoll ep
    cdef public dict clients        # fd -> ServedClient
    cdef public dict by_id          # client id -> ServedClient
    cdef public ConsumersCore consumers  # the shard's blocked consumers (every GETJOB of this worker)
    cdef public list deadlines      # the heap of the shard's consumers' Deadlines (never replaced)
    cdef public set interest_due    # the shard's (never replaced)
    cdef public object persistence  # the shard's
    cdef public list ready          # client fds readable after the last wait
    cdef public list peer_ready
    cdef public bint channel_ready
    cdef public list dirty          # clients with replies to write
    cdef public bint keep_unsent    # a reply the socket took part of: written here (no output limit)
    cdef public long long net_in, net_out
    cdef public list slow           # [client id, argv, us] of slow commands, for SLOWLOG
    cdef public list unblocked      # clients whose waiting command was answered: their held commands next
    cdef public bint link_ready, ticked     # what the last poll found besides the clients
    cdef public bint woke           # it found a client, a peer, the channel or a job link
    cdef public bint idle           # the worker ticks slowly: every wake-up goes to its loop
    # fd -> what handles its events: a loophooks.FdHandler (a direct job link's read), called
    # in C, or a callable on_event(events) (job_links.py, tls_clients.py)
    cdef public dict extra_fds
    cdef public list extra_ready    # (fd, events) the last poll found for them
    cdef public MessagesOut job_links_out   # the worker's job links (JobLinkPath), None: no links
    # Hooks: what the loop calls on the Python half (disque/workers/served_clients.py,
    # SERVED_HOOKS there), bound once; None until bound (tests/test_core_hooks.py).
    cdef public object channel_readable     # () the hand-over channel has frames
    cdef public object drop_client          # (client) the peer closed it, or a read failed
    cdef public object back_when_answered   # (client) a hand-back waiting for replies may go
    cdef public object slow_commands_out    # () SLOWLOG entries to the front-end
    cdef public object unpark_client        # (client) its parked GETJOB becomes input again
    cdef bint deadline_due(self, long long now) except -1
    cdef bint poll(self, bint block) except -1
    cdef int serve(self) except -1
    cpdef read(self, ServedClient c)
    cdef int read_tls(self, ServedClient c, Py_ssize_t n) except -2
    cdef int write_runs(self, ServedClient c) except -2
    cdef bytes tls_records(self, ServedClient c, bytes run)
    cdef int slow_reader(self, ServedClient c) except -1
    cdef bytes send_out(self, ServedClient c, bytes data, bint keep)
    cdef int send_unsent(self, ServedClient c) except -2
    cpdef run_input(self, ServedClient c)
    cdef resume_unblocked(self)
    cdef int write_all(self) except -1
