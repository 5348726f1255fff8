"""Our nodes, one per network namespace: start, kill -9, restart from their files, pause,
kill one worker; queries go through redis-cli inside the clients' namespace."""
import os
import signal
import subprocess
import sys
import time

import psutil

from faults import netns

PORT = 7711
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env():
    """This checkout first on the path of every process we start, as tests/conftest.py."""
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e
NODE_TIMEOUT_MS = 2000


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
    out = cli(i, "INFO", section)
    for line in (out or "").splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


class Node:
    def __init__(self, i, root, workers, aof):
        self.i = i
        self.dir = os.path.join(root, "n%d" % i)
        os.makedirs(self.dir, exist_ok=True)
        self.workers = workers
        self.aof = aof              # None, "everysec" or "always"
        self.proc = None
        self.killed = 0             # kills we caused (their exit is not a crash)
        self.log = os.path.join(self.dir, "node.log")

    def start(self):
        args = ["--port", str(PORT), "--bind", netns.node_addr(self.i),
                "--workers", str(self.workers), "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--dir", self.dir]
        if self.aof:
            args += ["--appendonly", "yes", "--appendfsync", self.aof]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["ip", "netns", "exec", netns.node_ns(self.i),
                                          sys.executable, "-m", "disque", *args],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                                         env=env())

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cli(self.i, "PING") == "PONG":
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def procs(self):
        try:
            p = psutil.Process(self.proc.pid)
            return [p] + p.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def worker_pids(self):
        return [p.pid for p in self.procs()[1:]]

    def kill(self):
        self.killed += 1
        for p in self.procs():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait()

    def signal_all(self, sig):
        for p in self.procs():
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

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
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def join(nodes):
    for n in nodes[1:]:
        cli(n.i, "CLUSTER", "MEET", netns.node_addr(0), PORT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(info_reachable(n.i) == len(nodes) - 1 for n in nodes):
            return True
        time.sleep(0.3)
    return False


def info_reachable(i):
    out = cli(i, "CLUSTER", "INFO") or ""
    for line in out.splitlines():
        if line.startswith("cluster_reachable_nodes:"):
            return int(line.split(":")[1])
    return -1
