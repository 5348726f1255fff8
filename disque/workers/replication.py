"""A worker's side of the cluster: job copies on other nodes (SPEC 3.1, 7.3, 7.4, 10.4).

The messages about jobs and queues of this worker's slots come from the front-end (off the
bus) or straight from other nodes' workers (disque/workers/job_links.py) to `on_bus`; what
the worker appends to `bus_out` goes back the same two ways:
    (destination node ids or None for every node, type, message flags, payload)
Destinations may include this node; it is skipped.

The hot half (replicate_new, on_gotjob, replicated, activate, on_repljob and the dispatch
in on_bus) is C: disque/_fast/replcore.pyx; so are the acknowledgements (SETACK / GOTACK /
DELJOB and the SETACKs of a GC pass): disque/_fast/ackpath.pyx, whose `AckMessages` is the
base class of `Replication`.

What lives here:
  * synchronous replication of ADDJOB (REPLJOB / GOTJOB, one more node every 50 ms,
    -NOREPL on timeout), ASYNC and external replication (ENQUEUE);
  * requeue coordination (WILLQUEUE / QUEUED / WORKING).
"""
import random

from disque._fast.jobid import IdMaker
from disque._fast.job import (ACKED, ACTIVE, FLAG_BCAST_WILLQUEUE, FLAG_HANDED, QUEUED,
                              WAIT_REPL, retry_interval_msec)
from disque._fast.ackpath import NOREPL_REMOVED, AckMessages
from disque import replies
from disque.commands import resolve
from disque.contracts import bus_messages as bus_msg
from disque.contracts.job_codec import serialize
from disque.workers.job_features import counters_aux

REPL_ADD_NODE_MS = 50          # add one more node to a replication still short of copies
RESEND_BYTES_PER_MS = 128 << 10  # ... or less often for a big job: the time its copy takes
                                 # to cross at 128 MB/s, so that a resend does not overtake it
LEAVING_WAIT_GRACE_MS = 100    # a producer waits at least one cron pass before -LEAVING

NOREPL_TIMEOUT = (b"-NOREPL Timeout reached before replicating to the requested "
                  b"number of nodes\r\n")


# the hooks the Cython core calls (declared in replcore.pxd): hook -> "method" here, or
# "part.method" of what this object holds (the shard's parts)
REPLICATION_HOOKS = {
    "enqueue_msg": "on_enqueue",
    "queued_msg": "on_queued",
    "working_msg": "on_working",
    "willqueue_msg": "on_willqueue",
    "setack_msg": "on_setack",
    "gotack_msg": "on_gotack",
    "deljob_msg": "on_deljob_msg",
    "wait_failed": "repl_failed",
    "pause_msg": "on_pause_msg",
    "needjobs_msg": "shard.federation.on_needjobs",
    "yourjobs_msg": "shard.federation.on_yourjobs",
    "interest_msg": "shard.federation.on_interest",
}


def mix(node_id, job_id):
    """SPEC 5: the node ID XORed with the job ID's random part, for QUEUED tie-breaks."""
    return bytes(node_id[i] ^ job_id[11 + i % 24] for i in range(40))


