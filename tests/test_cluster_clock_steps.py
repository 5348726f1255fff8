"""A node whose wall clock steps back still finds a dead peer (docs/faults-clocks.md, "Bugs
found and fixed"): two real nodes, node 0's CLOCK_REALTIME moved by the test through
faults/wallclock.c. Before the fix the bus timed PINGs with the wall clock, so a PING sent
before a step back of S looked S seconds younger and the dead peer stayed unflagged S
seconds more."""
import os
import shutil
import signal
import sys
import time

import pytest

from support.cluster import DisqueCluster
from support.server import DisqueServer, stop_servers
from support.waits import wait_until

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from faults.wallclock import Clock  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="the clock shim needs gcc")

STEP_S = 300


@pytest.fixture
def pair(tmp_path):
    """Two joined nodes, node 0 with a wall clock the test moves (`pair.clock`)."""
    servers = []
    clock = Clock(str(tmp_path / "wallclock"))

    def factory(workers, extra_args, wait):
        srv = DisqueServer(workers=workers, extra_args=extra_args,
                           workdir=tmp_path / ("n%d" % len(servers)))
        if not servers:
            srv.env = dict(srv.env, **clock.env())
        servers.append(srv)
        srv.spawn()
        return srv
    try:
        cluster = DisqueCluster(factory, 2, workers=1).join()
        cluster.clock = clock
        yield cluster
    finally:
        for srv in servers:
            if srv.is_alive():
                srv.signal_all(signal.SIGCONT)
        stop_servers(servers)


def pending_ping_ms(cluster):
    """How long node 0's PING to node 1 has waited for its PONG, by the test's clock (node
    0's clock is still the real one here); 0 when none is pending."""
    for line in cluster[0].execute("CLUSTER", "NODES").decode().splitlines():
        parts = line.split(" ")
        if parts[0] == cluster.ids[1] and int(parts[3]):
            return time.time() * 1000 - int(parts[3])
    return 0


def test_a_step_back_does_not_hide_a_dead_peer(pair):
    pair[1].signal_all(signal.SIGSTOP)
    # node 0 has a PING to node 1 that no PONG will answer
    wait_until(lambda: pending_ping_ms(pair) > 500, timeout=15,
               message="a PING from node 0 waiting for node 1")
    pair.clock.set(-STEP_S)
    wait_until(lambda: "fail?" in (pair.flags_of(0, 1) or ()), timeout=30,
               message="node 0 flags node 1 as failing (before the fix: %d s later)" % STEP_S)
