"""The front-end's batches to a worker (contracts/worker_link.py, REQUESTS): each request
of a batch to its handler by kind, its answer appended to the shard's `out` for the
Outbox. A command (CMD) is the per-command path and is handled inline."""
import logging

from disque import replies as R
from disque.contracts import worker_link as P
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
            P.GETJOB: self.getjob,
            P.UNBLOCK: lambda req: shard.consumers.unblock_client(*P.Unblock.decode(req)),
            P.RETURN: lambda req: shard.return_jobs(P.Return.decode(req).job_ids),
            P.BUS: lambda req: shard.replication.on_bus(P.Bus.decode(req).messages),
            P.CONTROL: self.control,
        }

    def handle(self, batch):
        worker = self.worker
        shard = self.shard
        out = shard.out
        handlers = self.handlers
        worker.ops += len(batch)
        for req in batch:
            kind = req[0]
            if kind == P.CMD:
                worker.work += 1
                # P.Cmd in, P.Reply out, indexed and built inline: the per-command path
                try:
                    reply = shard.execute(req[1], req[2])
                    if reply is not None:       # None: an ADDJOB waiting for its copies
                        out.append([req[1], reply])
                except Exception:
                    log.exception("command failed: %r", req[2][:3])
                    out.append([req[1], R.INTERNAL_ERROR])
                continue
            if kind != P.CONTROL:
                worker.work += 1
            handler = handlers.get(kind)
            if handler is not None:
                handler(req)

    def getjob(self, req):
        request = GetjobRequest.from_message(P.GetJob.decode(req))
        reply, ids = self.shard.getjob(request)
        if reply is not None:
            self.shard.out.append(P.GetJobReply.encode(request.reqid, reply, ids))

    def control(self, req):
        c = P.Control.decode(req)
        try:
            answer = run_control(self.worker, c.name, c.arg)
        except Exception as e:
            log.exception("control %s failed", c.name)
            answer = {"error": str(e)}
        self.shard.out.append(P.Reply.encode(c.reqid, answer))
