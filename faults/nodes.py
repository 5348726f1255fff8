"""The nodes, one per network namespace (disque.harness nodes started behind `ip netns
exec`): ours, or the original C `disque-server` when a binary is given. Start, kill -9,
restart from their files, pause, kill one worker; queries go through redis-cli inside the
clients' namespace."""
import os
import signal
import subprocess

from disque.harness import cluster, node as harness
from faults import netns

PORT = 7711
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_TIMEOUT_MS = 2000
CLI_POLL = 0.2      # each check starts a redis-cli in a namespace


def env():
    """This checkout first on the path of every process we start, as tests/conftest.py."""
    return harness.checkout_env(REPO)


def cli(i, *args, timeout=5):
    """One command to node i from the clients' namespace; None when it does not answer."""
    try:
        r = subprocess.run(["ip", "netns", "exec", netns.CLIENT, "redis-cli", "-h",
                            netns.node_addr(i), "-p", str(PORT), *map(str, args)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0 or r.stdout.startswith("Could not connect"):
        return None
    return r.stdout.strip()


def info_field(i, section, name):
    return cluster.field(cli(i, "INFO", section), name)


class Node(harness.Node):
    def __init__(self, i, root, workers, aof, original=None, extra_env=None, extra_args=()):
        self.i = i
        self.dir = os.path.join(root, "n%d" % i)
        os.makedirs(self.dir, exist_ok=True)
        self.workers = workers
        self.aof = aof              # None, "everysec" or "always"
        self.original = original    # path of the original's disque-server, or None
        self.killed = 0             # kills we caused (their exit is not a crash)
        self.down_by_harness = False
        addr = netns.node_addr(i)
        args = ["--cluster-node-timeout", NODE_TIMEOUT_MS, "--dir", self.dir, *extra_args]
        if aof:
            args += ["--appendonly", "yes", "--appendfsync", aof]
        if original:
            argv = harness.original_argv(original, PORT, self.dir, *args, host=addr)
        else:
            argv = harness.disque_argv(PORT, workers, *args, host=addr)
        node_env = env()
        node_env.update(extra_env or {})
        super().__init__(argv, port=PORT, host=addr, cwd=self.dir, env=node_env,
                         log_path=os.path.join(self.dir, "node.log"),
                         prefix=["ip", "netns", "exec", netns.node_ns(i)],
                         ready=lambda node: cli(node.i, "PING") == "PONG",
                         call=lambda node, *a: cli(node.i, *a), label="node %d" % i)
        self.poll_interval = CLI_POLL

    def start(self):
        """Without waiting: the harness starts every node, then waits for each."""
        self.down_by_harness = False
        self.spawn()

    def wait_ready(self, timeout=30):
        try:
            super().wait_ready(timeout)
            return True
        except harness.NodeStartError:
            return False

    def kill(self):
        self.killed += 1
        self.down_by_harness = True
        super().kill()

    def pause(self):
        self.signal_all(signal.SIGSTOP)

    def resume(self):
        self.signal_all(signal.SIGCONT)

    def kill_worker(self, k=None):
        pids = self.worker_pids()
        if pids:
            os.kill(pids[0] if k is None else pids[k % len(pids)], signal.SIGKILL)
            return True
        return False

    def alive(self):
        return self.is_alive()

    def stop(self):
        if self.alive():
            self.resume()           # a paused node cannot act on SIGTERM
        return super().stop()


def join(nodes):
    try:
        return cluster.join(nodes)
    except RuntimeError:            # a MEET not answered
        return False
