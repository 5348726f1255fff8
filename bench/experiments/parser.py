"""Request parsing: our Cython RequestParser against hiredis.Reader on the same bytes.

    python bench/experiments/parser.py

hiredis parses RESP *replies*; a multibulk request is a valid reply, so it can parse
requests too (not inline ones, and without upstream's exact protocol errors). We use our
own parser for those two reasons; this shows it is not slower.
"""
import time

import hiredis

from disque._fast.resp import RequestParser

COMMAND = b"*4\r\n$6\r\nADDJOB\r\n$1\r\nq\r\n$100\r\n" + b"x" * 100 + b"\r\n$1\r\n0\r\n"


def ours(chunk, reads):
    p = RequestParser()
    n = 0
    t = time.perf_counter()
    for _ in range(reads):
        p.feed(chunk)
        n += len(p.commands())
    return n / (time.perf_counter() - t)


def theirs(chunk, reads):
    r = hiredis.Reader()
    n = 0
    t = time.perf_counter()
    for _ in range(reads):
        r.feed(chunk)
        while r.gets() is not False:
            n += 1
    return n / (time.perf_counter() - t)


def main():
    print("%-28s %14s %14s %7s" % ("input per read", "ours cmd/s", "hiredis cmd/s", "ratio"))
    for per_read, reads in ((1, 400000), (16, 50000), (100, 8000)):
        chunk = COMMAND * per_read
        a = max(ours(chunk, reads) for _ in range(3))
        b = max(theirs(chunk, reads) for _ in range(3))
        print("%-28s %14s %14s %6.2fx" % ("%d ADDJOB (100-byte body)" % per_read,
                                         "{:,.0f}".format(a), "{:,.0f}".format(b), a / b))


if __name__ == "__main__":
    main()