class Replication(AckMessages):
    """Needs from the shard: the ShardCore (jobs, timers, enqueue, delete_job, bus_out,
    cluster fields), `shard.features` (counters, dead letters) and `shard.federation`
    (its bus handlers). Offers: on_bus (every job message), set_cluster, replicate_new
    (ADDJOB with copies: the ReplWait that ShardCore.cmd_addjob returns), repl_cron,
    activate, gc_send_setacks, the bus counters (bus_in, bus_sent: by type). The fields
    (reachable, known, repl_waits by job id, repl_by_reqid) are ReplicationCore's; the
    message handlers here and federation's are its hooks (REPLICATION_HOOKS)."""

    def __init__(self, shard):
        super().__init__(shard)
        for hook, handler in REPLICATION_HOOKS.items():
            setattr(self, hook, resolve(self, handler))

    def set_cluster(self, state):
        """The front-end's view of the cluster, pushed when it changes. Returns it with one
        object per node id (canonical_state), for the job links."""
        state = self.canonical_state(state)
        myid = state["myid"]
        if myid != self.shard.node_id:               # CLUSTER RESET HARD
            self.shard.node_id = myid
            self.shard.self_nodes = (myid,)
            self.shard.ids = IdMaker(myid)
        self.shard.cluster_size = state["size"]
        self.reachable = tuple(state["reachable"])
        self.shard.reachable_nodes = len(self.reachable)
        roomy = tuple(state.get("roomy", state["reachable"]))
        # one tuple object while every node has room: replicate_new's common case
        self.roomy = self.reachable if roomy == self.reachable else roomy
        self.crowded = tuple(n for n in self.reachable if n not in roomy)
        self.shard.roomy_nodes = len(self.roomy)
        self.shard.leaving = state["leaving"]
        if self.shard.groups.set_nodes(tuple(state.get("members", (myid,))), myid):
            self.rehome_groups()
        return state

    def canonical_state(self, state):
        """`state` with each node id as the one object this worker keeps for it
        (`node_ids`, its own id's the shard's): the front-end's state arrives with a new
        bytes object for every id in every field, and the job path's lookups and tests of
        ids (copies' targets, link boxes, a group's ranking, a GOTJOB's sender) then
        compared 40 bytes where they now compare pointers (callgrind, docs/benchmarks.md)."""
        myid = state["myid"]
        if myid == self.shard.node_id:
            myid = self.shard.node_id
        self.node_ids[myid] = myid
        self.set_known(frozenset(state["known"]) | {myid})
        ids = self.node_ids
        out = dict(state, myid=ids[myid])
        for field in ("reachable", "roomy", "known", "members"):
            if field in state:
                out[field] = [ids.get(n, n) for n in state[field]]
        if "links" in state:
            out["links"] = {ids.get(n, n): v for n, v in state["links"].items()}
        return out

    def rehome_groups(self):
        """The membership changed, so some job groups have another home (docs/job-groups.md,
        "Where a group lives"): each job of theirs held here goes, as a copy with its place,
        to a new home that does not hold it yet, so that the home holds its whole group and
        queues its head. Rendezvous hashing moves only the groups of the nodes that came or
        went. A head queued here and no longer at its home leaves the queue."""
        shard = self.shard
        groups = shard.groups
        me = shard.node_id
        for queue, by_key in list(groups.by_queue.items()):
            for key, group in list(by_key.items()):
                home = groups.home_of(queue, key)
                if home == me:
                    continue
                head = shard.jobs.get(group.head)
                if head is not None and head.state == QUEUED and not head.flags & FLAG_HANDED:
                    # no longer its home: the new home queues it (its requeue timer runs
                    # here, as on any copy), so the group is not queued on two nodes
                    shard.dequeue(head)
                    shard.schedule(head)
                for jid in list(group.ids):
                    job = shard.find_job(jid)
                    if job is None or job.body is None or job.state == ACKED:
                        continue
                    if home not in job.nodes_delivered:
                        self.send_to_home(job, home)

    def remind_home(self, job):
        """The requeue timer of a group's head fired here, and another node is its home:
        the home is sent the job again (it keeps one copy of it). A copy sent while the
        membership changed can be lost on the way; this, one RETRY apart, makes sure the
        home gets its group's head."""
        groups = self.shard.groups
        home = groups.home_of(job.queue, job.ext.group)
        if home != self.shard.node_id:
            self.send_to_home(job, home)

    # ---- ADDJOB with copies on other nodes (SPEC 3.1 step 10) ------------------------------

    def repl_failed(self, wait, reply):
        """Timeout, expiry, client gone, RESET or leaving: drop every copy made so far."""
        job = wait.job
        self.end_wait(wait)
        if job.state == WAIT_REPL:      # else the cluster already queued or acked it
            self.send_bus(job.nodes_delivered, bus_msg.DELJOB, [job.id, 0])
            self.shard.delete_job(job)
        if reply is not None:
            self.shard.answer(wait.reqid, reply)

    def cancel_replication(self, reqid):
        """The producer vanished (front-end UNBLOCK): True when it was waiting here."""
        wait = self.repl_by_reqid.get(reqid)
        if wait is None:
            return False
        self.repl_failed(wait, None)
        return True

    def repl_cron(self):
        """Every worker tick while producers wait: timeouts, and one more node every 50 ms."""
        now = self.shard.now_ms
        for wait in list(self.repl_waits.values()):
            job = wait.job
            if job.state != WAIT_REPL or self.shard.jobs.get(job.id) is not job:
                self.repl_overtaken(wait, now)
            elif wait.deadline and now >= wait.deadline:
                self.repl_failed(wait, NOREPL_TIMEOUT)
            elif now - wait.last_add >= max(REPL_ADD_NODE_MS,
                                            len(job.body or b"") // RESEND_BYTES_PER_MS):
                wait.last_add = now
                if wait.home is None:
                    # a group's job has its holders (group_holders); any other gets one more
                    have = set(job.nodes_delivered)
                    extra = ([n for n in self.roomy if n not in have]
                             or [n for n in self.crowded if n not in have])
                    if extra:
                        job.nodes_delivered += (random.choice(extra),)
                # the copy sent to them may have been lost (the bus) or refused (memory,
                # a sender not known yet): sent again, except where it has not even left
                links = self.shard.job_links
                pending = tuple(n for n in job.nodes_delivered
                                if n not in job.nodes_confirmed and n != self.shard.node_id
                                and (links is None or not links.busy(n)))
                if pending:
                    # a job of a group still without its place asks its holders again
                    mtype = bus_msg.GROUPSEQ if wait.seq_pending else bus_msg.REPLJOB
                    self.send_bus(pending, mtype, serialize(job, False, self.shard.now_s))

    def repl_overtaken(self, wait, now):
        """The job left WAIT_REPL by another road while its producer waits: deleted here
        (FASTACK), or queued through federation (YOURJOBS), delivered and acknowledged
        (ACKJOB, SETACK) before enough GOTJOBs came (issue 13: a partition right after the
        ADDJOB). Nothing is replicated for it any more and the job is left to the cluster.
        The producer gets -NOREPL: at once for a deleted job, else at its timeout as in the
        original (right away when it has none, rather than blocking it forever)."""
        if self.shard.jobs.get(wait.job.id) is not wait.job:
            self.end_wait(wait)
            self.shard.answer(wait.reqid, NOREPL_REMOVED)
        elif not wait.deadline or now >= wait.deadline:
            self.end_wait(wait)
            self.shard.answer(wait.reqid, NOREPL_TIMEOUT)

    def repl_leaving_cron(self):
        """Every cluster cron pass (100 ms) while LEAVING: producers still waiting for their
        copies get -LEAVING, like upstream's client cron (SPEC 3.1 [quirk]). Only waits older
        than one pass: this check used to run on every worker tick, right after the ADDJOB
        started replicating, so every synchronous ADDJOB on a leaving node failed and the
        external replication SPEC 8.7 asks for could never succeed."""
        now = self.shard.now_ms
        for wait in list(self.repl_waits.values()):
            if now - wait.started >= LEAVING_WAIT_GRACE_MS:
                self.repl_failed(wait, replies.LEAVING_ERROR)

    def expire_waiting(self, job):
        """The scheduler found a job still waiting for copies past its TTL."""
        wait = self.repl_waits.get(job.id)
        if wait is not None:
            self.repl_failed(wait, NOREPL_REMOVED)
        else:
            self.shard.delete_job(job)

    # ---- job messages (SPEC 10.4) -----------------------------------------------------------

    def on_enqueue(self, sender, mflags, payload):
        job = self.shard.find_job(payload[0])
        if job is not None:
            self.enqueue_copy(job, payload[1])

    def on_willqueue(self, sender, mflags, payload):
        job = self.shard.find_job(payload[0])
        if job is None:
            return
        if job.state == ACKED:
            self.send_bus((sender,), bus_msg.SETACK, [job.id, len(job.nodes_delivered)])
        elif job.state in (ACTIVE, QUEUED):
            self.add_node(job, sender)
            if job.state == QUEUED:
                if job.ext is None:
                    self.send_bus(job.nodes_delivered, bus_msg.QUEUED, [job.id, 0])
                elif job.ext.origin is not None:
                    self.shard.features.announce_dead_letter(job, job.nodes_delivered)
                else:
                    self.send_bus(job.nodes_delivered, bus_msg.QUEUED, [job.id, counters_aux(job)])

    def on_queued(self, sender, mflags, payload, working=False):
        """QUEUED / WORKING from another copy: postpone our requeue (SPEC 7.3). With job
        options (disque.workers.job_features) also merge counters and the dead-letter move;
        WORKING with INCR_NACKS is a NACK ... DELAY whose delay (ms) is in aux."""
        job = self.shard.find_job(payload[0])
        if job is None:
            return
        if job.state == ACKED:
            self.send_bus((sender,), bus_msg.SETACK, [job.id, len(job.nodes_delivered)])
            return
        if job.body is None:
            return
        aux = payload[1]
        keep = self.shard.features.merge_counters(job, mflags, aux, working)
        if keep:
            # our copy is in the dead-letter queue, the sender's is not: it moves, we stay
            self.shard.features.announce_dead_letter(job, (sender,))
        if job.state == QUEUED and (working or (
                not keep and mix(sender, job.id) > mix(self.shard.node_id, job.id))):
            self.shard.dequeue(job)
        if job.retry and job.qtime:
            job.flags |= FLAG_BCAST_WILLQUEUE
            wait = retry_interval_msec(job)
            if working and mflags & bus_msg.INCR_NACKS:
                wait += aux         # the nacking node queues it after its delay: we wait longer
            job.qtime = self.shard.now_ms + wait + self.shard.rand_err()
        self.shard.schedule(job)

    def on_working(self, sender, mflags, payload):
        self.on_queued(sender, mflags, payload, working=True)

    # ---- PAUSE ... BCAST (SPEC 3.12) ----------------------------------------------------------

    def on_pause_msg(self, sender, mflags, payload):
        name, flags = payload[0], payload[1]
        q = self.shard.queues.get(name)
        if q is None and flags:
            q = self.shard.get_queue(name, create=True)
        if q is not None:
            self.shard.queue_commands.set_pause(q, flags)
