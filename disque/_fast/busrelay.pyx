# cython: language_level=3, boundscheck=True, wraparound=True
"""The front-end's per-message work on the cluster bus' job path, in C (docs/design.md,
"The bus relay").

A node's front-end relays every job message between the bus and its workers: a message
that arrives goes to the worker owning its job (or its queue), a message a worker sends
goes to one frame per destination node. Under synchronous replication that is several
messages per job on every node; here each costs 2-4x less than in the Python loops this
replaced (docs/benchmarks.md, "Cluster"), though that was a small part of what a
replicated job costs the front-ends. The Python side (disque/frontend/cluster_relay.py)
keeps everything per frame or per node: the policy for copies, the ZeroMQ sockets, the
membership.

Everything here comes from the network, so this module keeps Cython's bounds checks on
(setup.py turns them off for the others): an index past the end of a peer's list must be
an IndexError, not a read past the end of memory.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from disque._fast.jobid cimport id_worker, id_worker_at, queue_worker, valid_id_at

from disque.contracts import bus_messages as _bus
# the job messages' shapes (JobMessage, Inbound, Outbound) are bus_messages' named types,
# built inline here: this is the job path (tests/test_messages.py holds them to the encoders)
# bus message types and flags: disque/contracts/bus_messages.py is their one home (C ints, read at import)
cdef long REPLJOB = _bus.REPLJOB
cdef long GOTJOB = _bus.GOTJOB
cdef long NEEDJOBS = _bus.NEEDJOBS
cdef long YOURJOBS = _bus.YOURJOBS
cdef long PAUSE = _bus.PAUSE
cdef long INTEREST = _bus.INTEREST
cdef long GROUPSEQ = _bus.GROUPSEQ
cdef long PLACED = _bus.PLACED
cdef long NOREPLY = _bus.NOREPLY
cdef long ACCEPTED = _bus.ACCEPTED
# JOB_TYPES is REPLJOB ... PAUSE, INTEREST, GROUPSEQ and PLACED: is_job_type relies on that shape
assert _bus.JOB_TYPES == frozenset(range(REPLJOB, PAUSE + 1)) | {INTEREST, GROUPSEQ, PLACED}

# the largest aux a job message may carry: counters (32 bits), a NACK delay in ms or a
# DELAY in seconds (32 bits); anything bigger would overflow the worker's C fields
cdef object MAX_AUX = 1 << 48
# ... except a GOTJOB's and a PLACED's: a group job's sequence number (docs/job-groups.md)
cdef object MAX_SEQ = 1 << 64

# what this node does with a copy (REPLJOB), decided by the front-end per frame
REFUSE_COPIES = 0      # leaving or above 75% of maxmemory: no copy, no GOTJOB (SPEC 8.7, 9)
FORWARD_COPIES = 1     # with an AOF: the worker answers once its LOADJOB record is written
ACCEPT_COPIES = 2      # the GOTJOB leaves from here, the copy goes on to the worker
cdef int C_REFUSE_COPIES = REFUSE_COPIES    # the same, as C ints for the per-message tests
cdef int C_FORWARD_COPIES = FORWARD_COPIES


cdef inline bint is_job_type(object t):
    """bus_messages.JOB_TYPES: REPLJOB ... PAUSE, INTEREST, GROUPSEQ and PLACED (compared as
    Python ints: a peer may send any 64-bit value)."""
    return type(t) is int and (REPLJOB <= t <= PAUSE or t == INTEREST or t == GROUPSEQ
                               or t == PLACED)


cdef inline bint valid_pair(object payload, object max_aux):
    """[job ID or queue name, aux]: what every job message but REPLJOB and YOURJOBS carries,
    with an aux the worker can take (0 <= aux < max_aux)."""
    if type(payload) is not list or len(<list>payload) != 2:
        return False
    if type((<list>payload)[0]) is not bytes:
        return False
    aux = (<list>payload)[1]
    return type(aux) is int and 0 <= aux < max_aux


cdef int owner(long mtype, object payload, int nworkers) except -2:
    """The worker a message goes to: by queue for NEEDJOBS / PAUSE / INTEREST, else by the
    slot its job ID carries (worker 0 for an ID without one; the worker drops what it does
    not know). -1: malformed, dropped here."""
    cdef object jid
    cdef const unsigned char *at
    if mtype == REPLJOB or mtype == GROUPSEQ:
        # a copy is answered from here: nothing that is not one gets a GOTJOB (a group
        # job's home answers GROUPSEQ itself, with the job's place). The ID is read where
        # it lies in the serialized job (codec.pyx: 4 bytes, then the ID), not sliced out
        if type(payload) is not bytes or PyBytes_GET_SIZE(payload) < 44:
            return -1
        at = <const unsigned char *>PyBytes_AS_STRING(payload) + 4
        if not valid_id_at(at):
            return -1
        return id_worker_at(at, nworkers)
    elif mtype == YOURJOBS:
        # serialized jobs, all of one queue; the worker's codec checks each one
        if type(payload) is not list or not payload or type((<list>payload)[0]) is not bytes:
            return -1
        jid = (<list>payload)[0]
        if PyBytes_GET_SIZE(jid) < 44:
            return 0
        return id_worker_at(<const unsigned char *>PyBytes_AS_STRING(jid) + 4, nworkers)
    elif not valid_pair(payload, MAX_SEQ if mtype == GOTJOB or mtype == PLACED else MAX_AUX):
        return -1
    elif mtype == NEEDJOBS or mtype == PAUSE or mtype == INTEREST:
        return queue_worker(<bytes>(<list>payload)[0], nworkers)
    else:
        jid = (<list>payload)[0]
    return id_worker(<bytes>jid, nworkers) if len(<bytes>jid) == 40 else 0


cpdef route_job_messages(list msgs, bytes sender, int nworkers, dict inbox, int copies,
                         list gotjobs):
    """The job messages of one JOBS frame from a known node: each well-formed one is
    appended to inbox[worker] as an Inbound [sender, type, flags, payload]; anything else in the frame
    is dropped on its own, like any bad bus message. `copies` is one of the *_COPIES
    policies; with ACCEPT_COPIES the GOTJOB each copy asks for is appended to `gotjobs`,
    and the worker gets the copy flagged NOREPLY | ACCEPTED."""
    cdef object m, payload, per_worker
    cdef long mtype, mflags
    cdef int w
    for m in msgs:
        if type(m) is not list or len(<list>m) != 3:
            continue
        if not is_job_type((<list>m)[0]) or type((<list>m)[1]) is not int:
            continue
        mtype = (<list>m)[0]
        try:
            mflags = (<list>m)[1]
        except OverflowError:           # flags beyond 63 bits: nothing of ours
            continue
        if mflags < 0:
            continue
        mflags &= ~ACCEPTED             # never on the wire: only this front-end accepts copies
        payload = (<list>m)[2]
        w = owner(mtype, payload, nworkers)
        if w < 0:
            continue
        if mtype == REPLJOB and copies != C_FORWARD_COPIES:
            if copies == C_REFUSE_COPIES:
                continue
            if not mflags & NOREPLY:
                gotjobs.append([GOTJOB, 0, [payload[4:44], 0]])      # a JobMessage
            mflags |= NOREPLY | ACCEPTED
        per_worker = inbox.get(w)
        if per_worker is None:
            inbox[w] = [[sender, mtype, mflags, payload]]
        else:
            (<list>per_worker).append([sender, mtype, mflags, payload])


def group_by_node(list entries, dict outbox, str myid, object everyone, dict node_names):
    """Job messages a worker wants sent, Outbound [destinations, type, flags, payload] each:
    appended to outbox[node id] as JobMessage [type, flags, payload]. Destinations None means every other
    node (`everyone()`, asked at most once); node ids come as bytes from the workers and
    `node_names` caches their str form. True when anything was queued."""
    cdef object e, dests, d, name, msg, per_node
    cdef object all_nodes = None
    cdef list targets
    cdef bint queued = False
    for e in entries:
        dests = e[0]
        msg = [e[1], e[2], e[3]]        # JobMessage
        if dests is None:
            if all_nodes is None:
                all_nodes = everyone()
            targets = all_nodes
        else:
            targets = []
            for d in dests:
                name = node_names.get(d)
                if name is None:
                    name = (<bytes>d).decode()
                    if len(node_names) < 4096:
                        node_names[d] = name
                targets.append(name)
        for name in targets:
            if name == myid:
                continue
            per_node = outbox.get(name)
            if per_node is None:
                outbox[name] = [msg]
            else:
                (<list>per_node).append(msg)
            queued = True
    return queued


cpdef group_by_link(list entries, dict boxes, bytes myid, tuple everyone, list leftover):
    """A worker's job messages for its direct job links (docs/design.md, "Direct job
    links"), [destinations, type, flags, payload] each. `boxes` maps a node id to one slot
    per worker of that node: the list its link from here collects [type, flags, payload]
    in, or None while that link is not up. A message goes to the box of the node's worker
    that owns it (the owner() the node's front-end would pick); the destinations with no
    box up are left in `leftover` as one [destinations, type, flags, payload] for the
    bus. Destinations None means every other node (`everyone`)."""
    cdef object e, dests, d, per, box, msg
    cdef list rest
    cdef long mtype
    cdef int w
    for e in entries:
        dests = e[0]
        if dests is None:
            dests = everyone
        mtype = e[1]
        msg = None
        rest = None
        for d in dests:
            if d == myid:
                continue
            per = boxes.get(d)
            if per is not None:
                w = owner(mtype, e[3], len(<list>per))
                if w >= 0:
                    box = (<list>per)[w]
                    if box is not None:
                        if msg is None:
                            msg = [mtype, e[2], e[3]]
                        (<list>box).append(msg)
                        continue
            if rest is None:
                rest = [d]
            else:
                rest.append(d)
        if rest is not None:
            leftover.append([tuple(rest), mtype, e[2], e[3]])
