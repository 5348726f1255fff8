"""The `disque://` transport of kombu (`disques://` over TLS), hence a Celery broker
(docs/frameworks.md).

    import disque.integrations.kombu        # registers the disque:// scheme
    app = Celery("tasks", broker="disque://:secret@10.0.0.1:7711,10.0.0.2:7711")

A kombu message is one Disque job: published with ADDJOB (its Celery eta as DELAY, the
`visibility_timeout` option as RETRY), fetched with one blocking GETJOB over every consumed
queue, acknowledged with ACKJOB, requeued with NACK. A message a consumer holds without
acknowledging it (prefetched, or running with acks_late) gets WORKING from a thread of its
channel (`HeldJobs`), so it is delivered again only when its consumer died or lost the
cluster for `visibility_timeout` seconds. Unacknowledged messages of a closing channel are
handed back with ENQUEUE, never published again, so closing duplicates nothing.
"""
from __future__ import annotations

import builtins
import itertools
import logging
import socket
import threading
from queue import Empty
from time import monotonic, sleep

import kombu.transport
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

import disque
from disque.client import Disque
from disque.client.errors import (AuthenticationError, DisqueError, LoadingError,
                                  NoReplicationError, UnavailableError, WorkerRestartedError)
from disque.integrations.kombu_config import (MAX_BLOCK, eta_delay, job_ttl, masked_uri,
                                              settings_from_connection)
from disque.integrations.kombu_held import HeldJobs

log = logging.getLogger(__name__)

FETCH_WITHOUT_PREFETCH_LIMIT = 10   # GETJOB COUNT for a consumer with no prefetch limit
MAX_FETCH = 100                     # the largest GETJOB COUNT a consumer asks for
PURGE_BATCH = 100                   # jobs taken per GETJOB NOHANG while purging


class BrokerAuthenticationError(DisqueError):
    """The nodes refused the broker URL's password (or asked for one)."""


class QoS(virtual.QoS):
    """kombu's prefetch accounting. Restoring the unacknowledged messages (a channel that
    closes, basic_recover) hands their jobs back to the server with ENQUEUE instead of
    publishing them again, which would make a second job of each."""

    def restore_unacked(self):
        self._flush()
        tags = list(self._delivered)
        self._delivered.clear()
        self.channel.hand_back(tags)
        return []


def message_group(properties):
    """The job group a published message asks for, or None."""
    if not properties:
        return None
    return properties.get("disque_group") or properties.get("MessageGroupId")


