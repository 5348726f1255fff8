"""Disk faults (docs/faults-disks.md): a node's directory (its AOF files and its cluster
config) on a small tmpfs that a filler file fills to ENOSPC while the workload runs and
frees again; kill -9 of nodes, then the last record of some of their AOF files cut
part-way (a torn write) before they restart.

The tmpfs are mounted in the root mount namespace by `prepare`, before the nodes start
(`ip netns exec` sees them), and unmounted by `finish`, which the harness always runs."""
import errno
import os
import subprocess
import sys
import time

from faults import nodes as fault_nodes
from faults.scenario import Scenario
from faults.scenarios import _sleep_until

TMPFS_SIZE = "32m"          # a node's AOF grows by ~100 KB/s under the workload
FILL_HOLD = 4.0             # seconds a disk stays full
FILL_GAP = 2.0              # seconds between two fills
FILLER = "filler"
CHUNK = 1 << 20


def disk_dir(ctx, i):
    return os.path.join(ctx.dir, "n%d" % i, "disk")


def dir_args(ctx, d):
    """The node's --dir (AOF, cluster config) on the faulty disk; the log stays outside."""
    args = ["--dir", d]
    if ctx.args.disque_binary:      # the original's cluster file too (the harness puts it
        args += ["--cluster-config-file", os.path.join(d, "nodes-%d.conf" % fault_nodes.PORT)]  # beside)
    return args


def node_args(ctx, i):
    return dir_args(ctx, disk_dir(ctx, i))


def mount_all(ctx):
    ctx.mounted = []
    for i in range(ctx.args.nodes):
        d = disk_dir(ctx, i)
        os.makedirs(d, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % TMPFS_SIZE,
                        "dqf-disk", d], check=True)
        ctx.mounted.append(d)


