"""TLS to the nodes' client port (docs/client.md, "TLS"), the way redis-py does it.

`tls` is what the client's `tls=` argument takes: True (the system's CAs, the host name
checked), a dict of redis-py's ssl options (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`,
...), or a ready `ssl.SSLContext`. A `disques://` URL turns TLS on too, its query carrying
the same ssl options as a `rediss://` URL does for redis-py.

redis-py's own `SSLConnection` classes make and run the TLS connections: this module only
checks the options and picks the connection class. A given `ssl.SSLContext` is handed to
them as the context they would otherwise build from the options.
"""
from __future__ import annotations

import ssl

import redis.asyncio.connection as async_connection
import redis.connection as sync_connection

# redis-py's ssl options that both its sync and its asyncio SSLConnection take
SSL_OPTIONS = ("ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_certfile", "ssl_keyfile",
               "ssl_password", "ssl_cert_reqs", "ssl_check_hostname", "ssl_min_version",
               "ssl_ciphers")
# how a URL's query text becomes an option (redis-py's parse_url reads the same names so)
_FROM_QUERY = {
    "ssl_check_hostname": sync_connection.to_bool,
    "ssl_min_version": int,
}


class TlsOptionError(ValueError):
    """A `tls` argument or a URL's ssl option the client cannot use."""


def tls_settings(tls):
    """`tls` checked: None (plaintext), a dict of ssl options (empty: the defaults), or an
    `ssl.SSLContext`."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return {}
    if isinstance(tls, ssl.SSLContext):
        return tls
    if isinstance(tls, dict):
        unknown = sorted(set(tls) - set(SSL_OPTIONS))
        if unknown:
            raise TlsOptionError("unknown TLS option%s %s (known: %s)" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(SSL_OPTIONS)))
        return {k: v for k, v in tls.items() if v is not None}
    raise TlsOptionError("tls is True, a dict of ssl options or an ssl.SSLContext, not %r"
                         % (tls,))


def merged(from_url, tls):
    """The TLS settings of a client: its `tls` argument over its URL's (a `disques://`
    URL's query options, or {} for none). An SSLContext or False given as `tls` wins
    whole."""
    if tls is False or isinstance(tls, ssl.SSLContext):
        return tls_settings(tls)
    given = tls_settings(tls)
    if from_url is None:
        return given
    return {**from_url, **(given or {})}


def options_from_query(pairs):
    """A `disques://` URL's ssl options, as (name, text) pairs -> the client's options."""
    options = {}
    for name, text in pairs:
        if name not in SSL_OPTIONS:
            raise TlsOptionError("unknown TLS option %r in a disques:// URL (known: %s)"
                                 % (name, ", ".join(SSL_OPTIONS)))
        try:
            options[name] = _FROM_QUERY.get(name, str)(text)
        except (TypeError, ValueError):
            raise TlsOptionError("bad value %r for %s in a disques:// URL" % (text, name)) from None
    return options


class SyncSSLConnection(sync_connection.SSLConnection):
    """redis-py's SSLConnection, with a given SSLContext used instead of one it builds."""

    def __init__(self, ssl_context=None, **kwargs):
        super().__init__(**kwargs)
        self.given_context = ssl_context

    def _wrap_socket_with_ssl(self, sock):
        if self.given_context is None:
            return super()._wrap_socket_with_ssl(sock)
        return self.given_context.wrap_socket(sock, server_hostname=self.host)


class AsyncSSLConnection(async_connection.SSLConnection):
    """redis-py's asyncio SSLConnection, with a given SSLContext used instead of one it
    builds (its RedisSSLContext hands out the context it holds)."""

    def __init__(self, ssl_context=None, **kwargs):
        super().__init__(**kwargs)
        if ssl_context is not None:
            self.ssl_context.context = ssl_context


def pool_options(tls, asyncio=False):
    """What a redis-py ConnectionPool needs for `tls` (tls_settings' result): the
    connection class and its ssl options; nothing for plaintext."""
    if tls is None:
        return {}
    cls = AsyncSSLConnection if asyncio else SyncSSLConnection
    if isinstance(tls, ssl.SSLContext):
        return dict(connection_class=cls, ssl_context=tls)
    return dict(connection_class=cls, **tls)
