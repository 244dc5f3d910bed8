"""When and how a consistent checkpoint is cut, without a coordinator process.

At a boundary epoch ``b`` every process asks its workers to quiesce: a worker whose view holds
nothing but input capabilities at ``b`` and notification requests at later epochs knows, by the
progress protocol's safety property, that nothing is in flight anywhere.  Once every worker of
the process is, the process arrives at the boundary's barrier (with process 0's proposal for the
next boundary), and while that message travels each worker pickles its vertex states and hands
them, with its pending notifications, to the :class:`Coordinator` (a worker handles nothing
else in between, so no message of a later epoch can reach a vertex before it is pickled).  When
every process has arrived and this one's snapshots are in, the inputs go on.  Waiting
until the subscribers have handed out the epochs before the boundary, writing the states, and
appending the commit record once every process has written its part (process 0 waits for the
others' word; they do not wait for each other) happen behind, in the
:class:`~naiad.recovery.committer.Committer`'s thread.
"""

from __future__ import annotations

import math
import threading
import time as _time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from naiad.recovery.committer import Committer
from naiad.errors import CheckpointMisaligned, NaiadError
from naiad.messages import CHECKPOINT, INPUT_EPOCH

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Coordinator", "CHECKPOINT_BOUND", "HOLD_PATIENCE", "ROTATE_LOGS", "STATS_KEPT"]

CHECKPOINT_BOUND = 600.0
"""Seconds, beyond connect_timeout, that a process waits for the others at a checkpoint."""

HOLD_PATIENCE = 2.0
"""Seconds an input's epochs are held back for a checkpoint boundary while the program feeds
and completes nothing: then the boundary is let go (the program waits for those epochs'
output, other than by a probe, which lets them go at once)."""

ROTATE_LOGS = 8
"""The input logs start new segments every this many checkpoints (a segment is pruned whole
once every kept checkpoint is after it): not at every one, since creating and deleting files
costs more than appending to them."""


STATS_KEPT = 1000
"""``comp.checkpoint_stats`` keeps the figures of this many checkpoints, the latest: a long run
takes checkpoints without end."""


