"""Starting a worker process: forked from the front-end at start-up, or a new interpreter.

At start-up the front-end has imported everything a worker runs and has no thread yet (the
cluster bus, ZeroMQ's threads, opens after the workers): a worker is then a fork of it,
with nothing to import, which starts in milliseconds instead of the ~0.2 s of CPU a new
interpreter takes, and shares the interpreter's pages with the front-end (docs/design.md,
"Starting the workers"). A worker started later (one that died, `worker-link zmq`, whose
link the front-end opens with ZeroMQ before any worker) is a new interpreter, as before.
"""
import gc
import logging
import os
import random
import signal
import subprocess
import sys
import time

from disque._fast import procctl

# A new interpreter imports the same `disque` the front-end runs: `python -m` would put the
# current directory first on sys.path, and started from inside a source checkout the worker
# would import the uncompiled tree instead of the installed package.
WORKER_BOOT = ("import os, sys\n"
               "if sys.path and sys.path[0] in ('', os.getcwd()):\n"
               "    sys.path.pop(0)\n"
               "from disque.workers.process import main\n"
               "main()\n")



class ForkedWorker:
    """A forked worker, with the part of subprocess.Popen the front-end uses."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
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
        if self.returncode is None:
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


def fork_worker(args, fds):
    """A worker forked from this process, which must have no thread. The child keeps only
    `fds` and the standard streams, and never returns."""
    from disque.workers import process        # imported before the fork, once for all
    sys.stdout.flush()
    sys.stderr.flush()
    # the front-end's objects go to the collector's permanent generation: in the child no
    # collection frees one (a socket or file closing an fd number the child reuses), and
    # no collection writes to their pages (they stay shared with the front-end)
    gc.freeze()
    pid = os.fork()
    if pid:
        gc.unfreeze()
        return ForkedWorker(pid)
    code = 1
    try:
        for h in logging.getLogger().handlers:      # the front-end's log file: ours is opened anew
            stream = getattr(h, "stream", None)
            if stream is not None and stream not in (sys.stdout, sys.stderr):
                stream.close()
        keep = sorted(set(fds) | {0, 1, 2})
        start = 0
        for fd in keep:                 # everything of the front-end's but our fds goes
            if fd > start:              # closerange(n, n) would close every fd from n on
                os.closerange(start, fd)
            start = fd + 1
        os.closerange(start, 1 << 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        random.seed()                   # not the front-end's sequence
        procctl.set_name(b"disque-worker-%d" % args.index)   # not the front-end's name
        code = process.serve(args)
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
            # the front-end's objects (its loop, sockets) are not ours to finalize
            os._exit(code or 0)
