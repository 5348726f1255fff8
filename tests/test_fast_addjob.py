"""ADDJOB as parts (disque/_fast/addjob.pyx, ShardCore.cmd_addjob): its options parsed once,
every error in SPEC 3.1's order, and the job that needs copies handed to the replication
as a value (a ReplWait), which never reads the ADDJOB's arguments again."""
import pytest

from disque import replies
from disque._fast.addjob import ReplWait, parse_options
from disque._fast.job import QUEUED, WAIT_REPL
from disque.workers.shard import Shard
from test_replication_units import ME, T0, clustered_shard     # a shard in a 3-node cluster

pytestmark = pytest.mark.unit


def parse(*opts, timeout=b"0", cluster_size=1):
    return parse_options([b"ADDJOB", b"q", b"body", timeout, *opts], cluster_size)


def test_every_option_is_parsed():
    assert parse(b"REPLICATE", b"2", b"DELAY", b"5", b"RETRY", b"20", b"TTL", b"600",
                 b"MAXLEN", b"7", b"ASYNC", b"BACKOFF", b"40", b"MAXDELIVERIES", b"3",
                 b"DEADLETTER", b"dlq", timeout=b"1500") == {
        "replicate": 2, "delay": 5, "retry": 20, "ttl": 600, "maxlen": 7, "timeout": 1500,
        "backoff": 40, "maxdeliveries": 3, "deadletter": b"dlq", "group": None, "async": True}
    assert parse(b"group", b"user:1", b"RETRY", b"20")["group"] == b"user:1"


def test_options_are_case_insensitive_and_the_last_one_wins():
    o = parse(b"ttl", b"100", b"TtL", b"200", b"async")
    assert o["ttl"] == 200 and o["async"] is True


@pytest.mark.parametrize("size, replicate", [(1, 1), (2, 2), (3, 3), (7, 3)])
def test_replicate_defaults_to_the_cluster_size_up_to_3(size, replicate):
    assert parse(cluster_size=size)["replicate"] == replicate


@pytest.mark.parametrize("ttl, retry", [(b"86400", 300), (b"1000", 100), (b"5", 1)])
def test_retry_defaults_to_a_tenth_of_the_ttl_between_1_and_300(ttl, retry):
    assert parse(b"TTL", ttl)["retry"] == retry


def test_no_deadletter_and_no_async_by_default():
    o = parse()
    assert o["deadletter"] is None and o["async"] is False and o["maxlen"] == 0


