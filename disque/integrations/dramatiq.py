"""`DisqueBroker`: Dramatiq's messages as Disque jobs (docs/frameworks.md).

    >>> import dramatiq
    >>> from disque.integrations.dramatiq import DisqueBroker
    >>> dramatiq.set_broker(DisqueBroker("10.0.0.1:7711", "10.0.0.2:7711", retry=60))

Every Dramatiq queue is the Disque queue of the same name. A message is one job whose body
is `Message.encode()`:

- `enqueue` is ADDJOB with the broker's REPLICATE, RETRY and TTL. A delay is the server's
  DELAY, in whole seconds, and the message keeps Dramatiq's `eta`; the consumer holds the
  remainder of a second (`dramatiq_consumer`). So there are no delay queues: the broker
  declares none and Dramatiq's worker consumes each queue once.
- RETRY plays the visibility timeout: a message a worker holds without an ACK gets WORKING
  while the worker lives, and comes back RETRY seconds after the worker died.
- A message Dramatiq gives up on (Retries exhausted, unknown actor) goes to the queue
  `<queue>:dead`, kept `dead_message_ttl` seconds.

All durations here are whole seconds, the server's unit (Dramatiq's own are milliseconds).
"""
from __future__ import annotations

import threading
import time

from dramatiq.broker import Broker
from dramatiq.common import current_millis
from dramatiq.errors import QueueJoinTimeout, QueueNotFound

from disque.client import Disque
from disque.client.commands import count, seconds, whole_seconds
from disque.integrations.dramatiq_consumer import DisqueConsumer
from disque.integrations.dramatiq_errors import as_broker_errors
from disque.integrations.dramatiq_leases import QueueLeases

DEFAULT_RETRY = 60                      # s; Dramatiq's Redis broker requeues after 60 s too
DEFAULT_TTL = 7 * 86400                 # s a message may wait to be run, after its delay
DEFAULT_DEAD_MESSAGE_TTL = 7 * 86400    # s a dead-lettered message is kept
DEFAULT_REPLICATION_TIMEOUT = 10.0      # s ADDJOB waits for its copies before NOREPL
SOCKET_TIMEOUT_MARGIN = 5.0             # s a reply may take beyond ADDJOB's wait
DEAD_LETTER_SUFFIX = ":dead"            # the server's own default (docs/job-features.md)
FLUSH_BATCH = 100


