"""`disque-stats-collect --nodes host:port,... --interval S --output DIR`

For nodes that cannot write to a shared disk: polls every node's `INFO workerstats`
(one `worker<k>:<json>` line per worker, the same schema-v2 records the node itself
writes with `stats-log-file`) and appends them to DIR/<host>_<port>.jsonl, rotating by
size like the server does. Runs until interrupted (or --count polls).
"""
import argparse
import json
import os
import socket
import sys
import time

from disque.statslog import StatsLog


def info_workerstats(host, port, timeout=2.0, password=None):
    """Raw records of one node: a list of dicts (empty when the node has none)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        out = b""
        if password:
            s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(password), password.encode()))
            out = read_reply(s)
            if not out.startswith(b"+"):
                raise ConnectionError("AUTH failed: %s" % out.decode(errors="replace").strip())
        s.sendall(b"*2\r\n$4\r\nINFO\r\n$11\r\nworkerstats\r\n")
        text = read_reply(s)
    if text.startswith(b"-"):
        raise ConnectionError(text.decode(errors="replace").strip())
    records = []
    for line in text.split(b"\r\n"):
        if line.startswith(b"worker") and b":" in line:
            records.append(json.loads(line.split(b":", 1)[1]))
    return records


def read_reply(sock):
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    head, rest = buf.split(b"\r\n", 1)
    if not head.startswith(b"$"):
        return head
    n = int(head[1:])
    while len(rest) < n + 2:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed")
        rest += chunk
    return rest[:n]


def parse_nodes(text):
    nodes = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise argparse.ArgumentTypeError("bad node address %r (want host:port)" % item)
        nodes.append((host, int(port)))
    return nodes


def main(argv=None):
    ap = argparse.ArgumentParser(prog="disque-stats-collect", description=__doc__.split("\n\n")[1])
    ap.add_argument("--nodes", type=parse_nodes, required=True, help="host:port,host:port,...")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between polls")
    ap.add_argument("--output", required=True, help="directory for the JSON lines")
    ap.add_argument("--count", type=int, default=0, help="stop after this many polls (0 = forever)")
    ap.add_argument("--password", default=os.environ.get("DISQUE_PASSWORD"))
    args = ap.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    logs = {node: StatsLog(os.path.join(args.output, "%s_%d.jsonl" % node)) for node in args.nodes}
    polls = 0
    try:
        while True:
            started = time.monotonic()
            total = 0
            for node, log in logs.items():
                try:
                    records = info_workerstats(*node, password=args.password)
                except (OSError, ValueError) as e:
                    print("%s:%d: %s" % (node[0], node[1], e), file=sys.stderr)
                    continue
                log.write(records)
                total += len(records)
            polls += 1
            print("poll %d: %d lines from %d node(s)" % (polls, total, len(logs)), flush=True)
            if args.count and polls >= args.count:
                return 0
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
