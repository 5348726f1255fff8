"""The client calls a job needs after it ran, written once as small scripts that yield the
call to make (`("ack_job", job)`) and receive its result; `run_sync` and `run_async` carry
them out with a `Disque` or an `AsyncDisque`. Errors of a call go back into the script.
"""
from __future__ import annotations

import logging

from disque.client.errors import DisqueError, NoJobError, TooLateError
from disque.client.worker.policy import describe, plan_failure

log = logging.getLogger("disque.worker")


class JobTimeout(Exception):
    """The job ran longer than the worker's job timeout."""


def succeeded(job, settings, stats):
    try:
        yield ("fastack" if settings.fastack else "ack_job", job)
    except DisqueError as exc:
        log.error("%s done, but its acknowledgement failed (%s): the server will deliver "
                  "it again after its RETRY", describe(job), exc)
        return
    stats.add("done")


def failed(job, error, settings, stats):
    stats.add("failed")
    try:
        info = yield ("show", job)
    except DisqueError:
        info = None
    plan = plan_failure(job, info, settings)
    log.warning("%s failed: %r; %s", describe(job), error, plan.note)
    if not plan.retried and plan.dead_letter is None:
        return
    try:
        yield ("nack_job", job, plan.delay)
    except DisqueError as exc:
        log.error("%s: NACK failed (%s); the server delivers it again after its RETRY",
                  describe(job), exc)
        return
    stats.add("dead_lettered" if plan.dead_letter else "retried")


def keep_alive(running, clock):
    """WORKING for a job still running: its reply is the RETRY, the next one at half."""
    try:
        retry = yield ("working", running.job)
    except TooLateError:
        running.extend = False
        log.warning("%s: half of its TTL has passed, WORKING refused; it may be delivered "
                    "again while it runs", describe(running.job))
        return
    except NoJobError:
        running.extend = False
        log.warning("%s: the node no longer knows it (acked or expired elsewhere)",
                    describe(running.job))
        return
    except DisqueError as exc:
        log.error("%s: WORKING failed (%s), trying again", describe(running.job), exc)
        running.working_at = clock() + 0.1
        return
    running.working_done(retry, clock())


def _call(client, step):
    name, *args = step
    if name == "nack_job":
        return getattr(client, name)(args[0], delay=args[1])
    return getattr(client, name)(*args)


def run_sync(client, script):
    try:
        step = next(script)
        while True:
            try:
                result = _call(client, step)
            except Exception as exc:        # the script decides what a failed call means
                step = script.throw(exc)
            else:
                step = script.send(result)
    except StopIteration:
        pass


async def run_async(client, script):
    try:
        step = next(script)
        while True:
            try:
                result = await _call(client, step)
            except Exception as exc:
                step = script.throw(exc)
            else:
                step = script.send(result)
    except StopIteration:
        pass
