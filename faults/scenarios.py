"""The first fault schedules: partitions, pauses, kills. Each runs until `until`
(monotonic) and leaves the faults in place; the harness heals everything afterwards.
`ctx` holds the nodes and a random generator."""
import time

from disque.worker_restart import MAX_RESTARTS, RESTART_WINDOW_S
from faults import netns
from faults.scenario import Scenario

PERIOD = 4.0            # seconds between two partition changes


def _sleep_until(t, until):
    time.sleep(max(0.0, min(t, until) - time.monotonic()))


def partitions(make_groups):
    def run(ctx, until):
        n = len(ctx.nodes)
        while time.monotonic() < until:
            groups = make_groups(ctx.rng, n)
            ctx.note("partition %s" % groups)
            netns.partition(n, groups)
            _sleep_until(time.monotonic() + PERIOD, until)
    return run


def halves(rng, n):
    ids = list(range(n))
    rng.shuffle(ids)
    return [ids[:n // 2], ids[n // 2:]]


def isolate_one(rng, n):
    lone = rng.randrange(n)
    return [[lone], [i for i in range(n) if i != lone]]


def majority_minority(rng, n):
    ids = list(range(n))
    rng.shuffle(ids)
    return [ids[:n // 2 + 1], ids[n // 2 + 1:]]


def bridge(ctx, until):
    """A bridge: one node sees both sides, the sides do not see each other."""
    n = len(ctx.nodes)
    while time.monotonic() < until:
        ids = list(range(n))
        ctx.rng.shuffle(ids)
        hub, rest = ids[0], ids[1:]
        left, right = rest[:len(rest) // 2], rest[len(rest) // 2:]
        ctx.note("bridge %d between %s and %s" % (hub, left, right))
        netns.cut_links(n, [(a, b) for a in left for b in right])
        _sleep_until(time.monotonic() + PERIOD, until)


def pauses(ctx, until):
    """SIGSTOP every process of one node for twice the node timeout, then SIGCONT."""
    while time.monotonic() < until:
        node = ctx.rng.choice(ctx.nodes)
        ctx.note("pause node %d" % node.i)
        node.pause()
        time.sleep(2 * ctx.node_timeout_s)
        node.resume()
        _sleep_until(time.monotonic() + 2.0, until)


def kill_one(ctx, until):
    """kill -9 of one node at a time, restarted from its files after a moment."""
    while time.monotonic() < until:
        node = ctx.rng.choice(ctx.nodes)
        ctx.note("kill -9 node %d" % node.i)
        node.kill()
        time.sleep(2.0)
        node.start()
        node.wait_ready()
        _sleep_until(time.monotonic() + 3.0, until)


def kill_all(ctx, until):
    """kill -9 of every node at once, all restarted from their files."""
    while time.monotonic() < until:
        _sleep_until(time.monotonic() + 4.0, until)
        ctx.note("kill -9 all nodes")
        for node in ctx.nodes:
            node.kill()
        time.sleep(1.0)
        for node in ctx.nodes:
            node.start()
        for node in ctx.nodes:
            node.wait_ready()
        _sleep_until(time.monotonic() + 4.0, until)


def kill_worker(ctx, until):
    """kill -9 of one worker process of a random node (the node restarts it). A node
    that lost MAX_RESTARTS workers in the last RESTART_WINDOW_S is left alone: one more
    death would be a crash loop, which stops the node on purpose (disque/worker_restart.py),
    and the 2-minute run used to count that as a crash."""
    kills = ctx.worker_kill_times       # node index -> monotonic times of its worker kills
    while time.monotonic() < until:
        now = time.monotonic()
        node = ctx.rng.choice(ctx.nodes)
        recent = [t for t in kills.get(node.i, ()) if now - t < RESTART_WINDOW_S]
        if len(recent) < MAX_RESTARTS and node.kill_worker(ctx.rng.randrange(8)):
            kills[node.i] = recent + [now]
            ctx.worker_kills += 1
            ctx.note("kill -9 a worker of node %d" % node.i)
        _sleep_until(time.monotonic() + 3.0, until)


# partitions, pauses and kills: docs/faults.md, "Scenarios"
def calm(ctx, until):
    """No fault: the workload alone, for as long as a scenario's faults last."""
    _sleep_until(until, until)


SCENARIOS = {
    "calm": Scenario(calm, summary="no fault: what every check must show without one"),
    "halves": Scenario(partitions(halves)),
    "isolate-one": Scenario(partitions(isolate_one)),
    "majority-minority": Scenario(partitions(majority_minority)),
    "bridge": Scenario(bridge),
    "pause": Scenario(pauses),
    "kill-node-everysec": Scenario(kill_one, "everysec"),
    "kill-node-always": Scenario(kill_one, "always"),
    "kill-all-always": Scenario(kill_all, "always"),
    "kill-all-everysec": Scenario(kill_all, "everysec"),
    "kill-worker": Scenario(kill_worker, ours_only=True),
    "kill-worker-aof": Scenario(kill_worker, "everysec", ours_only=True),
}
