"""The heap of waiters a timeout ends (disque/deadlines.py): a worker's blocked consumers
and the front-end's GETJOBs across workers."""
import pytest

from disque.deadlines import SWEEP_MIN, Deadlines

pytestmark = pytest.mark.unit


class Waiter:
    """Counts how often its `done` is read: a sweep reads every entry's."""
    reads = 0

    def __init__(self, done=False):
        self._done = done

    @property
    def done(self):
        Waiter.reads += 1
        return self._done

    @done.setter
    def done(self, value):
        self._done = value


def test_take_due_gives_the_waiters_not_done_earliest_first_and_leaves_the_rest():
    d = Deadlines()
    a, b, c, served = Waiter(), Waiter(), Waiter(), Waiter(done=True)
    d.add(30, c)
    d.add(10, a)
    d.add(15, served)
    d.add(20, b)
    d.add(50, Waiter())
    assert not d.due(9)
    assert d.due(10)
    assert d.take_due(30) == [a, b, c]
    assert len(d) == 1 and not d.due(49) and d.due(50)
    assert d.take_due(49) == []


def test_waiters_served_long_before_their_timeout_do_not_grow_the_heap():
    d = Deadlines()
    heap = d.heap
    for k in range(100_000):
        d.add(10 ** 12 + k, Waiter(done=True))
    assert len(d) <= 2 * SWEEP_MIN + 1
    assert d.heap is heap                   # in place: a worker's served loop holds it


def test_a_heap_of_waiters_that_still_wait_is_not_scanned_again_and_again():
    """Every sweep reads every entry; sweeping only once the heap doubled keeps the reads
    per add bounded however many waiters wait (a scan per add would read n^2 / 2)."""
    d = Deadlines()
    Waiter.reads = 0
    n = 50_000
    waiting = [Waiter() for _ in range(n)]
    for k, w in enumerate(waiting):
        d.add(10 ** 12 + k, w)
    assert len(d) == n                      # all still wait: nothing dropped
    assert Waiter.reads <= 2 * n
    for w in waiting:
        w.done = True
    d.add(10 ** 13, Waiter())               # not yet doubled since the last sweep
    assert len(d) == n + 1
    while len(d) > n:                       # the heap doubles: the served ones go
        d.add(10 ** 13, Waiter())
    assert len(d) <= n


def test_clear_keeps_the_list():
    d = Deadlines()
    heap = d.heap
    d.add(1, Waiter())
    d.clear()
    assert len(d) == 0 and d.heap is heap


def test_due_drops_the_entries_of_waiters_done_before_their_deadline():
    """A served consumer's entry that comes due is not worth a turn of the worker's Python
    loop: `due` drops it and answers for the waiters still waiting only."""
    d = Deadlines()
    d.add(10, Waiter(done=True))
    d.add(12, Waiter(done=True))
    waiting = Waiter()
    d.add(20, waiting)
    assert not d.due(15)
    assert len(d) == 1                      # the two done entries went, the waiting one stays
    assert d.due(20)
    assert d.take_due(20) == [waiting]
    d.add(1.5, Waiter())                    # the front-end's clock is in float seconds
    assert not d.due(1.25) and d.due(1.5)
