"""A worker: owns one vertex per stage, schedules their callbacks and runs the progress protocol.

Each worker is an independent state machine.  It talks to other workers only through its
fabric (data batches and progress updates, FIFO per pair of workers) and keeps its own view of
the occurrence and precursor counts in a :class:`~naiad.progress.Tracker`.  A step of the
worker: take what arrived; deliver queued batches (messages before notifications); broadcast the
accumulated progress updates; deliver the notifications that the frontier now allows.  An idle
worker blocks on its inbox.
"""

from __future__ import annotations

import math
import pickle
import time as _time
import traceback
from collections import deque
from queue import Empty
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import cloudpickle

from naiad import gcpolicy
from naiad.errors import NaiadError, ProgressViolation, VertexError
from naiad.flow import low_epoch
from naiad.graph import INPUT, LogicalGraph, StageDef
from naiad.partition import partition
from naiad.progress.buffer import ProgressBuffer
from naiad.progress.timestamp import Timestamp
from naiad.progress.tracker import Tracker
from naiad.vertex import StageInfo, Vertex

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Worker", "DATA", "PROGRESS", "INPUT_EPOCH", "INPUT_CLOSE", "STOP", "CHECKPOINT"]

# Inbox message tags (first element of each tuple).
DATA, PROGRESS, INPUT_EPOCH, INPUT_CLOSE, STOP, CHECKPOINT = 0, 1, 2, 3, 4, 5

# Batches delivered before the worker looks at its inbox again (keeps it responsive to STOP).
_BATCHES_PER_STEP = 256
# Rounds of local work after which progress is broadcast even if local work remains.
_STEPS_BEFORE_FLUSH = 4


class _pickled:
    """A vertex state pickled at snapshot time (so later mutation cannot leak into the file)."""

    __slots__ = ("data",)

    def __init__(self, state: Any):
        try:
            self.data = pickle.dumps(state, protocol=5)
        except Exception:
            self.data = cloudpickle.dumps(state)

    def load(self) -> Any:
        return pickle.loads(self.data)

    def __reduce__(self):
        return (_unpickled, (self.data,))


def _unpickled(data: bytes) -> "_pickled":
    obj = _pickled.__new__(_pickled)
    obj.data = data
    return obj


