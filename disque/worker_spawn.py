"""Starting a worker process: forked at start-up, or a new interpreter.

At start-up the front-end has no thread yet (the cluster bus, ZeroMQ's threads, opens
after the workers). It forks one process, the *starter*, which imports what a worker runs
while the front-end imports its own parts and its event loop on the other core; the
starter then forks every worker, tells the front-end their pids and exits. The workers,
orphaned, become the front-end's children (it is their subreaper), share the starter's
pages, and start in milliseconds instead of the ~0.2 s of CPU a new interpreter takes
(docs/design.md, "Starting the workers"). A worker started later (one that died,
`worker-link zmq`, whose link the front-end opens with ZeroMQ before any worker, a node
with a cluster secret) is a new interpreter, as before.
"""
import gc
import logging
import os
import random
import select
import signal
import subprocess
import sys
import time

from disque._fast import procctl

STARTER_EXIT_TIMEOUT = 10.0     # a forked worker waits this long at most for the starter's exit

# A new interpreter imports the same `disque` the front-end runs: `python -m` would put the
# current directory first on sys.path, and started from inside a source checkout the worker
# would import the uncompiled tree instead of the installed package.
WORKER_BOOT = ("import os, sys\n"
               "if sys.path and sys.path[0] in ('', os.getcwd()):\n"
               "    sys.path.pop(0)\n"
               "from disque.workers.process import main\n"
               "main()\n")



class ForkedStart:
    """The starter of a start's workers, seen from the front-end: the workers' pids, read
    from its pipe once it has forked them all and exited (then they are our children)."""

    def __init__(self, pid, pipe_fd, count, timeout):
        self.pid = pid
        self.fd = pipe_fd
        self.count = count
        self.timeout = timeout
        self.pids = None
        self.code = None                # the starter's exit code

    def worker_pid(self, k):
        """Worker k's pid, None if the starter failed before forking it."""
        if self.pids is None:
            self.read_pids()
        return self.pids[k] if k < len(self.pids) else None

    def read_pids(self):
        data = b""
        deadline = time.monotonic() + self.timeout
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not poller.poll(left * 1000):
                    os.kill(self.pid, signal.SIGKILL)
                    break
                chunk = os.read(self.fd, 4096)
                if not chunk:           # the starter exited: its workers are reparented
                    break
                data += chunk
        finally:
            os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        self.code = os.waitstatus_to_exitcode(status)
        self.pids = [int(x) for x in data.split()][:self.count]


class ForkedWorker:
    """A forked worker, with the part of subprocess.Popen the front-end uses."""

    def __init__(self, start, index):
        self.start = start
        self.index = index
        self.returncode = None

    @property
    def pid(self):
        return self.start.worker_pid(self.index)

    def poll(self):
        if self.returncode is None:
            pid = self.pid
            if pid is None:             # never forked: the starter failed
                self.returncode = self.start.code or 1
                return self.returncode
            try:
                pid, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["worker", str(self.pid)], timeout)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None and self.pid is not None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def exec_worker(args, fds):
    """A worker in a new interpreter, its options on the command line."""
    cmd = [sys.executable, "-c", WORKER_BOOT] + args.argv()
    return subprocess.Popen(cmd, close_fds=True, pass_fds=fds)


def keep_only(fds):
    """Close every file descriptor but `fds` and the standard streams."""
    start = 0
    for fd in sorted(set(fds) | {0, 1, 2}):
        if fd > start:              # closerange(n, n) would close every fd from n on
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def fork_workers(starts, timeout):
    """Every worker of a start, `starts` being (WorkerArgs, fds) per worker, through a
    starter process (the module's docstring). This process must have no thread. Returns a
    ForkedWorker per worker at once: their pids are read when first needed."""
    procctl.become_subreaper()
    pipe_r, pipe_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    # the front-end's objects go to the collector's permanent generation: in the children
    # no collection frees one (a socket or file closing an fd number a worker reuses), and
    # no collection writes to their pages (they stay shared with the front-end)
    gc.freeze()
    pid = os.fork()
    if pid:
        gc.unfreeze()
        os.close(pipe_w)
        start = ForkedStart(pid, pipe_r, len(starts), timeout)
        return [ForkedWorker(start, k) for k in range(len(starts))]
    os.close(pipe_r)
    run_child(lambda: be_starter(starts, pipe_w))


def be_starter(starts, pipe_w):
    """In the starter: only the workers' fds and the pipe, default signals, its own name;
    then run_starter."""
    for h in logging.getLogger().handlers:      # the front-end's log file: ours is opened anew
        stream = getattr(h, "stream", None)
        if stream is not None and stream not in (sys.stdout, sys.stderr):
            stream.close()
    keep_only({fd for _, fds in starts for fd in fds} | {pipe_w})
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    procctl.set_name(b"disque-starter")
    return run_starter(starts, pipe_w)


def run_child(body):
    """In a forked child (the starter, a worker): `body()`'s exit code, 1 after an
    exception (its traceback printed); never returns: the front-end's objects (its loop,
    sockets) are not ours to finalize."""
    code = 1
    try:
        code = body()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)


def run_starter(starts, pipe_w):
    """In the starter: import the workers' modules once for all, fork each worker, tell
    the front-end their pids, exit."""
    from disque.workers import process
    front_end, starter = os.getppid(), os.getpid()
    gc.freeze()                     # the modules' objects: never collected, never written
    for args, fds in starts:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(lambda: become_worker(process, args, fds, starter, front_end))
        os.write(pipe_w, b"%d\n" % pid)
    return 0


def wait_for_adoption(starter, front_end, timeout=STARTER_EXIT_TIMEOUT):
    """In a forked worker: until the starter has exited and the front-end is our parent
    (only then may we ask to die with it). The starter's pidfd turns readable once the
    kernel has reparented its children; a kernel without pidfds is asked every 0.5 ms.
    False when our parent is then not the front-end (it died)."""
    deadline = time.monotonic() + timeout
    if os.getppid() == starter:
        try:
            pidfd = os.pidfd_open(starter)
        except (AttributeError, OSError):   # no pidfds, or the starter gone already
            pidfd = None
        if pidfd is not None:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll(timeout * 1000)
            os.close(pidfd)
        while os.getppid() == starter and time.monotonic() < deadline:
            time.sleep(0.0005)
    return os.getppid() == front_end


def become_worker(process, args, fds, starter, front_end):
    """In a forked worker: only its own fds, its own random sequence and name; once the
    front-end has adopted it, serve. Its exit code (run_child)."""
    keep_only(fds)
    random.seed()                   # not the front-end's sequence
    procctl.set_name(b"disque-worker-%d" % args.index)   # not the front-end's name
    if not wait_for_adoption(starter, front_end):
        return 1
    return process.serve(args)
