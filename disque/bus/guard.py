"""Who may connect to the bus: the ZAP handler of a secured bus, and the log of refusals.

ZeroMQ asks the ZAP handler (a socket bound at inproc://zeromq.zap.01 in the bus context)
about every CURVE client that proved it knows the server key: the request carries the
client's public key and its address, so a refusal there is logged with the address.

A peer with another secret (or none) fails earlier, in the CURVE HELLO or the mechanism
greeting, and ZeroMQ only reports that as a monitor event naming our own endpoint. Its
address is then recovered from the kernel: the refused connection is closed by us first,
so it sits in TIME_WAIT with our bus port as local port (Linux /proc/net/tcp*; elsewhere
the line says the address is unknown). ZeroMQ may report the failure before it closes the
connection, so the line waits up to LOCATE_WAIT_S for the address to show. Refusals are
summed up in at most one log line per LOG_EVERY_S seconds.
"""
import logging
import socket
import struct
import threading
import time

import zmq

log = logging.getLogger("disque.bus")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"disque-bus"
LOG_EVERY_S = 10.0
LOCATE_WAIT_S = 0.5     # how long a refusal's address may take to show in TIME_WAIT
MAX_ADDRESSES_LOGGED = 8
FAILED_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
TCP_TIME_WAIT = "06"


class BusGuard:
    def __init__(self, ctx, router, bus_port, keys):
        self.keys = keys
        self.bus_port = bus_port
        self.zap = None
        if keys is not None:
            self.zap = ctx.socket(zmq.REP)
            self.zap.setsockopt(zmq.LINGER, 0)
            self.zap.bind(ZAP_ENDPOINT)
            router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        self.monitor = router.get_monitor_socket(FAILED_EVENTS)
        self.refused = 0                # INFO cluster: cluster_bus_handshakes_refused
        self.pending = {}               # reason -> count since the last log line
        self.pending_addrs = set()      # addresses seen by ZAP since the last log line
        self.unlocated = False          # a refusal whose address must come from the kernel
        self.last_log = 0.0
        self.pending_since = 0.0        # when the first refusal not logged yet came
        # the baseline (older closes are not ours) costs the kernel ~7 ms of walking its
        # TCP table on a big machine: read on a thread (the read drops the GIL), off the
        # start's path, and waited for at the first refusal that needs it
        self.time_wait = set()
        self.baseline = threading.Thread(target=self.read_baseline, name="bus-guard-baseline",
                                         daemon=True)
        self.baseline.start()

    def read_baseline(self):
        self.time_wait = closed_peers(self.bus_port)

    def fds(self):
        socks = [self.monitor] + ([self.zap] if self.zap is not None else [])
        return [s.getsockopt(zmq.FD) for s in socks]

    def on_readable(self):
        """Serve ZAP requests and read monitor events (ZeroMQ FDs signal edges: drain)."""
        if self.zap is not None:
            while self.zap.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self.answer_zap(self.zap.recv_multipart(zmq.NOBLOCK))
        while self.monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            from zmq.utils.monitor import parse_monitor_message     # rare: off the start
            event = parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            self.note(self.failure_reason(event["event"], event["value"]), None)

    def answer_zap(self, request):
        # [version, request id, domain, address, identity, mechanism, credentials...]
        if len(request) < 6:
            return self.zap.send_multipart([b"1.0", b"", b"500", b"bad request", b"", b""])
        version, request_id, _domain, address, _identity, mechanism = request[:6]
        key = request[6] if len(request) > 6 else b""
        if mechanism == b"CURVE" and key in self.keys.accepted:
            self.zap.send_multipart([version, request_id, b"200", b"OK", b"", b""])
            return
        self.zap.send_multipart([version, request_id, b"400", b"unknown key", b"", b""])
        self.note("a client key of no secret we accept", address.decode(errors="replace"))

    def note(self, reason, address):
        if not self.pending:
            self.pending_since = time.monotonic()
        self.refused += 1
        self.pending[reason] = self.pending.get(reason, 0) + 1
        if address:
            self.pending_addrs.add(address)
        else:
            self.unlocated = True

    def cron(self):
        """Log what was refused, at most once per LOG_EVERY_S (called every 100 ms, so a
        refused connection is closed and visible in TIME_WAIT by then)."""
        if not self.pending:
            return
        now = time.monotonic()
        if now - self.last_log < LOG_EVERY_S:
            return
        addrs = set(self.pending_addrs)
        if self.unlocated:
            self.baseline.join()
            current = closed_peers(self.bus_port)
            found = {ip for ip, _port in current - self.time_wait}
            if not found and now - self.pending_since < LOCATE_WAIT_S:
                return      # ZeroMQ reports the failure before it closes the connection
            addrs.update(found)
            self.time_wait = current
        where = ", ".join(sorted(addrs)[:MAX_ADDRESSES_LOGGED]) or "an unknown address"
        if len(addrs) > MAX_ADDRESSES_LOGGED:
            where += " and %d more" % (len(addrs) - MAX_ADDRESSES_LOGGED)
        what = "; ".join("%d x %s" % (n, r) for r, n in sorted(self.pending.items()))
        log.warning("Cluster bus: refused %d connection attempt(s) from %s: %s",
                    sum(self.pending.values()), where, what)
        self.pending.clear()
        self.pending_addrs.clear()
        self.unlocated = False
        self.last_log = now

    def failure_reason(self, event, value):
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            # the two sides use different mechanisms: CURVE on one, none on the other
            return "a peer without the cluster secret" if self.keys else "a peer with a cluster secret"
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return "a peer with another cluster secret"
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            # the peer hung up first: it found our mechanism or our keys not its own
            return "a peer that dropped the handshake (%s): %s" % (
                zmq.strerror(value) if value else "no detail",
                "no cluster secret or another one" if self.keys else "it has a cluster secret")
        return "a handshake protocol error (0x%x)" % value

    def close(self):
        self.monitor.close(linger=0)
        if self.zap is not None:
            self.zap.close(linger=0)


def closed_peers(local_port):
    """{(ip, port)} of TCP connections to `local_port` that we closed (TIME_WAIT)."""
    found = set()
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(path) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) < 4 or fields[3] != TCP_TIME_WAIT:
                        continue
                    local_ip, local = fields[1].split(":")
                    if int(local, 16) != local_port:
                        continue
                    ip, port = fields[2].split(":")
                    found.add((kernel_ip(ip, family), int(port, 16)))
        except (OSError, ValueError):
            continue
    return found


def kernel_ip(hexaddr, family):
    """/proc/net/tcp addresses are 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hexaddr)
    words = struct.unpack("<%dI" % (len(raw) // 4), raw)
    packed = struct.pack(">%dI" % len(words), *words)
    text = socket.inet_ntop(family, packed)
    return text[7:] if text.startswith("::ffff:") else text