class Channel(virtual.Channel):
    """One kombu channel on the transport's Disque client. Acks may come from other
    threads (Celery's pool result handler): `HeldJobs` is thread-safe."""

    QoS = QoS
    do_restore = True
    supports_fanout = False

    def __init__(self, connection, **kwargs):
        super().__init__(connection, **kwargs)
        self.disque = connection.disque
        self.settings = connection.settings
        self._held = HeldJobs(self.disque)
        self._tags = itertools.count(1)
        self._no_ack_queues = set()
        self._slot_freed = threading.Event()

    # -- publishing ---------------------------------------------------------------
    def _put(self, queue, message, **kwargs):
        """ADDJOB of the serialized message. A Celery eta a second or more ahead becomes
        the job's DELAY, so the server holds the job until then. A `disque_group` property
        (`apply_async(..., disque_group=key)`; SQS FIFO's `MessageGroupId` is read too)
        puts the job in that group of its queue (docs/job-groups.md)."""
        settings = self.settings
        delay = eta_delay(message.get("headers"))
        self.disque.add_job(queue, dumps(message), settings.add_timeout,
                            replicate=settings.replicate,
                            retry=settings.visibility_timeout,
                            ttl=job_ttl(settings.ttl, delay), delay=delay,
                            group=message_group(message.get("properties")))

    # -- consuming ----------------------------------------------------------------
    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        if no_ack:
            self._no_ack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_cancel(self, consumer_tag):
        queue = self._tag_to_queue.get(consumer_tag)
        super().basic_cancel(consumer_tag)
        if queue not in self._active_queues:
            self._no_ack_queues.discard(queue)

    def drain_events(self, timeout=None, callback=None):
        """Fetch what QoS allows; with every prefetch slot taken, wait for an ack to free
        one (at most one GETJOB block)."""
        if not self._consumers:
            raise Empty()
        if self.qos.can_consume():
            return self._get_many(self._active_queues, timeout=timeout)
        self._slot_freed.clear()
        if self.qos.can_consume():
            return self._get_many(self._active_queues, timeout=timeout)
        self._slot_freed.wait(self._block_time(timeout))
        raise Empty()

    def _get_many(self, queues, timeout=None):
        """One GETJOB over every consumed queue: COUNT as many as the prefetch limit allows,
        blocking at most MAX_BLOCK (NOHANG when `timeout` is 0), failing over for at most
        as long (consumer_failover)."""
        client = self.disque
        jobs = client.get_jobs(*dict.fromkeys(queues), count=self._fetch_count(),
                               timeout=self._block_time(timeout), withcounters=True,
                               failover_timeout=client.consumer_failover(MAX_BLOCK))
        if not jobs:
            raise Empty()
        self._deliver_jobs(jobs)

    def _get(self, queue, timeout=None, no_ack=False):
        """One message without blocking (GETJOB NOHANG); Empty when none."""
        jobs = self.disque.get_jobs(queue, timeout=0, withcounters=True)
        payload = self._accept(jobs[0], no_ack) if jobs else None
        if payload is None:
            raise Empty()
        return payload

    def basic_get(self, queue, no_ack=False, **kwargs):
        """kombu's basic_get, with `no_ack` reaching the job (ACKed at once, never held)."""
        try:
            payload = self._get(queue, no_ack=no_ack)
        except Empty:
            return None
        message = self.Message(payload, channel=self)
        if not no_ack:
            self.qos.append(message, message.delivery_tag)
        return message

    def _deliver_jobs(self, jobs):
        """Hold every job of the batch first, then hand them to kombu one by one: a
        callback may block for long (Celery's prefork pool waits there for a free
        process), and the jobs behind it must keep their leases meanwhile. Jobs fetched
        for nobody (a consumer cancelled meanwhile, a failure half way) go back at once."""
        accepted, orphans = [], []
        for index, job in enumerate(jobs):
            try:
                if job.queue not in self.connection._callbacks:
                    orphans.append(job)
                    continue
                payload = self._accept(job, job.queue in self._no_ack_queues)
            except BaseException:
                self.hand_back([held["properties"]["delivery_tag"] for _, held in accepted])
                self._enqueue(orphans + list(jobs[index:]), "taking the batch failed")
                raise
            if payload is not None:
                accepted.append((job.queue, payload))
        if orphans:
            self._enqueue(orphans, "no consumer left for their queue")
        for index, (queue, payload) in enumerate(accepted):
            try:
                self.connection._deliver(payload, queue)
            except BaseException:
                self.hand_back([rest["properties"]["delivery_tag"]
                                for _, rest in accepted[index + 1:]])
                raise

    def _fetch_count(self):
        allowed = self.qos.can_consume_max_estimate()
        if allowed is None:
            return FETCH_WITHOUT_PREFETCH_LIMIT
        return max(1, min(allowed, MAX_FETCH))

    def _block_time(self, timeout):
        return MAX_BLOCK if timeout is None else max(0.0, min(timeout, MAX_BLOCK))

    def _accept(self, job, no_ack):
        """The kombu payload of a fetched job, its job ID and a delivery tag of its own in
        its delivery_info; the job is held (leased) until acked, or acknowledged at once
        for a no-ack consumer. None for a job this channel holds already (a second delivery
        is dropped: the first one is acked or handed back), and for a job that is not a
        kombu message: it is moved to `<queue>:dead` (the dead-letter convention of
        docs/job-features.md)."""
        try:
            payload = loads(bytes_to_str(job.body))
            properties = payload["properties"]
            delivery_info = properties.setdefault("delivery_info", {})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._quarantine(job, exc)
            return None
        tag = "%s.%d" % (job.id, next(self._tags))
        properties["delivery_tag"] = tag
        delivery_info["disque_job_id"] = job.id
        delivery_info["redelivered"] = bool(job.nacks or job.additional_deliveries)
        if no_ack:
            self.disque.ack_job(job)
        elif not self._held.hold(tag, job):
            log.debug("job %s delivered again while this channel holds it: dropped", job.id)
            return None
        return payload

    def _quarantine(self, job, reason):
        dead = "%s:dead" % job.queue
        try:
            self.disque.add_job(dead, job.body, self.settings.add_timeout,
                                replicate=self.settings.replicate,
                                retry=self.settings.visibility_timeout, ttl=self.settings.ttl)
            self.disque.ack_job(job)
        except DisqueError as exc:
            log.error("job %s in queue %s is not a kombu message (%s) and could not be moved "
                      "to %s (%s): it comes back after its RETRY", job.id, job.queue, reason,
                      dead, exc)
        else:
            log.error("job %s in queue %s is not a kombu message (%s): moved to queue %s",
                      job.id, job.queue, reason, dead)

    # -- acknowledging ------------------------------------------------------------
    def basic_ack(self, delivery_tag, multiple=False):
        """ACKJOB: the job is done and the cluster forgets it."""
        job = self._held.release(delivery_tag)
        try:
            if job is not None:
                self._job_command(self.disque.ack_job, job, "ACKJOB")
        finally:
            super().basic_ack(delivery_tag)
            self._slot_freed.set()

    def basic_reject(self, delivery_tag, requeue=False):
        """requeue=True: NACK, queued again at once with one more nack counted.
        requeue=False: ACKJOB, the message is dropped (kombu's meaning of a reject)."""
        job = self._held.release(delivery_tag)
        try:
            if job is not None and requeue:
                self._job_command(self.disque.nack_job, job, "NACK")
            elif job is not None:
                self._job_command(self.disque.ack_job, job, "ACKJOB")
        finally:
            # kombu's own reject with requeue publishes the message again: not here
            self.qos.reject(delivery_tag, requeue=False)
            self._slot_freed.set()

    def _job_command(self, method, job, name):
        try:
            method(job)
        except DisqueError as exc:
            log.warning("%s of job %s (queue %s) failed: %s; the server delivers it again "
                        "after its RETRY (%d s)", name, job.id, job.queue, exc,
                        self.settings.visibility_timeout)
            raise

    def hand_back(self, tags):
        """ENQUEUE the jobs of these unacknowledged deliveries, so another consumer gets
        them now rather than after their RETRY."""
        jobs = self._held.release_all(tags)
        if jobs:
            self._enqueue(jobs, "the channel gave them back")

    def _enqueue(self, jobs, why):
        try:
            self.disque.enqueue(*jobs)
        except DisqueError as exc:
            # not lost: the server queues them again after their RETRY
            log.warning("could not hand %d job(s) back with ENQUEUE (%s: %s); the server "
                        "queues them again after their RETRY (%d s)", len(jobs), why, exc,
                        self.settings.visibility_timeout)

    # -- queues ---------------------------------------------------------------------
    def _size(self, queue):
        """QLEN: the jobs queued on the node in use (not those of other nodes)."""
        return self.disque.qlen(queue)

    def _purge(self, queue):
        """Take every job queued on the node in use (GETJOB NOHANG) and FASTACK it."""
        removed = 0
        while True:
            jobs = self.disque.get_jobs(queue, count=PURGE_BATCH, timeout=0)
            if not jobs:
                return removed
            self.disque.fastack(*jobs)
            removed += len(jobs)

    def _new_queue(self, queue, **kwargs):
        """Disque makes queues on demand."""

    def _has_queue(self, queue, **kwargs):
        return True

    def close(self):
        try:
            super().close()             # restores the unacknowledged messages (QoS)
        finally:
            left = self._held.close()   # anything QoS did not own
            if left:
                self._enqueue(left, "the channel closed")


