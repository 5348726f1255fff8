"""The worker's loop (docs/design.md, "The worker's loop"): deliberately plain (no asyncio),
one turn at a time.

A turn: wait (in the served loop's C turn when the worker serves connections itself,
which serves them again and again with no Python in between and comes back here only
when something else needs this loop), run the job timers that are due, handle the
front-end's batches (timers again between them), serve the connections that became
ready, run the crons when the timer ticked, spill (after releasing what the turn made so
far) and serve waiting consumers, then the Outbox: job messages, the AOF, replies, in that
order. Last, a slice of AOF work, and the
idle tick's look at the turn.
"""
import logging

import msgpack

log = logging.getLogger("disque.worker")


class WorkerLoop:
    """Needs the worker's parts (shard, link, served, job_links, timer, crons, idle,
    batches, outbox). Offers run."""

    def __init__(self, worker):
        self.worker = worker
        self.shard = worker.shard
        self.link = worker.link
        self.served = worker.served
        self.wait = None if worker.served is not None else worker.link.waiter(worker.timer.fileno())

    def run(self):
        worker = self.worker
        link = self.link
        while worker.running and not link.closed:
            if not self.turn():
                break

    def turn(self):
        """One turn; False when the worker must stop (the front-end is gone)."""
        shard = self.shard
        persistence = shard.persistence
        served = self.served
        worker = self.worker
        # an AOF load or a rewrite with slices left goes on at once, not at the next tick
        block = not persistence.aof_busy or not persistence.aof_has_slices()
        if served is None:
            readable, ticked = self.wait(block)
        elif served.turn(block):
            return True             # only served connections had news: the turn ran in C
        else:
            readable, ticked = served.link_ready, served.ticked
        worker.loop_turns += 1
        shard.tick()
        # timers first and again between batches: a request never sees a job whose TTL
        # passed before the request came in, however long the batches take
        if shard.timers_due() or shard.consumers.deadlines.due(shard.now_ms):
            shard.run_timers()
        if readable:
            self.batches()
        if served is not None:
            served.serve_ready()        # connections this worker serves itself
        if ticked and not worker.crons.tick():
            return False
        if shard.spill.pending():
            # the turn's replies leave first: a producer waits on them, not on the spilling
            worker.outbox.release()
            shard.spill.work()          # bodies to disk past the threshold, heads refilled
        if shard.ready:
            shard.consumers.serve_ready()
        if shard.interest_due:
            shard.federation.tell_interest_due()
        worker.outbox.release()         # job messages, the AOF, then the replies
        if persistence.aof_busy:
            persistence.aof_work()      # rewrite / load slices, auto rewrite, retries
        worker.idle.after_turn(ticked)
        return True

    def batches(self):
        shard = self.shard
        handle = self.worker.batches.handle
        for msg in self.link.recv_all():
            handle(msgpack.unpackb(msg, use_list=True))
            shard.tick()
            if shard.timers_due():
                shard.run_timers()
