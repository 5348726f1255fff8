"""The Celery app of tests/test_frameworks_celery.py, on the disque:// transport.

Worker processes run it with `celery -A support.celery_app worker`: it reads its broker, its
result directory, its record file and any further Celery settings (JSON) from the
environment. The test process builds the same app with `create_app` to send tasks.

Every task appends one JSON line `[event, n, time, pid, extra]` to the record file (one
short write in append mode, so lines of concurrent processes do not mix): that is how the
tests see what ran, where and when.
"""
from __future__ import annotations

import json
import os
import time

from celery import Celery

import disque.integrations.kombu  # noqa: F401  (registers the disque:// scheme)

ENV_BROKER = "CELERY_TEST_BROKER"
ENV_RESULTS = "CELERY_TEST_RESULTS"
ENV_RECORD = "CELERY_TEST_RECORD"
ENV_CONF = "CELERY_TEST_CONF"


def create_app(broker, results_dir=None, record=None, **conf):
    """A Celery app on `broker` with the file result backend in `results_dir`; `conf` are
    Celery settings (broker_transport_options, task_acks_late, ...)."""
    app = Celery("celery_app", broker=broker,
                 backend="file://%s" % results_dir if results_dir else None)
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        broker_connection_retry_on_startup=True, worker_hijack_root_logger=True,
        result_extended=False, **conf)
    record_path = record

    def note(event, n, **extra):
        line = json.dumps([event, n, time.time(), os.getpid(), extra]) + "\n"
        with open(record_path, "a") as f:
            f.write(line)

    @app.task(name="t.record")
    def record_task(n):
        note("run", n)
        return n * 2

    @app.task(name="t.flaky", bind=True, autoretry_for=(RuntimeError,), max_retries=2,
              default_retry_delay=1, retry_backoff=False, retry_jitter=False)
    def flaky(self, n):
        note("attempt", n, retries=self.request.retries)
        raise RuntimeError("flaky task %d fails every time" % n)

    @app.task(name="t.sleepy", bind=True)
    def sleepy(self, n, seconds, again_seconds):
        """Sleeps `seconds`, or `again_seconds` when the broker delivers it again."""
        redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
        note("start", n, redelivered=redelivered)
        time.sleep(again_seconds if redelivered else seconds)
        note("done", n)
        return n

    @app.task(name="t.keyed")
    def keyed(key, n):
        """A task of a job group (docs/job-groups.md): its start and end, keyed."""
        note("start", n, key=key)
        time.sleep(0.004 * (n % 3))
        note("done", n, key=key)

    @app.task(name="t.noop")
    def noop():
        return None

    return app


def _app_from_environment():
    broker = os.environ.get(ENV_BROKER)
    if not broker:
        return None
    conf = json.loads(os.environ.get(ENV_CONF) or "{}")
    return create_app(broker, os.environ.get(ENV_RESULTS), os.environ.get(ENV_RECORD), **conf)


app = _app_from_environment()
