"""Checkpoints written off the inputs' path: one background thread writes, agrees and commits.

A checkpoint has a short part that must stop the dataflow — every worker quiescent at the
boundary, its vertex states pickled in memory, and the processes agreed on the next boundary —
and a long part that need not: sealing the logs, appending and fsyncing the process's part, waiting
until every process has written its part, and process 0 appending the commit record.  The
:class:`Committer` runs the long part in order, one checkpoint at a time, while the inputs feed
the next epochs.  A checkpoint is durable once its commit record is; until then recovery uses the
previous one (whose input logs are kept until the next commit).  A failure in the background
fails the computation.  At most :data:`PENDING` checkpoints wait to be written: a cut beyond
that waits for room, so a disk slower than the checkpoints come holds the inputs back instead
of piling the states up in memory (and process 0's commits never fall far behind the parts).
The bound holds only while the thread writes: while a job waits for something other than the
disk (:meth:`Committer.elsewhere`: subscribers to hand out the epochs before the boundary,
other processes to write their parts), a cut goes on.  Those may wait for the program itself,
which would otherwise wait for room for ever.

>>> done = []
>>> c = Committer(on_error=done.append)
>>> c.submit(lambda: done.append("written"))
>>> c.flush(timeout=5)
>>> done
['written']
>>> c.close()
"""

from __future__ import annotations

import queue
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from naiad.errors import NaiadError

__all__ = ["Committer", "PENDING"]

PENDING = 2
"""Checkpoints cut but not yet written that a process holds at most."""


class Committer:
    """A background thread that runs checkpoint jobs in order."""

    def __init__(self, on_error: Callable[[BaseException], None], pending: int = PENDING):
        self.on_error = on_error
        self.pending = pending
        self._cv = threading.Condition()
        self._submitted = 0          # checkpoint jobs submitted and not finished
        self._elsewhere = 0          # > 0 while the running job waits other than on the disk
        self._jobs: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="naiad-committer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except BaseException as exc:  # noqa: BLE001 - must reach the computation
                self.on_error(exc)
            finally:
                self._jobs.task_done()

    def submit(self, job: Callable[[], None], timeout: float = 600.0) -> None:
        """Run ``job`` after the jobs submitted before it, once fewer than ``pending``
        submitted jobs are still to run or the running one waits elsewhere (waiting at most
        ``timeout`` seconds for that)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._submitted >= self.pending and not self._elsewhere:
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = (f"checkpoints were cut faster than they could be written: none of "
                           f"the pending ones was written within {timeout:.0f} s (the disk is "
                           "very slow)")
                    raise NaiadError(msg)
                self._cv.wait(left)
            self._submitted += 1

        def run() -> None:
            try:
                job()
            finally:
                with self._cv:
                    self._submitted -= 1
                    self._cv.notify_all()
        self._jobs.put(run)

    @contextmanager
    def elsewhere(self) -> Iterator[None]:
        """Within a job: a wait for something other than the disk (the bound is lifted)."""
        with self._cv:
            self._elsewhere += 1
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._elsewhere -= 1

    def flush(self, timeout: float) -> None:
        """Wait until every submitted job has run (TimeoutError naming the bound if not)."""
        done = threading.Event()
        self._jobs.put(done.set)
        if not done.wait(timeout):
            msg = (f"a checkpoint was still being written after {timeout:.0f} s (the disk is "
                   "very slow, or another process never wrote its part)")
            raise NaiadError(msg)

    def close(self) -> None:
        """Stop the thread after the jobs already submitted."""
        self._jobs.put(None)
        self._thread.join(timeout=30.0)
