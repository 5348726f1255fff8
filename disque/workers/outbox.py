"""Where everything a turn of the worker's loop produced leaves, in one order
(docs/design.md, "The worker's loop"):

1. job messages for other nodes: into the boxes of the direct job links, the rest into
   `out` for the front-end's bus;
2. the AOF: what the turn changed is written (and with `appendfsync always`, synced);
3. then, and only then, what may depend on it: the job links' frames (a GOTJOB promises
   a copy the AOF now holds), the served connections' replies, the front-end's batch.

So no reply and no acknowledgement leaves before the AOF record of what it promises
(docs/persistence.md). `STEPS` names the order; `release` runs it. The one other way out
is the served loop's turn in C (servedloop.pyx), which sends job messages itself
(JobLinkPath.messages_out) only on a node without an AOF.
"""
from disque._fast.joblinkpath import relay_bus_out
from disque._fast.msgframe import Packer

STEPS = ("bus_out", "aof", "job_links", "served", "front_end")


class Outbox:
    """Needs the worker (shard, link, served, job_links). Offers release."""

    def __init__(self, worker):
        self.worker = worker
        self.shard = worker.shard
        self.link = worker.link
        self.pack = Packer().pack
        job_links = worker.job_links
        step = {"bus_out": self.bus_out if job_links is None else job_links.bus_out,
                "aof": self.shard.persistence.aof_flush,
                "job_links": job_links.flush if job_links is not None else None,
                "served": worker.served.flush if worker.served is not None else None,
                "front_end": self.front_end}
        self.steps = [step[name] for name in STEPS if step[name] is not None]

    def release(self):
        for step in self.steps:
            step()

    def bus_out(self):
        """This turn's job messages, on a worker without direct job links: all through the
        front-end onto the bus (with links: JobLinkPath.bus_out)."""
        relay_bus_out(self.shard, None)

    def front_end(self):
        shard = self.shard
        if shard.out:
            self.link.send(self.pack(shard.out))
            shard.out = []
