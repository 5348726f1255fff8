"""The client's parts that do no I/O: server specs, the node table and failover order,
the switching rule, error classes by code, argument checks, and the worker's retry and
WORKING bookkeeping (a clock the test moves)."""
import pytest

from disque.client import errors
from disque.client.commands import milliseconds, whole_seconds
from disque.client.nodes import Failover, Hello, NodeTable
from disque.client.replies import Job, JobInfo
from disque.client.servers import ServerSpecError, parse_servers
from disque.client.switching import JobSources, SwitchRule
from disque.client.worker.jobflow import failed, keep_alive, succeeded
from disque.client.worker.policy import RunningJobs, plan_failure, retry_delay
from disque.client.worker.settings import WorkerSettings
from disque.client.worker.stats import WorkerStats

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# -- server specs ------------------------------------------------------------------
@pytest.mark.parametrize("spec, addresses, password", [
    ("127.0.0.1:7711", [("127.0.0.1", 7711)], None),
    ("localhost", [("localhost", 7711)], None),
    ("[::1]:7712", [("::1", 7712)], None),
    (("10.0.0.1", 7713), [("10.0.0.1", 7713)], None),
    ("a:1,b:2", [("a", 1), ("b", 2)], None),
    ("disque://h1:7711,h2:7712", [("h1", 7711), ("h2", 7712)], None),
    ("disque://:s%40cret@h1", [("h1", 7711)], "s@cret"),
    ("DISQUE://user:pw@h1:1/", [("h1", 1)], "pw"),
    (["a:1", "disque://a:1,c:3"], [("a", 1), ("c", 3)], None),
])
def test_server_specs(spec, addresses, password):
    assert parse_servers(spec) == (addresses, password)


@pytest.mark.parametrize("spec", ["", "h:x", "h:0", "h:70000", "[::1", "disque://", ":1",
                                  [("h", 1, 2)], 7711, []])
def test_bad_server_specs_say_why(spec):
    with pytest.raises(ServerSpecError):
        parse_servers(spec)


# -- the node table -------------------------------------------------------------------
def hello(*nodes, me=0, address=("127.0.0.1", 7001)):
    reply = [1, nodes[me][0].encode()]
    reply += [[n.encode(), h.encode(), str(p).encode(), str(prio).encode()]
              for n, h, p, prio in nodes]
    return Hello.from_reply(reply, address)


A, B, C = ("a" * 40, "127.0.0.1", 7001, 1), ("b" * 40, "127.0.0.1", 7002, 1), \
    ("c" * 40, "127.0.0.1", 7003, 1)


def test_hello_reply_and_learning():
    h = hello(A, B, C)
    assert h.node_id == "a" * 40 and len(h.nodes) == 3
    table = NodeTable([("seed", 1)])
    table.learn(h)
    assert table.by_prefix["bbbbbbbb"].port == 7002
    assert table.node_of_job("D-bbbbbbbb-" + "x" * 24 + "-05a1").id == "b" * 40
    assert table.node_of_job("D-dddddddd-" + "x" * 24 + "-05a1") is None
    table.learn(hello(A, C))                    # B left the cluster: forgotten
    assert "b" * 40 not in table.by_id


def test_the_answering_node_is_reachable_where_it_answered():
    h = hello(("a" * 40, "", 7001, 1), B, address=("10.1.1.1", 9000))
    assert h.nodes[0].address == ("10.1.1.1", 9000)


def test_connect_order_prefers_good_nodes_then_seeds_then_failing_then_failed():
    clock = Clock()
    table = NodeTable([("seed", 1), ("127.0.0.1", 7001)], clock=clock)
    table.learn(hello(A, ("b" * 40, "127.0.0.1", 7002, 10), ("c" * 40, "127.0.0.1", 7003, 5)))
    table.mark_failed(("127.0.0.1", 7001))
    order = table.connect_order()
    assert order == [("127.0.0.1", 7003), ("seed", 1), ("127.0.0.1", 7002), ("127.0.0.1", 7001)]
    clock.now += table.failed_for + 1           # a failure here is forgotten after a while
    assert table.connect_order()[0] == ("127.0.0.1", 7001)


def test_a_failing_node_is_not_used_for_job_ids():
    table = NodeTable([])
    table.learn(hello(A, ("b" * 40, "127.0.0.1", 7002, 100)))
    assert table.node_of_job("D-bbbbbbbb-" + "x" * 24 + "-05a1") is None


