"""Consumers of job groups that check the groups' rule as they go (docs/job-groups.md):
jobs whose bodies are b"<group>:<i>", taken by GETJOB, NACKed now and then, acked
otherwise; per group, the jobs in the order of their first delivery, and every delivery of
a group's job while the group already had one in flight."""
import threading

from support.resp_client import NULL_ARRAY


class GroupWatch:
    def __init__(self, ngroups):
        self.delivered = {g: [] for g in range(ngroups)}
        self.violations = []
        self.in_flight = set()
        self.lock = threading.Lock()

    def consume(self, r, rng, nack_share, done, *getjob):
        """Until `done` is set: GETJOB `getjob` on the connection `r`, each job checked,
        then NACKed with probability `nack_share` or acked."""
        while not done.is_set():
            got = r.execute("GETJOB", *getjob)
            if got is NULL_ARRAY or got is None:
                continue
            for _, jid, body in got:
                g = int(body.split(b":")[0])
                with self.lock:
                    if g in self.in_flight:
                        self.violations.append(("two at once", g, jid))
                    self.in_flight.add(g)
                    if not self.delivered[g] or self.delivered[g][-1] != jid:
                        self.delivered[g].append(jid)
            for _, jid, body in got:
                with self.lock:     # before the reply can release the next job
                    self.in_flight.discard(int(body.split(b":")[0]))
                if rng.random() < nack_share:
                    assert r.execute("NACK", jid) == 1
                else:
                    assert r.execute("ACKJOB", jid) == 1
