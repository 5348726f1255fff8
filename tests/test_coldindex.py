"""The RAM index of spilled jobs (disque/_fast/coldindex.pyx) against a dict and list model:
random adds, removals, lookups by ID and by scan-log seq and ring walks, across the growth
of both tables, block allocation and slot reuse."""
import os
import random

from disque._fast.coldindex import ColdIndex


def jid(n):
    return b"D-%08x-%s-05a1" % (n & 0xffffffff, os.urandom(12).hex()[:24].encode())


def test_random_operations_match_a_model():
    rng = random.Random(7)
    index = ColdIndex()
    rings = [index.new_ring("q%d" % k) for k in range(3)]
    model = {}                      # id -> (slot, ring number, seg, off, size)
    order = [[] for _ in rings]     # ring number -> ids, front first
    for step in range(60_000):
        op = rng.random()
        if op < 0.55 or not model:
            j = jid(step)
            k = rng.randrange(4)            # 3: not queued (a copy)
            front = rng.random() < 0.3
            ring = rings[k] if k < 3 else None
            slot = index.add(j, step % 7, step * 3, 100 + step % 50, 10, 0 if ring else 99,
                             ring, front, step + 1)
            model[j] = (slot, k, step % 7, step * 3, 100 + step % 50)
            if k < 3:
                (order[k].insert(0, j) if front else order[k].append(j))
        elif op < 0.85:
            j = rng.choice(list(model))
            slot, k, *_ = model.pop(j)
            index.remove(slot)
            if k < 3:
                order[k].remove(j)
        else:
            k = rng.randrange(3)
            n = rng.randrange(1, 20)
            slots = index.take_front(rings[k], n)
            assert [index.job_id(s) for s in slots] == order[k][:len(slots)]
            if rng.random() < 0.5:
                index.put_front(rings[k], slots)
            else:
                for j in order[k][:len(slots)]:
                    index.remove(model.pop(j)[0])
                del order[k][:len(slots)]
        if step % 5000 == 0:
            check(index, rings, model, order)
    check(index, rings, model, order)


def check(index, rings, model, order):
    assert len(index) == len(model)
    for j, (slot, k, seg, off, size) in model.items():
        assert index.find(j) == slot
        assert index.find_seq(index.seq_of(slot)) == slot
        assert index.location(slot) == (seg, off, size)
        assert index.is_queued(slot) == (k < 3)
    for k, ring in enumerate(rings):
        assert len(ring) == len(order[k])
        assert [index.job_id(s) for s in index.peek(ring, len(order[k]) + 5)] == order[k]
        back = index.peek(ring, 3, True)
        assert [index.job_id(s) for s in back] == order[k][::-1][:3]
    assert index.find(jid(1 << 40)) == -1
    assert index.find_seq(1 << 40) == -1


def test_an_empty_index_gives_its_memory_back():
    index = ColdIndex()
    ring = index.new_ring("q")
    slots = [index.add(jid(i), 0, i, 10, 10, 0, ring) for i in range(50_000)]
    grown = index.memory()
    assert grown > 50_000 * 68
    for s in slots:
        index.remove(s)
    index.shrink()
    assert len(index) == 0 and index.memory() < grown // 100
    slot = index.add(jid(1), 0, 0, 10, 10, 0, ring)       # usable again
    assert index.find(index.job_id(slot)) == slot


def test_due_walk_finds_expiring_and_timed_jobs():
    index = ColdIndex()
    ring = index.new_ring("q")
    near = index.add(jid(1), 0, 0, 10, 100, 0, ring)       # expires at 100
    timed = index.add(jid(2), 0, 10, 10, 10_000, 150)      # a copy whose timer is due at 150
    index.add(jid(3), 0, 20, 10, 10_000, 0, ring)          # neither
    slots, nxt = index.due(0, 10, 200)
    assert sorted(slots) == sorted([near, timed]) and nxt == 0


def test_a_spilled_tail_goes_before_the_ring_and_newer_jobs_after_it():
    """add_tail gets a queue's tail newest first: older than the ring's newest job, each
    goes before the last at the front; newer ones (added since) go to the back, in order."""
    from disque._fast.job import Job
    from disque._fast.jobid import IdMaker
    maker = IdMaker(b"%040x" % 3)

    def jobs(*ctimes):
        out = []
        for c in ctimes:
            j = Job(maker.make(0, 3600, 1), b"q", b"x")
            j.ctime = c
            out.append(j)
        return out

    index = ColdIndex()
    ring = index.new_ring("q")
    first = jobs(50, 40)                            # the first tail: 40 and 50 spilled
    index.add_tail(ring, first, [10, 10], 1, 0)
    assert ring.back_ctime == 50
    tail = jobs(70, 60, 30, 20)                     # newest first: 60, 70 newer than 50
    index.add_tail(ring, tail, [10] * 4, 1, 20)
    order = [index.job_id(s) for s in index.peek(ring, 10)]
    by_ctime = {j.id: j.ctime for j in first + tail}
    assert [by_ctime[i] for i in order] == [20, 30, 40, 50, 60, 70]
    assert ring.back_ctime == 70 and len(ring) == 6


