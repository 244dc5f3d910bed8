"""Probes (timely's ProbeHandle): how far has the computation got at one point of the graph?

``stream.probe()`` attaches a stage that drops its records and, in every worker, watches the
frontier of its input: the least times at which a record could still arrive there.  Each worker's
view of the progress state is conservative (it never shows a time complete before it is complete
everywhere), so the probe in every process answers for the whole computation, not just for its
own workers.  The program thread asks ``less_than(t)``, ``less_equal(t)`` and ``done()``, or blocks
with ``wait(epoch)``; the workers tell the probe only when the frontier changes.

A time ``t`` is an epoch (int), compared with the epoch of each frontier time, or a
:class:`~naiad.Timestamp`, compared in the product order (for a probe inside a loop).

>>> import naiad
>>> comp = naiad.Computation(workers=2)
>>> inp = comp.new_input()
>>> probe = inp.stream.probe()
>>> comp.activate()
>>> inp.on_next([1, 2])
>>> probe.wait(0, timeout=10)          # epoch 0 is complete at the probe
>>> probe.less_equal(0), probe.less_equal(1), probe.done()
(False, True, False)
>>> inp.on_completed(); comp.join(timeout=10)
>>> probe.done()
True
"""

from __future__ import annotations

import threading
import time as _time
from typing import TYPE_CHECKING, List, Optional, Union

from naiad.graph import VERTEX, Stream
from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Probe", "probe"]

Time = Union[int, Timestamp]


def _before(f: Timestamp, t: Time, strict: bool) -> bool:
    if isinstance(t, Timestamp):
        return f.less_equal(t) and (not strict or f != t)
    return f[0] < t if strict else f[0] <= t


class Probe:
    """The frontier at one point of the graph, as seen by this process's workers."""

    def __init__(self, comp: "Computation", name: str):
        self.comp = comp
        self.name = name
        # None until a worker has looked: nothing is known to be complete.
        self._frontiers: List[Optional[List[Timestamp]]] = [None] * comp.workers_per_process
        self._cv = threading.Condition()

    # ---- called by the workers -------------------------------------------------------------
    def _update(self, local_index: int, frontier: List[Timestamp]) -> None:
        with self._cv:
            self._frontiers[local_index] = frontier
            self._cv.notify_all()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    # ---- the questions ---------------------------------------------------------------------
    def frontier(self) -> List[Timestamp]:
        """The least times that could still arrive here (empty: nothing more ever will)."""
        with self._cv:
            if any(f is None for f in self._frontiers):
                return [Timestamp(0)]
            return sorted({t for f in self._frontiers for t in f})    # type: ignore[union-attr]

    def less_than(self, t: Time) -> bool:
        """Whether a record at a time strictly before ``t`` may still arrive here."""
        return any(_before(f, t, True) for f in self.frontier())

    def less_equal(self, t: Time) -> bool:
        """Whether a record at a time at or before ``t`` may still arrive (``t`` not complete)."""
        return any(_before(f, t, False) for f in self.frontier())

    def done(self) -> bool:
        """Whether nothing more will ever arrive here."""
        return not self.frontier()

    def wait(self, epoch: Time, timeout: Optional[float] = None) -> None:
        """Block until ``epoch`` is complete here.  Raises the computation's failure if it
        fails meanwhile, and TimeoutError (saying what is still active) after ``timeout`` s."""
        deadline = None if timeout is None else _time.monotonic() + timeout
        coordinator = getattr(self.comp, "coordinator", None)
        if coordinator is not None and self._pending(epoch):
            # Epochs an input holds back for a checkpoint boundary go on: the program needs them.
            coordinator.waiting_for(epoch if isinstance(epoch, int) else epoch.epoch)
        with self._cv:
            while self._pending(epoch):
                self.comp.check_failed()
                left = None if deadline is None else deadline - _time.monotonic()
                if left is not None and left <= 0:
                    msg = (f"probe {self.name!r}: epoch {epoch!r} not complete after {timeout} s; "
                           f"frontier {self.frontier()!r}; process {self.comp.process_index} "
                           f"still sees: {self.comp.describe_progress()}")
                    raise TimeoutError(msg)
                self._cv.wait(1.0 if left is None else min(1.0, left))
        self.comp.check_failed()

    def _pending(self, t: Time) -> bool:
        if any(f is None for f in self._frontiers):
            return True
        return any(_before(f, t, False) for fs in self._frontiers for f in fs)  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"Probe({self.name!r}, frontier={self.frontier()!r})"


class _ProbeVertex(Vertex):
    """Drops its records; tells the probe the frontier of its input when it changes."""

    _observer = True

    def __init__(self, handle: Probe):
        super().__init__()
        self.handle = handle
        self.seen: Optional[List[Timestamp]] = None

    def on_recv_batch(self, edge: int, messages: list, time) -> None:
        pass

    def checkpoint(self) -> None:
        """Nothing to keep: the frontier it reports is seen again after a restore (its handle,
        the program's Probe, is not state)."""
        return None

    def restore(self, state: None) -> None:
        pass

    def observe_frontier(self, frontier: List[Timestamp]) -> None:
        if frontier != self.seen:
            self.seen = frontier
            self.handle._update(self._worker.local_index, frontier)


def probe(stream: Stream, name: Optional[str] = None) -> Probe:
    """A :class:`Probe` at ``stream`` (any scope); build it before ``comp.activate()``."""
    graph = stream.graph
    graph.check_stream(stream, "probe")
    comp = graph.computation
    label = graph.unique_name(name, "probe")
    handle = Probe(comp, label)
    stage = graph.add_stage(label, VERTEX, lambda: _ProbeVertex(handle), stream.scope,
                            default="probe")
    stage.new_input(stream, None)
    comp.probes.append(handle)
    return handle


def _probe_method(self: Stream, name: Optional[str] = None) -> Probe:
    return probe(self, name)


_probe_method.__doc__ = Stream.probe.__doc__
Stream.probe = _probe_method                 # type: ignore[method-assign]
