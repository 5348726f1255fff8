"""redis-py underneath: connection pools whose parser (hiredis when installed) turns error
replies into this client's exceptions, and the settings every connection shares.

Nothing here writes or reads RESP by hand: redis-py owns the wire, this module only
chooses its options.
"""
from __future__ import annotations

import redis.asyncio.connection as async_connection
import redis.connection as sync_connection
from redis.backoff import NoBackoff
from redis.retry import Retry

from disque.client import errors, tls as tls_options


class _ErrorsByCode:
    """Mixed into redis-py's parser: an error reply becomes the class of its code."""

    @classmethod
    def parse_error(cls, response):
        return errors.from_reply(response)


class SyncParser(_ErrorsByCode, sync_connection.DefaultParser):
    pass


class AsyncParser(_ErrorsByCode, async_connection.DefaultParser):
    pass


def pool_options(address, password, socket_timeout, connect_timeout, tls=None,
                 asyncio=False):
    """Keyword arguments of a redis-py ConnectionPool for one node.

    RESP2 (`protocol=2`): redis-py 8 would otherwise send `HELLO 3`. No retry inside
    redis-py: a node that fails is the client's business (it tries the next node), and
    redis-py's default would retry the dead node with back-off first. `tls` (checked by
    disque.client.tls.tls_settings) makes the connections redis-py's SSLConnection, the
    same for every node."""
    host, port = address
    return dict(host=host, port=port, password=password, protocol=2,
                socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout,
                retry=Retry(NoBackoff(), 0), **tls_options.pool_options(tls, asyncio))


def sync_pool(address, password, socket_timeout, connect_timeout, max_connections=None,
              tls=None):
    return sync_connection.ConnectionPool(
        parser_class=SyncParser, max_connections=max_connections,
        **pool_options(address, password, socket_timeout, connect_timeout, tls))


def async_pool(address, password, socket_timeout, connect_timeout, max_connections=None,
               tls=None):
    return async_connection.ConnectionPool(
        parser_class=AsyncParser, max_connections=max_connections,
        **pool_options(address, password, socket_timeout, connect_timeout, tls, asyncio=True))
