"""Membership under load (docs/faults-membership.md): nodes joining and leaving, a rolling
restart of every node from its AOF, a worker process stopped with SIGSTOP. Each schedule
runs while the workload produces and consumes; the harness heals and checks as usual."""
import json
import os
import signal
import time

from disque._fast.jobid import queue_worker
from disque.harness import cluster
from faults import netns
from faults import nodes as fault_nodes
from faults.scenario import Scenario
from faults.workload import BUCKET, QUEUE

DRAIN_MAX = 90.0        # seconds a leaving node may take to hand over what it holds
BACKLOG_S = 3.0         # seconds of consumers held off before two nodes leave
SETTLE_MAX = 20.0       # seconds for the garbage collection after the drain
REJOIN_MAX = 30.0       # seconds a restarted node may take to see every other node again
FORGET_BAN_S = 60.0     # CLUSTER FORGET bars the ID this long (spec 4.2): forget everywhere
                        # well within it


def _sleep_until(t, until):
    time.sleep(max(0.0, min(t, until) - time.monotonic()))


def _wait(cond, seconds, poll=fault_nodes.CLI_POLL):
    """Until cond() is true (True) or `seconds` passed (False)."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def _cluster_field(i, name):
    value = cluster.field(fault_nodes.cli(i, "CLUSTER", "INFO"), name)
    return int(value) if value is not None and value.isdigit() else None


def reachable(i):
    return _cluster_field(i, "cluster_reachable_nodes")


def known(i):
    return _cluster_field(i, "cluster_known_nodes")


def sees_all(nodes):
    """Every node of `nodes` counts every other one as reachable."""
    return all(reachable(n.i) == len(nodes) - 1 for n in nodes)


def holds(i):
    """What node i still holds: its registered jobs (queued, active copies, acks waiting
    for garbage collection) plus its queue's length; None when it does not answer."""
    jobs = fault_nodes.info_field(i, "jobs", "registered_jobs")
    qlen = fault_nodes.cli(i, "QLEN", QUEUE)
    if not (jobs or "").isdigit() or not (qlen or "").isdigit():
        return None
    return int(jobs) + int(qlen)


def settled(ctx):
    """After the drain every job was delivered and acknowledged: each node's garbage
    collection should leave it holding nothing (acks of jobs that had a copy on a node
    since forgotten included). Reported as `registered_after_drain`, never asserted; so is
    the longest time no add was acknowledged at all (`longest_stall_s`, what the producers
    saw of the fault)."""
    _wait(lambda: all(holds(n.i) == 0 for n in ctx.all_nodes), SETTLE_MAX)
    ctx.extra["registered_after_drain"] = sum(holds(n.i) or 0 for n in ctx.all_nodes)
    with open(os.path.join(ctx.dir, "record.json")) as f:
        rates = json.load(f)["adds_per_second"]
    longest = run = 0
    for rate in rates:
        run = run + 1 if rate == 0 else 0
        longest = max(longest, run)
    ctx.extra["longest_stall_s"] = longest * BUCKET


# ---- join and leave ------------------------------------------------------------------------

def join_spares(ctx):
    """CLUSTER MEET from each spare to a member; gossip does the rest. The workload then
    sends them producers and consumers."""
    for spare in ctx.spares:
        member = ctx.rng.choice(ctx.nodes)
        ctx.note("node %d: CLUSTER MEET %s (node %d)" % (spare.i, netns.node_addr(member.i),
                                                          member.i))
        reply = fault_nodes.cli(spare.i, "CLUSTER", "MEET", netns.node_addr(member.i), fault_nodes.PORT)
        if reply != "OK":
            raise RuntimeError("CLUSTER MEET on node %d answered %r" % (spare.i, reply))
    everyone = ctx.nodes + ctx.spares
    if not _wait(lambda: sees_all(everyone), REJOIN_MAX):
        raise RuntimeError("the spares did not join: reachable %s"
                           % [reachable(n.i) for n in everyone])
    ctx.note("nodes %s joined" % [s.i for s in ctx.spares])