class Transport(virtual.Transport):
    """kombu's transport for a Disque cluster: one Disque client per kombu connection."""

    Channel = Channel

    driver_type = "disque"
    driver_name = "disque"
    default_port = 7711
    can_parse_url = True                # kombu would mangle `disque://a:1,b:2`
    polling_interval = 0.1              # s: the wait of a connection without consumers

    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic"]), heartbeats=False)

    # what reconnecting (and, for a producer, publishing again) can cure
    connection_errors = virtual.Transport.connection_errors + (
        UnavailableError, LoadingError, WorkerRestartedError, NoReplicationError,
        builtins.ConnectionError)
    channel_errors = virtual.Transport.channel_errors + (DisqueError,)
    recoverable_connection_errors = connection_errors
    recoverable_channel_errors = ()

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        self.disque = None
        self.settings = None

    def establish_connection(self):
        """Read the URL and the options, connect to a node (HELLO) and pick REPLICATE."""
        settings = settings_from_connection(self.client)
        client = Disque(*settings.servers, password=settings.password, tls=settings.tls,
                        socket_timeout=settings.socket_timeout,
                        connect_timeout=settings.connect_timeout,
                        failover_timeout=settings.failover_timeout)
        try:
            try:
                # a worker's reconnect loop does the waiting, and stops for a shutdown
                client.connect(failover_timeout=client.consumer_failover(MAX_BLOCK))
            except AuthenticationError as exc:
                raise BrokerAuthenticationError("Disque refused the password of %s: %s" % (
                    masked_uri(self.client.hostname), exc)) from exc
            if settings.replicate is None:
                settings = settings.with_replicate(2 if len(client.nodes) >= 2 else 1)
        except BaseException:
            client.close()
            raise
        if self.disque is not None:     # connecting again: the old client is done
            self.disque.close()
        self.disque, self.settings = client, settings
        return super().establish_connection()

    def close_connection(self, connection):
        try:
            super().close_connection(connection)
        finally:
            if self.disque is not None:
                self.disque.close()

    def drain_events(self, connection, timeout=None):
        """Deliver one batch of messages. Consuming channels wait inside (a blocking
        GETJOB of at most MAX_BLOCK, or a wait for a free prefetch slot): one such wait
        that brought nothing ends the call, so the caller's loop sees a stop (Celery's
        warm shutdown) within MAX_BLOCK rather than its whole timeout. Without consumers
        the call sleeps polling_interval between looks, up to the timeout."""
        start = monotonic()
        while True:
            remaining = None if timeout is None else max(0.0, timeout - (monotonic() - start))
            try:
                return self.cycle.get(self._deliver, timeout=remaining)
            except Empty:
                consuming = any(channel._consumers for channel in self.channels)
                if timeout is not None and (consuming or monotonic() - start >= timeout):
                    raise socket.timeout()
                if not consuming:
                    pause = self.polling_interval
                    sleep(pause if remaining is None else min(pause, remaining))

    def as_uri(self, uri, include_password=False, mask="**"):
        return masked_uri(uri, include_password, mask)

    def driver_version(self):
        return disque.__version__


kombu.transport.TRANSPORT_ALIASES["disque"] = "disque.integrations.kombu:Transport"
kombu.transport.TRANSPORT_ALIASES["disques"] = "disque.integrations.kombu:Transport"   # TLS
