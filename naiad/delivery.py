"""A subscriber's callback runs in its own thread, never in a worker's.

``stream.subscribe(fn)`` hands each completed epoch to a :class:`Deliverer`, whose thread calls
``fn(epoch, records)`` in epoch order; a slow ``fn`` therefore delays only its own deliveries,
not the dataflow.  How far it lags is bounded: the deliverer reports the epochs it has finished
to the inputs' flow control (:mod:`naiad.flow`), so ``on_next`` waits once
``max_epochs_in_flight`` epochs are fed and not yet delivered.  A checkpoint waits until the
epochs before its boundary are delivered (and marked), so exactly-once delivery holds as before.

>>> got = []
>>> d = Deliverer("subscribe", lambda e, r: got.append((e, r)), on_error=print)
>>> d.put(0, ["a"]); d.put(1, [])
>>> d.wait(2, timeout=5, check=lambda: None)
>>> d.close(timeout=5)
True
>>> got
[(0, ['a']), (1, [])]
"""

from __future__ import annotations

import queue
import threading
import time as _time
from typing import Any, Callable, Optional

from naiad.errors import NaiadError

__all__ = ["Deliverer"]


class Deliverer:
    """Calls ``deliver(epoch, records)`` in a thread, in the order the epochs were put."""

    def __init__(self, name: str, deliver: Callable[[int, list], None],
                 on_error: Callable[[BaseException, int], None],
                 on_progress: Optional[Callable[[int], None]] = None, start: int = 0):
        self.name = name
        self.deliver = deliver
        self.on_error = on_error
        self.on_progress = on_progress
        self.done = start                    # every epoch below this was delivered
        self.failed = False
        self._halted = False
        self._busy = threading.Lock()        # held through one call of deliver (fn and mark)
        self.calling_since: Optional[float] = None   # monotonic start of the current call
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"naiad-{name}", daemon=True)
        self._thread.start()

    def put(self, epoch: int, records: list) -> None:
        self._queue.put((epoch, records))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            epoch, records = item
            with self._busy:
                if self._halted:
                    return
                if not self.failed:
                    self.calling_since = _time.monotonic()
                    try:
                        self.deliver(epoch, records)
                    except BaseException as exc:  # noqa: BLE001 - reaches the computation
                        self.failed = True
                        self.on_error(exc, epoch)
                    finally:
                        self.calling_since = None
            with self._cv:
                self.done = epoch + 1
                self._cv.notify_all()
            if self.on_progress is not None:
                self.on_progress(epoch + 1)

    def busy_for(self) -> float:
        """Seconds the current call of the callback has run (0 between calls)."""
        since = self.calling_since
        return 0.0 if since is None else _time.monotonic() - since

    def wait(self, epoch: int, timeout: float, check: Callable[[], None]) -> None:
        """Block until every epoch below ``epoch`` was delivered (``check`` raises a failure)."""
        deadline = _time.monotonic() + timeout
        with self._cv:
            while self.done < epoch:
                check()
                left = deadline - _time.monotonic()
                if left <= 0:
                    msg = (f"{self.name}: the subscriber has not returned from epoch "
                           f"{self.done} after {timeout:.0f} s")
                    raise NaiadError(msg)
                self._cv.wait(min(left, 0.5))

    def halt(self, timeout: float) -> bool:
        """Start no further call; wait (at most ``timeout`` seconds) until the current one has
        returned and its epoch is marked.  The process is about to be stopped: ending it in
        between would hand that epoch out again after the restart.  False if the call is
        still running."""
        self._halted = True
        if not self._busy.acquire(timeout=timeout):
            return False
        self._busy.release()
        return True

    def close(self, timeout: float) -> bool:
        """Deliver what was put, then stop the thread; False if it is still running after
        ``timeout`` seconds (a subscriber that does not return)."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()