def test_failover_tries_every_address_then_pauses_until_its_deadline():
    clock = Clock()
    table = NodeTable([("s", 1), ("s", 2)], clock=clock)
    attempt = Failover(table, ("s", 1), timeout=1.0)
    steps = []
    for step in attempt:
        steps.append(step)
        if isinstance(step, float):
            clock.now += step
        else:
            attempt.failed(step, OSError("refused"))
        assert len(steps) < 100
    assert steps[0] == ("s", 2) and isinstance(steps[1], float)
    assert clock.now >= 1000.0 + 1.0 - 1e-9     # gave up at its deadline, not before
    pauses = [s for s in steps if isinstance(s, float)]
    assert pauses[:3] == [0.05, 0.1, 0.2]


def test_failover_tries_every_address_once_even_past_a_short_deadline():
    """Each address takes longer to fail than the whole deadline (nodes that do not answer
    within the connect timeout): every one is still tried once, then the failover ends."""
    clock = Clock()
    table = NodeTable([("s", 1), ("s", 2), ("s", 3), ("s", 4)], clock=clock)
    attempt = Failover(table, ("s", 1), timeout=0.25)
    tried = []
    for step in attempt:
        assert not isinstance(step, float), "no pause once the deadline has passed"
        tried.append(step)
        clock.now += 2.0                    # a connect timeout
        attempt.failed(step, OSError("timed out"))
    assert sorted(tried) == [("s", 2), ("s", 3), ("s", 4)]


# -- switching ---------------------------------------------------------------------------
def test_a_consumer_moves_when_another_node_produces_its_jobs():
    sources = JobSources(SwitchRule(window=10, margin=0.5))
    assert sources.observe(["aaaaaaaa"] * 9, "bbbbbbbb") is None
    assert sources.observe(["aaaaaaaa"], "bbbbbbbb") == "aaaaaaaa"


def test_a_consumer_fed_evenly_stays_and_margin_is_hysteresis():
    sources = JobSources(SwitchRule(window=100, margin=0.5))
    for _ in range(20):
        assert sources.observe(["aaaaaaaa", "bbbbbbbb"] * 50, "bbbbbbbb") is None
    # 60/40 is inside the margin, 70/30 is not
    assert sources.observe(["aaaaaaaa"] * 60 + ["bbbbbbbb"] * 40, "bbbbbbbb") is None
    assert sources.observe(["aaaaaaaa"] * 70 + ["bbbbbbbb"] * 30, "bbbbbbbb") == "aaaaaaaa"


def test_window_zero_never_moves():
    assert JobSources(SwitchRule(window=0)).observe(["aaaaaaaa"] * 1000, "b") is None
    with pytest.raises(ValueError):
        SwitchRule(window=-1)


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("reply, cls", [
    ("NOREPL Not enough reachable nodes", errors.NoReplicationError),
    ("PAUSED Queue paused in input, try later", errors.PausedError),
    ("OOM command not allowed when used memory > 'maxmemory'", errors.OutOfMemoryError),
    ("LEAVING This node is leaving the cluster", errors.LeavingError),
    ("BADID Invalid Job ID format.", errors.BadIdError),
    ("NOJOB Job not known in the context of this node.", errors.NoJobError),
    ("TOOLATE Half of job TTL already elapsed", errors.TooLateError),
    ("MAXLEN Queue is already longer than the specified MAXLEN count", errors.MaxLenError),
    ("MISCONF Errors writing to the AOF file: File too large", errors.MisconfError),
    ("LOADING Disque is loading the dataset in memory", errors.LoadingError),
    ("NOAUTH Authentication required.", errors.AuthenticationError),
    ("WRONGPASS invalid password", errors.AuthenticationError),
    ("ERR invalid password", errors.AuthenticationError),
    ("NOPROTO unsupported protocol version", errors.NoProtoError),
    ("ERR worker process died while running this command", errors.WorkerRestartedError),
    ("ERR MAXLEN must be a positive number", errors.ResponseError),
    ("SOMETHING new", errors.ResponseError),
])
def test_error_classes_by_code(reply, cls):
    exc = errors.from_reply(reply)
    assert type(exc) is cls and isinstance(exc, errors.DisqueError)
    assert str(exc) == reply
    assert exc.code == reply.split(" ")[0]


