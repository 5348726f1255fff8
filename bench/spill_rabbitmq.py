"""RabbitMQ anchor for the spill benchmark: N persistent messages go into a durable classic
queue (CQv2 or lazy) with publisher confirms, then are drained with manual acks and checked,
while the RSS and disk use of a private rabbitmq-server child process are sampled. Usage:
    python bench/spill_rabbitmq.py --jobs 200000 --body 1024 --mode both"""
import argparse, glob, os, pathlib, random, shutil, signal, socket, struct, subprocess  # noqa: E401
import tempfile, threading, time, types, zlib  # noqa: E401
from contextlib import suppress

import pika

QUEUE_ARGS = {"cqv2": {"x-queue-version": 2}, "lazy": {"x-queue-mode": "lazy"}}
# Memory watermark 0.8 of RAM, not the default 0.4: at it the alarm blocks publishers, and from
# half of it (paging ratio 0.5) queues page messages out, so CQv2's RSS peak follows this
# setting (measured: 1500MiB gave a 1.2 GB peak, no alarm). Not "never": no swap, OOM guard.
RABBIT_CONF = "vm_memory_high_watermark.relative = 0.8\ndisk_free_limit.absolute = 1GB\n"
PUBLISH_WINDOW = 10_000          # unconfirmed messages in flight, see AsyncPublisher
PREFETCH, ACK_EVERY = 1000, 250  # ack (multiple) every prefetch/4: deliveries never stall
SAMPLE_EVERY, PROGRESS_EVERY, DRAIN_STALL_S = 0.5, 5.0, 60
_handles_by_port = {}            # so run_rabbitmq_backlog(port=...) finds what to sample


def _wait_port(port, proc, deadline, what):
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: port {port} still closed at the deadline")
        time.sleep(0.2)


