"""Where a consumer's jobs come from, and when it moves to the node that produces them
(the original's client protocol, step 3; docs/client.md, "Following the producers").

A job ID carries the first 8 characters of the ID of the node that created it (SPEC 5).
A consumer on node B of jobs produced on node A receives them through NEEDJOBS / YOURJOBS
between the nodes; connected to A it takes them where they are queued.

The rule: count the creating node of every job received; after every `window` jobs, move
when one other node created more than `(1 + margin)` times the jobs the current node did in
that window, and that node is in good standing (HELLO priority below 10, not failed here).
The counts start again after every decision, so a consumer moves at most once a window; the
margin keeps a consumer fed evenly by two nodes where it is.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class SwitchRule:
    window: int = 1000          # jobs received between two decisions; 0 never moves
    margin: float = 0.5         # the other node must have created (1 + margin) x as many

    def __post_init__(self):
        if self.window < 0:
            raise ValueError("switch window must be >= 0")
        if self.margin < 0:
            raise ValueError("switch margin must be >= 0")


class JobSources:
    """Counts the creating node of the jobs received, one window at a time."""

    def __init__(self, rule: SwitchRule):
        self.rule = rule
        self.counts: dict[str, int] = {}
        self.seen = 0
        self._lock = threading.Lock()

    def observe(self, prefixes, current_prefix):
        """Count these jobs' node prefixes; at the end of a window, return the prefix of
        the node to move to, or None."""
        if not self.rule.window:
            return None
        with self._lock:
            counts = self.counts
            for prefix in prefixes:
                counts[prefix] = counts.get(prefix, 0) + 1
            self.seen += len(prefixes)
            if self.seen < self.rule.window:
                return None
            self.counts, self.seen = {}, 0
        best = max(counts, key=counts.__getitem__)
        if best == current_prefix:
            return None
        if counts[best] > (1 + self.rule.margin) * counts.get(current_prefix, 0):
            return best
        return None
