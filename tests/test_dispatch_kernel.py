"""The dispatch kernel both command loops share (disque/_fast/dispatch.pyx; docs/design.md,
"The command table"): the table built from disque/commands.py, and the worker that runs a
command, including NACK's DELAY and job IDs of several workers."""
import pytest

from disque import commands
from disque._fast.dispatch import (TARGETS, arity_ok, build_table, ids_end, lookup, ping_reply,
                                   nack_delay, target_worker)
from disque._fast.jobid import IdMaker, id_slot, queue_slot
from disque.contracts import routes

pytestmark = pytest.mark.unit

TABLE = build_table(commands.command_table())


def job_id(slot):
    return IdMaker(b"a" * 40).make(slot, 3600, 60)


def ids_of_workers(nworkers):
    """One job ID per worker of an nworkers node."""
    found = {}
    slot = 0
    while len(found) < nworkers:
        found.setdefault(slot % nworkers, job_id(slot))
        slot += 1
    return [found[w] for w in range(nworkers)]


def test_every_command_has_one_entry_under_its_name_and_in_capitals():
    for name, cmd in commands.COMMANDS.items():
        entry = lookup(TABLE, name.encode())
        assert entry is lookup(TABLE, name.upper().encode()) is lookup(TABLE, name.title().encode())
        assert (entry.name, entry.route, entry.arity, entry.command) == \
            (name.encode(), cmd.route, cmd.arity, cmd)
        assert not entry.renamed
    assert lookup(TABLE, b"nosuchcommand") is None


def test_a_renamed_command_is_known_by_its_new_name_only():
    table = build_table(commands.command_table({"ADDJOB": "put", "DEBUG": ""}))
    entry = lookup(table, b"PUT")
    assert entry.renamed and entry.name == b"addjob"
    assert lookup(table, b"addjob") is None and lookup(table, b"debug") is None


def test_arity():
    addjob, show = lookup(TABLE, b"addjob"), lookup(TABLE, b"show")
    assert not arity_ok(addjob, 3) and arity_ok(addjob, 4) and arity_ok(addjob, 9)
    assert arity_ok(show, 2) and not arity_ok(show, 3)


@pytest.mark.parametrize("nworkers", [1, 2, 3])
def test_queue_and_id_routes_name_the_owning_worker(nworkers):
    addjob, show = lookup(TABLE, b"addjob"), lookup(TABLE, b"show")
    for q in (b"a", b"orders", b"q-17"):
        assert target_worker(addjob, [b"addjob", q, b"b", b"0"], nworkers) == \
            queue_slot(q) % nworkers
    jid = job_id(1234)
    assert target_worker(show, [b"show", jid], nworkers) == id_slot(jid) % nworkers
    assert target_worker(show, [b"show", b"D-bad"], nworkers) == TARGETS["bad id"]


def test_ids_of_one_worker_go_there_of_several_are_split():
    ackjob = lookup(TABLE, b"ackjob")
    a, b = ids_of_workers(2)
    assert target_worker(ackjob, [b"ackjob", a, a], 2) == 0
    assert target_worker(ackjob, [b"ackjob", b], 2) == 1
    assert target_worker(ackjob, [b"ackjob", a, b], 2) == TARGETS["split"]
    assert target_worker(ackjob, [b"ackjob", a, b], 1) == 0
    # one bad ID is -BADID even after IDs of two workers
    assert target_worker(ackjob, [b"ackjob", a, b, b"nope"], 2) == TARGETS["bad id"]
    assert target_worker(ackjob, [b"ackjob"], 2) == 0     # no ID: any worker answers 0


def test_nack_delay_is_checked_once_and_ends_the_ids():
    nack = lookup(TABLE, b"nack")
    a, b = ids_of_workers(2)
    argv = [b"nack", b, b"DELAY", b"5"]
    assert ids_end(argv) == 2 and nack_delay(argv) == 5
    assert target_worker(nack, argv, 2) == 1
    for bad in (b"-1", b"x", b"4294967296"):
        argv = [b"nack", a, b"delay", bad]
        assert nack_delay(argv) == -2
        assert target_worker(nack, argv, 2) == TARGETS["bad delay"]
    assert nack_delay([b"nack", a, b"delay", b"4294967295"]) == 4294967295
    assert nack_delay([b"nack", a]) == -1
    # with no ID before it, DELAY is an ID (a bad one), as the original reads it
    assert ids_end([b"nack", b"delay", b"5"]) == 3
    assert target_worker(nack, [b"nack", b"delay", b"5"], 2) == TARGETS["bad id"]
    # only NACK has a DELAY
    assert ids_end([b"ackjob", a, b"delay", b"5"]) == 4


def test_routes_with_no_one_worker():
    for name in (b"info", b"ping", b"getjob", b"qscan"):
        entry = lookup(TABLE, name)
        assert entry.route in (routes.LOCAL, routes.GETJOB, routes.ALL)
        assert target_worker(entry, [name, b"x"], 2) == TARGETS["none"]


def test_ping_has_one_reply_for_both_loops():
    from disque import replies
    assert ping_reply([b"ping"]) == b"+PONG\r\n"
    assert ping_reply([b"ping", b"hi"]) == b"$2\r\nhi\r\n"
    assert ping_reply([b"ping", b"a", b"b"]) == replies.arity_error("ping")