def start_rabbitmq(workdir, port, timeout=120.0):
    """A private broker on 127.0.0.1:port; its handle has .proc (beam.smp), .epmd, .mnesia_dir"""
    server = "/usr/lib/rabbitmq/bin/rabbitmq-server"   # Debian's; else the one on PATH
    server = server if os.path.exists(server) else shutil.which("rabbitmq-server") or server
    epmd_port, dist_port = port + 10000, port + 20000   # both below 65536 for port < 45536
    for p in (port, epmd_port, dist_port):
        try:   # create_server sets SO_REUSEADDR as servers do: TIME_WAIT is no false alarm
            socket.create_server(("127.0.0.1", p)).close()
        except OSError as exc:
            raise RuntimeError(f"port {p}: {exc}; pick another --port") from None
    here = lambda name: os.path.join(workdir, name)  # noqa: E731
    for d in ("home", "mnesia", "log"):
        os.makedirs(here(d), exist_ok=True)
    for name, text in (("enabled_plugins", "[].\n"), ("rabbitmq.conf", RABBIT_CONF),
                       ("rabbitmq-env.conf", "")):
        pathlib.Path(here(name)).write_text(text)
    env = dict(os.environ, HOME=here("home"),        # the Erlang cookie is created there
               ERL_EPMD_PORT=str(epmd_port), RABBITMQ_NODENAME=f"bench{port}@localhost",
               RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(port),
               RABBITMQ_DIST_PORT=str(dist_port), RABBITMQ_MNESIA_BASE=here("mnesia"),
               RABBITMQ_LOG_BASE=here("log"), RABBITMQ_CONFIG_FILE=here("rabbitmq.conf"),
               RABBITMQ_ENABLED_PLUGINS_FILE=here("enabled_plugins"),   # no management
               RABBITMQ_CONF_ENV_FILE=here("rabbitmq-env.conf"),  # not /etc/rabbitmq's
               RABBITMQ_ADVANCED_CONFIG_FILE=here("advanced.config"),  # absent on purpose
               RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-start_epmd false")
    # Our own epmd, in the foreground: erl would start a daemonised one that leaves our
    # process group and outlives us; this one is our child and is stopped by PID.
    epmd = subprocess.Popen([shutil.which("epmd") or "epmd", "-port", str(epmd_port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    handle = types.SimpleNamespace(port=port, epmd=epmd, proc=None, mnesia_dir=here("mnesia"),
                                   log_dir=here("log"), stdout_path=here("rabbitmq.stdout"))
    try:
        deadline = time.monotonic() + timeout
        _wait_port(epmd_port, epmd, deadline, "epmd")
        with open(handle.stdout_path, "wb") as out:
            # own session: the scripts exec into beam.smp, its helpers stay in its group
            handle.proc = subprocess.Popen([server], env=env, cwd=workdir, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(port, handle.proc, deadline, "rabbitmq-server")
    except Exception as exc:
        tail = ""
        for path in [handle.stdout_path] + glob.glob(os.path.join(handle.log_dir, "*.log")):
            with suppress(OSError), open(path, errors="replace") as f:
                tail += f"--- {path}\n" + "".join(f.readlines()[-30:])
        stop_rabbitmq(handle)
        raise RuntimeError(f"RabbitMQ did not start: {exc}\n{tail}") from exc
    _handles_by_port[port] = handle
    return handle


def _tree_pids(root_pid):
    """root_pid and its descendants, from /proc/*/stat."""
    children = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        with suppress(OSError, IndexError, ValueError), open(f"/proc/{name}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(name))
    pids, frontier = [], [root_pid] if os.path.exists(f"/proc/{root_pid}") else []
    while frontier:
        pids.append(frontier.pop())
        frontier += children.get(pids[-1], [])
    return pids


def stop_rabbitmq(handle, timeout=60.0):
    """SIGTERM (rabbit shuts down cleanly), then SIGKILL its tree and group; always epmd."""
    _handles_by_port.pop(handle.port, None)
    try:
        if handle.proc is not None:
            pids = _tree_pids(handle.proc.pid)
            handle.proc.terminate()
            with suppress(subprocess.TimeoutExpired):
                handle.proc.wait(timeout)
            for pid in [-handle.proc.pid] + pids:   # -pid: its process group
                with suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            handle.proc.wait()
    finally:
        handle.epmd.kill()
        handle.epmd.wait()


def rss_of_broker(handle):
    """RSS in bytes of beam.smp plus its children (erl_child_setup, inet_gethost)."""
    total = 0
    for pid in _tree_pids(handle.proc.pid):
        with suppress(OSError, StopIteration), open(f"/proc/{pid}/status") as f:  # gone, zombie
            total += next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))
    return total


class AsyncPublisher:
    """Publishes n bodies (8-byte index + random bytes; crc32 summed) over a SelectConnection,
    up to PUBLISH_WINDOW unconfirmed. Why: BlockingConnection.confirm_delivery() waits a round
    trip and a broker fsync per persistent message; a window gets thousands confirmed per fsync.
    2 or 3 publisher processes were no faster (~22k/s): with 2 CPUs the broker is the limit."""

    def __init__(self, params, queue, n_jobs, body_size, progress):
        self.params, self.queue, self.n, self.body_size = params, queue, n_jobs, body_size
        self.progress, self.props = progress, pika.BasicProperties(delivery_mode=2)
        self.sent = self.confirmed = self.floor = self.blocked_events = self.crc_sum = 0
        self.acked = bytearray(n_jobs + 1)   # by delivery tag: 1..n in publish order
        self.rng, self.error = random.Random(12345), None

    def run(self):
        self.started = self.last_report = time.monotonic()
        pika.SelectConnection(self.params, on_open_callback=self._on_open,
                              on_open_error_callback=self._on_closed,
                              on_close_callback=self._on_closed).ioloop.start()
        if self.error is not None:
            raise RuntimeError(f"publisher: {self.error}")
        return time.monotonic() - self.started

    def _on_open(self, conn):
        self.conn = conn
        conn.add_on_connection_blocked_callback(self._on_blocked)
        conn.channel(on_open_callback=lambda ch: ch.confirm_delivery(
            self._on_confirm, callback=lambda _: self._pump(ch)))

    def _on_closed(self, conn, exc):
        self.error = self.error or (exc if self.confirmed < self.n else None)
        conn.ioloop.stop()

    def _on_blocked(self, conn, frame):   # memory or disk alarm: broker stops reading us
        self.blocked_events += 1
        self.progress(f"  publisher BLOCKED by the broker: {frame.method.reason}")

    def _pump(self, channel=None):
        self.channel = channel or self.channel
        while self.sent < self.n and self.sent - self.confirmed < PUBLISH_WINDOW:
            body = struct.pack(">Q", self.sent) + self.rng.randbytes(self.body_size - 8)
            self.crc_sum += zlib.crc32(body)   # order-free: the drain must match this sum
            self.channel.basic_publish("", self.queue, body, self.props)
            self.sent += 1

    def _on_confirm(self, frame):
        method, now = frame.method, time.monotonic()
        if isinstance(method, pika.spec.Basic.Nack):
            self.error = f"broker nacked delivery tag {method.delivery_tag}"
            return self.conn.close()
        tag = method.delivery_tag
        for t in range(self.floor + 1 if method.multiple else tag, tag + 1):
            self.confirmed += not self.acked[t]
            self.acked[t] = 1
        if method.multiple:
            self.floor = max(self.floor, tag)
        if now - self.last_report >= PROGRESS_EVERY or self.confirmed >= self.n:
            self.last_report, done = now, self.confirmed
            self.progress(f"  publish {done:,}/{self.n:,} ({done / (now - self.started):,.0f}/s)")
        if self.confirmed >= self.n:
            self.conn.close()
        else:
            self._pump()


def _drain(channel, queue, n_jobs, body_size, progress):
    """Consume up to n_jobs deliveries: (times each index seen, received, crc32 sum, seconds)."""
    seen, crc_sum, received = bytearray(n_jobs + 1), 0, 0   # seen[n_jobs]: not our bodies
    started = last_report = time.monotonic()
    channel.basic_qos(prefetch_count=PREFETCH)
    for method, _, body in channel.consume(queue, inactivity_timeout=DRAIN_STALL_S):
        if method is None:
            progress(f"  drain stalled {DRAIN_STALL_S}s after {received:,} messages")
            break
        received += 1
        index = min(struct.unpack_from(">Q", body)[0], n_jobs) if len(body) == body_size else n_jobs
        seen[index] = min(seen[index] + 1, 255)
        crc_sum += zlib.crc32(body)
        if received % ACK_EVERY == 0 or received >= n_jobs:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if time.monotonic() - last_report >= PROGRESS_EVERY or received >= n_jobs:
            last_report, rate = time.monotonic(), received / (time.monotonic() - started)
            progress(f"  drain {received:,}/{n_jobs:,} ({rate:,.0f}/s)")
        if received >= n_jobs:
            break
    channel.cancel()
    return seen, received, crc_sum, time.monotonic() - started


def run_rabbitmq_backlog(n_jobs, body_size, mode, port, progress=print, handle=None):
    """Publish n_jobs persistent body_size-byte messages with confirms into a durable queue
    of `mode` ("cqv2" or "lazy"), then drain them with manual acks and check them all.
    handle: from start_rabbitmq (default: the one this process started on `port`)."""
    if mode not in QUEUE_ARGS or body_size < 8:
        raise ValueError("mode is cqv2 or lazy; body_size at least 8 (the index)")
    handle = handle or _handles_by_port[port]
    params = pika.ConnectionParameters("127.0.0.1", port, heartbeat=600,
                                       blocked_connection_timeout=None)
    queue, setup = f"spill-{mode}", pika.BlockingConnection(params)
    setup.channel().queue_delete(queue)
    setup.channel().queue_declare(queue, durable=True, arguments=QUEUE_ARGS[mode])
    setup.close()
    peak, stop_sampling = {"rss": 0, "disk": 0}, threading.Event()

    def sample_until_stopped():   # every SAMPLE_EVERY s, and once more when stopped
        stopped = False
        while not stopped:
            stopped, disk = stop_sampling.wait(SAMPLE_EVERY), 0
            for root, _, names in os.walk(handle.mnesia_dir):
                for name in names:   # allocated bytes, as du counts them
                    with suppress(OSError):   # segment files come and go while we walk
                        disk += os.lstat(os.path.join(root, name)).st_blocks * 512
            peak["disk"] = max(peak["disk"], disk)
            peak["rss"] = max(peak["rss"], rss_of_broker(handle))
    sampler = threading.Thread(target=sample_until_stopped, daemon=True)
    sampler.start()
    try:
        publisher = AsyncPublisher(params, queue, n_jobs, body_size, progress)
        publish_s = publisher.run()
        with pika.BlockingConnection(params) as conn:
            seen, received, crc_sum, drain_s = _drain(conn.channel(), queue, n_jobs, body_size,
                                                      progress)
            left = conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        stop_sampling.set()
        sampler.join()
    once, missing = seen[:n_jobs].count(1), seen[:n_jobs].count(0)
    crc_ok = crc_sum == publisher.crc_sum
    ok = once == received == n_jobs and left == 0 and crc_ok   # each exactly once, intact
    if not ok:
        progress(f"  CHECK FAILED: received={received:,} once={once:,} missing={missing:,} "
                 f"more_than_once={n_jobs - once - missing:,} left={left} crc_ok={crc_ok}")
    return {"mode": mode, "jobs": n_jobs, "publish_s": publish_s,
            "publish_rate": n_jobs / publish_s, "drain_s": drain_s, "drain_rate": n_jobs / drain_s,
            "rss_peak_bytes": peak["rss"], "rss_end_bytes": rss_of_broker(handle),
            "disk_bytes_peak": peak["disk"], "blocked_events": publisher.blocked_events, "ok": ok}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--body", type=int, default=1024, help="message size in bytes (>= 8)")
    ap.add_argument("--mode", choices=("cqv2", "lazy", "both"), default="both")
    ap.add_argument("--port", type=int, default=21672,
                    help="AMQP port; epmd gets port+10000, Erlang distribution port+20000")
    ap.add_argument("--workdir", help="kept if given; default: a tempdir removed at the end")
    args = ap.parse_args()
    workdir, results = args.workdir or tempfile.mkdtemp(prefix="spill-rabbitmq-"), []
    try:
        for mode in ("cqv2", "lazy") if args.mode == "both" else (args.mode,):
            t0 = time.monotonic()   # a fresh broker per mode: RSS and disk are its own
            handle = start_rabbitmq(os.path.join(workdir, mode), args.port)
            print(f"[{mode}] broker up in {time.monotonic() - t0:.1f}s, "
                  f"RSS {rss_of_broker(handle) >> 20} MiB")
            try:
                results.append(run_rabbitmq_backlog(args.jobs, args.body, mode, args.port,
                                                    handle=handle))
            finally:
                stop_rabbitmq(handle)
            print(f"[{mode}] {time.monotonic() - t0:.1f}s with broker start and stop")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    row = "{:<6}{:>11}{:>11}{:>9}{:>14}{:>13}{:>15}{:>9}  {}"
    print("\n" + row.format("mode", "jobs", "publish/s", "drain/s", "RSS peak MiB",
                            "RSS end MiB", "disk peak MiB", "blocked", "ok"))
    for r in results:
        figures = (f"{r[k] / (2**20 if 'bytes' in k else 1):,.0f}" for k in (
            "publish_rate", "drain_rate", "rss_peak_bytes", "rss_end_bytes", "disk_bytes_peak"))
        print(row.format(r["mode"], f"{r['jobs']:,}", *figures, r["blocked_events"], r["ok"]))
    return 0 if results and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
