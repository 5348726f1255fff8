"""Queues held by workers other than their slot's (docs/job-features.md).

A dead-lettered job stays on the worker its ID routes to, so a dead-letter queue may exist
on several workers. A worker that creates such a queue tells the front-end (a QUEUE_ELSEWHERE
entry, reqid -2, in its reply batch); from then on GETJOB FROM that queue asks those workers
too (blocked GETJOBs included) and QLEN sums their lengths.
"""
from disque._fast.jobid import queue_slot
from disque.contracts import worker_link as P


class QueuesElsewhereMixin:
    def queue_elsewhere(self, name, w):
        """Worker `w` holds queue `name` though its slot is another worker's (a dead-letter
        queue with jobs of other slots): GETJOB FROM that queue asks `w` too, including the
        GETJOBs already blocked (a cross-worker one asks `w` now; one blocked on a single
        worker is taken back from it and issued again, its TIMEOUT starting over)."""
        from disque.frontend import MultiGet       # the GETJOB state lives there
        workers = self.queues_elsewhere.setdefault(name, set())
        if w in workers:
            return
        workers.add(w)
        self.queues_spread = True
        for client in list(self.clients.values()):
            m = client.waiting
            if isinstance(m, MultiGet):
                if not m.done and name in m.order and w not in m.workers:
                    reqid = self.new_reqid(w)
                    m.reqids[reqid] = w
                    m.workers.append(w)
                    self.pending[reqid] = self.multiget_reply(m, reqid, w)
                    self.send(w, [P.GETJOB, reqid, client.id, m.count, m.nohang,
                                  m.withcounters, 0, True, [name]])
            elif type(m) is tuple:
                blocked = self.blocked_getjobs.get(m[0])
                if blocked is not None and name in blocked[1] and m[1] != w:
                    self.getjob_restarts.add(m[0])
                    self.send(m[1], [P.UNBLOCK, client.id, m[0]])

    def qlen_spread(self, client, argv):
        """QLEN of a queue held by several workers: the sum of their lengths."""
        from disque.frontend import Gather
        w = queue_slot(argv[1]) % self.nworkers
        others = [x for x in self.queues_elsewhere.get(argv[1], ()) if x != w]
        if not others:
            self.forward(client, w, argv)
            return
        g = Gather(client, client.slot(), 1 + len(others))
        for n, x in enumerate([w] + others):
            reqid = self.new_reqid(x)
            self.pending[reqid] = self.gather_part(g, n)
            self.send(x, [P.CMD, reqid, argv])

    def add_queue_elsewhere(self, owners, queues):
        extra = self.queues_elsewhere
        for q in queues:
            for w in extra.get(q, ()):
                part = owners.setdefault(w, [])
                if q not in part:
                    part.append(q)
