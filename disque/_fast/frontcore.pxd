from disque._fast.resp cimport RequestParser
from disque._fast.dispatch cimport Entry
from disque._fast.msgframe cimport Packer

cdef class Slot:
    cdef public object data
    cdef public Client client
    cdef public long long t0          # dispatch time (monotonic us) when the slowlog times it
    cdef public object argv           # the timed command (slowlog), else None
    cdef public bint mute             # CLIENT REPLY OFF/SKIP: the reply is dropped
    cdef public bint resp3            # the reply is converted to RESP3 (HELLO 3)

cdef class Client:
    cdef public Core fe
    cdef public object transport
    cdef public RequestParser parser
    cdef public object slots          # deque of Slot once replies are outstanding
    cdef public list backlog          # parsed commands held behind a blocking GETJOB
    cdef public object waiting        # the blocking GETJOB in progress, or None
    cdef public bint closing, closed, dirty
    cdef public long long id
    cdef public int fd
    cdef public str addr
    cdef public bytes name
    cdef public bytes last_cmd
    cdef public double created
    cdef public double last_interaction   # Core.now at the last read or write (idle timeout)
    cdef public double obuf_soft_since    # when the output buffer went over the soft limit
    cdef public bint authenticated
    cdef public bint resp3            # HELLO 3: nulls are sent as RESP3 `_`
    cdef public bint monitor          # MONITOR: receives the feed, not paused, never idle
    cdef public bint mute             # replies of the command being executed are dropped
    cdef public int reply_mode        # CLIENT REPLY: 0 on, 1 off, 2 skip the next command
    cdef public object lib_name, lib_ver
    # connection-affinity (disque/frontend/handover.py): the worker of the last commands,
    # how many in a row went there, how many it takes to hand the connection over, and
    # the worker serving it now (-1: this process)
    cdef public int affine, affine_run, affine_need, handed
    cdef public int detached          # aborted transports whose connection_lost is still due
    cdef public object tls            # a TLS connection: its TlsOrigin (disque/frontend/tls_port.py), else None
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
    cdef public bint queues_spread   # some queue lives off its slot's worker (QLEN sums it)
    cdef public int eager_batch
    cdef public long long next_reqid
    cdef public long long next_client_id
    cdef public bint flush_scheduled
    cdef public long long commands_processed
    cdef public long long net_input_bytes
    cdef public long long net_output_bytes
    cdef public int maxclients
    cdef public dict table            # command name as typed -> dispatch.Entry
    cdef public dict calls            # command name -> calls (INFO commandstats)
    # SPEC 1.3 steps and admin features, each a flag tested once per command
    cdef public bint auth_required    # requirepass is set
    cdef public bint gate             # OOM / MISCONF / LOADING hook: call command_gate()
    cdef public bint paused           # CLIENT PAUSE in effect
    cdef public int nmonitors         # MONITOR clients connected
    cdef public long long slowlog_slower_than   # us; < 0: the slowlog is off
    cdef public long long cur_t0      # dispatch time of the command being dispatched
    cdef public object cur_argv
    cdef public bint cur_slotted      # the command being dispatched reserved a timed Slot
    cdef public long long input_t     # clock at the read being processed (slowlog)
    cdef public long long deliver_t   # clock at the worker message being delivered (slowlog)
    cdef public bint obuf_limited     # client-output-buffer-limit has a non-zero limit
    cdef public double now            # wall clock, refreshed by the cron
    cdef public bint clustered        # other nodes known: ADDJOB may wait for copies
    cdef public bint affinity         # connection-affinity yes over the unix link
    cdef Packer packer
    cdef object unpackb
    # Hooks: what the core calls on the Python parts, bound once by the composition root
    # (disque/frontend/node.py, CORE_HOOKS). A C field holding the bound method: no
    # attribute lookup per call, and a hook the root forgot to bind is None (tested).
    cdef public object client_connected     # (client) a connection was accepted
    cdef public object client_gone          # (client) a connection was lost
    cdef public object client_returned      # (client) a worker gave a connection back
    cdef public object client_overflow      # (client) its query buffer passed 1 GiB
    cdef public object check_output_buffer  # (client) after a write, while `obuf_limited`
    cdef public object command_gate         # (client, cmd, argv) -> bool, while `gate` is set
    cdef public object unknown_command      # (client, argv)
    cdef public object arity_error          # (client, cmd)
    cdef public object local_command        # (client, name, argv) route `local`
    cdef public object feed_monitors        # (client, argv) while `nmonitors`
    cdef public object slowlog_push         # (client, argv, duration_us)
    cdef public object getjob               # (client, argv) route `getjob`
    cdef public object addjob_clustered     # (client, worker, argv) ADDJOB on a cluster node
    cdef public object route_ids            # (client, argv) route `ids`, IDs of several workers
    cdef public object qlen_spread          # (client, argv) QLEN while `queues_spread`
    cdef public object queue_elsewhere      # (queue, worker) a worker's QUEUE_ELSEWHERE entry
    cdef public object all_workers_command  # (client, name, argv) route `all`
    cdef public object bus_from_worker      # (entries) a worker's cluster bus messages
    cdef public object hand_over            # (client, worker, big) while `affinity`
    cdef public object worker_report        # (entry) other reserved-reqid entries of a worker
    cpdef long long new_reqid(self, int w)
    cpdef send(self, int w, list req)
    cpdef forward(self, Client client, int w, list argv)
    cdef hand_over_big(self, Client client)
    cpdef dispatch(self, Client client, list argv)
    cdef run(self, Client client, list argv)
    cdef route(self, Client client, Entry entry, list argv)
    cpdef deliver(self, bytes payload)
    cpdef flush_replies(self)
