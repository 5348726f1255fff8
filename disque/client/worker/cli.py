"""disque-worker: run a function on the jobs of some queues until SIGTERM / SIGINT.

    disque-worker myapp.tasks:send_email --queue emails --concurrency 8 \\
        --servers 10.0.0.1:7711,10.0.0.2:7711

The function gets a `disque.client.Job` (queue, id, body, nacks, additional_deliveries).
An `async def` function runs as asyncio tasks, any other on threads.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from disque.client import AsyncDisque, Disque
from disque.client.servers import ServerSpecError, parse_servers
from disque.client.worker.settings import WorkerSettings
from disque.client.worker.tasks import AsyncWorker
from disque.client.worker.threads import Worker

LOG_FORMAT = "%(process)d:worker %(asctime)s.%(msecs)03d %(levelname)s %(message)s"


class UsageError(Exception):
    pass


def load_function(spec):
    """`package.module:function` (the current directory is importable, as for Celery)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError("the function is given as package.module:function, not %r" % spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError("cannot import %s: %s" % (module_name, exc)) from None
    target = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError("%s has no %r" % (module_name, attr)) from None
    if not callable(target):
        raise UsageError("%s is not callable" % spec)
    return target


def build_parser():
    p = argparse.ArgumentParser(
        prog="disque-worker", description="Run a Python function on Disque jobs.")
    defaults = WorkerSettings()
    p.add_argument("function", help="package.module:function, called with each Job")
    p.add_argument("-q", "--queue", action="append", default=[], dest="queues",
                   help="a queue to take jobs from (repeat for several)")
    p.add_argument("--from-prefix", help="take jobs from every queue whose name starts so")
    p.add_argument("-s", "--servers", action="append", default=[],
                   help="host:port[,host:port...] or disque:// URL "
                        "(default: $DISQUE_SERVERS or 127.0.0.1:7711)")
    p.add_argument("--password", default=os.environ.get("DISQUE_PASSWORD"),
                   help="the nodes' requirepass (default: $DISQUE_PASSWORD)")
    p.add_argument("--tls", action="store_true",
                   help="TLS to the nodes (implied by a disques:// URL or a --tls-* file)")
    p.add_argument("--tls-ca-cert-file", help="CA certificates to check the nodes' with "
                                              "(default: the system's)")
    p.add_argument("--tls-cert-file", help="this client's certificate, for a node with "
                                           "tls-auth-clients")
    p.add_argument("--tls-key-file", help="the private key of --tls-cert-file")
    p.add_argument("-c", "--concurrency", type=int, default=defaults.concurrency)
    p.add_argument("--grace", type=float, default=defaults.grace,
                   help="seconds to finish the jobs in hand after SIGTERM/SIGINT")
    p.add_argument("--job-timeout", type=float, default=None,
                   help="seconds a job may run before it counts as failed")
    p.add_argument("--retry-delay", type=int, default=defaults.retry_delay,
                   help="NACK delay after a first failure, doubling per delivery")
    p.add_argument("--max-retry-delay", type=int, default=defaults.max_retry_delay)
    p.add_argument("--poll", type=float, default=defaults.poll,
                   help="longest GETJOB block, in seconds")
    p.add_argument("--stats-interval", type=float, default=defaults.stats_interval,
                   help="seconds between two stats lines (0: none)")
    p.add_argument("--fastack", action="store_true", help="FASTACK instead of ACKJOB")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    return p


def tls_of(args):
    """The client's `tls` from the --tls flags: None (the servers' URL decides), or
    redis-py's ssl options."""
    files = dict(ssl_ca_certs=args.tls_ca_cert_file, ssl_certfile=args.tls_cert_file,
                 ssl_keyfile=args.tls_key_file)
    if not args.tls and not any(files.values()):
        return None
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        raise UsageError("--tls-cert-file and --tls-key-file go together")
    for path in filter(None, files.values()):
        if not os.path.isfile(path):
            raise UsageError("no such file: %s" % path)
    return {k: v for k, v in files.items() if v}


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT,
                        datefmt="%Y-%m-%d %H:%M:%S")
    try:
        if bool(args.queues) == (args.from_prefix is not None):
            raise UsageError("give --queue (one or more) or --from-prefix")
        servers = args.servers or [os.environ.get("DISQUE_SERVERS", "127.0.0.1:7711")]
        parse_servers(servers)
        tls = tls_of(args)
        settings = WorkerSettings(
            concurrency=args.concurrency, grace=args.grace, poll=args.poll,
            job_timeout=args.job_timeout, retry_delay=args.retry_delay,
            max_retry_delay=args.max_retry_delay, stats_interval=args.stats_interval,
            fastack=args.fastack)
        function = load_function(args.function)
    except (UsageError, ServerSpecError, ValueError) as exc:
        print("disque-worker: %s" % exc, file=sys.stderr)
        return 2
    queues = [q for spec in args.queues for q in spec.split(",") if q]
    common = dict(from_prefix=args.from_prefix, settings=settings)
    if Worker.is_async(function):
        import asyncio
        client = AsyncDisque(*servers, password=args.password, tls=tls)
        return asyncio.run(AsyncWorker(function, queues, client=client, **common).run())
    client = Disque(*servers, password=args.password, tls=tls)
    return Worker(function, queues, client=client, **common).run()


if __name__ == "__main__":
    sys.exit(main())
