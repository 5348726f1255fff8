"""The protocol fuzzer's input generator (tests/test_fuzz_protocol.py): random command lines
and random bytes from one seeded random.Random."""

import random
import re

from support.slots import queues_on_distinct_workers
from support.resp_client import encode_command

encode = encode_command

# ---------------------------------------------------------------------------
# the generator
# ---------------------------------------------------------------------------

B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
HEX = b"0123456789abcdef"
FUZZ_QUEUES = queues_on_distinct_workers("fz", per_worker=3)
# never sent by the fuzzer (see the module docstring); garbage containing them is redrawn
DANGER = (b"shutdown", b"flushall", b"monitor", b"debug", b"client", b"cluster", b"config",
          b"hello", b"sleep")


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.ids = []            # job IDs the fuzzer itself created

    # -- atoms ------------------------------------------------------------------------

    def case(self, word: str) -> bytes:
        r = self.rng.random()
        if r < 0.5:
            return word.upper().encode()
        if r < 0.75:
            return word.lower().encode()
        return "".join(ch.upper() if self.rng.random() < 0.5 else ch.lower() for ch in word).encode()

    def junk(self, maxlen=12) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, maxlen)))
        if r < 0.7:
            return rng.randbytes(rng.randint(0, maxlen))
        if r < 0.85:
            return b""
        return rng.choice([b" ", b"\r\n", b"\n", b"\x00", b'"', b"'", b"\\", b"*1", b"$5", b"-", b"+OK"])

    def integer(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return str(rng.randint(0, 20)).encode()
        if r < 0.45:
            return str(rng.randint(-5, -1)).encode()
        if r < 0.55:
            return str(rng.randint(21, 100000)).encode()
        if r < 0.75:
            return rng.choice([b"0", b"-0", b"+5", b"007", b"", b" 5", b"5 ", b"1e3", b"0x10", b"1.5",
                               b"abc", b"9223372036854775807", b"-9223372036854775808",
                               b"9223372036854775808", b"-9223372036854775809", b"4294967295",
                               b"4294967296", b"2147483648", b"65535", b"65536", b"536870912",
                               b"99999999999999999999999999", b"-99999999999999999999", b"\x00",
                               b"18446744073709551616", b"1" * 200])
        return str(rng.choice([2 ** 31, 2 ** 32, 2 ** 53, 2 ** 63 - 1, 2 ** 64, -2 ** 63, 10 ** 12,
                               rng.randint(-2 ** 70, 2 ** 70)])).encode()

    def small_timeout(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.7:
            return str(rng.randint(1, 80)).encode()
        return self.integer()

    def queue(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            return rng.choice(FUZZ_QUEUES).encode()
        if r < 0.9:
            return b"fzr-" + rng.randbytes(rng.randint(0, 20))
        return rng.choice([b"", b"fz-" + b"q" * 5000, b"fz-\x00\xff", b"fz \r\n x"])

    def body(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.8:
            return rng.randbytes(rng.randint(0, 64))
        if r < 0.95:
            return rng.randbytes(rng.randint(65, 4000))
        return rng.randbytes(rng.randint(10000, 120000))

    def job_id(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if self.ids and r < 0.35:
            return rng.choice(self.ids)
        if self.ids and r < 0.45:
            jid = bytearray(rng.choice(self.ids))
            jid[rng.randrange(len(jid))] = rng.randrange(256)
            return bytes(jid)
        node = bytes(rng.choice(HEX) for _ in range(8))
        mid = bytes(rng.choice(B64) for _ in range(24))
        ttl = bytes(rng.choice(HEX) for _ in range(4))
        if r < 0.75:
            return b"D-" + node + b"-" + mid + b"-" + ttl
        mutations = [
            lambda: b"D-" + node + b"-" + rng.randbytes(24) + b"-" + ttl,      # any bytes inside
            lambda: b"D-" + node + b"-" + mid + b"-" + rng.choice([b"zzzz", b"05A1", b"\xff\xff\xff\xff"]),
            lambda: b"D-" + node + b"-" + mid + b"-" + ttl + b"x",             # 41 chars
            lambda: b"D-" + node + b"-" + mid[:-1] + b"-" + ttl,               # 39 chars
            lambda: b"d-" + node + b"-" + mid + b"-" + ttl,
            lambda: b"D_" + node + b"-" + mid + b"-" + ttl,
            lambda: b"D-" + node + b"+" + mid + b"-" + ttl,
            lambda: b"D-" + node + b"-" + mid + b"+" + ttl,
            lambda: rng.randbytes(40),
            lambda: self.junk(45),
        ]
        return rng.choice(mutations)()

    def ids_list(self, lo=0, hi=6):
        return [self.job_id() for _ in range(self.rng.randint(lo, hi))]

    # -- commands -----------------------------------------------------------------------

    def addjob(self):
        rng = self.rng
        argv = [self.case("addjob"), self.queue(), self.body(),
                self.small_timeout() if rng.random() < 0.2 else b"0"]
        opts = ["replicate", "delay", "retry", "ttl", "maxlen", "async"]
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5))):
            if rng.random() < 0.1:
                argv.append(self.junk())
                continue
            o = rng.choice(opts)
            argv.append(self.case(o))
            if o != "async" and rng.random() < 0.93:
                if o == "replicate" and rng.random() < 0.5:
                    argv.append(b"1")
                else:
                    argv.append(self.integer())
        return argv

    def getjob(self):
        """-> (argv, may_block)"""
        rng = self.rng
        argv = [self.case("getjob")]
        nohang = rng.random() < 0.6
        opts = []
        if nohang:
            opts.append([self.case("nohang")])
        if rng.random() < 0.5 or not nohang:
            opts.append([self.case("timeout"), self.small_timeout()])
        if rng.random() < 0.5:
            opts.append([self.case("count"), self.integer() if rng.random() < 0.4 else str(rng.randint(1, 5)).encode()])
        if rng.random() < 0.3:
            opts.append([self.case("withcounters")])
        if rng.random() < 0.1:
            opts.append([self.junk()])
        rng.shuffle(opts)
        for o in opts:
            argv += o
        if rng.random() < 0.95:
            argv.append(self.case("from"))
            argv += [self.queue() for _ in range(rng.choice((0, 1, 1, 1, 2, 3, 5)))]
        return argv, not nohang

    def scan(self, name):
        rng = self.rng
        argv = [self.case(name)]
        words = (["count", "busyloop", "minlen", "maxlen", "importrate"] if name == "qscan"
                 else ["count", "busyloop", "queue", "state", "reply"])
        if rng.random() < 0.6:
            argv.append(self.integer() if rng.random() < 0.5 else b"0")
        for _ in range(rng.randint(0, 4)):
            w = rng.choice(words)
            argv.append(self.case(w))
            if w == "busyloop" or rng.random() < 0.07:
                continue
            if w == "queue":
                argv.append(self.queue())
            elif w == "state":
                argv.append(rng.choice([self.case(s) for s in ("queued", "active", "acked", "wait-repl")]
                                       + [self.junk()]))
            elif w == "reply":
                argv.append(rng.choice([self.case("all"), self.case("id"), self.junk()]))
            else:
                argv.append(self.integer())
        return argv

    def command(self):
        """-> (argv, may_block, is_quit)"""
        rng = self.rng
        kind = rng.choices(
            ["addjob", "getjob", "ids", "show", "working", "qlen", "qpeek", "qstat", "qscan",
             "jscan", "pause", "ping", "info", "time", "command", "misc", "unknown", "arity",
             "quit"],
            weights=[16, 12, 12, 5, 3, 4, 4, 3, 2, 2, 3, 4, 2, 1, 2, 3, 4, 4, 0.3])[0]
        if kind == "addjob":
            return self.addjob(), False, False
        if kind == "getjob":
            argv, may_block = self.getjob()
            return argv, may_block, False
        if kind == "ids":
            name = rng.choice(["ackjob", "fastack", "deljob", "enqueue", "nack", "dequeue"])
            return [self.case(name)] + self.ids_list(), False, False
        if kind == "show":
            return [self.case("show"), self.job_id()], False, False
        if kind == "working":
            return [self.case("working"), self.job_id()], False, False
        if kind == "qlen":
            return [self.case("qlen"), self.queue()], False, False
        if kind == "qpeek":
            return [self.case("qpeek"), self.queue(), self.integer()], False, False
        if kind == "qstat":
            return [self.case("qstat"), self.queue()], False, False
        if kind in ("qscan", "jscan"):
            return self.scan(kind), False, False
        if kind == "pause":
            opts = [rng.choice([self.case(o) for o in ("in", "out", "all", "none", "state", "bcast")]
                               + [self.junk()]) for _ in range(rng.randint(0, 4))]
            return [self.case("pause"), self.queue()] + opts, False, False
        if kind == "ping":
            return [self.case("ping")] + [self.body() for _ in range(rng.choice((0, 1, 1, 2)))], False, False
        if kind == "info":
            args = rng.choice([[], [b"all"], [b"default"], [b"workers"], [b"jobs"], [b"SERVER"],
                               [self.junk()], [b"a", b"b"], [b"commandstats"]])
            return [self.case("info")] + args, False, False
        if kind == "time":
            return [self.case("time")] + ([self.junk()] if rng.random() < 0.3 else []), False, False
        if kind == "command":
            args = rng.choice([[], [b"count"], [b"info", b"addjob", b"nosuch", b"GETJOB"],
                               [b"info"], [self.junk()], [b"count", b"x"]])
            return [self.case("command")] + args, False, False
        if kind == "misc":
            argv = rng.choice([
                [self.case("hello")],
                [self.case("hello"), rng.choice([b"2", b"4", b"-1", b"abc", b"99999999999999999999", b""])],
                [self.case("auth"), self.junk()],
                [self.case("auth")],
                [self.case("loadjob"), self.body()],
                [self.case("config"), self.case("get"), rng.choice([b"*", b"port", b"max*", self.junk()])],
                [self.case("config"), self.case("resetstat")],
                [self.case("config"), self.junk()],
                [self.case("config"), self.case("get")],
                [self.case("config"), self.case("set"), b"fuzz-" + self.junk(), self.junk()],
                [self.case("debug"), self.case("error"), b"FUZZ " + self.junk(30)],
                [self.case("debug"), self.case("sleep"), b"0"],
                [self.case("debug"), rng.choice([b"nosuch", b"structsize", b"", b"error"])],
                [self.case("cluster"), rng.choice([self.case("info"), self.case("myid"), self.case("nodes"),
                                                   b"nosuch", b""])],
                [self.case("cluster"), self.case("forget"), self.junk(45)],
                [self.case("client"), rng.choice([self.case("list"), self.case("getname"), b"nosuch", b""])],
                [self.case("client"), self.case("setname"), self.junk()],
                [self.case("slowlog"), rng.choice([self.case("get"), self.case("len"), self.case("reset"), b"x"])],
                [self.case("latency"), rng.choice([self.case("latest"), self.case("doctor"), self.case("reset"),
                                                   b"x"])],
                [self.case("bgrewriteaof"), b"extra"],
            ])
            return argv, False, False
        if kind == "unknown":
            name = b"z" + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(0, 11)))
            if rng.random() < 0.25:      # binary names: the error reply echoes them
                name = b"z" + self.junk(10) + rng.choice([b"\r\n", b"\n", b"\r", b"'", b"\x00"]) + self.junk(5)
            return [name] + [self.junk() for _ in range(rng.randint(0, 3))], False, False
        if kind == "arity":
            name = rng.choice(["show", "qlen", "qpeek", "qstat", "working", "addjob", "getjob", "time",
                               "hello", "pause", "ping", "auth", "loadjob"])
            return [self.case(name)] + [self.junk() for _ in range(rng.choice((0, 1, 4, 7)))], False, False
        return [self.case("quit")] + [self.junk() for _ in range(rng.randint(0, 2))], False, True

    # -- wire forms ----------------------------------------------------------------------

    def inline_form(self, argv):
        """A line the inline parser splits back into ``argv`` minus empty arguments; None
        when that would leave nothing (such a line gets no reply)."""
        if not argv[0]:
            return None
        parts = []
        for a in argv:
            if re.fullmatch(rb"[A-Za-z0-9_.:+/=-]+", a):
                parts.append(a)
            else:
                out = bytearray(b'"')
                for ch in a:
                    c = bytes([ch])
                    if c in b'"\\':
                        out += b"\\" + c
                    elif c == b"\n":
                        out += b"\\n"
                    elif c == b"\r":
                        out += b"\\r"
                    elif c == b"\t":
                        out += b"\\t"
                    elif 32 <= ch < 127:
                        out += c
                    else:
                        out += b"\\x%02x" % ch
                out += b'"'
                parts.append(bytes(out))
        line = b" ".join(parts)
        if len(line) > 60000:
            return None
        return line + self.rng.choice([b"\r\n", b"\n"])

    def garbage(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            data = rng.randbytes(rng.randint(1, 3000))
        elif r < 0.55:
            vocab = [b"ADDJOB", b"GETJOB", b"FROM", b"NOHANG", b"ackjob", b"QLEN", b"PING", b"show",
                     b"fz-0", b"0", b"-1", b"\"", b"'", b"\\x4", b"\\", b"*3", b"$4", b"\r\n", b"\n",
                     b" ", b"\t", b"TIMEOUT", b"COUNT", b"99999999999999999999", b"D-"]
            data = b" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 300)))
        elif r < 0.75:
            # a valid pipeline with random byte mutations
            data = bytearray(b"".join(encode(*self.addjob()) if rng.random() < 0.5
                                      else encode(self.case("qlen"), self.queue())
                                      for _ in range(rng.randint(1, 6))))
            for _ in range(rng.randint(1, 8)):
                op = rng.random()
                i = rng.randrange(len(data) + 1)
                if op < 0.4 and i < len(data):
                    data[i] = rng.randrange(256)
                elif op < 0.7:
                    data[i:i] = rng.randbytes(rng.randint(1, 4))
                elif i < len(data):
                    del data[i:i + rng.randint(1, 6)]
            data = bytes(data)
        else:
            data = rng.choice([b"*", b"$", b"*1\r\n", b"*2\r\n$", b"*1\r\n$-1\r\n", b"*1\r\n$0\r\n\r\n",
                               b"*3\r\n$1\r\nx\r\n:5\r\n", b"*1\r\n$3\r\nabc", b"*-7\r\n", b"*0\r\n",
                               b"*1\r\n$4\r\nPING\n", b"*1\r\r\n", b"\r\n\r\n\r\n", b"$5\r\nhello\r\n",
                               b"+PING\r\n", b"-ERR\r\n", b":1\r\n", b"*+1\r\n", b"*1\r\n$+4\r\nPING\r\n",
                               b"*01\r\n$04\r\nPING\r\n", b"*1\r\n$ 4\r\nPING\r\n",
                               b"*1\r\n$4\r\nPINGXX\r\n"]) + rng.randbytes(rng.randint(0, 20))
        low = data.lower()
        if any(w in low for w in DANGER) or b"quit" in low:
            return self.garbage()
        return data