def test_queue_tails_added_in_batches_are_found_by_id_and_seq_across_growth():
    """add_tail, the spiller's path: each batch (newest first) goes before the queue's
    spilled jobs, the tables grow once per batch and every job is found by its ID and its
    scan-log seq, through growth and removals (backward shifts over the new hashes)."""
    from disque._fast.job import Job
    index = ColdIndex()
    ring = index.new_ring("q")
    live = {}                               # id -> seq
    order = []                              # ids, front first
    seq = 0
    for batch in range(40):
        jobs = []
        for k in range(1500):
            seq += 1
            j = Job(jid(seq), b"q", b"body")
            j.ctime = (10_000 - batch) * 1_000_000 + k    # each batch older than the last
            j.scan_hi, j.scan_lo = seq >> 32, seq & 0xffffffff
            jobs.append(j)
        jobs.reverse()                                     # newest first
        index.add_tail(ring, jobs, [64] * len(jobs), batch, 0)
        order[:0] = [j.id for j in reversed(jobs)]
        live.update((j.id, (j.scan_hi << 32) | j.scan_lo) for j in jobs)
        for gone in order[1::7][:150]:                     # some leave (loaded back)
            index.remove(index.find(gone))
            del live[gone]
        order = [i for i in order if i in live]
    assert len(index) == len(live)
    for i, s in live.items():
        slot = index.find(i)
        assert slot >= 0 and index.find_seq(s) == slot and index.job_id(slot) == i
    assert [index.job_id(s) for s in index.peek(ring, len(order))] == order


def test_slots_given_back_after_one_was_freed_skip_it():
    """A prefetch takes slots, one of them is freed before it gives them back (its job
    came back from a failed write): the ring gets the others only, and the freed slot,
    taken by the next job spilled, is not in two rings."""
    index = ColdIndex()
    ring, other = index.new_ring("q"), index.new_ring("r")
    slots = [index.add(jid(i), 0, i, 10, 10, 0, ring, False, i + 1) for i in range(3)]
    taken = index.take_front(ring, 3)
    assert taken == slots
    index.remove(taken[1])
    index.put_front(ring, taken)
    reused = index.add(jid(99), 0, 99, 10, 10, 0, other, False, 100)
    assert reused == taken[1]
    assert index.peek(ring, 10) == [slots[0], slots[2]] and index.peek(other, 10) == [reused]


def test_a_repacked_index_keeps_every_job_and_gives_the_rest_back():
    """A partial drain: after three quarters of the jobs left, `repack` moves the rest to
    the lowest slots. Every job is still found by ID and seq at its new slot, with its
    location, and each ring keeps its order (entries made stale by removals dropped); the
    records, tables and rings shrink, and the index grows again from there."""
    from disque._fast.coldindex import REPACK_MIN_SLOTS
    rng = random.Random(11)
    index = ColdIndex()
    rings = [index.new_ring("q%d" % k) for k in range(3)]
    model = {}                      # id -> (ring number, seg, off, size, seq)
    order = [[] for _ in rings]
    n = REPACK_MIN_SLOTS * 2
    for i in range(n):
        j = jid(i)
        k = rng.randrange(4)        # 3: a copy, in no ring
        front = rng.random() < 0.2
        index.add(j, i % 5, i * 8, 64 + i % 9, 10, 0 if k < 3 else 77,
                  rings[k] if k < 3 else None, front, i + 1)
        model[j] = (k, i % 5, i * 8, 64 + i % 9, i + 1)
        if k < 3:
            (order[k].insert(0, j) if front else order[k].append(j))
    full = index.memory()
    for k in range(3):              # drain from the fronts, as GETJOBs do
        for j in order[k][:len(order[k]) * 4 // 5]:
            index.remove(index.find(j))
            del model[j]
        order[k] = order[k][len(order[k]) * 4 // 5:]
    copies = [j for j, v in model.items() if v[0] == 3]
    for j in [j for i, j in enumerate(copies) if i % 4]:           # acked copies
        index.remove(index.find(j))
        del model[j]
    assert index.sparse()
    index.repack()
    assert not index.sparse() and len(index) == len(model)
    assert index.slot_limit == len(model) and index.memory() < full // 3

    def check():
        for j, (k, seg, off, size, seq) in model.items():
            slot = index.find(j)
            assert 0 <= slot < index.slot_limit
            assert index.find_seq(seq) == slot and index.location(slot) == (seg, off, size)
            assert index.is_queued(slot) == (k < 3)
        for k, ring in enumerate(rings):
            assert len(ring) == len(order[k])
            assert [index.job_id(s) for s in index.peek(ring, len(order[k]) + 1)] == order[k]
    check()
    for i in range(n, n + 5000):    # it grows again, slots after the packed ones
        j = jid(i)
        index.add(j, 1, i, 100, 10, 0, rings[0], False, i + 1)
        model[j] = (0, 1, i, 100, i + 1)
        order[0].append(j)
    check()
    taken = index.take_front(rings[1], 10)
    assert [index.job_id(s) for s in taken] == order[1][:10]


def test_clear_forgets_every_spilled_job():
    """FLUSHALL: nothing stays indexed, found or counted (it used to keep them all)."""
    index = ColdIndex()
    ring = index.new_ring("q")
    ids = [jid(i) for i in range(5000)]
    for i, j in enumerate(ids):
        index.add(j, 0, i, 10, 10, 0, ring, False, i + 1)
    index.clear()
    assert len(index) == 0 and len(ring) == 0 and index.slot_limit == 0
    assert index.find(ids[7]) == -1 and index.find_seq(8) == -1
    assert index.peek(ring, 10) == [] and index.memory() < 20_000
    slot = index.add(ids[7], 0, 0, 10, 10, 0, ring, False, 8)
    assert index.find(ids[7]) == slot and index.peek(ring, 10) == [slot]
