"""Cutting a checkpoint in a worker: aligned (vertex by vertex, the inputs going on) or quiesced.

*Aligned* checkpoints (``checkpoint_every``): each vertex is snapshotted when its own input
frontier passes a boundary.

A checkpoint at boundary ``b`` holds every vertex's state after all times of epochs below ``b``
and nothing of later epochs.  The inputs need not stop for it: a worker snapshots each of its
vertices separately, at the moment that vertex's frontier (the least times at which anything
could still happen there, from the progress protocol) has passed ``b`` — every message and
notification below ``b`` delivered — and before the vertex has received anything at ``b`` or
later.  A batch at an epoch at or beyond the vertex's next boundary that reaches the vertex
earlier is *held* (kept out of delivery, its pointstamp still active) until the vertex has been
snapshotted; notifications at ``b`` or later cannot run earlier, since their time is not
behind the frontier.  When every vertex of the worker has been snapshotted at ``b``, the
worker hands its states to the computation (a ``CHECKPOINT`` action), as a quiesced worker does.

What at ``b`` or later is in flight at the cut is not part of the checkpoint: restoring it
replays the input log from ``b``, which recomputes everything at those times (the delivery
marks keep outputs exactly-once).  Two things are part of it:

* the notification requests a vertex holds at its snapshot (all at ``b`` or later), restored
  as now;
* records a vertex sent at an epoch at or beyond ``b`` from a callback *before* ``b`` (a send
  into the future).  Replaying the inputs from ``b`` would not send them again, so the sending
  worker keeps them with the cut (*carried* sends): a restore sends them again, covered by a
  pointstamp at the sender that every worker counts from the start (like a notification
  request) until the records are on their way.

Every worker must know a boundary before any batch at its epoch can reach it, or it could
deliver one too early.  With ``checkpoint_every`` the boundaries are known in advance (every
multiple after the restored epoch), so a worker holds from the next scheduled boundary on; the
inputs *announce* a boundary (``BOUNDARY``) when the first of them reaches it, before they feed
that epoch, which makes the cut happen in this process.  A process whose inputs all close before
a scheduled boundary drops it.

*Quiesced* checkpoints (``checkpoint_interval``, ``comp.checkpoint()``: boundaries not known in
advance): the inputs stop at the boundary, and a worker snapshots all its vertices at once when
its view shows nothing in flight (:func:`quiescent`, :func:`snapshot_all`).

>>> s = Schedule(every=10, base=0)
>>> s.bounds, s.hold_from(0)
([10], 10)
>>> s.announce(10), s.bounds
(True, [10, 20])
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from naiad.errors import NaiadError
from naiad.messages import CHECKPOINT
from naiad.progress.timestamp import Timestamp
from naiad.recovery import snapshot

__all__ = ["Schedule", "Cut", "Aligner", "quiescent", "snapshot_all"]


@dataclass
class Cut:
    """One boundary in progress in one worker: what has been snapshotted so far."""

    epoch: int
    announced: bool = False
    remaining: Set[int] = field(default_factory=set)      # stage ids not yet snapshotted
    states: Dict[Any, Any] = field(default_factory=dict)
    notifications: List[Tuple[int, int, Any]] = field(default_factory=list)
    carried: List[Tuple[int, int, Any, list]] = field(default_factory=list)


class Schedule:
    """The boundaries a worker knows: announced ones and the next scheduled one, ascending."""

    def __init__(self, every: Optional[int], base: int):
        self.every = every
        self.bounds: List[int] = []
        self.announced: Set[int] = set()
        if every:
            self.bounds.append((base // every + 1) * every)

    def hold_from(self, done: float) -> float:
        """The first boundary after ``done`` (a vertex's last snapshot): batches at this epoch
        or later wait for the vertex's next snapshot (``inf``: none)."""
        i = bisect.bisect_right(self.bounds, done)
        return self.bounds[i] if i < len(self.bounds) else math.inf

    def announce(self, epoch: int) -> bool:
        """The inputs of this process reached ``epoch``: it is cut.  Whether it is new."""
        if epoch in self.announced:
            return False
        self.announced.add(epoch)
        if epoch not in self.bounds:
            bisect.insort(self.bounds, epoch)
        if self.every and epoch + self.every not in self.bounds:
            bisect.insort(self.bounds, epoch + self.every)
        return True

    def drop_unannounced(self) -> None:
        """Every input of this process closed: the scheduled boundaries are not taken here."""
        self.bounds = [b for b in self.bounds if b in self.announced]

    def finish(self, epoch: int) -> None:
        """``epoch`` is cut everywhere in this worker (or a quiesced checkpoint at ``epoch``
        covered every boundary up to it)."""
        self.bounds = [b for b in self.bounds if b > epoch]
        self.announced = {b for b in self.announced if b > epoch}
        if self.every and not self.bounds:
            self.bounds.append((epoch // self.every + 1) * self.every)


class Aligner:
    """The aligned cuts of one :class:`~naiad.worker_state.WorkerState` (``state``)."""

    def __init__(self, state: Any, every: Optional[int], base: int):
        self.state = state
        self.schedule = Schedule(every, base)
        n = len(state.stages)
        self.done: List[float] = [base] * n            # last boundary each stage was cut at
        self.hold: List[float] = [self.schedule.hold_from(base)] * n
        self.held: Dict[int, list] = {}                 # stage id -> batches kept back
        self.cuts: Dict[int, Cut] = {}
        self.carry: List[Tuple[int, int, Any, list, int]] = []   # sid, port, time, records, from
        self.closed_at: Dict[int, int] = {}
        self.due = False
        self.active = bool(every)

    # ---- events --------------------------------------------------------------------------------
    def announce(self, epoch: int) -> None:
        """(BOUNDARY, epoch): this process's inputs reached ``epoch`` and go on past it."""
        self.active = True
        if self.schedule.announce(epoch):
            self._cut(epoch).announced = True
            self._rehold()
            self.due = True

    def closed(self, stage_id: int, epoch: int) -> None:
        """An input closed at ``epoch``; when all are closed, unannounced boundaries are dropped."""
        self.closed_at[stage_id] = epoch
        if all(e is None for e in self.state.input_epoch.values()):
            self.schedule.drop_unannounced()
            for b in [b for b, c in self.cuts.items() if not c.announced]:
                del self.cuts[b]
            self._rehold()
            self.due = bool(self.cuts)

    def hold_batch(self, sid: int, item: tuple) -> None:
        """A batch at or beyond the stage's next boundary: kept back until its snapshot."""
        self.held.setdefault(sid, []).append(item)

    def sent_ahead(self, sid: int, port: int, time: Any, records: list, now: Any) -> None:
        """A callback at ``now`` sent at a later epoch: kept for the cuts in between."""
        if time[0] >= self.hold[sid]:
            self.carry.append((sid, port, time, list(records), now[0]))

    def quiesced(self, epoch: int) -> None:
        """A quiesced checkpoint at ``epoch`` covered every vertex and boundary up to it."""
        self.schedule.finish(epoch)
        for b in [b for b in self.cuts if b <= epoch]:
            del self.cuts[b]
        self.done = [max(d, epoch) for d in self.done]
        self._rehold()

    # ---- cutting ---------------------------------------------------------------------------------
    def _cut(self, epoch: int) -> Cut:
        cut = self.cuts.get(epoch)
        if cut is None:
            n = len(self.state.stages)
            cut = self.cuts[epoch] = Cut(epoch, remaining={s for s in range(n)
                                                           if self.done[s] < epoch})
        return cut

    def _rehold(self) -> None:
        hold_from = self.schedule.hold_from
        self.hold[:] = [hold_from(d) for d in self.done]
        for sid in list(self.held):
            self._release(sid)

    def _release(self, sid: int) -> None:
        items = self.held.pop(sid, [])
        bound = self.hold[sid]
        keep = [it for it in items if it[1][0] >= bound]
        if keep:
            self.held[sid] = keep
        if len(keep) < len(items):
            self.state.pending.extend(it for it in items if it[1][0] < bound)

    def check(self) -> bool:
        """Snapshot every vertex whose frontier passed its next announced boundary; whether
        any was."""
        self.due = False
        state = self.state
        cut_any = False
        in_order = True           # cuts complete in epoch order; vertices go on regardless
        for epoch in sorted(self.cuts):
            cut = self.cuts[epoch]
            if not cut.announced:
                break
            for sid in sorted(cut.remaining):
                if self.hold[sid] == epoch and self._passed(state.stages[sid].loc, epoch):
                    self._snapshot(sid, cut)
                    cut_any = True
            if cut.remaining:
                in_order = False
            elif in_order:
                self._complete(cut)
        return cut_any

    def _passed(self, loc: int, epoch: int) -> bool:
        summaries = self.state.tracker.reach.summaries
        for src, time in self.state.tracker.frontier_view():
            if time[0] < epoch and summaries(src, loc):
                return False
        return True

    def _snapshot(self, sid: int, cut: Cut) -> None:
        state = self.state
        v = state.vertices[sid]
        epoch = cut.epoch
        v._now = None
        try:
            if getattr(v, "_observer", False):
                v.observe_frontier(state.tracker.frontier_at(state.stages[sid].loc))
            cut.states[sid] = snapshot.encode(v.checkpoint())
        except Exception as exc:
            state.raise_vertex_error(v, Timestamp(epoch), "checkpoint", exc)
        cut.notifications.extend((state.index, s, t) for (s, t) in state.notifications
                                 if s == sid)
        cut.carried.extend((s, port, t, recs) for s, port, t, recs, frm in self.carry
                           if s == sid and frm < epoch <= t[0])
        cut.remaining.discard(sid)
        self.done[sid] = epoch
        self.hold[sid] = self.schedule.hold_from(epoch)
        self.carry = [c for c in self.carry if c[0] != sid or c[2][0] >= self.hold[sid]]
        if sid in self.held:
            self._release(sid)

    def _complete(self, cut: Cut) -> None:
        state = self.state
        epoch = cut.epoch
        inputs = {sid: (epoch if e is not None or self.closed_at.get(sid, -1) > epoch else None)
                  for sid, e in state.input_epoch.items()}
        cut.states["__naiad__"] = {"inputs": inputs, "carried": cut.carried}
        del self.cuts[epoch]
        self.schedule.finish(epoch)
        state.actions.append((CHECKPOINT, epoch, cut.states, cut.notifications))


# ---- quiesced checkpoints (checkpoint_interval, comp.checkpoint()) ------------------------------
def quiescent(self: Any, epoch: int) -> bool:
    """Whether worker state ``self``'s view shows the whole computation paused at ``epoch``.

    Nothing but input capabilities at ``epoch`` and notification requests at later epochs
    may be active.  By the protocol's safety property every message still in flight is
    covered, in every worker's view, by an active pointstamp of its causal chain (at an
    earlier epoch, or on a connector), so this view proves that no message is in flight.
    """
    if self.pending or self.buffer:
        return False
    boundary = Timestamp(epoch)
    inputs = self.input_locs
    stage_at = self.stage_at_loc
    for (loc, time), count in self.tracker.active().items():
        if count <= 0:
            continue
        if loc in inputs:
            if time[0] > epoch:
                # Some process fed past this boundary without stopping at it: the others
                # would wait for ever.  Fail, naming the boundary and the input.
                name = self.stages[stage_at[loc]].name
                msg = (f"checkpoint at epoch {epoch}: input {name!r} has already been fed "
                       f"epoch {time[0]} in another process, which did not checkpoint at "
                       f"epoch {epoch}; every process must checkpoint at the same epochs "
                       "(checkpoint_every=, or comp.checkpoint() at the same point of the "
                       "program in every process)")
                raise NaiadError(msg)
            if time != boundary:
                return False
        elif loc not in stage_at or time[0] < epoch:
            return False
    return True


def snapshot_all(self: Any, epoch: int) -> None:
    """Every vertex's checkpoint() and the engine's own state, as a CHECKPOINT action (a
    quiesced checkpoint)."""
    if self.observers:
        self.observe()
    states: Dict[Any, Any] = {}
    for st, v in zip(self.stages, self.vertices):
        v._now = None
        try:
            states[st.id] = snapshot.encode(v.checkpoint())
        except Exception as exc:
            self.raise_vertex_error(v, Timestamp(epoch), "checkpoint", exc)
    states["__naiad__"] = {"inputs": dict(self.input_epoch)}
    notifications = [(self.index, sid, t) for (sid, t) in self.notifications]
    self.ckpt_epoch = None
    self.aligner.quiesced(epoch)
    self.actions.append((CHECKPOINT, epoch, states, notifications))