def leave(ctx, leavers, before_drain=lambda: None):
    """The graceful removal a user follows (docs/faults-membership.md, "Removing a node"):
    1. CLUSTER LEAVING yes: the others stop sending it copies, it stops taking new jobs;
    2. producers stop using it, consumers keep draining it;
    3. wait until it holds nothing: INFO jobs registered_jobs:0 and QLEN 0 (its queued jobs
       are delivered or fetched by the others' NEEDJOBS, its copies acknowledged);
    4. stop it (SIGTERM), then CLUSTER FORGET its ID on every remaining node."""
    stay = [n for n in ctx.all_nodes if n not in leavers]
    ids = {}
    for node in leavers:
        ids[node.i] = fault_nodes.cli(node.i, "CLUSTER", "MYID")
        reply = fault_nodes.cli(node.i, "CLUSTER", "LEAVING", "yes")
        if reply != "OK":
            raise RuntimeError("CLUSTER LEAVING yes on node %d answered %r" % (node.i, reply))
    ctx.note("nodes %s: CLUSTER LEAVING yes" % [n.i for n in leavers])
    ctx.set_addrs(stay, consumers=stay + leavers)
    if not _wait(lambda: all(reachable(n.i) == len(stay) - 1 for n in stay), REJOIN_MAX):
        raise RuntimeError("the others still count a leaving node")
    before_drain()
    t0 = time.monotonic()
    for node in leavers:
        if _wait(lambda: holds(node.i) == 0, DRAIN_MAX - (time.monotonic() - t0)):
            ctx.note("node %d holds nothing (registered_jobs:0, QLEN 0) after %.1fs"
                     % (node.i, time.monotonic() - t0))
        else:
            ctx.extra["leave_timeouts"] += 1
            ctx.note("node %d still holds %s after %.0fs: stopped anyway"
                     % (node.i, holds(node.i), DRAIN_MAX))
    ctx.set_addrs(stay)
    # consumers move off first (the workload reads the file every 0.2 s); one still on a
    # stopped node only gets a connection error, so this is no condition to wait for
    time.sleep(1.5)
    for node in leavers:
        node.down_by_harness = True
        code = node.stop()
        ctx.note("node %d stopped (exit %s)" % (node.i, code))
        ctx.nodes.remove(node)
        ctx.removed.append(node)
    for node in stay:
        for i, nid in ids.items():
            reply = fault_nodes.cli(node.i, "CLUSTER", "FORGET", nid)
            if reply != "OK":
                raise RuntimeError("CLUSTER FORGET %s on node %d answered %r"
                                   % (nid, node.i, reply))
    ctx.note("nodes %s forgotten by %s" % (sorted(ids), [n.i for n in stay]))
    if not _wait(lambda: all(known(n.i) == len(stay) for n in stay), FORGET_BAN_S / 2):
        raise RuntimeError("a forgotten node came back: known %s" % [known(n.i) for n in stay])


def pause_out(ctx, how):
    """PAUSE the workload's queue in output on every node ("out") or lift it ("none")."""
    reply = fault_nodes.cli(ctx.nodes[0].i, "PAUSE", QUEUE, how, "bcast")
    if reply not in ("out", "none"):
        raise RuntimeError("PAUSE %s %s bcast answered %r" % (QUEUE, how, reply))


def join_leave(backlog):
    """Two spares join, then two of the original members leave, all under load. With
    `backlog`, the consumers are held off (PAUSE out) for BACKLOG_S before the leave, so the
    leaving nodes have thousands of queued jobs and copies to hand over."""
    def run(ctx, until):
        ctx.extra["leave_timeouts"] = 0
        join_spares(ctx)
        ctx.set_addrs(ctx.nodes + ctx.spares)
        _sleep_until(time.monotonic() + (until - time.monotonic()) / 3 - backlog, until)
        if backlog:
            ctx.note("PAUSE %s out: a backlog builds" % QUEUE)
            pause_out(ctx, "out")
            time.sleep(backlog)
            ctx.extra["backlog_at_leave"] = sum(int(fault_nodes.cli(n.i, "QLEN", QUEUE) or 0)
                                                for n in ctx.all_nodes)
        leavers = ctx.rng.sample(ctx.nodes, 2)
        try:
            leave(ctx, leavers, before_drain=lambda: backlog and pause_out(ctx, "none"))
        finally:
            if backlog:
                pause_out(ctx, "none")
        _sleep_until(until, until)
    return run