ERRORS = [
    ((b"REPLICATE", b"0"), b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    ((b"REPLICATE", b"65536"), b"-ERR REPLICATE must be between 1 and 65535\r\n"),
    ((b"DELAY", b"-1"), replies.DELAY_NEGATIVE),
    ((b"DELAY", b"4294967296"), replies.DELAY_NEGATIVE),
    ((b"RETRY", b"x"), b"-ERR RETRY time must be a non negative number\r\n"),
    ((b"TTL", b"0"), b"-ERR TTL must be a number > 0\r\n"),
    ((b"MAXLEN", b"0"), b"-ERR MAXLEN must be a positive number\r\n"),
    ((b"BACKOFF", b"0"), b"-ERR BACKOFF time must be a number > 0\r\n"),
    ((b"MAXDELIVERIES", b"65536"), b"-ERR MAXDELIVERIES must be between 1 and 65535\r\n"),
    ((b"DEADLETTER", b"q"),
     b"-ERR DEADLETTER queue must be a non empty name different from the job's queue\r\n"),
    ((b"DEADLETTER", b""),
     b"-ERR DEADLETTER queue must be a non empty name different from the job's queue\r\n"),
    ((b"NOSUCH",), replies.SYNTAX_ERROR),
    ((b"DELAY",), replies.SYNTAX_ERROR),              # an option missing its value
    ((b"REPLICATE", b"2", b"RETRY", b"0"),
     b"-ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)\r\n"),
    ((b"DELAY", b"10", b"TTL", b"10"),
     b"-ERR The specified DELAY is greater than TTL. Job refused since would never be delivered\r\n"),
    ((b"DEADLETTER", b"dlq"), b"-ERR DEADLETTER needs MAXDELIVERIES\r\n"),
    ((b"MAXDELIVERIES", b"2", b"RETRY", b"0", b"REPLICATE", b"1"),
     b"-ERR BACKOFF and MAXDELIVERIES need RETRY > 0 (a RETRY 0 job is never queued again)\r\n"),
    ((b"BACKOFF", b"5", b"RETRY", b"10"), b"-ERR BACKOFF time must not be less than RETRY\r\n"),
]


@pytest.mark.parametrize("opts, error", ERRORS)
def test_every_error(opts, error):
    assert parse(*opts) == error


@pytest.mark.parametrize("timeout, error", [(b"x", replies.TIMEOUT_NOT_INTEGER),
                                            (b"99999999999999999999", replies.TIMEOUT_NOT_INTEGER),
                                            (b"-1", replies.TIMEOUT_NEGATIVE)])
def test_timeout_errors(timeout, error):
    assert parse(timeout=timeout) == error


def test_the_order_of_the_errors():
    """SPEC 3.1: the options left to right (the first wrong one answers), then the
    timeout, then the rules between options."""
    assert parse(b"TTL", b"0", b"DELAY", b"-1") == b"-ERR TTL must be a number > 0\r\n"
    assert parse(b"DELAY", b"-1", b"TTL", b"0") == replies.DELAY_NEGATIVE
    assert parse(b"TTL", b"0", timeout=b"x") == b"-ERR TTL must be a number > 0\r\n"
    assert parse(b"NOSUCH", timeout=b"-1") == replies.SYNTAX_ERROR
    # the timeout before the rules between options
    assert parse(b"DELAY", b"10", b"TTL", b"5", timeout=b"-1") == replies.TIMEOUT_NEGATIVE
    # REPLICATE vs RETRY 0 before DELAY >= TTL, which comes before the job features
    assert parse(b"REPLICATE", b"2", b"RETRY", b"0", b"DELAY", b"9", b"TTL", b"9") == ERRORS[13][1]
    assert parse(b"DELAY", b"9", b"TTL", b"9", b"DEADLETTER", b"dlq") == ERRORS[14][1]
    assert parse(b"DEADLETTER", b"dlq", b"RETRY", b"0", b"BACKOFF", b"1") == ERRORS[15][1]
    # the default REPLICATE depends on the cluster: RETRY 0 alone is fine on a lone node
    assert parse(b"RETRY", b"0")["retry"] == 0
    assert parse(b"RETRY", b"0", cluster_size=2) == ERRORS[13][1]


# ---- the job handed to the replication ----------------------------------------------------

def test_a_job_needing_copies_is_returned_not_left_in_the_shard():
    s = clustered_shard()
    wait = s.cmd_addjob([b"ADDJOB", b"q", b"body", b"2500", b"REPLICATE", b"2"])
    assert type(wait) is ReplWait
    assert (wait.timeout, wait.is_async, wait.extrepl) == (2500, False, False)
    assert wait.job.body == b"body" and wait.job.repl == 2
    assert wait.job.id not in s.jobs            # the replication registers it
    assert not hasattr(s, "last_added")


def test_the_replication_waits_with_the_parsed_timeout():
    s = clustered_shard()
    wait = s.cmd_addjob([b"ADDJOB", b"q", b"body", b"2500", b"REPLICATE", b"2"])
    assert s.replication.replicate_new(7, wait) is None      # the producer waits
    assert s.replication.repl_by_reqid[7] is wait
    assert (wait.reqid, wait.deadline, wait.started) == (7, T0 + 2500, T0)
    assert wait.job.state == WAIT_REPL and s.jobs[wait.job.id] is wait.job
    assert len(wait.job.nodes_delivered) == 2 and wait.job.nodes_delivered[0] == ME


def test_a_timeout_beyond_the_clock_means_no_deadline_overflow():
    s = clustered_shard()
    wait = s.cmd_addjob([b"ADDJOB", b"q", b"b", b"9223372036854775807", b"REPLICATE", b"2"])
    s.replication.replicate_new(7, wait)
    assert wait.deadline == 9223372036854775807


def test_async_is_answered_at_once_and_kept_nowhere():
    s = clustered_shard()
    wait = s.cmd_addjob([b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"3", b"ASYNC"])
    assert wait.is_async
    assert s.replication.replicate_new(7, wait) == b"+" + wait.job.id + b"\r\n"
    assert not s.replication.repl_waits and wait.job.state == QUEUED      # activated


def test_external_replication_keeps_no_copy_here():
    s = clustered_shard()
    s.memory.set_memory(1, None, False)          # above 75% of maxmemory (SPEC 3.1 step 5)
    wait = s.cmd_addjob([b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"2"])
    assert wait.extrepl
    s.replication.replicate_new(7, wait)
    assert ME not in wait.job.nodes_delivered and len(wait.job.nodes_delivered) == 2


def test_the_link_path_hands_the_value_to_the_replication():
    s = clustered_shard()
    assert s.execute(9, [b"ADDJOB", b"q", b"body", b"100", b"REPLICATE", b"3"]) is None
    assert s.replication.repl_by_reqid[9].deadline == T0 + 100


def test_one_copy_is_queued_here_and_answered():
    s = clustered_shard()
    reply = s.cmd_addjob([b"ADDJOB", b"q", b"body", b"0", b"REPLICATE", b"1"])
    assert reply.startswith(b"+D-") and len(s.queues[b"q"].jobs) == 1


def test_node_state_errors_come_after_the_options():
    s = clustered_shard()
    s.reachable_nodes = 0
    assert s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"TTL", b"0"]) == ERRORS[5][1]
    assert s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0"]).startswith(b"-NOREPL ")
    s.reachable_nodes = 2
    s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1"])
    assert s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1", b"MAXLEN", b"1"]) \
        .startswith(b"-MAXLEN ")
    s.queue_commands.cmd_pause([b"PAUSE", b"q", b"in"])
    assert s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1", b"MAXLEN", b"1"]) \
        .startswith(b"-MAXLEN ")                # MAXLEN before PAUSED
    assert s.cmd_addjob([b"ADDJOB", b"q", b"b", b"0", b"REPLICATE", b"1"]).startswith(b"-PAUSED ")


def test_the_shard_parts_are_the_named_classes():
    from disque.workers.shard import SHARD_PARTS
    s = Shard(0, 1, ME)
    for name, cls in SHARD_PARTS.items():
        assert type(getattr(s, name)) is cls, name
