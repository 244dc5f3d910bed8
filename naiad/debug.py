"""Debug checks of the progress protocol while a computation runs (``debug_progress=True``).

:class:`GlobalView` records every occurrence-count change at the moment a worker makes it,
before any buffering, so it holds the true counts of the whole computation (all workers of one
process).  The safety property of the protocol: every pointstamp that is truly active is
could-result-in'd by some pointstamp with a positive count in each worker's local view; a local
frontier never moves ahead of the global one.
"""

from __future__ import annotations

import threading
from typing import Dict, Iterable, Tuple

from naiad.errors import ProgressViolation

__all__ = ["GlobalView"]


class GlobalView:
    """True occurrence counts, updated under a lock by every worker of the process."""

    def __init__(self, reach, initial: Iterable[Tuple[Tuple[int, object], int]] = ()):
        self.reach = reach
        self.counts: Dict[Tuple[int, object], int] = {}
        self.lock = threading.Lock()
        for p, d in initial:
            self.counts[p] = self.counts.get(p, 0) + d

    def add(self, loc: int, time, delta: int) -> None:
        """Record a change as it happens."""
        with self.lock:
            p = (loc, time)
            n = self.counts.get(p, 0) + delta
            if n:
                self.counts[p] = n
            else:
                del self.counts[p]

    def check(self, worker: int, tracker, names=None) -> None:
        """Raise ProgressViolation if ``tracker``'s view is ahead of the true counts."""
        local = [p for p, c in tracker.active().items() if c > 0]
        cri = self.reach.could_result_in
        with self.lock:
            for p, c in self.counts.items():
                if c > 0 and not any(cri(q, p) for q in local):
                    where = names(p[0]) if names else p[0]
                    msg = (f"worker {worker}'s local frontier moved ahead of the global one: "
                           f"{where} at {p[1]!r} is active ({c}) but nothing in its view "
                           "could result in it")
                    raise ProgressViolation(msg)