class DisqueBroker(Broker):
    """A Dramatiq broker on a Disque cluster.

    - `servers`: `host:port` strings, (host, port) pairs or `disque://` URLs, as for
      `disque.client.Disque` (default 127.0.0.1:7711); `password` the nodes' requirepass.
    - `replicate`: copies of each message (ADDJOB REPLICATE). None: 2 when HELLO lists two
      nodes or more, else 1.
    - `retry`: seconds after which a message held by a worker that died is delivered again.
    - `ttl`: seconds a message lives once due (its delay is added to its TTL).
    - `dead_message_ttl`: seconds a message in `<queue>:dead` is kept.
    - `replication_timeout`: seconds ADDJOB waits for the copies (then NOREPL).
    - `client`: a `Disque` to use instead of making one (then no servers, password or
      client options). Other keyword arguments (`failover_timeout`, `connect_timeout`,
      `socket_timeout`, `tls`, ...) go to `Disque`; `socket_timeout` defaults to
      `replication_timeout` + 5 s (a blocking GETJOB gets its block time on top).
    """

    def __init__(self, *servers, password=None, middleware=None, replicate=None,
                 retry=DEFAULT_RETRY, ttl=DEFAULT_TTL,
                 dead_message_ttl=DEFAULT_DEAD_MESSAGE_TTL,
                 replication_timeout=DEFAULT_REPLICATION_TIMEOUT, client=None,
                 **client_options):
        super().__init__(middleware=middleware)
        self.replicate = None if replicate is None else count("replicate", replicate)
        self.retry = whole_seconds("retry", retry, 1)
        self.ttl = whole_seconds("ttl", ttl, 1)
        self.dead_message_ttl = whole_seconds("dead_message_ttl", dead_message_ttl, 1)
        self.replication_timeout = seconds("replication_timeout", replication_timeout)
        if client is not None and (servers or password is not None or client_options):
            raise TypeError("give DisqueBroker either a client or servers and client "
                            "options, not both")
        if client is None:
            # a node that stops answering (a partition drops packets, no reset) must not
            # hang a consumer forever; an ADDJOB may wait replication_timeout for its copies
            client_options.setdefault("socket_timeout",
                                      replication_timeout + SOCKET_TIMEOUT_MARGIN)
            client = Disque(*servers, password=password, **client_options)
        self.client = client
        self.queues = set()
        self._leases = {}
        self._leases_lock = threading.Lock()

    # -- queues -----------------------------------------------------------------------
    def declare_queue(self, queue_name):
        """Declare a queue (idempotent). No delay queue: the server holds delays."""
        if queue_name not in self.queues:
            self.emit_before("declare_queue", queue_name)
            self.queues.add(queue_name)
            self.emit_after("declare_queue", queue_name)

    def get_declared_queues(self):
        return self.queues.copy()

    @staticmethod
    def dead_letter_queue(queue_name):
        return queue_name + DEAD_LETTER_SUFFIX

    def consume(self, queue_name, prefetch=1, timeout=5000):
        """A consumer of a declared queue: `prefetch` messages in hand at most (running
        ones included), `timeout` milliseconds of waiting before it yields None."""
        if queue_name not in self.queues:
            raise QueueNotFound(queue_name)
        return DisqueConsumer(self, queue_name, prefetch, timeout)

    def leases_of(self, queue_name):
        """The held jobs of a queue, shared by its consumers in this process."""
        with self._leases_lock:
            leases = self._leases.get(queue_name)
            if leases is None:
                leases = self._leases[queue_name] = QueueLeases(self.client)
            return leases

    # -- producing ----------------------------------------------------------------------
    def enqueue(self, message, *, delay=None):
        """ADDJOB of the message on its queue. `delay` (milliseconds) sets the `eta`
        option and becomes DELAY, its whole seconds; the consumer holds the rest."""
        delay_seconds = 0
        if delay is not None:
            if delay < 0:
                raise ValueError("delay must be >= 0 milliseconds, not %r" % (delay,))
            message = message.copy(options={"eta": current_millis() + int(delay)})
            delay_seconds = int(delay) // 1000
        self.logger.debug("Enqueueing message %r on queue %r.", message.message_id,
                          message.queue_name)
        self.emit_before("enqueue", message, delay)
        self.add_message(message.queue_name, message.encode(), delay_seconds,
                         group=message.options.get("disque_group"))
        self.emit_after("enqueue", message, delay)
        return message

    def add_message(self, queue_name, body, delay_seconds=0, ttl=None, group=None):
        """ADDJOB with the broker's settings (TTL `ttl` plus the delay); returns the job ID.
        `group`: the message option `disque_group` (docs/job-groups.md)."""
        with as_broker_errors():
            return self.client.add_job(
                queue_name, body, self.replication_timeout, replicate=self._replication(),
                delay=delay_seconds or None, retry=self.retry,
                ttl=(self.ttl if ttl is None else ttl) + delay_seconds, group=group)

    def add_dead_letter(self, queue_name, body):
        """ADDJOB to `<queue>:dead`, kept dead_message_ttl seconds."""
        return self.add_message(self.dead_letter_queue(queue_name), body,
                                ttl=self.dead_message_ttl)

    def _replication(self):
        if self.replicate is not None:
            return self.replicate
        nodes = self.client.nodes
        if not nodes:
            self.client.connect()
            nodes = self.client.nodes
        return 2 if len(nodes) >= 2 else 1

    # -- test helpers ----------------------------------------------------------------------
    def flush(self, queue_name):
        """Drop the messages of a queue and of its dead-letter queue: every job of them
        the node in use knows (queued, delayed, or held by a worker) is FASTACKed, then
        GETJOB NOHANG takes what other nodes still send, until none comes."""
        for name in (queue_name, self.dead_letter_queue(queue_name)):
            with as_broker_errors():
                self._fastack_known(name)
                while True:
                    jobs = self.client.get_jobs(name, count=FLUSH_BATCH, nohang=True)
                    if not jobs:
                        break
                    self.client.fastack(*jobs)

    def _fastack_known(self, queue_name):
        batch = []
        for job_id in self.client.scan_jobs(queue=queue_name, states=("queued", "active")):
            batch.append(job_id)
            if len(batch) == FLUSH_BATCH:
                self.client.fastack(*batch)
                batch = []
        if batch:
            self.client.fastack(*batch)

    def flush_all(self):
        for queue_name in self.get_declared_queues():
            self.flush(queue_name)

    def join(self, queue_name, *, interval=100, timeout=None):
        """Wait until the queue is drained: QLEN 0, no job of it queued, delayed or held
        unacknowledged on the node in use, and none held by this process. QLEN and the
        job scan are per node: on a cluster, jobs only other nodes hold are not seen.

        Raises QueueJoinTimeout after `timeout` milliseconds."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000.0
        while not self._drained(queue_name):
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(interval / 1000.0)

    def _drained(self, queue_name):
        if len(self.leases_of(queue_name)):
            return False
        with as_broker_errors():
            if self.client.qlen(queue_name):
                return False
            for _ in self.client.scan_jobs(queue=queue_name, states=("queued", "active")):
                return False
        return True

    def close(self):
        with self._leases_lock:
            leases = list(self._leases.values())
        for queue_leases in leases:
            queue_leases.close()
        self.client.close()