def unmount_all(ctx):
    for d in getattr(ctx, "mounted", ()):
        if subprocess.run(["umount", d], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", d], capture_output=True)   # still held: detach
    ctx.mounted = []


def fill(path):
    """Grow a filler file in `path` until the file system refuses (ENOSPC)."""
    with open(os.path.join(path, FILLER), "ab", buffering=0) as f:
        for size in (CHUNK, 4096):
            block = b"\0" * size
            while True:
                try:
                    f.write(block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break


def free(path):
    try:
        os.unlink(os.path.join(path, FILLER))
    except FileNotFoundError:
        pass


def in_turn(what, fault, mend):
    """A schedule: `fault(ctx, i)` on one or two random nodes for FILL_HOLD seconds, then
    `mend(ctx, i)`, FILL_GAP seconds apart."""
    def run(ctx, until):
        n = len(ctx.nodes)
        while time.monotonic() < until:
            victims = ctx.rng.sample(range(n), ctx.rng.choice((1, 2)))
            ctx.note("%s on node(s) %s" % (what, victims))
            for i in victims:
                fault(ctx, i)
            _sleep_until(time.monotonic() + FILL_HOLD, until)
            ctx.note("mended node(s) %s" % victims)
            for i in victims:
                mend(ctx, i)
            _sleep_until(time.monotonic() + FILL_GAP, until)
    return run


disk_full = in_turn("disk full", lambda ctx, i: fill(disk_dir(ctx, i)),
                    lambda ctx, i: free(disk_dir(ctx, i)))


def disk_full_kill(ctx, until):
    """The disks of one or two nodes full while another node is killed (kill -9) for three
    node timeouts: the full nodes must record its failure in their cluster config file."""
    n = len(ctx.nodes)
    while time.monotonic() < until:
        ids = list(range(n))
        ctx.rng.shuffle(ids)
        full, dead = ids[:ctx.rng.choice((1, 2))], ctx.nodes[ids[-1]]
        ctx.note("disk full on node(s) %s, kill -9 node %d" % (full, dead.i))
        for i in full:
            fill(disk_dir(ctx, i))
        dead.kill()
        _sleep_until(time.monotonic() + 3 * ctx.node_timeout_s, until)
        dead.start()
        dead.wait_ready()
        ctx.note("node %d back, disks freed" % dead.i)
        for i in full:
            free(disk_dir(ctx, i))
        _sleep_until(time.monotonic() + FILL_GAP, until)


# the log line of a cluster config that could not be saved: ours, the original's (it exits)
CONFIG_SAVE_FAILED = ("Can't save the cluster config", "can't update cluster config file")


def free_all_count_saves(ctx):
    free_all(ctx)
    ctx.extra["config_save_failed"] = sum(n.log_text().count(line) for n in ctx.nodes
                                          for line in CONFIG_SAVE_FAILED)


def free_all(ctx):
    for i in range(len(ctx.nodes)):
        free(disk_dir(ctx, i))
    count_aof_restarts(ctx)


def count_aof_restarts(ctx):
    """Workers restarted after an AOF write error (ours, appendfsync always)."""
    n = 0
    for node in ctx.nodes:
        v = fault_nodes.info_field(node.i, "server", "worker_aof_restarts")
        n += int(v) if v and v.isdigit() else 0
    ctx.extra["worker_aof_restarts"] = n


# ---- fsync failures: a FUSE pass-through (faults/flakyfs.py) ----

def fuse_paths(ctx):
    return (os.path.join(ctx.dir, "fuse-backing"), os.path.join(ctx.dir, "fuse"),
            os.path.join(ctx.dir, "fuse-control"))


def fuse_dir(ctx, i):
    return os.path.join(fuse_paths(ctx)[1], "n%d" % i)


def fuse_node_args(ctx, i):
    return dir_args(ctx, fuse_dir(ctx, i))


def fuse_mount(ctx):
    backing, mountpoint, control = fuse_paths(ctx)
    for d in (backing, mountpoint, control):
        os.makedirs(d, exist_ok=True)
    for i in range(ctx.args.nodes):
        os.makedirs(os.path.join(backing, "n%d" % i), exist_ok=True)
    ctx.fuse = subprocess.Popen([sys.executable, "-m", "faults.flakyfs", backing, mountpoint,
                                 control], cwd=fault_nodes.REPO, env=fault_nodes.env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.ismount(mountpoint):
        if time.monotonic() > deadline or ctx.fuse.poll() is not None:
            raise RuntimeError("the FUSE file system did not mount (libfuse2, fusepy?)")
        time.sleep(0.05)


def fuse_unmount(ctx):
    mountpoint = fuse_paths(ctx)[1]
    if os.path.ismount(mountpoint):
        if subprocess.run(["umount", mountpoint], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mountpoint], capture_output=True)
    p = getattr(ctx, "fuse", None)
    if p is not None:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fail_fsync(ctx, i, on):
    path = os.path.join(fuse_paths(ctx)[2], "fail-fsync-n%d" % i)
    if on:
        open(path, "w").close()
    elif os.path.exists(path):
        os.unlink(path)


fsync_fail = in_turn("fsync fails (EIO)", lambda ctx, i: fail_fsync(ctx, i, True),
                     lambda ctx, i: fail_fsync(ctx, i, False))


def fsync_heal(ctx):
    for i in range(len(ctx.nodes)):
        fail_fsync(ctx, i, False)
    count_aof_restarts(ctx)


def last_record_start(data):
    """Offset of the last record (a RESP array) of an AOF, ours or the original's."""
    at = len(data)
    while True:
        at = data.rfind(b"\r\n*", 0, at - 1)
        if at < 0:
            return 0 if data.startswith(b"*") else None
        if data[at + 3:at + 4].isdigit():
            return at + 2


def tear(path, rng):
    """Cut the file's last record part-way; the bytes dropped, or 0."""
    with open(path, "rb") as f:
        data = f.read()
    start = last_record_start(data)
    if start is None or len(data) - start < 2:
        return 0
    keep = rng.randrange(start + 1, len(data))
    os.truncate(path, keep)
    return len(data) - keep


def torn_tail(ctx, until):
    """kill -9 of one node, the last record of its AOF files cut part-way (a torn write,
    harsher than kill -9 alone: the record was acknowledged), restart; the node must load
    everything before the cut and say how many bytes it dropped."""
    ctx.extra.setdefault("torn_files", 0)
    while time.monotonic() < until:
        node = ctx.rng.choice(ctx.nodes)
        ctx.note("kill -9 node %d" % node.i)
        node.kill()
        d = disk_dir(ctx, node.i)
        files = sorted(name for name in os.listdir(d) if name.endswith(".aof"))
        for name in ctx.rng.sample(files, ctx.rng.randint(1, len(files))) if files else ():
            dropped = tear(os.path.join(d, name), ctx.rng)
            if dropped:
                ctx.extra["torn_files"] += 1
                ctx.note("tore the last record of %s: %d bytes cut" % (name, dropped))
        node.start()
        node.wait_ready()
        _sleep_until(time.monotonic() + 3.0, until)


def count_repairs(ctx):
    """At the heal: the loads' "short read" lines, ours and the original's."""
    ctx.extra["torn_repaired"] = sum(n.log_text().count("short read while loading the AOF")
                                     for n in ctx.nodes)


def _disk(schedule, aof, heal=free_all, finish=unmount_all, summary=""):
    return Scenario(schedule, aof, node_args=node_args, prepare=mount_all, heal=heal,
                    finish=finish, summary=summary)


SCENARIOS = {
    "disk-full-everysec": _disk(disk_full, "everysec",
                                summary="tmpfs of 1-2 nodes filled to ENOSPC 4 s, freed 2 s"),
    "disk-full-always": _disk(disk_full, "always",
                              summary="the same with appendfsync always"),
    "disk-full-kill": _disk(disk_full_kill, "everysec", heal=free_all_count_saves,
                            summary="disks full while another node is killed and restarted"),
    "fsync-fail-everysec": Scenario(fsync_fail, "everysec", node_args=fuse_node_args,
                                    prepare=fuse_mount, heal=fsync_heal, finish=fuse_unmount,
                                    summary="fsync answers EIO on 1-2 nodes 4 s (FUSE)"),
    "fsync-fail-always": Scenario(fsync_fail, "always", node_args=fuse_node_args,
                                  prepare=fuse_mount, heal=fsync_heal, finish=fuse_unmount,
                                  summary="the same with appendfsync always"),
    "torn-tail": _disk(torn_tail, "always", heal=count_repairs,
                       summary="kill -9, last AOF record cut part-way, restart"),
}
