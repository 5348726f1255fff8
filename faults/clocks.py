"""Skewed and jumping wall clocks (docs/faults-clocks.md). Every process of a node runs
with faults/wallclock.c preloaded: its CLOCK_REALTIME reads real time plus the node's
offset, its CLOCK_MONOTONIC is untouched, as on a machine whose clock NTP steps.

- clock-skew: offsets drawn from -SKEW_S..+SKEW_S (one node at each end) before the nodes
  start, held for the whole run: the cluster forms and works with clocks minutes apart.
- clock-jumps: every JUMP_PERIOD s the clock of a random node steps to another of -J, 0
  and +J (a step of J or 2J, forward or back), J longer than the probes' short TTL; the
  heal steps every clock back to 0.

Both turn on the workload's timing probes (faults/workload.py --probes), which the checker
holds to the guarantees: DELAY and RETRY never end early, a TTL is never cut short, IDs
are never reused, one producer's jobs on one node come in order."""
import os
import time

from faults import nodes as fault_nodes
from faults.scenario import Scenario
from faults.scenarios import _sleep_until
from faults.wallclock import Clock

SKEW_S = 120.0
JUMP_PERIOD = 3.0
PROBES = 0.2                # share of the adds that are timing probes
CLOCK_SLACK_S = 5.0         # TIME read through redis-cli in a namespace: seconds of slack


def probe_ttl(ctx):
    """Longer than any job stays in the run (warm-up, faults, at most 30 s of recovery and
    40 s of drain), so a short-TTL probe that is not delivered was cut short."""
    return int(ctx.args.warmup + ctx.args.duration + 90)


def jump_s(ctx):
    return probe_ttl(ctx) + 30


def clock(ctx, i):
    clocks = ctx.__dict__.setdefault("clocks", {})
    if i not in clocks:
        clocks[i] = Clock(os.path.join(ctx.dir, "n%d.wallclock" % i))
    return clocks[i]


def node_env(ctx, i):
    c = clock(ctx, i)
    c.set(getattr(ctx, "start_offsets", {}).get(i, 0.0))
    return c.env()


def check_clocks(ctx):
    """Each node's TIME (its front-end's wall clock) is real time plus its offset: the shim
    reaches the node (tests/test_server_clock_steps.py checks the workers too)."""
    for node in ctx.nodes:
        for _ in range(10):
            reply = (fault_nodes.cli(node.i, "TIME") or "").split()
            if len(reply) == 2:
                seen = int(reply[0]) + int(reply[1]) / 1e6 - time.time()
                if abs(seen - clock(ctx, node.i).offset) < CLOCK_SLACK_S:
                    break
            time.sleep(fault_nodes.CLI_POLL)
        else:
            raise RuntimeError("node %d does not follow its clock offset %+.0fs (TIME %r)"
                               % (node.i, clock(ctx, node.i).offset, reply))


def skew_prepare(ctx):
    n = ctx.args.nodes
    offsets = {i: ctx.rng.uniform(-SKEW_S, SKEW_S) for i in range(n)}
    low, high = ctx.rng.sample(range(n), 2)
    offsets[low], offsets[high] = -SKEW_S, SKEW_S
    ctx.start_offsets = offsets


def skew(ctx, until):
    check_clocks(ctx)
    ctx.note("clocks %s" % " ".join("n%d:%+.0fs" % (i, clock(ctx, i).offset)
                                    for i in range(len(ctx.nodes))))
    _sleep_until(until, until)


def jumps(ctx, until):
    check_clocks(ctx)
    j = jump_s(ctx)
    while time.monotonic() < until:
        node = ctx.rng.choice(ctx.nodes)
        c = clock(ctx, node.i)
        to = ctx.rng.choice([o for o in (-j, 0.0, j) if o != c.offset])
        ctx.note("clock of node %d steps %+.0fs (to %+.0fs)" % (node.i, to - c.offset, to))
        c.set(to)
        _sleep_until(time.monotonic() + JUMP_PERIOD, until)
    check_clocks(ctx)


def clocks_to_zero(ctx):
    for c in getattr(ctx, "clocks", {}).values():
        c.set(0.0)


def probes(ctx):
    return ["--probes", PROBES, "--probe-ttl", probe_ttl(ctx)]


# docs/faults-clocks.md, "Scenarios"
SCENARIOS = {
    "clock-skew": Scenario(skew, node_env=node_env, prepare=skew_prepare, workload_args=probes,
                           summary="wall clocks -%d..+%d s apart, held" % (SKEW_S, SKEW_S)),
    "clock-jumps": Scenario(jumps, node_env=node_env, heal=clocks_to_zero, workload_args=probes,
                            summary="a random node's wall clock steps by minutes every %d s"
                            % JUMP_PERIOD),
}
