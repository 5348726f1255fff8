"""What the kombu transport (disque.integrations.kombu) reads from a kombu `Connection`: the
Disque nodes and password of its URL, TLS (a `disques://` URL, Celery's `broker_use_ssl`),
its transport options checked and completed, and the
ADDJOB options of one message (its Celery `eta` as a DELAY). No I/O here.

The options and what they mean are documented in docs/frameworks.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from disque.client.commands import count, seconds, whole_seconds
from disque.client.servers import (DEFAULT_PORT, SCHEME, TLS_SCHEME, ServerSpecError, is_url,
                                   read_servers)
from disque.client.tls import TlsOptionError, merged

DEFAULT_VISIBILITY_TIMEOUT = 300    # s: the RETRY of every job (Disque's own cap for RETRY)
DEFAULT_TTL = 86400                 # s: Disque's default TTL (docs/spec.md, SPEC 3.1)
DEFAULT_ADD_TIMEOUT = 5.0           # s: how long ADDJOB waits for the job's copies
DEFAULT_SOCKET_TIMEOUT = 15.0       # s: a reply that takes longer means the node is lost
DEFAULT_FAILOVER_TIMEOUT = 10.0     # s: the client's default (docs/client.md)
DEFAULT_CONNECT_TIMEOUT = 2.0       # s: TCP connect to one node, when kombu gives none
MAX_BLOCK = 0.25                    # s: the longest blocking GETJOB of a consumer: a stop
                                    # (Celery checks between two fetches) waits no longer


def at_least_1(name, value):
    return whole_seconds(name, value, 1)


def replication(name, value):
    return count(name, value, 1, 65535)         # the server's REPLICATE range (SPEC 3.1)


class TransportOptionError(ValueError):
    """A transport option (Celery's broker_transport_options) the transport cannot use."""


@dataclass(frozen=True)
class TransportSettings:
    """Everything a Disque transport needs, checked once when it connects."""
    servers: tuple              # (host, port) pairs, in the order given
    password: str | None
    tls: object                 # None (plaintext), ssl options or an ssl.SSLContext
    visibility_timeout: int     # the jobs' RETRY
    ttl: int                    # the jobs' TTL (a delayed job gets more: `job_ttl`)
    add_timeout: float
    replicate: int | None       # None: decided from the cluster's size at connect
    socket_timeout: float
    connect_timeout: float
    failover_timeout: float

    def with_replicate(self, replicate):
        return replace(self, replicate=replicate)


def settings_from_connection(connection):
    """The settings of a kombu `Connection` whose transport is this one: its URL(s), its
    password and its `transport_options`. Raises ServerSpecError or TransportOptionError
    with a message naming what is wrong."""
    servers, password, url_tls = servers_of(connection)
    try:
        # kombu's `ssl` (Celery's broker_use_ssl) is False when not given
        tls = merged(url_tls, connection.ssl or None)
    except TlsOptionError as exc:
        raise TransportOptionError("Disque broker_use_ssl: %s" % exc) from None
    options = dict(connection.transport_options or {})
    visibility = option(options, "visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT, at_least_1)
    ttl = option(options, "ttl", DEFAULT_TTL, at_least_1)
    if visibility >= ttl:
        raise TransportOptionError(
            "Disque transport option visibility_timeout (%d s) must be below ttl (%d s): a "
            "job would expire before it could be delivered again" % (visibility, ttl))
    add_timeout = option(options, "add_timeout", DEFAULT_ADD_TIMEOUT, seconds)
    socket_timeout = option(options, "socket_timeout", DEFAULT_SOCKET_TIMEOUT, seconds)
    if socket_timeout <= add_timeout:
        raise TransportOptionError(
            "Disque transport option socket_timeout (%s s) must exceed add_timeout (%s s): "
            "ADDJOB's reply may take add_timeout" % (socket_timeout, add_timeout))
    replicate = option(options, "replicate", None, replication)
    return TransportSettings(
        servers=tuple(servers), password=password, tls=tls, visibility_timeout=visibility, ttl=ttl,
        add_timeout=add_timeout, replicate=replicate, socket_timeout=socket_timeout,
        connect_timeout=float(connection.connect_timeout or DEFAULT_CONNECT_TIMEOUT),
        failover_timeout=option(options, "failover_timeout", DEFAULT_FAILOVER_TIMEOUT,
                                seconds))


def servers_of(connection):
    """(addresses, password, the URL's TLS options or None) from a kombu `Connection`: every
    node of its URL and of its alternates (kombu's `;`-separated or list form), since the
    Disque client fails over between nodes itself. kombu hands the URL over untouched (the
    transport sets `can_parse_url`), so `disque://a:7711,b:7712` keeps its whole node
    list."""
    scheme = TLS_SCHEME if connection.transport_cls == "disques" else SCHEME
    specs = []
    for url in [connection.hostname, *(connection.alt or ())]:
        if url is None:
            continue
        if not isinstance(url, str):
            raise ServerSpecError("a Disque broker is a disque:// URL, not %r" % (url,))
        spec = url if "://" in url else "%s%s" % (scheme, _with_port(url, connection.port))
        if not is_url(spec):
            raise ServerSpecError("not a disque:// URL: %s" % masked_uri(spec))
        if not _hosts_part(spec):
            head, _, query = spec.partition("?")
            spec = "%s127.0.0.1:%d%s" % (head.split("://")[0] + "://", DEFAULT_PORT,
                                         "?" + query if query else "")
        if spec not in specs:
            specs.append(spec)
    if not specs:
        specs.append("%s127.0.0.1:%d" % (scheme, DEFAULT_PORT))
    try:
        addresses, password, tls = read_servers(specs)
    except ServerSpecError as exc:
        raise ServerSpecError("bad Disque broker URL %s: %s" % (
            "; ".join(masked_uri(s) for s in specs), exc)) from None
    return addresses, password or connection.password, tls


def _with_port(host, port):
    return host if port is None or ":" in host else "%s:%s" % (host, port)


def _hosts_part(url):
    """What lies between the scheme (and password) and the path: the node list."""
    rest = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    return rest.rsplit("@", 1)[-1].strip()


_PASSWORD = re.compile(r"^(disques?://)([^@/]*)@", re.I)
_SSL_PASSWORD = re.compile(r"([?&]ssl_password=)[^&]*")


def masked_uri(uri, include_password=False, mask="**"):
    """The URL as logs show it: the password (and a key's ssl_password) replaced by
    `mask`, the node list whole."""
    if not uri:
        return "%s127.0.0.1:%d" % (SCHEME, DEFAULT_PORT)
    if include_password:
        return uri
    uri = _SSL_PASSWORD.sub(lambda m: m.group(1) + mask, uri)
    match = _PASSWORD.match(uri)
    if match is None:
        return uri
    user, sep, _ = match.group(2).partition(":")
    hidden = "%s:%s" % (user, mask) if sep or user else ""
    return "%s%s@%s" % (match.group(1), hidden, uri[match.end():])


def option(options, name, default, check):
    """A transport option checked as the client checks the same value (disque.client's
    argument checks), or its default; TransportOptionError names the option."""
    value = options.get(name)
    if value is None:
        return default
    try:
        return check(name, value)
    except (TypeError, ValueError) as exc:
        raise TransportOptionError("Disque transport option %s" % exc) from None


def eta_delay(headers, now=None):
    """ADDJOB's DELAY for a message with a Celery `eta` header (ISO 8601; a naive time is
    read as UTC, Celery's default): the whole seconds until the eta, rounded down, so the
    server holds the job and the worker waits the rest (under a second) itself. None when
    the eta is less than a second away, absent, or not a time (Celery's worker reports a
    bad eta itself)."""
    eta = (headers or {}).get("eta")
    if not eta or not isinstance(eta, str):
        return None
    try:
        when = datetime.fromisoformat(eta)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return int(seconds) if seconds >= 1 else None


def job_ttl(ttl, delay):
    """The TTL of a job delayed `delay` seconds: `ttl + 2 * delay`. WORKING is refused once
    half a job's life has passed (docs/spec.md, SPEC 3.6), so a delayed job gets the same
    `ttl / 2` of leases after it becomes due as a job sent without delay, and lives `ttl`
    after its eta at least. A DELAY is never refused for being above the TTL."""
    return ttl + 2 * delay if delay else ttl
