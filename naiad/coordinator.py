"""When and how a consistent checkpoint is cut, without a coordinator process.

At a boundary epoch ``b`` every process asks its workers to quiesce: a worker whose view holds
nothing but input capabilities at ``b`` and notification requests at later epochs knows, by the
progress protocol's safety property, that nothing is in flight anywhere, and hands its vertex
states (pickled) and pending notifications to the :class:`Coordinator`.  The processes then agree
on the next boundary (process 0's proposal, through a barrier).  None of this stops the program:
the epochs it feeds meanwhile are logged and *held* (posted to the workers right after the cut,
in order), so the workers drain the epochs before the boundary while the program prepares the
next ones, and never wait for it afterwards.  Only the time-based policy, whose next boundary
is process 0's proposal, waits for the agreement.  Writing the states, waiting until every
process wrote its part and committing the manifest happen behind, in the
:class:`~naiad.committer.Committer`'s thread.
"""

from __future__ import annotations

import threading
import time as _time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from naiad.committer import Committer
from naiad.errors import NaiadError

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Coordinator", "CHECKPOINT_BOUND"]

CHECKPOINT_BOUND = 600.0
"""Seconds, beyond connect_timeout, that a process waits for the others at a checkpoint."""


class Coordinator:
    """The checkpoint policy and the cutting of checkpoints for one process."""

    def __init__(self, comp: "Computation", base: int):
        self.comp = comp
        self.store = comp.store
        self.last = base
        self.next = self._first_boundary(base)
        self.clock = _time.monotonic()
        self.stats: List[Dict[str, Any]] = comp.checkpoint_stats
        self._snapshots: dict = {}
        self._cv = threading.Condition()
        self._held: Optional[List[Callable[[], None]]] = None   # posts held during a cut
        self.committer = Committer(on_error=self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.comp.fail(exc)
        with self._cv:
            self._cv.notify_all()

    @property
    def bound(self) -> float:
        return float(self.comp.options["connect_timeout"]) + CHECKPOINT_BOUND

    # ---- the policy ----------------------------------------------------------------------------
    def _first_boundary(self, base: int) -> Optional[int]:
        opts = self.comp.options
        if opts["checkpoint_every"]:
            return (base // opts["checkpoint_every"] + 1) * opts["checkpoint_every"]
        if opts["checkpoint_interval"]:
            return base + 1
        return None

    def _propose_next(self, epoch: int) -> Optional[int]:
        opts = self.comp.options
        if opts["checkpoint_every"]:
            return epoch + opts["checkpoint_every"]
        if opts["checkpoint_interval"]:
            elapsed = max(1e-6, _time.monotonic() - self.clock)
            rate = (epoch - self.last) / elapsed
            return epoch + max(1, int(rate * float(opts["checkpoint_interval"])))
        return None

    def aligned_boundary(self) -> Optional[int]:
        epochs = {i.epoch for i in self.comp.inputs if not i.completed}
        return epochs.pop() if len(epochs) == 1 else None

    def before_epoch(self, epoch: int) -> None:
        """Called by an input before it feeds ``epoch``: checkpoint when the policy says so."""
        nxt = self.next
        if nxt is None or epoch < nxt or epoch <= self.last:
            return
        if self.aligned_boundary() != epoch:
            return       # another input lags; the checkpoint waits for an aligned boundary
        self.take(epoch)

    def checkpoint_now(self) -> None:
        """``comp.checkpoint()``: a checkpoint at the current boundary, durable on return."""
        boundary = self.aligned_boundary()
        if boundary is None:
            msg = ("comp.checkpoint(): the inputs are at different epochs; call it when every "
                   "open input has been fed the same number of epochs")
            raise NaiadError(msg)
        if boundary > self.last:
            self.take(boundary)
        self.committer.flush(self.bound)
        self.comp.check_failed()

    # ---- cutting one ----------------------------------------------------------------------------
    def hold(self, post: Callable[[], None]) -> bool:
        """Keep ``post`` (an input's epoch or close) for after the cut in progress, if any."""
        with self._cv:
            if self._held is None:
                return False
            self._held.append(post)
            return True

    def _await_cut(self) -> None:
        """Wait (bounded) until no cut is in progress."""
        deadline = _time.monotonic() + self.bound
        with self._cv:
            while self._held is not None:
                self.comp.check_failed()
                if _time.monotonic() > deadline:
                    msg = f"a checkpoint was not cut within {self.bound:.0f} s"
                    raise NaiadError(msg)
                self._cv.wait(0.2)

    def take(self, epoch: int) -> None:
        """Start cutting a checkpoint at ``epoch``: the workers quiesce and snapshot, the
        committer agrees on the next boundary, releases the held epochs, writes and commits."""
        from naiad.worker import CHECKPOINT
        comp = self.comp
        self._await_cut()              # one cut at a time
        t0 = _time.monotonic()
        with self._cv:
            self._snapshots = {}
            self._held = []
        self.store.rotate_logs()       # epochs from the boundary on go to new log segments
        for i in range(comp.workers_per_process):
            comp.fabric.post(i, (CHECKPOINT, epoch))
        self.last = epoch
        every = comp.options["checkpoint_every"]
        self.next = epoch + every if every else None
        self.committer.submit(lambda: self._cut(epoch, t0))
        if not every:
            self._await_cut()          # the next boundary is process 0's proposal: wait for it

    def on_snapshot(self, worker: Any, epoch: int, states: Any, notifications: Any) -> None:
        with self._cv:
            self._snapshots[worker.index] = (states, notifications)
            self._cv.notify_all()

    def _cut(self, epoch: int, t0: float) -> None:
        """In the committer's thread: wait for the snapshots, agree, release, then write."""
        comp = self.comp
        nxt, agreed = None, False
        try:
            with self._cv:
                while len(self._snapshots) < comp.workers_per_process:
                    comp.check_failed()
                    if comp._done.is_set():
                        return     # the run was stopped first: this checkpoint is not taken
                    self._cv.wait(0.2)
                snaps = dict(self._snapshots)
            t1 = _time.monotonic()
            nxt = comp.fabric.barrier(f"checkpoint-{epoch}", self.bound,
                                      self._propose_next(epoch))
            self.clock = _time.monotonic()
            agreed = True
        finally:
            with self._cv:
                held, self._held = self._held or [], None
                if agreed and comp._failure is None:
                    if not comp.options["checkpoint_every"]:
                        self.next = nxt
                    for post in held:
                        post()
                self._cv.notify_all()
        self._write(epoch, snaps, t0, t1)

    def _write(self, epoch: int, snaps: dict, t0: float, t1: float) -> None:
        """In the committer's thread: this process's part, every part, then the manifest."""
        comp, store = self.comp, self.store
        states = {w: st for w, (st, _) in snaps.items()}
        notifications = [n for _, (_, ns) in snaps.items() for n in ns]
        open_inputs: Dict[int, int] = {}
        for st in states.values():
            for sid, e in st["__naiad__"]["inputs"].items():
                open_inputs[sid] = open_inputs.get(sid, 0) + (e is not None)
        fingerprint = comp.graph.fingerprint()
        size = store.write_part(epoch, fingerprint, states, notifications, open_inputs)
        comp.fabric.barrier(f"written-{epoch}", self.bound)
        if comp.process_index == 0:
            store.commit(epoch, fingerprint)
        kept = store.epochs()[-store.keep:]
        for inp in comp.inputs:
            store.prune_inputs(inp.name, min(kept) if kept else epoch)
        self.stats.append({"epoch": epoch, "bytes": size, "quiesce_s": t1 - t0,
                           "total_s": _time.monotonic() - t0})
        if comp.observer is not None:
            comp.observer.checkpoint(self.stats[-1])

    def settle(self) -> None:
        """Before the workers are stopped: let a cut in progress finish (bounded), so that the
        checkpoint the program passed is taken, as it would be had it been cut at once."""
        try:
            self._await_cut()
        except Exception:  # noqa: BLE001 - the run is being stopped anyway
            pass

    def close(self) -> None:
        """The run ended: let the last checkpoint finish (unless the run failed), stop."""
        if self.comp._failure is None:
            try:
                self.committer.flush(self.bound)
            except NaiadError as exc:
                self.comp.fail(exc)
        self.committer.close()
