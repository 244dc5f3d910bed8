"""The worker's protocol as a sans-I/O state machine: events in, actions out.

A :class:`WorkerState` owns one vertex per stage, the queue of batches waiting for delivery, the
pending notification requests and this worker's view of the occurrence and precursor counts (a
:class:`~naiad.progress.Tracker`, fed through a :class:`~naiad.progress.ProgressBuffer`).  It
has no sockets, threads or clocks and knows nothing of the computation: the thread shell
(:class:`naiad.worker.Worker`) feeds it events and carries out the actions it collects.

Events (methods, or :meth:`WorkerState.handle` with a message tuple of :mod:`naiad.messages`):
``on_data`` (a batch arrived on a connector at a time), ``on_progress`` (another worker's
progress updates), ``on_input`` (an epoch of records at an input), ``on_close`` (an input
closed), ``on_checkpoint`` (pause at an epoch boundary and snapshot), and :meth:`step` (run the
work that is due: queued batches first, then the notifications the frontier allows).

Actions are plain tuples appended to :attr:`WorkerState.actions`, in the order they must be
carried out; the shell drains the list after every event (no object is built per batch):

* ``(DATA, dest_worker, connector_id, time, records)``: send a batch to another worker;
* ``(PROGRESS, updates)``: broadcast progress updates ``[((loc, time), delta), ...]`` to every
  other worker (this worker's own view has already applied them);
* ``(CHECKPOINT, epoch)``: this worker is quiescent at a checkpoint boundary; the shell says
  so (the processes can start agreeing that every worker is) and then takes the snapshot,
  :meth:`WorkerState.snapshot`, while that message travels.

Vertex callbacks run inside the state machine (vertices are plain Python objects).  What the
worker did can be reported to an optional ``meter`` (see :mod:`naiad.meter`), timed with the
``clock`` the shell passes; tests pass neither.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from naiad.batches import BatchQueue
from naiad.recovery import quiesce, snapshot
from naiad.errors import NaiadError, ProgressViolation, VertexError, format_current
from naiad.graph import INPUT, LogicalGraph, StageDef
from naiad.messages import CHECKPOINT, DATA, INPUT_CLOSE, INPUT_EPOCH, PROGRESS, STOP
from naiad.partition import batch_cut, partition
from naiad.progress.buffer import ProgressBuffer
from naiad.progress.timestamp import Timestamp
from naiad.progress.tracker import Tracker
from naiad.vertex import StageInfo, Vertex

__all__ = ["WorkerState", "Step", "BATCHES_PER_STEP", "STEPS_BEFORE_FLUSH",
           "PENDING_BEFORE_RECEIVE"]

BATCHES_PER_STEP = 256
"""Batches delivered by one :meth:`WorkerState.run_pending` (the shell then looks at its inbox
again, so it stays responsive to STOP)."""
STEPS_BEFORE_FLUSH = 4
"""Rounds of local work after which progress is broadcast even if local work remains."""
PENDING_BEFORE_RECEIVE = 8
"""The shell reads the transport only while fewer batches than this wait for delivery
(:meth:`WorkerState.wants_data`): a worker behind leaves the rest in the bounded queues."""


class Step(IntEnum):
    """What :meth:`WorkerState.step` found: call again, wait for an event, or finished."""

    BUSY = 0
    IDLE = 1
    DONE = 2


_BUSY, _IDLE, _DONE = Step.BUSY, Step.IDLE, Step.DONE


# What a vertex callback may raise that fails its vertex, named: sys.exit() and a
# KeyboardInterrupt raised by the callback too (a Ctrl-C reaches the main thread, never a
# worker's, so one here is the callback's own).
CALLBACK_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


def _receiver(v: Vertex) -> str:
    """The callback that received a batch: ``on_recv_batch`` when the vertex defines its own,
    else ``on_recv`` (which the default one calls per record)."""
    return "on_recv" if type(v).on_recv_batch is Vertex.on_recv_batch else "on_recv_batch"


def _no_clock() -> float:
    return 0.0


class WorkerState:
    """One worker's protocol state: vertices, queued batches, notification requests, progress view.

    ``index`` is the worker's global index among ``peers`` workers, ``local_index`` its index in
    its process.  ``initial_pointstamps`` are Naiad's initial counts (every worker's capability
    on every input, and after a restore the pending notifications), ``restored`` a checkpoint to
    resume from (with ``epoch``, ``states`` and ``notifications``).  ``accumulate`` combines a
    step's progress updates and holds back retirements behind the local frontier (paper
    §3.3.2); ``debug`` checks that no message arrives after its notification, and
    ``global_view`` (one process only) checks every view against the true counts.
    """

    def __init__(self, index: int, local_index: int, peers: int, graph: LogicalGraph, reach: Any,
                 *, initial_pointstamps: Iterable[Tuple[Any, int]] = (), restored: Any = None,
                 accumulate: bool = True, debug: bool = False, global_view: Any = None,
                 meter: Any = None, clock: Callable[[], float] = _no_clock,
                 process_index: Optional[int] = None):
        self.index = index
        self.local_index = local_index
        self.peers = peers
        self.graph = graph
        self.accumulate = accumulate
        self.debug = debug
        self.process_index = process_index
        self.meter = meter
        self.clock = clock
        self.actions: List[tuple] = []
        self.tracker = Tracker(reach, debug=debug)
        self.buffer = ProgressBuffer(reach)
        self.global_view = global_view
        self.add_progress = self.buffer.add if global_view is None else self._add_checked
        self.pending = BatchQueue()     # gathered by connector and time (naiad.batches)
        self.notifications: Dict[Tuple[int, Timestamp], Vertex] = {}
        self.observers: List[Any] = []
        self.connectors = graph.connectors
        self.stages = graph.stages
        self.input_epoch: Dict[int, Optional[int]] = {}
        self.stopped: Optional[str] = None
        self.ckpt_epoch: Optional[int] = None
        self.frontier_moved = False
        self.calls = 0                  # callbacks run so far (naiad.stall reads it)
        self._seen_version = -1
        self._notify_again = False      # a notification was asked for again at its own time
        self._since_flush = 0
        self._notified: Dict[int, set] = {}
        self.vertices: List[Vertex] = [self._make_vertex(st) for st in graph.stages]
        self._stage_at_loc = {st.loc: st.id for st in graph.stages}
        self._input_locs = {st.loc for st in graph.stages if st.kind == INPUT}
        base = restored.epoch if restored is not None else 0
        for st in graph.stages:
            if st.kind == INPUT:
                self.input_epoch[st.id] = base
        if restored is not None:
            self._restore(restored)
        self.tracker.update_many(initial_pointstamps)

    # ---- construction -------------------------------------------------------------------------
    def _make_vertex(self, st: StageDef) -> Vertex:
        try:
            v = st.factory()  # type: ignore[misc]  # only vertex stages reach here
        except (Exception, SystemExit) as exc:   # sys.exit() too: named, not silent
            raise VertexError(st.name, self.index, None, "the vertex factory", exc,
                              format_current(), self.process_index) from exc
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

    def _restore(self, restored: Any) -> None:
        states = restored.states.get(self.index, {})
        engine = states.get("__naiad__", {})
        for sid, epoch in engine.get("inputs", {}).items():
            self.input_epoch[sid] = epoch
        for sid, state in states.items():
            if sid == "__naiad__":
                continue
            v = self.vertices[sid]
            try:
                v.restore(snapshot.decode(state, v._stagedef.name))
            except CALLBACK_ERRORS as exc:
                self._raise_vertex_error(v, Timestamp(restored.epoch), "restore", exc)
        for w, sid, time in restored.notifications:
            if w == self.index:
                self.notifications[(sid, time)] = self.vertices[sid]

    def _add_checked(self, loc: int, time: Timestamp, delta: int) -> None:
        self.global_view.add(loc, time, delta)
        self.buffer.add(loc, time, delta)

    # ---- events -------------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        """One message of :mod:`naiad.messages` (from the inbox or a transport)."""
        tag = msg[0]
        if tag == DATA:
            self.pending.append(self.connectors[msg[1]], msg[2], msg[3])
            if self.meter is not None:
                self.meter.received(msg[1], msg[2], len(msg[3]))
        elif tag == PROGRESS:
            self.tracker.update_many(msg[2])
            if self.meter is not None:
                self.meter.progress(False, len(msg[2]))
        elif tag == INPUT_EPOCH:
            self.on_input(msg[1], msg[2], msg[3])
        elif tag == INPUT_CLOSE:
            self.on_close(msg[1])
        elif tag == STOP:
            self.stopped = msg[1]
        elif tag == CHECKPOINT:
            self.ckpt_epoch = msg[1]
        else:
            msg_ = f"worker {self.index}: a message with unknown tag {tag!r}"
            raise NaiadError(msg_)

    def on_data(self, connector_id: int, time: Timestamp, records: list) -> None:
        """A batch for a local vertex arrived on a connector (from this or another worker)."""
        self.handle((DATA, connector_id, time, records))

    def on_progress(self, sender: int, updates: list) -> None:
        """Another worker's progress updates, in the order that worker broadcast them."""
        self.handle((PROGRESS, sender, updates))

    def on_checkpoint(self, epoch: int) -> None:
        """Pause at ``epoch`` and snapshot once the view shows nothing else in flight."""
        self.ckpt_epoch = epoch

    def on_input(self, stage_id: int, epoch: int, records: list) -> None:
        """An epoch of records fed at an input: route them, advance its capability."""
        st = self.stages[stage_id]
        current = self.input_epoch[stage_id]
        if current != epoch:
            msg = f"input {st.name!r}: epoch {epoch} arrived while at {current}"
            raise NaiadError(msg)
        t = Timestamp(epoch)
        if self.meter is not None:
            self.meter.input(stage_id, epoch, len(records))
        if records:
            for conn in st.outputs[0]:
                self._route(conn, t, records)
        self.add_progress(st.loc, Timestamp(epoch + 1), 1)
        self.add_progress(st.loc, t, -1)
        self.input_epoch[stage_id] = epoch + 1

    def on_close(self, stage_id: int) -> None:
        """An input closed: retire its capability (once)."""
        epoch = self.input_epoch[stage_id]
        if epoch is None:
            return
        self.add_progress(self.stages[stage_id].loc, Timestamp(epoch), -1)
        self.input_epoch[stage_id] = None

    # ---- the scheduling step ----------------------------------------------------------------
    def step(self) -> Step:
        """Run what is due: queued batches first (messages before notifications), then, once
        progress is broadcast, the notifications the frontier allows, in time order.

        Returns BUSY when more work is due at once, IDLE when the worker must wait for an event
        and DONE when nothing is active any more.  Sets :attr:`frontier_moved` when the view
        changed (the shell then advances the inputs' flow control).
        """
        tracker = self.tracker
        if self.pending:
            # Local work first: progress made by a chain of local hand-offs leaves as one
            # broadcast, unless the chain is long (other workers must not starve).
            self.run_pending()
            self._since_flush += 1
            if self.pending and self._since_flush < STEPS_BEFORE_FLUSH:
                return _BUSY
        self._since_flush = 0
        self.flush_progress()
        if tracker.version != self._seen_version or self._notify_again:
            # (A vertex that asked again in on_notify(t) for t: the request and the retirement
            # cancel in the buffer, so the view does not change, but t is due once more.)
            self._notify_again = False
            self._seen_version = tracker.version
            self.frontier_moved = True
            if self.global_view is not None:
                self._check_view()
            if self.observers:
                self.observe()
            if self.notifications and self.run_notifications():
                return _BUSY         # run what the notifications sent before broadcasting
            self.flush_progress()
        if self.pending or tracker.version != self._seen_version:
            return _BUSY             # new local work, or a view nobody has looked at yet
        if self.ckpt_epoch is not None and self.quiescent(self.ckpt_epoch):
            self.actions.append((CHECKPOINT, self.ckpt_epoch))
            self.ckpt_epoch = None
        if tracker.is_empty() and not self.buffer:
            return _DONE
        return _IDLE

    def wants_data(self) -> bool:
        """Whether the shell should read more batches from the transport now."""
        return len(self.pending) < PENDING_BEFORE_RECEIVE

    def run_pending(self) -> None:
        """Deliver up to :data:`BATCHES_PER_STEP` queued batches to their vertices."""
        pending = self.pending
        vertices = self.vertices
        add = self.add_progress
        flush_each = not self.accumulate
        meter = self.meter
        clock = self.clock
        for _ in range(BATCHES_PER_STEP):
            if not pending:
                break
            conn, time, records, n = pending.popleft()
            self.calls += 1
            v = vertices[conn.dst]
            if self.debug:
                self._check_not_notified(conn.dst, time)
            v._now = time
            t0 = clock() if meter is not None else 0.0
            try:
                v.on_recv_batch(conn.dst_port, records, time)
            except CALLBACK_ERRORS as exc:
                self._raise_vertex_error(v, time, _receiver(v), exc)
            v._now = None
            out = self._flush_vertex(v)
            if meter is not None:
                meter.ran(conn.dst, "recv", time, len(records), out, clock() - t0)
            add(conn.loc, time, -n)
            if flush_each:
                self.flush_progress()

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

    def _route(self, conn: Any, time: Timestamp, records: list) -> None:
        key = conn.exchange.key
        add = self.add_progress
        if key is None or self.peers == 1:
            self.pending.append(conn, time, records)
            add(conn.loc, time, 1)
            if self.meter is not None:
                self.meter.send(conn.id, self.index, time, len(records))
            return
        try:
            parts = partition(records, key, self.peers)
        except CALLBACK_ERRORS as exc:
            st = self.stages[conn.dst]
            cause: BaseException = exc
            explain = conn.exchange.explain       # the clear error, from the batch
            if explain is not None:
                try:
                    explain(records)
                except CALLBACK_ERRORS as precise:
                    cause = precise
            raise VertexError(st.name, self.index, time, "partition_by", cause,
                              format_current(), self.process_index) from cause
        me = self.index
        actions = self.actions
        for dest in range(self.peers):
            part = parts[dest]
            if part:
                add(conn.loc, time, 1)
                if self.meter is not None:
                    self.meter.send(conn.id, dest, time, len(part))
                if dest == me:
                    self.pending.append(conn, time, part)
                    continue
                n = len(part)
                cut = batch_cut(part)     # parts of about 1 MB: bounded queues bound bytes
                if n > cut:
                    add(conn.loc, time, (n - 1) // cut)   # one count per further part
                    for i in range(0, n, cut):
                        actions.append((DATA, dest, conn.id, time, part[i:i + cut]))
                else:
                    actions.append((DATA, dest, conn.id, time, part))

    # ---- notifications ------------------------------------------------------------------------
    def _notify_at(self, v: Vertex, time: Timestamp) -> None:
        key = (v._stagedef.id, time)
        if key not in self.notifications:
            self.notifications[key] = v
            self.add_progress(v._stagedef.loc, time, 1)
            if self.meter is not None:
                self.meter.notify_requested(key[0], time)

    def run_notifications(self) -> bool:
        """Deliver the notifications the frontier allows, in time order; whether any ran."""
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
        meter = self.meter
        for key in ready:
            self.calls += 1
            v = notifications.pop(key)
            time = key[1]
            if self.debug:
                self._notified.setdefault(key[0], set()).add(time)
            v._now = time
            t0 = self.clock() if meter is not None else 0.0
            try:
                v.on_notify(time)
            except CALLBACK_ERRORS as exc:
                self._raise_vertex_error(v, time, "on_notify", exc)
            v._now = None
            out = self._flush_vertex(v)
            if meter is not None:
                meter.ran(key[0], "notify", time, 0, out, self.clock() - t0)
            add(v._stagedef.loc, time, -1)
            if key in notifications:
                self._notify_again = True
            if not self.accumulate:
                self.flush_progress()
        return True

    def observe(self) -> None:
        """Tell frontier observers (subscribe sinks, probes) the frontier of their input."""
        for v in self.observers:
            frontier = self.tracker.frontier_at(v._stagedef.loc)
            v._now = None
            try:
                v.observe_frontier(frontier)
            except CALLBACK_ERRORS as exc:
                at = Timestamp(min(t[0] for t in frontier)) if frontier else Timestamp(-1)
                # A subscribe sink delivers there; other observers (an arrangement that
                # compacts its traces) are named by the callback itself.
                role = getattr(v, "observe_role", "observe_frontier")
                self._raise_vertex_error(v, at, role, exc)

    def _check_not_notified(self, stage_id: int, time: Timestamp) -> None:
        for n in self._notified.get(stage_id, ()):
            if time.less_equal(n):
                msg = (f"stage {self.stages[stage_id].name!r} vertex {self.index} received a "
                       f"message at {time!r} after it was notified at {n!r}")
                raise ProgressViolation(msg)

    def _check_view(self) -> None:
        names = {st.loc: f"stage {st.name!r}" for st in self.stages}
        self.global_view.check(self.index, self.tracker, names.get)

    # ---- progress ---------------------------------------------------------------------------
    def flush_progress(self) -> None:
        """Move the buffered updates to the view and queue their broadcast (a PROGRESS action)."""
        if not self.buffer:
            return
        # While quiescing for a checkpoint nothing is held back: held retirements behind the
        # paused inputs would otherwise wait for ever.
        hold = self.accumulate and self.ckpt_epoch is None
        updates = self.buffer.drain(self.tracker, hold=hold)
        if updates:
            self.actions.append((PROGRESS, updates))
            self.tracker.update_many(updates)

    # ---- checkpoints (see naiad.recovery.quiesce) -------------------------------------------
    def quiescent(self, epoch: int) -> bool:
        """Whether this worker's view shows the whole computation paused at ``epoch``."""
        return quiesce.quiescent(self, epoch)

    def snapshot(self, epoch: int) -> Tuple[Dict[Any, Any], List[Tuple[int, int, Any]]]:
        """Every vertex's state and the pending notification requests (for a CHECKPOINT)."""
        return quiesce.snapshot(self, epoch)

    # ---- errors and diagnostics -------------------------------------------------------------
    def _raise_vertex_error(self, v: Vertex, time: Any, callback: str, exc: BaseException):
        v._now = None
        raise VertexError(v._stagedef.name, self.index, time, callback, exc,
                          format_current(), self.process_index) from exc

    def describe_progress(self) -> str:
        """The active pointstamps of this worker's view, for a diagnostic."""
        names = {st.loc: f"stage {st.name!r}" for st in self.stages}
        for c in self.connectors:
            names[c.loc] = f"edge {self.stages[c.src].name!r}->{self.stages[c.dst].name!r}"
        parts = [f"{names.get(loc, loc)} at {t!r} (count {n})"
                 for (loc, t), n in sorted(self.tracker.active().items(), key=lambda kv: kv[0][1])]
        return "; ".join(parts) or "nothing active"