class Coordinator:
    """The checkpoint policy and the cutting of checkpoints for one process."""

    def __init__(self, comp: "Computation", base: int):
        self.comp = comp
        self.store: Any = comp.store
        self.last = base
        self.demands = 0                 # comp.checkpoint() calls so far (collective)
        self.next = self._first_boundary(base)
        self.clock = _time.monotonic()
        self.stats: List[Dict[str, Any]] = comp.checkpoint_stats
        self._snapshots: dict = {}
        self._quiescent = 0          # workers of this process quiescent at the boundary cut now
        self._cv = threading.Condition()
        self.committer = Committer(on_error=comp.fail)
        self.fingerprint = comp.graph.fingerprint()
        self.taken = 0               # checkpoints cut by this run
        self.taking: Optional[int] = None    # the boundary being cut now
        self.peer_cuts: Dict[int, int] = {}  # boundary -> a process that arrived there
        self.skipped: set = set()            # boundaries let go (waiting_for, _patience)
        self._hold_lock = threading.RLock()  # holding and letting go of input epochs
        self._activity = 0                   # inputs fed or completed so far
        self._timer: Optional[threading.Timer] = None
        self._closing = False

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
        if self.peer_cuts:
            self._check_peers(epoch)
        b = self.next
        if b is None or epoch < b or b <= self.last:
            return
        with self._hold_lock:
            self._advance(epoch)

    def deliver(self, inp: Any, epoch: int, msgs: List[Tuple[int, tuple]]) -> None:
        """Post an input's ``epoch`` (``(worker, message)`` pairs), or hold it back for the
        boundary due before it (:meth:`holds`)."""
        post = self.comp.fabric.post
        with self._hold_lock:
            self._activity += 1
            if self.holds(epoch):
                inp.held.extend((epoch, i, msg) for i, msg in msgs)
                self._arm()
                return
            for i, msg in msgs:
                post(i, msg)

    def close_input(self, inp: Any, msgs: List[Tuple[int, tuple]]) -> None:
        """An input was completed: its close goes after the epochs it holds back, and the
        inputs still open may all be at the boundary now."""
        with self._hold_lock:
            self._activity += 1
            if inp.held:
                inp.held.extend((inp.epoch, i, msg) for i, msg in msgs)
            else:
                post = self.comp.fabric.post
                for i, msg in msgs:
                    post(i, msg)
            if any(i.held for i in self.comp.inputs):
                self._advance(None)

    def _arm(self) -> None:
        """Let held epochs go after :data:`HOLD_PATIENCE` seconds without the program feeding
        or completing any input (it waits for their output some other way than a probe)."""
        if self._timer is None and not self._closing:
            self._timer = threading.Timer(HOLD_PATIENCE, self._patience, (self._activity,))
            self._timer.daemon = True
            self._timer.start()

    def _patience(self, seen: int) -> None:
        with self._hold_lock:
            self._timer = None
            if self._closing or self.comp.failure is not None:
                return
            if not self._holding():
                return
            if self._activity != seen:
                self._arm()                 # the program is still feeding: it may catch up
                return
            self._let_go_through(math.inf)

    def holds(self, epoch: int) -> bool:
        """Whether an input's ``epoch`` waits for the boundary due before it: inputs are
        independent, and one fed past the boundary while another has not reached it is held
        back (logged, not delivered) until every open input has, so that each process cuts
        at the same boundaries whatever order its program feeds its inputs in."""
        b = self.next
        return b is not None and self.last < b <= epoch

    def _advance(self, epoch: Optional[int]) -> None:
        """Cut each boundary due (at or before ``epoch``; any, for None) once every open input
        has been fed up to it, and let the epochs held back before the next one go on; a
        boundary another process let go (:meth:`waiting_for`) is let go here too."""
        while True:
            b = self.next
            if b is None or b <= self.last or (epoch is not None and epoch < b):
                return
            if b in self.skipped:
                self._let_go(b)
                continue
            inputs = self.comp.inputs
            still = [i for i in inputs if not i.completed]
            if any(i.epoch < b for i in still):
                return       # another input lags: what is fed past b waits for it
            if epoch is None and not any(h[0] >= b and h[2][0] == INPUT_EPOCH
                                         for i in inputs for h in i.held):
                # An input completed, and no epoch is fed past b yet: b is cut when one is
                # (before_epoch), or never, as in every other feed order.
                if not still:
                    for i in inputs:
                        i.release(None)
                return
            # An input is fed past b and every other one up to b or completed: b is cut,
            # whichever completed first, so that every feed order cuts the same boundaries.
            self.take(b)
            for i in self.comp.inputs:
                i.release(self.next)

    def waiting_for(self, epoch: int) -> None:
        """The program waits for ``epoch`` to complete (a probe): epochs held back at or
        before it cannot wait for the lagging inputs any longer.  They go on, and this
        process lets the boundaries they pass go, as it would without holding (on one
        process, no checkpoint there), and says so to the others: they let them go too, or
        fail the run with CheckpointMisaligned if they are cutting one already."""
        with self._hold_lock:
            self._let_go_through(epoch)

    def _let_go_through(self, epoch: float) -> None:
        """Let go (and announce) each boundary due while an epoch at or before ``epoch`` is
        held back."""
        inputs = self.comp.inputs
        while True:
            b = self.next
            if b is None or not any(h[0] <= epoch for i in inputs for h in i.held):
                return
            if self._announce_skip(b):
                return

    def _holding(self) -> bool:
        """Whether an input holds an epoch back (not only its close)."""
        return any(h[2][0] == INPUT_EPOCH for i in self.comp.inputs for h in i.held)

    def _announce_skip(self, b: int) -> bool:
        """Let ``b`` go here and tell the other processes; whether the run fails for it (a
        process cut there already)."""
        self._let_go(b)
        self.comp.fabric.arrive(f"skip-{b}")
        process = self.peer_cuts.get(b)
        if process is not None:
            fed = max(i.epoch for i in self.comp.inputs) - 1
            self.comp.fail(self._misaligned(b, process, fed))
            return True
        return False

    def _let_go(self, b: int) -> None:
        """No checkpoint at boundary ``b``: the next is the policy's next after ``b`` (the
        same in every process), and the epochs held back before it go on."""
        self.skipped.add(b)
        self.next = b + (self.comp.options["checkpoint_every"] or 1)
        for i in self.comp.inputs:
            i.release(self.next)

    def checkpoint_now(self) -> None:
        """``comp.checkpoint()``: a checkpoint at the current boundary, durable on return."""
        with self._hold_lock:
            self._checkpoint_now()
        self.committer.flush(self.bound)
        self.comp.check_failed()
        if self.comp.processes > 1:
            # Process 0 commits after every part is written, then arrives here: the others
            # return only once the checkpoint is committed, not merely their part written.
            self.demands += 1
            self.comp.fabric.barrier(f"durable-{self.demands}", self.bound)
            self.comp.check_failed()

    def _checkpoint_now(self) -> None:
        self._advance(None)          # the policy's boundary, if every input has reached it
        inputs = self.comp.inputs
        boundary = self.aligned_boundary()
        if boundary is not None and boundary > self.last and self._holding():
            ahead = sorted({i.name for i in inputs if i.held})
            behind = sorted(f"{i.name!r} (at epoch {i.epoch})" for i in inputs
                            if not i.completed and self.next is not None and i.epoch < self.next)
            msg = (f"comp.checkpoint(): input(s) {', '.join(map(repr, ahead))} hold epochs "
                   f"back for the checkpoint boundary at epoch {self.next}, which "
                   f"{', '.join(behind)} has not reached: feed it up to the boundary first")
            raise CheckpointMisaligned(msg)
        if boundary is None:
            msg = ("comp.checkpoint(): the inputs are at different epochs; call it when every "
                   "open input has been fed the same number of epochs")
            raise NaiadError(msg)
        past = sorted(f"{i.name!r} (fed epochs up to {i.epoch - 1})" for i in inputs
                      if i.completed and i.epoch > boundary)
        if past and boundary > self.last:
            # Its epochs from the boundary on are in the computation already: a checkpoint
            # there would hold them, as done, in the state of "everything before epoch B".
            msg = (f"comp.checkpoint(): completed input(s) {', '.join(past)} went past the "
                   f"boundary at epoch {boundary} that the open inputs are at; call "
                   "comp.checkpoint() before feeding any input past the boundary")
            raise CheckpointMisaligned(msg)
        if boundary > self.last:
            self.take(boundary)

    # ---- cutting one ----------------------------------------------------------------------------
    def take(self, epoch: int) -> None:
        """Quiesce every worker at ``epoch`` and agree on the next boundary; the writing and the
        commit go to the committer."""
        comp = self.comp
        t0 = _time.monotonic()
        self.taking = epoch
        with self._cv:
            self._snapshots = {}
            self._quiescent = 0
        for i in range(comp.workers_per_process):
            comp.fabric.post(i, (CHECKPOINT, epoch))
        deadline = t0 + self.bound
        with self._cv:
            while len(self._snapshots) < comp.workers_per_process:
                comp.check_failed()
                if _time.monotonic() > deadline:
                    msg = (f"checkpoint at epoch {epoch}: the workers of process "
                           f"{comp.process_index} did not quiesce within {self.bound:.0f} s "
                           f"(still active: {comp.describe_progress()}); every process must "
                           "feed every input up to the boundary")
                    raise NaiadError(msg)
                if epoch in self.skipped:     # a peer let it go meanwhile (_peer_skipped)
                    msg = (f"another process let checkpoint boundary {epoch} go while process "
                           f"{comp.process_index} was cutting it (its program waited for an "
                           "epoch past it before feeding every input up to it): feed every "
                           "input up to the boundary before waiting for an epoch past it")
                    raise CheckpointMisaligned(msg)
                if comp.finished:
                    msg = f"the workers stopped before checkpoint {epoch} was taken"
                    raise NaiadError(msg)
                self._cv.wait(0.2)
            snaps = dict(self._snapshots)
        t1 = _time.monotonic()
        self.taken += 1
        if self.taken % ROTATE_LOGS == 0:
            self.store.rotate_logs()
        nxt = comp.fabric.barrier(f"checkpoint-{epoch}", self.bound)  # arrived: on_quiescent
        self.last, self.next, self.clock = epoch, nxt, _time.monotonic()
        self.taking = None
        self.committer.submit(lambda: self._write(epoch, snaps, t0, t1), self.bound)

    def replay(self, arrivals: List[Tuple[str, int]]) -> None:
        """The peers' arrivals received before this coordinator existed (a process that let
        a boundary go early, :meth:`waiting_for`); hearing one twice changes nothing."""
        for name, process in arrivals:
            self.peer_arrived(name, process)

    def peer_arrived(self, name: str, process: int) -> None:
        """Process ``process`` cut a checkpoint at a boundary this process's inputs have all
        been fed past, without cutting one there: it would wait for this one in vain (until
        the barrier's bound), so the run fails now, naming both."""
        if name.startswith("skip-"):
            self._peer_skipped(int(name.split("-", 1)[1]), process)
            return
        if not name.startswith("checkpoint-"):
            return
        epoch = int(name.split("-", 1)[1])
        if epoch <= self.last or self.taking == epoch:
            return
        self.peer_cuts[epoch] = process
        inputs = self.comp.inputs
        fed = [i.epoch for i in inputs]
        if epoch in self.skipped:
            msg = (f"process {process} checkpoints at epoch {epoch}, but process "
                   f"{self.comp.process_index} let that boundary go (its program waited "
                   "for an epoch past it, on a probe or for HOLD_PATIENCE, before feeding "
                   "every input up to it); feed every input up to the boundary before waiting "
                   "for an epoch past it, in every process")
            self.comp.fail(CheckpointMisaligned(msg))
        elif fed and min(fed) > epoch:
            self.comp.fail(self._misaligned(epoch, process, min(fed) - 1))
        elif inputs and all(i.completed and not i.held for i in inputs):
            msg = (f"process {process} checkpoints at epoch {epoch}, but process "
                   f"{self.comp.process_index} completed every input before it and cannot cut "
                   "there: feed every input the same number of epochs in every process (an "
                   "empty epoch is on_next([])), or checkpoint on demand")
            self.comp.fail(CheckpointMisaligned(msg))

    def _peer_skipped(self, b: int, process: int) -> None:
        """Process ``process`` let boundary ``b`` go (its program waits on a probe past it):
        this one does too when it gets there, and fails the run if it cut there already."""
        if self.taking == b or b <= self.last:
            msg = (f"process {process} let checkpoint boundary {b} go (its program waited "
                   "for an epoch past it, on a probe or for HOLD_PATIENCE, before feeding every "
                   f"input up to it), but process {self.comp.process_index} checkpoints at "
                   f"{b}; feed every input up to the boundary before waiting for an epoch past "
                   "it, in every process")
            self.comp.fail(CheckpointMisaligned(msg))
            return
        self.skipped.add(b)

    def _check_peers(self, epoch: int) -> None:
        """Before this process feeds ``epoch``: a boundary another process cut at or before
        it, which this one did not cut, can never be passed."""
        for b, process in list(self.peer_cuts.items()):
            if b <= self.last:
                del self.peer_cuts[b]
            elif b <= epoch and self.taking != b and b != self.next:
                raise self._misaligned(b, process, epoch)

    def _misaligned(self, epoch: int, process: int, fed: int) -> CheckpointMisaligned:
        msg = (f"process {process} checkpoints at epoch {epoch}, but process "
               f"{self.comp.process_index} feeds epoch {fed} without a checkpoint at epoch "
               f"{epoch}: every process must checkpoint at the same epochs (checkpoint_every=, "
               "or comp.checkpoint() at the same point of the program in every process)")
        return CheckpointMisaligned(msg)

    def on_quiescent(self, worker: Any, epoch: int) -> None:
        """In a worker's thread, before it snapshots: once every worker of this process is
        quiescent, this process arrives at the boundary's barrier (with its proposal for the
        next boundary), so the message travels while the workers pickle their vertices."""
        with self._cv:
            self._quiescent += 1
            last = self._quiescent == self.comp.workers_per_process
        if last:
            self.comp.fabric.arrive(f"checkpoint-{epoch}", self._propose_next(epoch))

    def on_snapshot(self, worker: Any, epoch: int, states: Any, notifications: Any,
                    seconds: float = 0.0) -> None:
        with self._cv:
            self._snapshots[worker.index] = (states, notifications, seconds)
            self._cv.notify_all()

    def _write(self, epoch: int, snaps: dict, t0: float, t1: float) -> None:
        """In the committer's thread: this process's part, every part, then the commit record;
        then what the newest ``keep`` checkpoints no longer need is pruned."""
        comp, store = self.comp, self.store
        cpu0 = _time.thread_time()
        with self.committer.elsewhere():    # the subscribers may wait for the program
            for sub in comp.subscriptions:  # delivered and marked before the commit
                sub.wait_delivered(epoch, self.bound)
        states = {w: st for w, (st, _, _) in snaps.items()}
        notifications = [n for _, (_, ns, _) in snaps.items() for n in ns]
        open_inputs: Dict[int, int] = {}
        for st in states.values():
            for sid, e in st["__naiad__"]["inputs"].items():
                open_inputs[sid] = open_inputs.get(sid, 0) + (e is not None)
        fingerprint = self.fingerprint
        size, where = store.write_part(epoch, fingerprint, states, notifications, open_inputs)
        with self.committer.elsewhere():    # process 0 waits for the others' parts
            parts = comp.fabric.gather(f"written-{epoch}", self.bound, where)
        if comp.process_index == 0:
            store.commit(epoch, fingerprint, {**parts, 0: where})
        store.prune()
        self.stats.append({"epoch": epoch, "bytes": size, "quiesce_s": t1 - t0,
                           "snapshot_s": max((s for _, _, s in snaps.values()), default=0.0),
                           "total_s": _time.monotonic() - t0,
                           "write_cpu_s": _time.thread_time() - cpu0})
        if len(self.stats) > STATS_KEPT:
            del self.stats[0]
        if comp.observer is not None:
            comp.observer.checkpoint(self.stats[-1])

    def settle(self) -> None:
        """The program stopped with its own error: finish writing the checkpoints it passed
        (bounded); a failure doing so must not hide the program's error."""
        try:
            self.committer.flush(self.bound)
        except Exception:  # noqa: BLE001 - the program's own error is what is raised
            pass

    def close(self) -> None:
        """The run ended: let the last checkpoint finish (unless the run failed), stop."""
        self._closing = True
        timer = self._timer
        if timer is not None:
            timer.cancel()
        if self.comp.failure is None:
            try:
                self.committer.flush(self.bound)
            except NaiadError as exc:
                self.comp.fail(exc)
        self.committer.close()