class Worker:
    """One worker thread's state: vertices, queues, pending notifications, progress view."""

    def __init__(self, comp: "Computation", index: int, local_index: int, graph: LogicalGraph,
                 reach, fabric, accumulate: bool = True, debug: bool = False):
        self.comp = comp
        self.index = index
        self.local_index = local_index
        self.graph = graph
        self.fabric = fabric
        self.peers = comp.workers
        self.accumulate = accumulate
        self.debug = debug
        self.inbox = fabric.inbox(local_index)
        self.tracker = Tracker(reach, debug=debug)
        self.buffer = ProgressBuffer(reach)
        self.global_view: Any = comp._global_view if debug else None
        self.add_progress = self.buffer.add if self.global_view is None else self._add_checked
        self.pending: deque = deque()
        self.notifications: Dict[Tuple[int, Timestamp], Vertex] = {}
        self.observers: List[Any] = []
        self.connectors = graph.connectors
        self.stages = graph.stages
        self.input_epoch: Dict[int, Optional[int]] = {}
        self.stopped: Optional[str] = None
        self.finished = False
        self.meter = comp.meter_for(index)
        self.window = comp.window            # flow control at the inputs (None: off)
        self._seen_version = -1
        self._notified: Dict[int, set] = {}
        self.vertices: List[Vertex] = [self._make_vertex(st) for st in graph.stages]
        self._stage_at_loc = {st.loc: st.id for st in graph.stages}
        self.ckpt_epoch: Optional[int] = None
        self._input_locs = {st.loc for st in graph.stages if st.kind == INPUT}
        restored = comp.restored
        base = restored.epoch if restored is not None else 0
        for st in graph.stages:
            if st.kind == INPUT:
                self.input_epoch[st.id] = base
        if restored is not None:
            self._restore(restored)
        # Naiad's initial pointstamps: every worker's capability on every input (at epoch 0, or
        # at the checkpoint's epoch), and after a restore every worker's pending notifications.
        self.tracker.update_many(comp.initial_pointstamps)

    def _restore(self, restored) -> None:
        states = restored.states.get(self.index, {})
        engine = states.get("__naiad__", {})
        for sid, epoch in engine.get("inputs", {}).items():
            self.input_epoch[sid] = epoch
        for sid, state in states.items():
            if sid == "__naiad__":
                continue
            v = self.vertices[sid]
            try:
                v.restore(state.load())
            except Exception as exc:
                self._raise_vertex_error(v, Timestamp(restored.epoch), "restore", exc)
        for w, sid, time in restored.notifications:
            if w == self.index:
                self.notifications[(sid, time)] = self.vertices[sid]

    # ---- construction ---------------------------------------------------------------------
    def _make_vertex(self, st: StageDef) -> Vertex:
        try:
            v = st.factory()  # type: ignore[misc]  # only vertex stages reach here
        except Exception as exc:
            raise VertexError(st.name, self.index, None, "the vertex factory", exc,
                              traceback.format_exc()) from exc
        if not isinstance(v, Vertex):
            msg = (f"stage {st.name!r}: the factory returned {type(v).__name__}, not a "
                   "naiad.Vertex; pass a Vertex subclass or a function returning an instance")
            raise TypeError(msg)
        v.index = self.index
        v.stage = StageInfo(st.name, st.id, st.input_ports, st.output_count)
        v._stagedef = st
        v._out = [{} for _ in range(st.output_count)]
        v._now = None
        v._notify = self._notify_at
        v._worker = self
        if getattr(v, "_observer", False):
            self.observers.append(v)
        return v

    def _add_checked(self, loc: int, time: Timestamp, delta: int) -> None:
        self.global_view.add(loc, time, delta)
        self.buffer.add(loc, time, delta)

    def _check_view(self) -> None:
        names = {st.loc: f"stage {st.name!r}" for st in self.stages}
        self.global_view.check(self.index, self.tracker, names.get)

    # ---- the scheduling loop ----------------------------------------------------------------
    def run(self) -> None:
        """Run until the computation completes or is stopped; errors go to the computation."""
        gcpolicy.enter()
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the computation
            if self.meter is not None:
                self.meter.event("failure", error=f"{type(exc).__name__}: {exc}")
            self.comp._worker_failed(self, exc)
        finally:
            gcpolicy.exit_()
            if self.meter is not None:
                self.meter.publish_frontiers(self.tracker, self.stages)
                self.meter.close()
            if self.window is not None:
                self.window.advance(self.local_index, math.inf)
            self.finished = True
            self.comp._worker_exited(self)

    def _loop(self) -> None:
        tracker = self.tracker
        since_flush = 0
        while True:
            self._take_inbox()
            if self.stopped is not None:
                return
            if self.pending:
                # Local work first: progress made by a chain of local hand-offs leaves as one
                # broadcast, unless the chain is long (other workers must not starve).
                self._run_pending()
                since_flush += 1
                if self.pending and since_flush < _STEPS_BEFORE_FLUSH:
                    continue
            since_flush = 0
            self._flush_progress()
            if tracker.version != self._seen_version:
                self._seen_version = tracker.version
                if self.window is not None:
                    self.window.advance(self.local_index, low_epoch(tracker.frontier_view()))
                if self.meter is not None and _time.monotonic() - self.meter.frontier_clock > 0.25:
                    self.meter.publish_frontiers(tracker, self.stages)
                if self.global_view is not None:
                    self._check_view()
                if self.observers:
                    self._observe()
                if self.notifications and self._run_notifications():
                    continue          # run what the notifications sent before broadcasting
                self._flush_progress()
            if self.pending or tracker.version != self._seen_version:
                continue          # new local work, or a view nobody has looked at yet
            if self.ckpt_epoch is not None and self._quiescent(self.ckpt_epoch):
                self._snapshot(self.ckpt_epoch)
            if tracker.is_empty() and not self.buffer:
                self.fabric.flush(self.index)
                return
            self.fabric.flush(self.index)
            gcpolicy.idle()
            msg = self.fabric.wait(self.local_index, 1.0)
            if msg is not None:
                self._handle(msg)

    def _take_inbox(self) -> None:
        inbox = self.inbox
        handle = self._handle
        for msg in self.fabric.receive(self.local_index):
            handle(msg)
        while not inbox.empty():
            try:
                msg = inbox.get_nowait()
            except Empty:  # pragma: no cover - another reader cannot exist
                return
            handle(msg)

    def _handle(self, msg: tuple) -> None:
        tag = msg[0]
        if tag == DATA:
            self.pending.append((self.connectors[msg[1]], msg[2], msg[3]))
            if self.meter is not None:
                self.meter.received(msg[1], msg[2], len(msg[3]))
        elif tag == PROGRESS:
            self.tracker.update_many(msg[2])
            if self.meter is not None:
                self.meter.progress(False, len(msg[2]))
        elif tag == INPUT_EPOCH:
            self._on_input(msg[1], msg[2], msg[3])
        elif tag == INPUT_CLOSE:
            self._on_close(msg[1])
        elif tag == STOP:
            self.stopped = msg[1]
        elif tag == CHECKPOINT:
            self.ckpt_epoch = msg[1]

    # ---- messages -----------------------------------------------------------------------------
    def _run_pending(self) -> None:
        pending = self.pending
        vertices = self.vertices
        add = self.add_progress
        flush_each = not self.accumulate
        meter = self.meter
        clock = _time.perf_counter
        for _ in range(_BATCHES_PER_STEP):
            if not pending:
                break
            conn, time, records = pending.popleft()
            v = vertices[conn.dst]
            if self.debug:
                self._check_not_notified(conn.dst, time)
            v._now = time
            t0 = clock() if meter is not None else 0.0
            try:
                v.on_recv_batch(conn.dst_port, records, time)
            except Exception as exc:
                self._raise_vertex_error(v, time, "on_recv", exc)
            v._now = None
            out = self._flush_vertex(v)
            if meter is not None:
                meter.ran(conn.dst, "recv", time, len(records), out, clock() - t0)
            add(conn.loc, time, -1)
            if flush_each:
                self._flush_progress()

    def _flush_vertex(self, v: Vertex) -> int:
        """Route what ``v`` sent; returns the number of records it sent."""
        outs = v._out
        sent = 0
        for port in range(len(outs)):
            buf = outs[port]
            if buf:
                conns = v._stagedef.outputs[port]
                for time, records in buf.items():
                    sent += len(records)
                    for conn in conns:
                        self._route(conn, time, records)
                buf.clear()
        return sent

    def _route(self, conn, time: Timestamp, records: list) -> None:
        key = conn.exchange.key
        add = self.add_progress
        if key is None or self.peers == 1:
            self.pending.append((conn, time, records))
            add(conn.loc, time, 1)
            if self.meter is not None:
                self.meter.send(conn.id, self.index, time, len(records))
            return
        try:
            parts = partition(records, key, self.peers)
        except Exception as exc:
            st = self.stages[conn.dst]
            raise VertexError(st.name, self.index, time, "partition_by", exc,
                              traceback.format_exc()) from exc
        me = self.index
        send = self.fabric.send
        for dest in range(self.peers):
            part = parts[dest]
            if part:
                add(conn.loc, time, 1)
                if self.meter is not None:
                    self.meter.send(conn.id, dest, time, len(part))
                if dest == me:
                    self.pending.append((conn, time, part))
                else:
                    send(me, dest, conn.id, time, part)

    # ---- notifications --------------------------------------------------------------------------
    def _notify_at(self, v: Vertex, time: Timestamp) -> None:
        key = (v._stagedef.id, time)
        if key not in self.notifications:
            self.notifications[key] = v
            self.add_progress(v._stagedef.loc, time, 1)
            if self.meter is not None:
                self.meter.notify_requested(key[0], time)

    def _run_notifications(self) -> bool:
        # Only frontier pointstamps can be notified: look there, not at every pending request.
        stage_at = self._stage_at_loc
        notifications = self.notifications
        ready = []
        for loc, time in self.tracker.frontier_view():
            sid = stage_at.get(loc)
            if sid is not None and (sid, time) in notifications:
                ready.append((sid, time))
        if not ready:
            return False
        if len(ready) > 1:
            ready.sort(key=lambda k: k[1])     # in time order (a linear extension)
        add = self.add_progress
        for key in ready:
            v = self.notifications.pop(key)
            time = key[1]
            if self.debug:
                self._notified.setdefault(key[0], set()).add(time)
            v._now = time
            t0 = _time.perf_counter() if self.meter is not None else 0.0
            try:
                v.on_notify(time)
            except Exception as exc:
                self._raise_vertex_error(v, time, "on_notify", exc)
            v._now = None
            out = self._flush_vertex(v)
            if self.meter is not None:
                self.meter.ran(key[0], "notify", time, 0, out, _time.perf_counter() - t0)
            add(v._stagedef.loc, time, -1)
            if not self.accumulate:
                self._flush_progress()
        return True

    def _observe(self) -> None:
        """Tell frontier observers (subscribe sinks, probes) the frontier of their input."""
        for v in self.observers:
            frontier = self.tracker.frontier_at(v._stagedef.loc)
            v._now = None
            try:
                v.observe_frontier(frontier)
            except Exception as exc:
                at = Timestamp(min(t[0] for t in frontier)) if frontier else Timestamp(-1)
                self._raise_vertex_error(v, at, "subscribe", exc)

    def _check_not_notified(self, stage_id: int, time: Timestamp) -> None:
        for n in self._notified.get(stage_id, ()):
            if time.less_equal(n):
                msg = (f"stage {self.stages[stage_id].name!r} vertex {self.index} received a "
                       f"message at {time!r} after it was notified at {n!r}")
                raise ProgressViolation(msg)

    # ---- inputs --------------------------------------------------------------------------------
    def _on_input(self, stage_id: int, epoch: int, records: list) -> None:
        st = self.stages[stage_id]
        current = self.input_epoch[stage_id]
        if current != epoch:  # pragma: no cover - the input handle numbers epochs
            msg = f"input {st.name!r}: epoch {epoch} arrived while at {current}"
            raise RuntimeError(msg)
        t = Timestamp(epoch)
        if self.meter is not None:
            self.meter.input(stage_id, epoch, len(records))
        if records:
            for conn in st.outputs[0]:
                self._route(conn, t, records)
        self.add_progress(st.loc, Timestamp(epoch + 1), 1)
        self.add_progress(st.loc, t, -1)
        self.input_epoch[stage_id] = epoch + 1

    def _on_close(self, stage_id: int) -> None:
        epoch = self.input_epoch[stage_id]
        if epoch is None:
            return
        self.add_progress(self.stages[stage_id].loc, Timestamp(epoch), -1)
        self.input_epoch[stage_id] = None

    # ---- progress ---------------------------------------------------------------------------------
    def _flush_progress(self) -> None:
        if not self.buffer:
            return
        # While quiescing for a checkpoint nothing is held back: held retirements behind the
        # paused inputs would otherwise wait for ever.
        hold = self.accumulate and self.ckpt_epoch is None
        updates = self.buffer.drain(self.tracker, hold=hold)
        if updates:
            if self.meter is not None:
                self.meter.progress(True, len(updates))
            self.fabric.broadcast_progress(self.index, updates)
            self.tracker.update_many(updates)

    # ---- checkpoints ------------------------------------------------------------------------------
    def _quiescent(self, epoch: int) -> bool:
        """Whether this worker's view shows the whole computation paused at ``epoch``.

        Nothing but input capabilities at ``epoch`` and notification requests at later epochs
        may be active.  By the protocol's safety property every message still in flight is
        covered, in every worker's view, by an active pointstamp of its causal chain (at an
        earlier epoch, or on a connector), so this view proves that no message is in flight.
        """
        if self.pending or self.buffer:
            return False
        boundary = Timestamp(epoch)
        inputs = self._input_locs
        stage_at = self._stage_at_loc
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

    def _snapshot(self, epoch: int) -> None:
        """Every vertex's checkpoint() and the engine's own state, handed to the computation."""
        if self.observers:
            self._observe()
        states: Dict[Any, Any] = {}
        for st, v in zip(self.stages, self.vertices):
            v._now = None
            try:
                states[st.id] = _pickled(v.checkpoint())
            except Exception as exc:
                self._raise_vertex_error(v, Timestamp(epoch), "checkpoint", exc)
        states["__naiad__"] = {"inputs": dict(self.input_epoch)}
        notifications = [(self.index, sid, t) for (sid, t) in self.notifications]
        self.ckpt_epoch = None
        self.comp._on_snapshot(self, epoch, states, notifications)

    # ---- errors -----------------------------------------------------------------------------------
    def _raise_vertex_error(self, v: Vertex, time, callback: str, exc: Exception):
        v._now = None
        raise VertexError(v._stagedef.name, self.index, time, callback, exc,
                          traceback.format_exc(), self.comp.process_index) from exc

    def describe_progress(self) -> str:
        """The active pointstamps of this worker's view, for a diagnostic."""
        names = {st.loc: f"stage {st.name!r}" for st in self.stages}
        for c in self.connectors:
            names[c.loc] = f"edge {self.stages[c.src].name!r}->{self.stages[c.dst].name!r}"
        parts = [f"{names.get(loc, loc)} at {t!r} (count {n})"
                 for (loc, t), n in sorted(self.tracker.active().items(), key=lambda kv: kv[0][1])]
        return "; ".join(parts) or "nothing active"
