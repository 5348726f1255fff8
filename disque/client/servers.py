"""Where the client starts: `host:port` strings, (host, port) pairs and `disque://` URLs.

`disque://[:password@]host[:port][,host[:port]...]`: the scheme of the Celery and Dramatiq
brokers too, so one string configures every layer. The default port is 7711.
`disques://...` is the same over TLS (as redis-py's `rediss://`), its query carrying
redis-py's ssl options: `disques://h:7711?ssl_ca_certs=/etc/ca.crt` (disque.client.tls).
"""
from __future__ import annotations

from typing import NamedTuple
from urllib.parse import parse_qsl, unquote

from disque.client.tls import TlsOptionError, options_from_query

DEFAULT_PORT = 7711
SCHEME = "disque://"
TLS_SCHEME = "disques://"
SCHEMES = (SCHEME, TLS_SCHEME)


class ServerSpecError(ValueError):
    """A server address or URL the client cannot read."""


def parse_address(text: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` -> (host, port)."""
    text = text.strip()
    if not text:
        raise ServerSpecError("empty server address")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ServerSpecError("unclosed '[' in server address %r" % text)
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            raise ServerSpecError("bad server address %r" % text)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if not host:
        raise ServerSpecError("no host in server address %r" % text)
    if port_text is None or port_text == "":
        return host, DEFAULT_PORT
    try:
        port = int(port_text)
    except ValueError:
        raise ServerSpecError("bad port %r in server address %r" % (port_text, text)) from None
    if not 0 < port < 65536:
        raise ServerSpecError("port out of range in server address %r" % text)
    return host, port


class ServerSpec(NamedTuple):
    addresses: list             # (host, port) pairs, distinct, in the order given
    password: str | None        # a URL's
    tls: dict | None            # None: no disques:// URL; else its query's ssl options


def is_url(spec) -> bool:
    return isinstance(spec, str) and spec.lower().startswith(SCHEMES)


def parse_url(url: str) -> ServerSpec:
    """`disque[s]://[:password@]host:port[,host:port...][?ssl options]` -> ServerSpec."""
    if not is_url(url):
        raise ServerSpecError("not a disque:// or disques:// URL: %r" % url)
    tls_url = url.lower().startswith(TLS_SCHEME)
    rest, _, query = url[len(TLS_SCHEME if tls_url else SCHEME):].partition("?")
    rest = rest.split("/", 1)[0]
    # the query's ssl options; other names are ignored, as they always were
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
             if k.startswith("ssl_")]
    if pairs and not tls_url:
        raise ServerSpecError("ssl options are for a disques:// URL, not %s%s" % (
            SCHEME, _masked(rest)))
    try:
        tls = options_from_query(pairs) if tls_url else None
    except TlsOptionError as exc:
        raise ServerSpecError(str(exc)) from None
    password = None
    if "@" in rest:
        userinfo, rest = rest.rsplit("@", 1)
        _, sep, secret = userinfo.partition(":")
        password = unquote(secret if sep else userinfo) or None
    addresses = [parse_address(part) for part in rest.split(",") if part.strip()]
    if not addresses:
        raise ServerSpecError("no server in URL %s" % _masked(url))
    return ServerSpec(addresses, password, tls)


def _masked(text):
    head, sep, tail = text.rpartition("@")
    return "**@" + tail if sep else text


def _is_pair(spec):
    return isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], int)


def parse_servers(servers) -> tuple[list[tuple[str, int]], str | None]:
    """Every accepted form, mixed: -> (distinct addresses in order, password from a URL)."""
    spec = read_servers(servers)
    return spec.addresses, spec.password


def read_servers(servers) -> ServerSpec:
    """Every accepted form, mixed -> ServerSpec. `disque://` and `disques://` URLs cannot
    be mixed: the client reaches every node the same way."""
    if isinstance(servers, str) or _is_pair(servers):
        servers = [servers]
    elif not isinstance(servers, (list, tuple)):
        raise ServerSpecError("servers are 'host:port' strings, (host, port) pairs or "
                              "disque:// URLs, not %r" % (servers,))
    addresses, password, tls, schemes = [], None, None, set()
    for spec in servers:
        if isinstance(spec, tuple):
            if not _is_pair(spec):
                raise ServerSpecError("a server pair is (host, port), not %r" % (spec,))
            found = [parse_address("%s:%s" % spec if ":" not in str(spec[0])
                                   else "[%s]:%s" % spec)]
        elif is_url(spec):
            found, url_password, url_tls = parse_url(spec)
            password = url_password or password
            schemes.add(url_tls is not None)
            if url_tls is not None:
                tls = {**(tls or {}), **url_tls}
        elif isinstance(spec, str):
            found = [parse_address(part) for part in spec.split(",") if part.strip()]
        else:
            raise ServerSpecError("a server is 'host:port', (host, port) or a disque:// URL, "
                                  "not %r" % (spec,))
        for address in found:
            if address not in addresses:
                addresses.append(address)
    if not addresses:
        raise ServerSpecError("no server given")
    if len(schemes) > 1:
        raise ServerSpecError("disque:// and disques:// URLs mixed: every node is reached "
                              "with TLS or none is")
    return ServerSpec(addresses, password, tls)