# -- arguments ---------------------------------------------------------------------------
def test_seconds_to_milliseconds_and_whole_seconds():
    assert milliseconds("t", 1.5) == 1500 and milliseconds("t", 0.0001) == 1
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            milliseconds("t", bad)
    with pytest.raises(TypeError):
        milliseconds("t", "1")
    assert whole_seconds("delay", 5.0) == 5
    with pytest.raises(ValueError, match="whole number"):
        whole_seconds("delay", 1.5)


# -- the worker's policy ------------------------------------------------------------------
def info(**kw):
    base = dict(id="D-" + "a" * 38, queue="q", state="active", repl=1, ttl=100, ctime=0,
                delay=0, retry=5, nacks=0, additional_deliveries=0, nodes_delivered=(),
                nodes_confirmed=(), next_requeue_within=None, next_awake_within=None, body=b"")
    base.update(kw)
    return JobInfo(**base)


def test_retry_delays_grow_per_delivery_up_to_the_maximum():
    s = WorkerSettings(retry_delay=2, max_retry_delay=30)
    assert [retry_delay(d, s) for d in range(1, 7)] == [2, 4, 8, 16, 30, 30]
    assert retry_delay(None, s) == 2 and retry_delay(10 ** 6, s) == 30


def test_failure_plans():
    s = WorkerSettings()
    job = Job("q", "D-x", b"", 2, 0)
    assert plan_failure(job, None, s).delay == 4            # delivery 3, no SHOW
    assert plan_failure(job, info(nacks=3), s).delay == 8
    plan = plan_failure(job, info(nacks=2, max_deliveries=3), s)
    assert plan.dead_letter == "q:dead" and plan.delay is None
    plan = plan_failure(job, info(max_deliveries=1, deadletter="graveyard"), s)
    assert plan.dead_letter == "graveyard"
    plan = plan_failure(job, info(backoff=60, retry_interval=10), s)
    assert plan.delay is None and plan.retried               # the job's own BACKOFF decides
    plan = plan_failure(job, info(retry=0), s)
    assert not plan.retried and plan.dead_letter is None


def test_working_schedule_and_job_timeouts_follow_the_clock():
    clock = Clock()
    running = RunningJobs(WorkerSettings(job_timeout=10), clock)
    key = running.start(Job("q", "D-1", b""))
    assert running.due() == ([], [])
    clock.now += 0.4
    [r], [] = running.due()
    r.working_done(4, clock.now)                 # RETRY 4: the next WORKING in 2 s
    clock.now += 1.9
    assert running.due() == ([], [])
    clock.now += 0.2
    assert running.due()[0] == [r]
    clock.now += 8
    assert running.due() == ([], [r]) and r.timed_out
    assert running.due() == ([], [])            # a timeout is reported once
    assert running.finish(key) is r and len(running) == 0


def drive(script, results):
    """Run a worker script against a list of (call, result or exception)."""
    calls, step = [], next(script)
    try:
        while True:
            calls.append(step)
            outcome = results.pop(0)
            step = script.throw(outcome) if isinstance(outcome, Exception) else script.send(outcome)
    except StopIteration:
        return calls


def test_worker_scripts():
    s, stats = WorkerSettings(), WorkerStats()
    job = Job("q", "D-1", b"", 0, 0)
    assert drive(succeeded(job, s, stats), [1]) == [("ack_job", job)]
    assert stats.snapshot().done == 1
    calls = drive(failed(job, ValueError("x"), s, stats), [info(), 1])
    assert calls == [("show", job), ("nack_job", job, 1)]
    assert stats.snapshot().retried == 1 and stats.snapshot().failed == 1
    calls = drive(failed(job, ValueError("x"), s, stats), [info(max_deliveries=1), 1])
    assert stats.snapshot().dead_lettered == 1
    # an unacknowledged success is not counted as done
    drive(succeeded(job, s, stats), [errors.UnavailableError("down")])
    assert stats.snapshot().done == 1


def test_keep_alive_stops_on_toolate_and_learns_retry():
    clock = Clock()
    running = RunningJobs(WorkerSettings(), clock)
    running.start(Job("q", "D-1", b""))
    [r] = running.jobs.values()
    drive(keep_alive(r, clock), [6])
    assert r.retry == 6 and r.working_at == clock.now + 3
    drive(keep_alive(r, clock), [errors.TooLateError("late")])
    assert not r.extend


def test_worker_settings_refuse_nonsense():
    for kw in (dict(concurrency=0), dict(poll=0), dict(first_working_after=0.6),
               dict(retry_delay=10, max_retry_delay=5), dict(job_timeout=0)):
        with pytest.raises(ValueError):
            WorkerSettings(**kw)
