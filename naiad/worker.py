"""A worker thread: the shell that runs one :class:`~naiad.worker_state.WorkerState`.

The protocol (vertices, queues, notifications, the progress view) is the sans-I/O state machine
in :mod:`naiad.worker_state`.  This shell owns what it must not: the thread, the inbox and the
transport (a :class:`~naiad.transport.protocol.Fabric`), the clock and the meter, the garbage
collector policy, the inputs' flow-control window, and the hand-over of snapshots and failures
to the computation.  A round of the loop: take what arrived and hand it to the state machine;
let it step; carry out the actions it collected (sends, progress broadcasts, a snapshot); when
it is idle, flush the transport and block on the inbox (bounded).
"""

from __future__ import annotations

import math
import sys
import threading
import time as _time
from queue import Empty
from typing import TYPE_CHECKING, Any

from naiad import gcpolicy
from naiad.flow import low_epoch
from naiad.graph import LogicalGraph
from naiad.messages import CHECKPOINT, DATA, INPUT_EPOCH, PROGRESS
from naiad.worker_state import Step, WorkerState

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation
    from naiad.transport.protocol import Fabric

__all__ = ["Worker"]

_BUSY, _DONE = Step.BUSY, Step.DONE
_WAIT_SECONDS = 1.0          # an idle worker looks at its inbox and the computation this often
_CALLBACKS = frozenset({"on_recv", "on_recv_batch", "on_notify", "checkpoint", "observe_frontier"})


class Worker:
    """One worker thread around its protocol state (:attr:`state`)."""

    def __init__(self, comp: "Computation", index: int, local_index: int, graph: LogicalGraph,
                 reach: Any, fabric: "Fabric", accumulate: bool = True, debug: bool = False):
        self.comp = comp
        self.index = index
        self.local_index = local_index
        self.fabric = fabric
        self.inbox = fabric.inbox(local_index)
        self.meter = comp.meter_for(index)
        self.window = comp.window            # flow control at the inputs (None: off)
        # The input logs keep the records of the epochs fed in memory: written (one system
        # call for all of them) before this worker takes an epoch of input.
        self.flush_inputs = comp.store.flush_inputs if comp.store is not None else None
        self.finished = False
        self.thread_id: int = 0              # the thread running it, once it runs
        self.state = WorkerState(
            index, local_index, comp.workers, graph, reach,
            initial_pointstamps=comp.initial_pointstamps, restored=comp.restored,
            accumulate=accumulate, debug=debug,
            global_view=comp.global_view if debug else None,
            meter=self.meter, clock=_time.perf_counter, process_index=comp.process_index)

    @property
    def stages(self):
        return self.state.stages

    @property
    def vertices(self):
        return self.state.vertices

    @property
    def tracker(self):
        return self.state.tracker

    def describe_progress(self) -> str:
        """The active pointstamps of this worker's view, for a diagnostic."""
        return self.state.describe_progress()

    def describe_callback(self) -> str:
        """Which vertex callback this worker's thread is in now, and where in it (the
        innermost frame), or ``""``: read from the thread's frames, so nothing is recorded
        on the way in and out of callbacks."""
        frame = sys._current_frames().get(self.thread_id) if self.thread_id else None
        innermost = frame
        from naiad.vertex import Vertex
        while frame is not None:
            if frame.f_code.co_name in _CALLBACKS:
                vertex = frame.f_locals.get("self")
                if isinstance(vertex, Vertex) and getattr(vertex, "_stagedef", None) is not None:
                    if innermost is not None and innermost is not frame:
                        code = innermost.f_code
                        where = f", now in {code.co_name} ({code.co_filename}:{innermost.f_lineno})"
                    else:       # in the callback's own body (a loop, or a call into C)
                        where = f", now at {frame.f_code.co_filename}:{frame.f_lineno}"
                    # The time the engine set for the callback, whatever its parameter's name.
                    t = getattr(vertex, "_now", None)
                    if t is None:
                        t = frame.f_locals.get("time", frame.f_locals.get("time_"))
                    at = f" at {t!r}" if t is not None else ""
                    return (f"worker {self.index} is in stage {vertex._stagedef.name!r}"
                            f".{frame.f_code.co_name}{at}{where}")
            frame = frame.f_back
        return ""

    # ---- the thread ---------------------------------------------------------------------------
    def run(self) -> None:
        """Run until the computation completes or is stopped; errors go to the computation."""
        self.thread_id = threading.get_ident()
        gcpolicy.enter()
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the computation
            if self.meter is not None:
                self.meter.event("failure", error=f"{type(exc).__name__}: {exc}")
            self.comp.worker_failed(self, exc)
        finally:
            gcpolicy.exit_()
            if self.meter is not None:
                self.meter.publish_frontiers(self.state.tracker, self.state.stages)
                self.meter.close()
            if self.window is not None:
                self.window.advance(self.local_index, math.inf)
            self.finished = True
            self.comp.worker_exited(self)

    def _loop(self) -> None:
        state = self.state
        step = state.step
        actions = state.actions
        fabric = self.fabric
        send, broadcast = fabric.send, fabric.broadcast_progress
        index, local = self.index, self.local_index
        window, meter = self.window, self.meter
        tracker = state.tracker
        stale = False           # a frontier move not published yet (published at most 4 a second)
        while True:
            self._take_inbox()
            if state.stopped is not None:
                return
            status = step()
            if actions:
                # The actions, in order: sends and broadcasts to the transport, snapshots to
                # the computation (inline: this runs at every step).
                for action in actions:
                    tag = action[0]
                    if tag == PROGRESS:
                        if meter is not None:
                            meter.progress(True, len(action[1]))
                        broadcast(index, action[1])
                    elif tag == DATA:
                        send(index, action[1], action[2], action[3], action[4])
                    elif tag == CHECKPOINT:
                        # Quiescent: the processes can start agreeing that every worker is,
                        # while this one pickles its vertices (nothing runs in between).
                        self.comp.on_quiescent(self, action[1])
                        began = _time.perf_counter()
                        states, notifications = state.snapshot(action[1])
                        self.comp.on_snapshot(self, action[1], states, notifications,
                                              _time.perf_counter() - began)
                actions.clear()
            if state.frontier_moved:
                state.frontier_moved = False
                if window is not None:
                    window.advance(local, low_epoch(tracker.frontier_view()))
                if meter is not None:
                    stale = _time.monotonic() - meter.frontier_clock <= 0.25
                    if not stale:
                        meter.publish_frontiers(tracker, state.stages)
            if status is _BUSY:
                continue
            fabric.flush(index)
            if status is _DONE:
                return
            if stale and meter is not None:     # going idle: publish, or it shows an old one
                meter.publish_frontiers(tracker, state.stages)
                stale = False
            gcpolicy.idle()
            msg = fabric.wait(local, _WAIT_SECONDS)
            if msg is not None:
                if msg[0] == INPUT_EPOCH and self.flush_inputs is not None:
                    self.flush_inputs()
                state.handle(msg)

    def _take_inbox(self) -> None:
        state = self.state
        handle = state.handle
        if state.wants_data():      # else the rest waits in the bounded queues (flow control)
            for msg in self.fabric.receive(self.local_index):
                handle(msg)
        inbox = self.inbox
        flush = self.flush_inputs
        while not inbox.empty():
            try:
                msg = inbox.get_nowait()
            except Empty:  # pragma: no cover - another reader cannot exist
                break
            if flush is not None and msg[0] == INPUT_EPOCH:
                flush()
            handle(msg)
