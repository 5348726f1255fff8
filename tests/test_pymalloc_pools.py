"""The interpreter's free small-object pools handed back to the system
(disque/_fast/pymalloc_pools.pyx, docs/memory.md "RSS"), in this process: the pages come
back, and the pools pymalloc takes again hold what is written to them."""
import random

import pytest

from disque._fast import pymalloc_pools
from disque.memstat import rss

MB = 1 << 20

pytestmark = pytest.mark.skipif(not pymalloc_pools.enabled,
                                reason="pymalloc's pool layout is not the one read here")


def test_free_pools_kept_by_survivors_come_back_and_are_used_again():
    """2 million small tuples and strs fill ~300 arenas; one survivor in 20,000 keeps
    every arena mapped after the rest is freed. give_back returns their free pools' pages
    (three of a pool's four), a second call has nothing left to give, and a refill of the
    same sizes reads back what it wrote."""
    blocks = [(i, str(i)) for i in range(2_000_000)]
    survivors = blocks[::20_000]
    del blocks
    before = rss()
    given = pymalloc_pools.give_back()
    assert given > 50 * MB
    assert rss() < before - 40 * MB, (before / MB, rss() / MB)
    assert pymalloc_pools.give_back() < MB          # only what the lines between freed
    blocks = [(i, str(i)) for i in range(2_000_000)]
    assert all(t[1] == str(t[0]) for t in blocks) and len(survivors) == 100


def test_mixed_sizes_freed_and_taken_again_between_walks_keep_their_contents():
    """Objects of every small size class, freed at random and made again between walks:
    a pool handed back is initialised again when pymalloc takes it (its old free list is
    on pages that are now zero), whatever size class it had."""
    rng = random.Random(47)
    live = {}
    for rnd in range(30):
        for _ in range(20_000):
            key = rng.randrange(200_000)
            size = rng.randrange(1, 480)
            live[key] = bytes([key & 0xFF]) * size
        for key in rng.sample(sorted(live), len(live) * 2 // 3):
            del live[key]
        pymalloc_pools.give_back()
        for key, body in live.items():
            assert body == bytes([key & 0xFF]) * len(body), (rnd, key)
    assert pymalloc_pools.tracked_arenas() > 0


def test_threads_frame_stacks_mapped_by_the_same_allocator_are_not_taken_for_arenas():
    """The arena allocator also maps each thread's frame stack (16 KiB and up) and unmaps
    it when the thread ends: a walk that took those for arenas read unmapped memory (a
    segfault after the Spark tests' threads). Threads with deep frames come and go here
    between walks."""
    import threading

    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)

    for _ in range(5):
        threads = [threading.Thread(target=deep, args=(400,)) for _ in range(20)]
        for t in threads:
            t.start()
        pymalloc_pools.give_back()
        for t in threads:
            t.join()
        pymalloc_pools.give_back()
