"""`DisqueConsumer`: Dramatiq's consumer of one queue, on GETJOB (docs/frameworks.md).

- **Fetching.** A blocking GETJOB asks for as many jobs as the prefetch leaves room for
  (COUNT), so a busy queue costs one round trip per batch. Each job is held (WORKING keeps
  it from redelivery, `QueueLeases`, from a thread of its own) from delivery until its
  ACK, its dead-lettering or its hand-back.
- **Delays.** The server holds a delayed message for the whole seconds of its delay
  (`DisqueBroker.enqueue`); the message keeps Dramatiq's `eta` option. A message delivered
  with its eta a little ahead is kept here until the eta and then yielded with the option
  removed, so Dramatiq's worker runs it at once instead of putting it on a delay queue. One
  with its eta further ahead (another producer's clock, a foreign message) goes back to the
  server with the remaining whole seconds as its DELAY.
- **Ending.** ACK is ACKJOB. NACK (a message Dramatiq gave up on) is ADDJOB to
  `<queue>:dead` and then ACKJOB. A requeue (prefetched messages a stopping worker did not
  run) is ENQUEUE: delivered again at once, no duplicate, no NACK counted. `close()` hands
  back with ENQUEUE what was fetched and never yielded.

The consumer thread calls `__next__` and `close`; Dramatiq's worker threads call `ack` and
`nack`; the main thread calls `requeue` at shutdown.
"""
from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from contextlib import contextmanager

from dramatiq.broker import Consumer, MessageProxy
from dramatiq.common import current_millis
from dramatiq.errors import BrokerConnectionError, DecodeError
from dramatiq.message import Message

from disque.client.errors import DisqueError
from disque.integrations.dramatiq_errors import as_broker_errors, describe

log = logging.getLogger("disque.dramatiq")

# A message whose eta is at most this far ahead is kept by the consumer until it is due:
# the server delivers delayed messages after the whole seconds of their delay, so the
# remainder is below a second (plus the clock difference between producer and worker).
HOLD_LIMIT_MS = 2000

# The shortest GETJOB block: the client sends whole milliseconds, at least 1.
MIN_BLOCK = 0.001


class DisqueMessageProxy(MessageProxy):
    """A Dramatiq message with the Disque job that carries it (`job`, a `disque.client.Job`):
    ACK, dead-lettering and requeue act on that job, on the node that delivered it."""

    def __init__(self, message, job):
        super().__init__(message)
        self.job = job
        self.dead_lettered = False      # a retried NACK does not dead-letter it twice


