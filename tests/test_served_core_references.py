"""The served core (disque/_fast/servedcore.pyx) holds four of the shard's objects for its
whole life instead of looking them up per command: the command handlers, the consumers'
GETJOB deadline heap, the INTEREST set and the persistence object (docs/design.md, "Less
interpreter on the served path"). That is only right while the shard changes them in place.
These tests drive every path that changes them and check that each is still the same
object afterwards, so a later change that replaces one fails here rather than leaving the
served connections on a stale copy."""
import pytest

from disque._fast.consumers import Blocked
from disque.workers.shard import Shard

pytestmark = pytest.mark.unit


def held(shard):
    return (shard.handlers, shard.consumers.deadlines.heap, shard.interest_due, shard.persistence)


def same(before, shard):
    return all(a is b for a, b in zip(before, held(shard)))


def test_deadline_heap_compaction_keeps_the_list():
    shard = Shard(0, 1, b"a" * 40, {})
    before = held(shard)
    deadlines = shard.consumers.deadlines
    for seq in range(3000):                 # served consumers leave their entries behind
        b = Blocked(None, seq, [], False, False, 10 ** 12)
        b.done = True
        deadlines.add(10 ** 12 + seq, b)
    assert len(deadlines) < 3000, "the compaction did not run: the test no longer covers it"
    assert same(before, shard)


def test_misconf_swap_and_restore_change_the_handlers_in_place():
    shard = Shard(0, 1, b"a" * 40, {})
    before = held(shard)
    addjob = shard.handlers[b"addjob"]

    class FailingWriter:                    # what aof_write_failed reads of the writer
        policy = "everysec"
        path = "appendonly.aof"

    shard.persistence.aof_writer = FailingWriter()
    shard.persistence.aof_write_failed("No space left on device")
    assert shard.handlers[b"addjob"] is not addjob, "the MISCONF handlers were not put in"
    assert same(before, shard)
    shard.persistence.aof_misconf_off()
    assert shard.handlers[b"addjob"] is addjob
    assert same(before, shard)


def test_flushall_clears_in_place():
    shard = Shard(0, 1, b"a" * 40, {})
    before = held(shard)
    shard.interest_due.add(b"q")
    shard.consumers.deadlines.add(1, Blocked(None, 1, [], False, False, 1))
    shard.flushall()
    assert not shard.interest_due and not shard.consumers.deadlines
    assert same(before, shard)
