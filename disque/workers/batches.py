"""The front-end's batches to a worker (contracts/worker_link.py, REQUESTS): each request
of a batch to its handler by kind, its answer appended to the shard's `out` for the
Outbox. A command (CMD) is the per-command path and is handled inline."""
import logging

from disque import replies
from disque.contracts import worker_link as link_msg
from disque.contracts.getjob_options import GetjobRequest
from disque.workers.controls import run_control

log = logging.getLogger("disque.worker")


class Batches:
    """Needs the worker (shard, ops and work counters, controls). Offers handle."""

    def __init__(self, worker):
        self.worker = worker
        shard = worker.shard
        self.shard = shard
        # every kind but CMD: kind -> handler(request list)
        self.handlers = {
            link_msg.GETJOB: self.getjob,
            link_msg.UNBLOCK:
                lambda req: shard.consumers.unblock_client(*link_msg.Unblock.decode(req)),
            link_msg.RETURN: lambda req: shard.return_jobs(link_msg.Return.decode(req).job_ids),
            link_msg.BUS: lambda req: shard.replication.on_bus(link_msg.Bus.decode(req).messages),
            link_msg.CONTROL: self.control,
        }

    def handle(self, batch):
        worker = self.worker
        shard = self.shard
        out = shard.out
        handlers = self.handlers
        worker.ops += len(batch)
        for req in batch:
            kind = req[0]
            if kind == link_msg.CMD:
                worker.work += 1
                # P.Cmd in, P.Reply out, indexed and built inline: the per-command path
                try:
                    reply = shard.execute(req[1], req[2])
                    if reply is not None:       # None: an ADDJOB waiting for its copies
                        out.append([req[1], reply])
                except Exception:
                    log.exception("command failed: %r", req[2][:3])
                    out.append([req[1], replies.INTERNAL_ERROR])
                continue
            if kind != link_msg.CONTROL:
                worker.work += 1
            handler = handlers.get(kind)
            if handler is not None:
                handler(req)

    def getjob(self, req):
        request = GetjobRequest.from_message(link_msg.GetJob.decode(req))
        reply, ids = self.shard.getjob(request)
        if reply is not None:
            self.shard.out.append(link_msg.GetJobReply.encode(request.reqid, reply, ids))

    def control(self, req):
        c = link_msg.Control.decode(req)
        try:
            answer = run_control(self.worker, c.name, c.arg)
        except Exception as e:
            log.exception("control %s failed", c.name)
            answer = {"error": str(e)}
        self.shard.out.append(link_msg.Reply.encode(c.reqid, answer))
