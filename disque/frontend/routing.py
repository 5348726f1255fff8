"""Which worker(s) serve a command, beyond the one-worker routes of the Cython core.

* Multi-ID commands (ACKJOB, FASTACK, DELJOB, ENQUEUE, NACK, DEQUEUE; route `ids`) whose
  IDs belong to several workers (the dispatch kernel, disque/_fast/dispatch.pyx, checked the
  IDs and NACK's DELAY and sends the one-worker case straight there): the IDs are split per
  worker (the slot is in the ID, docs/design.md "Slots") and the integer replies summed. Worker halves: `Shard.cmd_ackjob`, `cmd_fastack`, ... (disque/commands.py).
* Queues held by workers other than their slot's (docs/job-features.md): a dead-lettered
  job stays on the worker its ID routes to, so a dead-letter queue may exist on several
  workers. A worker that creates such a queue tells the front-end (a QUEUE_ELSEWHERE entry,
  reqid -2, in its reply batch); from then on GETJOB FROM that queue asks those workers too
  (blocked GETJOBs included) and QLEN sums their lengths.
"""
from disque._fast.dispatch import ids_end
from disque._fast.jobid import id_worker, queue_worker
from disque.contracts import worker_link as link_msg
from disque.frontend.getjob import MultiGet


class Gather:
    """A command split over several workers; the integer replies are summed."""
    __slots__ = ("client", "slot", "left", "parts")

    def __init__(self, client, slot, n):
        self.client = client
        self.slot = slot
        self.left = n
        self.parts = [None] * n


def gather_part(g, n):
    """The reply callback of part n of a Gather."""
    def got(rep):
        g.parts[n] = rep[1]
        g.left -= 1
        if g.left == 0:
            total = 0
            for part in g.parts:
                if part[:1] != b":":
                    g.slot.fill(part)
                    return
                total += int(part[1:-2])
            g.slot.fill(b":%d\r\n" % total)
    return got


class Routing:
    """Needs from the node (`fe`): nworkers, new_reqid, pending, send, forward,
    clients, queues_spread, and `fe.getjobs` (blocked GETJOBs to widen or re-issue).
    Offers: route_ids, qlen_spread and queue_elsewhere (core hooks), add_queue_elsewhere."""

    def __init__(self, fe):
        self.fe = fe
        self.queues_elsewhere = {}      # queue -> workers holding it off its slot (dead letters)

    def scatter(self, client, groups, argv0, tail):
        """Send each worker its part ({worker: args}) and sum the integer replies."""
        fe = self.fe
        g = Gather(client, client.slot(), len(groups))
        for n, (w, part) in enumerate(groups.items()):
            reqid = fe.new_reqid(w)
            fe.pending[reqid] = gather_part(g, n)
            fe.send(w, link_msg.Cmd.encode(reqid, [argv0] + part + tail))

    def route_ids(self, client, argv):
        """IDs of several workers: each its part, the integer replies summed."""
        end = ids_end(argv)
        n = self.fe.nworkers
        groups = {}
        for jid in argv[1:end]:
            groups.setdefault(id_worker(jid, n), []).append(jid)
        self.scatter(client, groups, argv[0], argv[end:])

    # ---- queues held off their slot's worker ---------------------------------------------

    def queue_elsewhere(self, name, w):
        """Worker `w` holds queue `name` though its slot is another worker's (a dead-letter
        queue with jobs of other slots): GETJOB FROM that queue asks `w` too, including the
        GETJOBs already blocked (a cross-worker one asks `w` now; one blocked on a single
        worker is taken back from it and issued again, its TIMEOUT starting over)."""
        fe = self.fe
        getjobs = fe.getjobs
        workers = self.queues_elsewhere.setdefault(name, set())
        if w in workers:
            return
        workers.add(w)
        fe.queues_spread = True
        fe.handover.recall_all()        # QLEN / GETJOB of that queue now ask several workers
        for client in list(fe.clients.values()):
            m = client.waiting
            if isinstance(m, MultiGet):
                if not m.done and name in m.order and w not in m.workers:
                    getjobs.ask(m, w, [name])
            elif type(m) is tuple:
                blocked = getjobs.blocked_on_one.get(m[0])
                if blocked is not None and name in blocked[1] and m[1] != w:
                    getjobs.restarts.add(m[0])
                    fe.send(m[1], link_msg.Unblock.encode(client.id, m[0]))

    def qlen_spread(self, client, argv):
        """QLEN of a queue held by several workers: the sum of their lengths."""
        fe = self.fe
        w = queue_worker(argv[1], fe.nworkers)
        others = [x for x in self.queues_elsewhere.get(argv[1], ()) if x != w]
        if not others:
            fe.forward(client, w, argv)
            return
        g = Gather(client, client.slot(), 1 + len(others))
        for n, x in enumerate([w] + others):
            reqid = fe.new_reqid(x)
            fe.pending[reqid] = gather_part(g, n)
            fe.send(x, link_msg.Cmd.encode(reqid, argv))

    def add_queue_elsewhere(self, owners, queues):
        """GETJOB: add the workers holding these queues off their slot to `owners`."""
        extra = self.queues_elsewhere
        for q in queues:
            for w in extra.get(q, ()):
                part = owners.setdefault(w, [])
                if q not in part:
                    part.append(q)