# ---- rolling restart -----------------------------------------------------------------------

def restart(ctx, node):
    """An upgrade of one node: SHUTDOWN or SIGTERM at random (a graceful stop: the AOF is
    written and closed), start again from its files, wait until it answers and sees every
    other node again, and the others see it."""
    node.down_by_harness = True
    how = ctx.rng.choice(("SHUTDOWN", "SIGTERM"))
    if how == "SHUTDOWN":
        fault_nodes.cli(node.i, "SHUTDOWN")       # no reply: the connection closes
        node.wait_exit()
    code = node.stop()                  # SIGTERM unless it exited already
    if code != 0 or node.left_behind:
        ctx.extra["unclean_stops"] += 1
        ctx.note("node %d: %s: exit %s, left behind %s" % (node.i, how, code, node.left_behind))
    node.start()
    if not node.wait_ready():
        raise RuntimeError("node %d did not come back: %s" % (node.i, node.log_tail(3)))
    if not _wait(lambda: sees_all(ctx.nodes), REJOIN_MAX):
        raise RuntimeError("node %d did not rejoin: reachable %s"
                           % (node.i, [reachable(n.i) for n in ctx.nodes]))
    return how


def rolling_restart(ctx, until):
    """Every node in turn, in a random order; rounds go on while there is time left."""
    ctx.extra["unclean_stops"] = 0
    while True:
        order = list(ctx.nodes)
        ctx.rng.shuffle(order)
        for node in order:
            t0 = time.monotonic()
            how = restart(ctx, node)
            ctx.note("node %d: %s, restarted and rejoined in %.1fs"
                     % (node.i, how, time.monotonic() - t0))
            _sleep_until(time.monotonic() + 1.0, until)
        if time.monotonic() >= until:
            return


# ---- a stopped worker ----------------------------------------------------------------------

def worker_pids(node):
    """{worker index: pid} from INFO workers (`workerK:pid=...,`)."""
    out = {}
    for line in (fault_nodes.cli(node.i, "INFO", "workers") or "").splitlines():
        if line.startswith("worker") and "pid=" in line:
            k = line.split(":", 1)[0][len("worker"):]
            if k.isdigit():
                out[int(k)] = int(line.split("pid=")[1].split(",")[0])
    return out


def stop_worker(ctx, until):
    """SIGSTOP of one worker process of a random node for 1.5-2.5x the node timeout (the
    front-end still sees the process alive), SIGCONT, a pause, again."""
    ctx.extra["queue_owner_stops"] = 0
    while time.monotonic() < until:
        node = ctx.rng.choice(ctx.nodes)
        pids = node.worker_pids()
        if not pids:
            raise RuntimeError("node %d has no worker process" % node.i)
        pid = ctx.rng.choice(pids)
        hold = ctx.rng.uniform(1.5, 2.5) * ctx.node_timeout_s
        owner = pid == worker_pids(node).get(queue_worker(QUEUE.encode(), ctx.args.workers))
        ctx.extra["queue_owner_stops"] += owner
        ctx.note("SIGSTOP worker pid %d of node %d for %.1fs%s" % (
            pid, node.i, hold, " (it owns the queue %r)" % QUEUE if owner else ""))
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(hold)
        finally:
            os.kill(pid, signal.SIGCONT)
        _sleep_until(time.monotonic() + ctx.rng.uniform(1.0, 2.0), until)


# membership under load: docs/faults-membership.md
SCENARIOS = {
    "join-leave": Scenario(join_leave(0), spares=2, settled=settled,
                           summary="2 nodes join (MEET), 2 leave (LEAVING, drain, FORGET)"),
    "join-leave-backlog": Scenario(join_leave(BACKLOG_S), spares=2, settled=settled,
                                   summary="the same, the leaving nodes holding a backlog"),
    "rolling-restart-everysec": Scenario(rolling_restart, "everysec", settled=settled,
                                         summary="every node in turn: SIGTERM, restart"),
    "rolling-restart-always": Scenario(rolling_restart, "always", settled=settled,
                                       summary="every node in turn: SIGTERM, restart"),
    "stop-worker": Scenario(stop_worker, ours_only=True, settled=settled,
                            summary="SIGSTOP of one worker process, SIGCONT, repeatedly"),
}
