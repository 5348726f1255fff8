"""Links between the workers of a node: a worker serving a connection itself runs a command
of another worker's queue or job on that worker, with no front-end hop (docs/design.md,
"Connections served by their worker").

One Unix socketpair per pair of workers, made by the front-end (disque/workers/link.py) and
replaced when a worker is restarted. The messages are disque/contracts/peer_link.py's.
Sends never block: what the socket does not take waits for EPOLLOUT, so two workers
forwarding to each other at once cannot deadlock.

`PeerLinks` itself is Cython (disque/_fast/peerlinks.pyx): a forwarded command is on the
path of every command of a client that spreads its jobs over the workers' queues.
"""
import socket

from disque import commands
from disque._fast.peerlinks import PeerLinks

# the hooks PeerLinks calls (declared in peerlinks.pxd): hook -> method of its owner
PEER_HOOKS = {
    "execute": "peer_execute",
    "answered": "peer_answered",
}


def peer_links(index, socks, ep, owner):
    """PeerLinks over `socks` ({worker: socket}), its hooks bound to `owner`'s methods."""
    links = PeerLinks(index, socks, ep)
    for hook, handler in PEER_HOOKS.items():
        setattr(links, hook, commands.resolve(owner, handler))
    return links


def peer_sockets(spec):
    """--peers "1:12,2:14" -> {1: socket(fd 12), 2: socket(fd 14)}."""
    socks = {}
    for part in filter(None, spec.split(",")):
        w, _, fd = part.partition(":")
        socks[int(w)] = socket.socket(fileno=int(fd))
    return socks
