"""A vertex callback that does not return is named, not waited on in silence.

A callback that loops or blocks (a vertex's ``on_recv``, ``on_notify`` or ``checkpoint``)
holds its time, and so every later epoch, for as long as it runs: nothing can bound that for
the user, but the run can say where it is.  :class:`StallWatch` looks at each worker of the
process every :data:`CHECK` seconds: a worker that has been in the same callback, without
delivering anything else, for 60 seconds (:data:`STALL_ENV` sets another) is named on stderr (its stage,
callback, time and the line it is at), and again each time it has been for that long more.
Looking is reading the worker thread's frames (:meth:`naiad.worker.Worker.describe_callback`)
and a counter the worker keeps anyway: nothing is recorded per callback.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from naiad.ticker import Ticker

__all__ = ["StallWatch", "STALL_ENV", "CHECK", "stall_seconds"]

STALL_ENV = "NAIAD_STALL"
"""Environment variable: the seconds in one callback after which a worker is named (60)."""
CHECK = 5.0
"""Seconds between looks (at most; less when the stall is shorter)."""


def stall_seconds() -> float:
    """:data:`STALL_ENV`, or 60 s."""
    try:
        return max(0.1, float(os.environ.get(STALL_ENV, "60")))
    except ValueError:
        return 60.0


class StallWatch:
    """Names the workers of ``workers`` that stay in one callback for ``stall`` seconds."""

    def __init__(self, workers: List[Any], process: int, stall: Optional[float] = None,
                 emit: Optional[Callable[[str], None]] = None):
        self.workers = workers
        self.process = process
        self.stall = stall_seconds() if stall is None else stall
        every = min(CHECK, self.stall / 4)
        self.emit = emit or _stderr
        self._since: Dict[int, Tuple[str, int, float, float]] = {}   # where, calls, since, told
        self._ticker = Ticker(self.look, every, "naiad-stall", "watching for a stall")

    def look(self, now: Optional[float] = None) -> None:
        """One look at every worker (the ticker's call; ``now`` for tests)."""
        now = time.monotonic() if now is None else now
        for w in self.workers:
            where = w.describe_callback()
            calls = w.state.calls
            seen = self._since.get(w.index)
            if not where or w.finished:
                self._since.pop(w.index, None)
                continue
            place = where.split(", now in ")[0]
            if seen is None or seen[0] != place or seen[1] != calls:
                self._since[w.index] = (place, calls, now, now)
                continue
            _, _, since, told = seen
            if now - told >= self.stall:
                self._since[w.index] = (place, calls, since, now)
                self.emit(f"process {self.process}: {where}, for {now - since:.0f} s: a "
                          "callback that does not return holds its time and every later one")

    def stop(self) -> None:
        self._ticker.stop()


def _stderr(text: str) -> None:
    print(f"naiad: {text}", file=sys.stderr, flush=True)