class DisqueConsumer(Consumer):
    """Consumes `queue_name` for one Dramatiq consumer thread; see the module docstring."""

    def __init__(self, broker, queue_name, prefetch, timeout):
        self.broker = broker
        self.client = broker.client
        self.queue_name = queue_name
        self.prefetch = max(1, int(prefetch))
        self.timeout = max(MIN_BLOCK, timeout / 1000.0)
        self.failover = self.client.consumer_failover(self.timeout)
        self.leases = broker.leases_of(queue_name)
        self.ready = deque()            # due, not yielded yet
        self.waiting = []               # heap of (eta, n, proxy): held until their eta
        self._order = itertools.count()
        self.closed = False

    # -- fetching ------------------------------------------------------------------
    def __next__(self):
        """The next due message, or None after waiting at most `timeout` for one."""
        proxy = self._take_due()
        if proxy is not None:
            return proxy
        block = self._block_time()
        room = self.prefetch - len(self.leases)
        if room <= 0:
            # everything the prefetch allows is in hand: wait for an ACK to free a slot
            self.leases.wait_for_release(block)
            return None
        with as_broker_errors():
            jobs = self.client.get_jobs(self.queue_name, count=room, timeout=block,
                                        failover_timeout=self.failover)
        for job in jobs:
            self._receive(job)
        return self._take_due()

    def _block_time(self):
        """How long GETJOB may block: the idle timeout, cut short by the next eta of a
        message kept here, so it runs on time."""
        limit = self.timeout
        if self.waiting:
            limit = min(limit, (self.waiting[0][0] - current_millis()) / 1000.0)
        return max(MIN_BLOCK, limit)

    def _receive(self, job):
        if not self.leases.hold(job):
            return          # delivered again while held here: the first delivery stands
        try:
            message = Message.decode(job.body)
        except DecodeError as exc:
            self._discard_undecodable(job, exc)
            return
        proxy = DisqueMessageProxy(message, job)
        eta = message.options.get("eta")
        if eta is None or not isinstance(eta, (int, float)):
            # no delay, or an eta Dramatiq's worker reports and handles itself
            self.ready.append(proxy)
            return
        ahead = eta - current_millis()
        if ahead <= 0:
            del message.options["eta"]
            self.ready.append(proxy)
        elif ahead <= HOLD_LIMIT_MS:
            heapq.heappush(self.waiting, (eta, next(self._order), proxy))
        else:
            self._postpone(proxy, ahead)

    def _take_due(self):
        now = current_millis()
        while self.waiting and self.waiting[0][0] <= now:
            proxy = heapq.heappop(self.waiting)[2]
            del proxy.options["eta"]
            self.ready.append(proxy)
        return self.ready.popleft() if self.ready else None

    def _postpone(self, proxy, ahead_ms):
        """Give a message due in more than HOLD_LIMIT_MS back to the server's timer."""
        job = proxy.job
        try:
            if proxy.options.get("disque_group") is not None:
                # a message of a group keeps its place: NACK DELAY, no new job at the end
                with as_broker_errors():
                    self.client.nack_job(job, delay=int(ahead_ms // 1000))
                return
            self.broker.add_message(self.queue_name, proxy.encode(),
                                    delay_seconds=int(ahead_ms // 1000))
            with as_broker_errors():
                self.client.ack_job(job)
        finally:
            # on failure the server delivers it again after its RETRY
            self.leases.release(job.id)

    def _discard_undecodable(self, job, error):
        """A body Dramatiq cannot read would fail on every delivery: dead-letter it as is."""
        log.error("job %s on queue %s is not a Dramatiq message (%s): moved to %s",
                  job.id, self.queue_name, error.error,
                  self.broker.dead_letter_queue(self.queue_name))
        try:
            self.broker.add_dead_letter(self.queue_name, job.body)
            with as_broker_errors():
                self.client.ack_job(job)
        finally:
            self.leases.release(job.id)

    # -- ending a message --------------------------------------------------------------
    def ack(self, message):
        """ACKJOB."""
        with self._ending(message.job):
            self.client.ack_job(message.job)

    def nack(self, message):
        """The message failed for good: ADDJOB to `<queue>:dead` (with the broker's
        dead_message_ttl), then ACKJOB of the original."""
        with self._ending(message.job):
            if not message.dead_lettered:
                self.broker.add_dead_letter(self.queue_name, message.encode())
                message.dead_lettered = True
            self.client.ack_job(message.job)

    @contextmanager
    def _ending(self, job):
        """The lease ends first, so no WORKING crosses the ACK; if the cluster cannot be
        reached, the job is held again while Dramatiq tries once more."""
        self.leases.release(job.id)
        try:
            with as_broker_errors():
                yield
        except BrokerConnectionError:
            self.leases.hold(job)
            raise

    def requeue(self, messages):
        """ENQUEUE: messages fetched but not run go back to the queue at once."""
        jobs = [message.job for message in messages]
        if not jobs:
            return
        for job in jobs:
            self.leases.release(job.id)
        log.debug("handing back %d messages of queue %s", len(jobs), self.queue_name)
        with as_broker_errors():
            self.client.enqueue(*jobs)

    def close(self):
        """Hand back what was fetched and never yielded; messages already yielded stay
        held (the worker still acknowledges them, through the broker's next consumer)."""
        if self.closed:
            return
        self.closed = True
        jobs = [proxy.job for proxy in self.ready]
        jobs += [proxy.job for _, _, proxy in self.waiting]
        self.ready.clear()
        self.waiting.clear()
        for job in jobs:
            self.leases.release(job.id)
        if not jobs:
            return
        try:
            self.client.enqueue(*jobs)
        except DisqueError as exc:
            log.warning("could not hand back %d prefetched messages of queue %s (%s): the "
                        "server delivers them again after their RETRY", len(jobs),
                        self.queue_name, describe(exc))

