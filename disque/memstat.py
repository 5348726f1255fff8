"""Memory figures of the node (SPEC 9, docs/memory.md).

`used_memory`, the figure `maxmemory` is held against, counts what the node holds for its
data and its clients, not the interpreters: each worker reports the bytes of its jobs,
queues and AOF buffers (`Memory.memory_used`, kept up to date incrementally), and the
front-end adds its clients (`client_bytes`). The processes' resident sets stay visible as
`used_memory_rss` and `rss=` per worker in INFO workers.
"""
import os

PAGE = os.sysconf("SC_PAGE_SIZE")

# a connection in the front-end (Client, parser, transport, asyncio handles), measured as
# the front-end's RSS growth per idle client (docs/memory.md)
CLIENT_COST = 1500


def rss():
    """This process's resident set: /proc/self/statm, one read, and always the calling
    process (a worker forked from the front-end must not report its parent's)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def client_bytes(clients):
    """What the front-end holds for its clients: a fixed cost each, unparsed input, replies
    waiting for earlier ones (pipelining across workers) and output the socket has not
    taken yet."""
    total = CLIENT_COST * len(clients)
    for c in clients:
        total += c.parser.pending
        transport = c.transport
        if transport is not None:
            total += transport.get_write_buffer_size()
        slots = c.slots
        if slots:
            for slot in slots:
                if type(slot.data) is bytes:
                    total += len(slot.data)
    return total
