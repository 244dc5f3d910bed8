"""Flow control at the inputs: at most ``max_epochs_in_flight`` epochs fed and not complete.

Each worker tells the process's :class:`EpochWindow` the least epoch that is still active in its
view of the progress state (its *low* epoch; every epoch below it is complete everywhere).
``on_next`` for epoch ``e`` waits when ``e - low >= bound``, so a producer that outruns the
dataflow blocks instead of filling memory: with epochs of size ``s`` at most about
``bound * s`` of input is queued anywhere.  A blocked input resumes when half the window is free
again, so that the program thread and the workers do not hand the GIL to each other at every
epoch; the workers update the low epoch without a lock and wake the input only then.  A wait that could never end (another input of this
process holds back the low epoch because it has not been fed) is an error naming that input.

>>> w = EpochWindow(bound=2, workers=1)
>>> w.room(1), w.room(2)
(True, False)
>>> w.advance(0, 1)
>>> w.room(2)
True
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Iterable, List, Optional

from naiad.errors import NaiadError

__all__ = ["EpochWindow", "low_epoch", "WARN_AFTER"]

WARN_AFTER = 10.0
"""Seconds ``on_next`` waits for room before it says which subscriber callback holds it."""


class EpochWindow:
    """The low epoch of this process's workers, and the wait of the inputs for room."""

    def __init__(self, bound: int, workers: int, base: int = 0):
        self.bound = bound
        self._low: List[float] = [base] * workers
        self._cv = threading.Condition()
        self._need = math.inf      # the low epoch a blocked input waits for
        self.waited = 0.0          # seconds the inputs spent blocked (for benchmarks)

    def advance(self, local_index: int, low: float) -> None:
        """A worker's view: every epoch below ``low`` is complete (``inf``: all of them)."""
        if low == self._low[local_index]:
            return
        self._low[local_index] = low
        if min(self._low) >= self._need:
            with self._cv:
                self._cv.notify_all()

    def wake(self) -> None:
        """The computation failed or ended: waiting inputs look again."""
        with self._cv:
            self._cv.notify_all()

    def low(self) -> float:
        return min(self._low)

    def room(self, epoch: int) -> bool:
        """Whether feeding ``epoch`` keeps at most ``bound`` epochs in flight."""
        return epoch - min(self._low) < self.bound

    def wait(self, epoch: int, name: str, check: Callable[[], None],
             lagging: Callable[[], Iterable[Any]],
             holding: Callable[[], Optional[str]] = lambda: None) -> None:
        """Block until ``epoch`` may be fed.  ``check`` raises the computation's failure;
        ``lagging()`` lists this process's other open inputs as ``(name, epoch)``;
        ``holding()`` names a subscriber callback that has run for long (logged once after
        :data:`WARN_AFTER` seconds: one that waits for the program never returns)."""
        if self.room(epoch):
            return
        t0 = time.monotonic()
        warned = False
        resume = epoch - (self.bound - self.bound // 2)   # half the window free again
        with self._cv:
            self._need = resume + 1
            while min(self._low) <= resume:
                check()
                stuck = [(n, e) for n, e in lagging() if e <= epoch - self.bound]
                if stuck:
                    others = ", ".join(f"{n!r} (at epoch {e})" for n, e in stuck)
                    msg = (f"input {name!r}: feeding epoch {epoch} would put more than "
                           f"max_epochs_in_flight={self.bound} epochs in flight, and this "
                           f"process's input(s) {others} hold the oldest ones open, so it "
                           "would wait for ever: feed those inputs (or call on_completed) in "
                           "step, or raise max_epochs_in_flight (None: no bound)")
                    raise NaiadError(msg)
                behind = [e for _, e in lagging()]
                if behind and min(behind) - 1 < resume:
                    # Another input of this process holds the frontier at its epoch: wait
                    # only for what can complete (its epoch leaves room: it is not stuck).
                    resume = min(behind) - 1
                    self._need = resume + 1
                if not warned and time.monotonic() - t0 >= WARN_AFTER:
                    warned = _warn_held(name, epoch, self.bound, holding())
                self._cv.wait(1.0)
            self._need = math.inf
        self.waited += time.monotonic() - t0
        check()


def _warn_held(name: str, epoch: int, bound: int, holder: Optional[str]) -> bool:
    """Log why ``on_next`` still waits, once a subscriber's callback is what holds it."""
    if holder is None:
        return False
    import logging
    logging.getLogger("naiad.flow").warning(
        "input %r: on_next for epoch %d has waited %.0f s for room (max_epochs_in_flight=%d "
        "epochs fed and not yet handed out): %s. A callback that waits for the program (a "
        "queue the program reads only after feeding, say) never returns while on_next waits: "
        "read its output from another thread, or set max_epochs_in_flight=None (no bound)",
        name, epoch, WARN_AFTER, bound, holder)
    return True


def low_epoch(frontier: Iterable[Any]) -> float:
    """The least epoch among ``(location, time)`` pointstamps (``inf`` when there are none)."""
    return min((t[0] for _, t in frontier), default=math.inf)
