"""The figures of docs/faults-network.md, in the harness' namespaces (DQF_PREFIX, DQF_SUBNET;
needs root; not while a fault run uses the same prefix):

    python -m faults.measure_network tbf                   # what tbf does to a node's link
    python -m faults.measure_network oneway --hold 60 [--disque-binary PATH]

`tbf`: one node; PING round trips from the clients' namespace, idle and while two client
threads push 4 KB ADDJOBs through the same link, and the bulk rate achieved, for each rate
of faults/network.py (tbf latency 200 ms).

`oneway`: three nodes; node 1 drops what it sends to node 0 for --hold seconds; then the
seconds until an ADDJOB REPLICATE 3 succeeds on nodes 0 and 1 again."""
import argparse
import subprocess
import sys
import tempfile
import time

from faults import netns, network
from faults import nodes as fault_nodes

PROBE = r'''
import redis, socket, statistics, sys, threading, time
addr, secs, load = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
stop = threading.Event(); sent = [0]
def bulk():
    c = redis.Redis(host=addr, port=7711, protocol=2, socket_timeout=10)
    while not stop.is_set():
        try:
            c.execute_command("ADDJOB", "bulk", b"x" * 4096, 0, "REPLICATE", 1, "TTL", 60)
            sent[0] += 4096
        except Exception:
            pass
if load:
    for _ in range(2):
        threading.Thread(target=bulk, daemon=True).start()
    time.sleep(1.0)
s = socket.create_connection((addr, 7711), timeout=5)
rtts, t0, b0 = [], time.monotonic(), sent[0]
while time.monotonic() - t0 < secs:
    t = time.monotonic(); s.sendall(b"*1\r\n$4\r\nPING\r\n"); s.recv(64)
    rtts.append(1000 * (time.monotonic() - t)); time.sleep(0.05)
kbit = (sent[0] - b0) * 8 / 1000 / (time.monotonic() - t0)
stop.set(); rtts.sort()
print("%d pings, min %.1f median %.1f p90 %.1f max %.1f ms; bulk %d kbit/s" % (len(rtts),
      rtts[0], statistics.median(rtts), rtts[int(0.9 * len(rtts))], rtts[-1], kbit))
'''


def start(n, binary):
    net = netns.HARNESS
    net.setup(n)
    root = tempfile.mkdtemp(prefix=net.prefix + "measure-")
    nodes = [fault_nodes.Node(i, root, 2, None, original=binary) for i in range(n)]
    for node in nodes:
        node.start()
    if not all(node.wait_ready() for node in nodes):
        raise RuntimeError("a node did not start")
    return net, nodes


def tbf(args):
    net, nodes = start(1, args.disque_binary)
    try:
        for rate in (None,) + network.RATES_KBIT:
            network.unshape(net, 1)
            if rate:
                network.shape(net, 0, rate, 200)
            for load in ("0", "1"):
                r = subprocess.run(["ip", "netns", "exec", net.client, sys.executable, "-c", PROBE,
                                    net.node_addr(0), "5", load],
                                   capture_output=True, text=True, cwd=fault_nodes.REPO, env=fault_nodes.env())
                print("rate %s, %s: %s" % ("%d kbit" % rate if rate else "none",
                                           "bulk" if load == "1" else "idle",
                                           r.stdout.strip() or r.stderr[-200:]), flush=True)
    finally:
        for node in nodes:
            node.stop()
        net.cleanup()


def oneway(args):
    net, nodes = start(3, args.disque_binary)

    def replicated(i, timeout_ms):
        reply = fault_nodes.cli(i, "ADDJOB", "q", "x", timeout_ms, "REPLICATE", 3, "RETRY", 5)
        return bool(reply) and reply.startswith("D-")
    try:
        if not fault_nodes.join(nodes):
            raise RuntimeError("the cluster did not form")
        deadline = time.monotonic() + 30
        while not (replicated(0, 1000) and replicated(1, 1000)):
            if time.monotonic() > deadline:
                raise RuntimeError("no replication before the cut")
            time.sleep(0.2)
        network.load_rules(net, 3, {1: [network.drop("OUTPUT", net.node_addr(0))]})
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.hold:
            replicated(0, 200)      # copies on the links while the cut holds
            replicated(1, 200)
            time.sleep(0.5)
        network.load_rules(net, 3, {})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            if replicated(0, 500) and replicated(1, 500):
                print("one-way cut held %.0f s: replication back %.1f s after the heal"
                      % (args.hold, time.monotonic() - t0))
                return
            time.sleep(0.2)
        print("one-way cut held %.0f s: no replication 120 s after the heal" % args.hold)
    finally:
        for node in nodes:
            node.stop()
        net.cleanup()


def main():
    ap = argparse.ArgumentParser(prog="python -m faults.measure_network")
    ap.add_argument("what", choices=("tbf", "oneway"))
    ap.add_argument("--hold", type=float, default=60.0, help="oneway: seconds of the cut")
    ap.add_argument("--disque-binary", help="the original's disque-server instead of ours")
    args = ap.parse_args()
    (tbf if args.what == "tbf" else oneway)(args)


if __name__ == "__main__":
    main()
