"""One node at a time on a leased loopback port, ours or the original, and its processes'
memory: what the single-node scripts (bench_idle, bench_queues, bench_rss, bench_spill)
share."""
import contextlib
import os
import time

import psutil

from disque.harness.node import Node, disque_argv, original_argv, ping
from disque.harness.ports import lease_port


def node_processes(pid):
    """The node's root process and every descendant (the workers)."""
    root = psutil.Process(pid)
    return [root] + root.children(recursive=True)


def rss_by_process(pid):
    """{pid: RSS} over the node's processes (one that just exited is left out)."""
    out = {}
    for p in node_processes(pid):
        try:
            out[p.pid] = p.memory_info().rss
        except psutil.Error:
            pass
    return out


def node_rss(pid):
    return sum(rss_by_process(pid).values())


def node_cpu(pid):
    """CPU seconds (user + system) the node's processes have used so far."""
    total = 0.0
    for p in node_processes(pid):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def until_pong(port, deadline_s=120.0):
    """Seconds until PING answers +PONG (a refused connection or -LOADING: again 1 ms later)."""
    t0 = time.monotonic()
    while not ping("127.0.0.1", port, timeout=5):
        if time.monotonic() - t0 > deadline_s:
            raise RuntimeError("no +PONG on port %d within %.0f s" % (port, deadline_s))
        time.sleep(0.001)
    return time.monotonic() - t0


@contextlib.contextmanager
def timed_start(argv, port, workdir, label):
    """A node of `argv` spawned in `workdir` on `port`: yields the seconds from its process
    start to its first +PONG, and stops it on the way out (bench_restart, bench_pong)."""
    node = Node(argv, port=port, cwd=workdir, log_path=os.path.join(workdir, "%s.log" % label))
    try:
        node.spawn()
        yield until_pong(port)
    finally:
        node.stop()


@contextlib.contextmanager
def leased_node(label, argv_of, children, workdir):
    """A started node (`argv_of(port)` its command line, `children` its workers), stopped
    and its port released on the way out."""
    lease = lease_port()
    node = Node(argv_of(lease.port), port=lease.port, cwd=workdir,
                log_path=os.path.join(workdir, "%s.log" % label))
    try:
        node.start(children=children)
        yield node
    finally:
        node.stop()
        lease.release()


def ours_then_original(workers, disque_binary, workdir, measure, *extra):
    """`measure(label, argv_of, children)` for ours with each worker count, then for the
    original when its binary is given: the rows, in that order."""
    rows = []
    for w in workers:
        print("ours --workers %d ..." % w, flush=True)
        rows.append(measure("ours-w%d" % w,
                            lambda port, w=w: disque_argv(port, w, "--dir", workdir, *extra), w))
    if disque_binary:
        print("original ...", flush=True)
        rows.append(measure("original",
                            lambda port: original_argv(disque_binary, port, workdir), 0))
    return rows
