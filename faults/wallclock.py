"""Moving one process tree's wall clock (faults/wallclock.c, docs/faults-clocks.md).

`library()` builds the LD_PRELOAD shim once per source version (gcc, which the Cython
build needs anyway); `Clock(path)` is one node's offset file: `env()` for the node's
environment, `set(seconds)` moves its CLOCK_REALTIME, leaving CLOCK_MONOTONIC alone as an
NTP step would. The file is rewritten in place (the node maps it), never replaced."""
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wallclock.c")


def library():
    """The path of the built shim (built on first use, kept in the temp directory)."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), "dq-wallclock-%s.so" % digest)
    if not os.path.exists(path):
        if not shutil.which("gcc"):
            raise RuntimeError("faults/wallclock.c needs gcc to build")
        tmp = "%s.%d" % (path, os.getpid())
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-w", "-o", tmp, SOURCE, "-ldl"],
                       check=True, capture_output=True)
        os.replace(tmp, path)
    return path


class Clock:
    """One node's wall-clock offset, in a file its processes map."""

    def __init__(self, path, seconds=0.0):
        self.path = path
        self.offset = None
        with open(path, "wb") as f:
            f.write(struct.pack("q", 0))
        self.set(seconds)

    def env(self):
        return {"LD_PRELOAD": library(), "DQF_WALLCLOCK_FILE": self.path}

    def set(self, seconds):
        """The node's CLOCK_REALTIME reads real time + `seconds` from its next read on."""
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("q", int(seconds * 1e9)), 0)
        finally:
            os.close(fd)
        self.offset = seconds
