"""The node's clock (docs/faults-clocks.md): the wall clock read once, when the node
starts, then advanced by CLOCK_MONOTONIC. Every timer of the node reads it: job DELAY,
RETRY, TTL and ack GC, a blocking GETJOB's TIMEOUT, the bus's failure detection, idle
clients. So a step of the wall clock (NTP, a resumed VM, an operator's `date -s`) neither
fires a timer early nor holds one back. What leaves the node as Unix time (a job's ctime,
the AOF's absolute expiry) is off by the steps since the node started, no more.

The front-end fixes BASE_NS when it imports this module; its workers adopt the same base
(worker config "clock_base_ns"), so every process of a node reads the same time, a worker
restarted after a step included."""
import time

BASE_NS = time.time_ns() - time.monotonic_ns()


def adopt(base_ns):
    global BASE_NS
    BASE_NS = base_ns


def now_ms():
    return (time.monotonic_ns() + BASE_NS) // 1000000


def now():
    """In seconds, as time.time()."""
    return (time.monotonic_ns() + BASE_NS) / 1e9
