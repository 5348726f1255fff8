"""Where the client starts: `host:port` strings, (host, port) pairs and `disque://` URLs.

`disque://[:password@]host[:port][,host[:port]...]`: the scheme of the Celery and Dramatiq
brokers too, so one string configures every layer. The default port is 7711.
"""
from __future__ import annotations

from urllib.parse import unquote

DEFAULT_PORT = 7711
SCHEME = "disque://"


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


def parse_url(url: str) -> tuple[list[tuple[str, int]], str | None]:
    """`disque://[:password@]host:port[,host:port...]` -> (addresses, password)."""
    if not url.lower().startswith(SCHEME):
        raise ServerSpecError("not a disque:// URL: %r" % url)
    rest = url[len(SCHEME):]
    rest = rest.split("/", 1)[0].split("?", 1)[0]
    password = None
    if "@" in rest:
        userinfo, rest = rest.rsplit("@", 1)
        _, sep, secret = userinfo.partition(":")
        password = unquote(secret if sep else userinfo) or None
    addresses = [parse_address(part) for part in rest.split(",") if part.strip()]
    if not addresses:
        raise ServerSpecError("no server in URL %r" % url)
    return addresses, password


def _is_pair(spec):
    return isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], int)


def parse_servers(servers) -> tuple[list[tuple[str, int]], str | None]:
    """Every accepted form, mixed: -> (distinct addresses in order, password from a URL)."""
    if isinstance(servers, str) or _is_pair(servers):
        servers = [servers]
    elif not isinstance(servers, (list, tuple)):
        raise ServerSpecError("servers are 'host:port' strings, (host, port) pairs or "
                              "disque:// URLs, not %r" % (servers,))
    addresses, password = [], None
    for spec in servers:
        if isinstance(spec, tuple):
            if not _is_pair(spec):
                raise ServerSpecError("a server pair is (host, port), not %r" % (spec,))
            found = [parse_address("%s:%s" % spec if ":" not in str(spec[0])
                                   else "[%s]:%s" % spec)]
        elif isinstance(spec, str) and spec.lower().startswith(SCHEME):
            found, url_password = parse_url(spec)
            password = url_password or password
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
    return addresses, password
