"""Inputs fed by the program, and outputs handed back per completed epoch (subscribe, collect)."""

from __future__ import annotations

import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple

from naiad.delivery import Deliverer
from naiad.recovery.logs import CheckpointWarning, OutputLost
from naiad.errors import GraphError, NaiadError, VertexError, format_current
from naiad.graph import VERTEX, StageDef, Stream
from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex
from naiad.messages import INPUT_CLOSE, INPUT_EPOCH

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Input", "Subscription", "Collection", "subscribe", "collect"]


class Input:
    """An input stage: each ``on_next(records)`` is this process's share of the next epoch."""

    def __init__(self, comp: "Computation", stage: StageDef):
        self.comp = comp
        self.stage = stage
        self.name = stage.name
        self.stream: Stream = stage.new_output()
        self.epoch = 0
        self.base_epoch = 0      # epochs below this are in the restored checkpoint: absorbed
        self.completed = False
        # (epoch, worker, message) fed past a checkpoint boundary another input has not
        # reached: delivered after the cut (naiad.recovery.coordinator.Coordinator.holds).
        self.held: List[Tuple[int, int, tuple]] = []

    def _check(self, what: str) -> None:
        comp = self.comp
        comp.check_failed()
        if comp.state == "building":
            msg = f"input {self.name!r}: {what} before comp.activate(); activate first"
            raise NaiadError(msg)
        if comp.state != "active":
            msg = f"input {self.name!r}: {what} after the computation {comp.state}"
            raise NaiadError(msg)
        if self.completed:
            msg = f"input {self.name!r}: {what} after on_completed()"
            raise NaiadError(msg)

    def on_next(self, records: Iterable[Any] = ()) -> None:
        """Supply this process's records for the next epoch and seal that epoch.  A
        ``pyarrow.Table`` (for :mod:`linq.frames`) is this process's share as one table, its
        rows divided among the process's workers."""
        self._check("on_next")
        comp = self.comp
        epoch = self.epoch
        if epoch < self.base_epoch:
            self.epoch += 1          # covered by the checkpoint we resumed from
            return
        recs = records if type(records) is list else self._as_list(records)
        window = comp.window
        if window is not None and not window.room(epoch):
            window.wait(epoch, self.name, comp.check_failed, self._lagging, self._holding)
        store = comp.store
        if store is not None:
            comp.before_epoch(epoch)
            logged = store.logged_input(self.name, epoch)
            if logged is not None:
                recs = logged        # replay what was accepted before the failure
            else:
                store.log_input(self.name, epoch, recs)
        n = comp.workers_per_process
        self.epoch += 1
        if self.epoch > comp.epochs_fed:
            comp.epochs_fed = self.epoch
        if n == 1:
            msgs = [(0, (INPUT_EPOCH, self.stage.id, epoch, recs))]
        else:
            size = -(-len(recs) // n) if recs else 0
            msgs = [(i, (INPUT_EPOCH, self.stage.id, epoch, recs[i * size:(i + 1) * size]))
                    for i in range(n)]
        if comp.coordinator is not None:
            comp.coordinator.deliver(self, epoch, msgs)     # or held for a boundary
            return
        post = comp.fabric.post
        for i, msg in msgs:
            post(i, msg)

    def release(self, before: Optional[int]) -> None:
        """Deliver the held epochs below ``before`` (all of them for None), in order."""
        if not self.held:
            return
        post = self.comp.fabric.post
        keep = [h for h in self.held if before is not None and h[0] >= before]
        for epoch, i, msg in self.held:
            if before is None or epoch < before:
                post(i, msg)
        self.held = keep

    def _holding(self) -> Optional[str]:
        """The subscriber whose callback has run longest, if for the whole wait (WARN_AFTER
        seconds): a slow callback that returns now and then is not one that waits for us."""
        from naiad import flow
        busy = [(sub.deliverer.busy_for(), sub) for sub in self.comp.subscriptions
                if getattr(sub, "deliverer", None) is not None]
        if not busy:
            return None
        seconds, sub = max(busy, key=lambda b: b[0])
        if seconds < flow.WARN_AFTER:
            return None
        return (f"the callback of subscriber {sub.name!r} has run for {seconds:.0f} s on epoch "
                f"{sub.deliverer.done}")

    def _lagging(self):
        """This process's other open inputs, as ``(name, next epoch)``."""
        return [(i.name, i.epoch) for i in self.comp.inputs if i is not self and not i.completed]

    def _as_list(self, records: Any) -> list:
        arrow = sys.modules.get("pyarrow")
        if arrow is not None and isinstance(records, (arrow.Table, arrow.RecordBatch)):
            return self._table_share(arrow, records)
        if isinstance(records, (str, bytes, bytearray, dict)):
            msg = (f"input {self.name!r}: on_next takes an iterable of records (a list); got a "
                   f"{type(records).__name__}, whose {'keys' if isinstance(records, dict) else 'items'}"
                   " would each become a record; wrap one record in a list: on_next([record])")
            raise TypeError(msg)
        try:
            return list(records)
        except TypeError:
            msg = (f"input {self.name!r}: on_next takes an iterable of records (a list); got "
                   f"{type(records).__name__} {records!r:.80}; wrap one record in a list: "
                   "on_next([record])")
            raise TypeError(msg) from None

    def _table_share(self, arrow: Any, table: Any) -> list:
        """An Arrow table is one message of a frame stream, not an iterable of records: its
        rows are divided among this process's workers as slices (no copy), in order."""
        if isinstance(table, arrow.RecordBatch):
            table = arrow.Table.from_batches([table])
        n = self.comp.workers_per_process
        size = max(1, -(-table.num_rows // n))
        parts = [table.slice(i * size, size) for i in range(n) if i * size < table.num_rows]
        return parts or [table]

    def on_completed(self) -> None:
        """No more epochs from this input."""
        self._check("on_completed")
        self.completed = True
        msgs = [(i, (INPUT_CLOSE, self.stage.id)) for i in range(self.comp.workers_per_process)]
        if self.comp.coordinator is not None:
            self.comp.coordinator.close_input(self, msgs)   # after the epochs it holds back
            return
        for i, msg in msgs:
            self.comp.fabric.post(i, msg)

    def __repr__(self) -> str:
        return f"Input({self.name!r}, epoch={self.epoch})"


class Subscription:
    """Calls ``fn(epoch, records)`` once per completed epoch, in order, with this process's records
    (in the subscription's own thread: see :mod:`naiad.delivery`)."""

    threaded = True

    def __init__(self, comp: "Computation", name: str, fn: Callable[[int, list], Any]):
        self.comp = comp
        self.name = name
        self.fn = fn
        n = comp.workers_per_process
        self._bounds: List[float] = [0] * n
        self._parts: List[Dict[int, list]] = [{} for _ in range(n)]
        self._lock = threading.Lock()
        self.delivered = 0   # epochs handed out so far
        self.store = None
        self.deliverer: Optional[Deliverer] = None
        self.slot = 0        # this subscription's place in the inputs' flow control

    def attach(self, store, base: int) -> None:
        """Resume: epochs already handed out (logged durably) are not handed out again."""
        self.store = store
        if store is not None:
            marked = store.delivered(self.name)
            if marked < base:
                # A checkpoint commits only once its epochs were handed out and marked: a mark
                # below it was lost (deleted, emptied, damaged), and with it how far beyond the
                # checkpoint the subscriber had got.
                warnings.warn(f"{self.name}: its delivery mark in the checkpoint directory is "
                              f"missing or damaged (it holds {marked}, the checkpoint is at "
                              f"epoch {base}); epochs from {base} on that were handed out before "
                              "the failure are handed out again", CheckpointWarning,
                              stacklevel=2)
            self.delivered = max(base, marked)
            store.open_marks(self.name, self.delivered)
        self._start(self.delivered)

    def _start(self, start: int) -> None:
        if not self.threaded:
            return
        comp = self.comp

        def failed(exc: BaseException, epoch: int) -> None:
            comp.fail(VertexError(self.name, comp.process_index * comp.workers_per_process,
                                  Timestamp(epoch), "subscribe", exc,
                                  format_current(), comp.process_index))

        def progress(epoch: int) -> None:
            if comp.window is not None:
                comp.window.advance(self.slot, epoch)
        self.deliverer = Deliverer(self.name, self.deliver, failed, progress, start)

    def wait_delivered(self, epoch: int, timeout: float) -> None:
        """Block until the subscriber has returned for every epoch below ``epoch``."""
        if self.deliverer is not None:
            self.deliverer.wait(epoch, timeout, self.comp.check_failed)

    def halt(self, timeout: float) -> None:
        """The process is being stopped: no further call of ``fn``; the current one, if any,
        returns and is marked first (bounded by ``timeout``)."""
        if self.deliverer is not None:
            self.deliverer.halt(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """The run ended: let the subscriber finish what it was handed."""
        if self.deliverer is not None:
            if not self.deliverer.close(timeout):
                msg = (f"{self.name}: the subscriber has not returned from epoch "
                       f"{self.deliverer.done} after "
                       f"{timeout:.0f} s; its remaining epochs are not delivered")
                self.comp.fail(NaiadError(msg))
            self.deliverer = None

    def advance(self, local_index: int, bound: Optional[int], ready: Dict[int, list]) -> None:
        """A worker's sink saw its input complete below epoch ``bound`` (None: all complete)."""
        with self._lock:
            parts = self._parts[local_index]
            for e, got in ready.items():
                parts.setdefault(e, []).extend(got)
            self._bounds[local_index] = float("inf") if bound is None else bound
            low = min(self._bounds)
            if low == float("inf"):
                # Complete: every epoch fed, and any later epoch a vertex sent records into.
                later = [e for p in self._parts for e in p]
                target = max([self.comp.epochs_fed] + [e + 1 for e in later])
            else:
                target = int(low)
            if self.store is not None:
                for p in self._parts:
                    for old in [e for e in p if e < self.delivered]:
                        del p[old]
            while self.delivered < target:
                e = self.delivered
                recs: list = []
                for p in self._parts:
                    got = p.pop(e, [])
                    if got:
                        recs.extend(got)
                if self.deliverer is not None:
                    self.deliverer.put(e, recs)
                else:
                    self.deliver(e, recs)
                self.delivered = e + 1

    def deliver(self, epoch: int, records: list) -> None:
        self.fn(epoch, records)
        if self.store is not None:
            self.store.mark_delivered(self.name, epoch + 1)


class Collection(Subscription):
    """The records of each epoch that reached this process: ``results[epoch] -> list``."""

    threaded = False       # no user code: stored by the worker that completes the epoch

    def __init__(self, comp: "Computation", name: str):
        super().__init__(comp, name, self._store)
        self.results: Dict[int, list] = {}

    def attach(self, store, base: int) -> None:
        """Resume: epochs collected before are loaded; recomputed ones replace them.  Every
        epoch before the checkpoint must be there: one lost to damage cannot be recomputed
        (its inputs are covered by the checkpoint), so it is named in an OutputLost error."""
        self.store = store
        if store is not None:
            stored = store.stored_outputs(self.name)
            missing = [e for e in range(base) if e not in stored]
            if missing:
                msg = (f"{self.name}: the collected records of epoch(s) {_ranges(missing)} are "
                       f"missing or damaged in {store.output_path(self.name)} (a file that "
                       "fails its check is named in a warning; one cut short or deleted is "
                       "not) and the checkpoint "
                       f"at epoch {base} covers their inputs, so they cannot be recomputed; "
                       "rerun from a fresh checkpoint_dir to get them")
                raise OutputLost(msg)
            self.results.update(stored)
            self.delivered = base

    def deliver(self, epoch: int, records: list) -> None:
        self.results[epoch] = records
        if self.store is not None:
            self.store.store_output(self.name, epoch, records)

    def _store(self, epoch: int, records: list) -> None:
        self.results[epoch] = records

    def records(self) -> list:
        """All collected records, epoch by epoch."""
        return [r for e in sorted(self.results) for r in self.results[e]]


def _ranges(epochs: List[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``."""
    out: List[str] = []
    start = epochs[0]
    for a, b in zip(epochs, [*epochs[1:], -1]):
        if b != a + 1:
            out.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


class _SinkVertex(Vertex):
    """Keeps records per epoch and hands complete epochs to its subscription."""

    _observer = True
    observe_role = "subscribe"      # what an error while it observes the frontier is called

    def __init__(self, sub: Subscription):
        super().__init__()
        self.sub = sub
        self.epochs: Dict[int, list] = {}
        self.bound: Optional[int] = 0

    def on_recv_batch(self, edge: int, messages: list, time) -> None:
        lst = self.epochs.get(time[0])
        if lst is None:
            self.epochs[time[0]] = lst = []
        lst.extend(messages)

    def checkpoint(self):
        return {"epochs": self.epochs, "bound": self.bound}

    def restore(self, state) -> None:
        self.epochs = state["epochs"]
        self.bound = state["bound"]

    def observe_frontier(self, frontier) -> None:
        self.advance_to(min(t[0] for t in frontier) if frontier else None)

    def advance_to(self, bound: Optional[int]) -> None:
        if bound == self.bound:
            return
        if bound is None:
            ready, self.epochs = self.epochs, {}
        else:
            ready = {e: self.epochs.pop(e) for e in [e for e in self.epochs if e < bound]}
        self.bound = bound
        try:
            self.sub.advance(self._worker.local_index, bound, ready)
        except VertexError:
            raise
        except Exception as exc:
            msg = f"subscriber of stage {self.stage.name!r} raised {type(exc).__name__}: {exc}"
            raise RuntimeError(msg) from exc


def _sink(stream: Stream, sub_factory: Callable[["Computation", str], Subscription],
          what: str):
    graph = stream.graph
    graph.check_stream(stream, what)
    if stream.scope is not graph.top:
        msg = (f"{what} needs a stream outside any loop (its scope is {stream.scope.path()}); "
               "leave the loop with loop.exit(stream) first")
        raise GraphError(msg)
    comp = graph.computation
    name = graph.unique_name(None, what)
    sub = sub_factory(comp, name)
    stage = graph.add_stage(name, VERTEX, lambda: _SinkVertex(sub), graph.top, default=what)
    stage.new_input(stream, None)
    comp.subscriptions.append(sub)
    return sub


def subscribe(stream: Stream, fn: Callable[[int, list], Any]) -> Subscription:
    """Call ``fn(epoch, records)`` once per completed epoch, in epoch order, in each process."""
    if not callable(fn):
        msg = f"subscribe needs a callable fn(epoch, records); got {type(fn).__name__}"
        raise TypeError(msg)
    return _sink(stream, lambda comp, name: Subscription(comp, name, fn), "subscribe")


def collect(stream: Stream) -> Collection:
    """Gather the records reaching this process, per epoch, into ``.results``."""
    return _sink(stream, Collection, "collect")


def _install() -> None:
    """Stream.subscribe and Stream.collect (the graph layer declares them; this one builds them)."""
    def subscribe_method(self: Stream, fn: Callable[[int, list], Any]) -> Subscription:
        return subscribe(self, fn)

    def collect_method(self: Stream) -> Collection:
        return collect(self)

    subscribe_method.__doc__ = Stream.subscribe.__doc__
    collect_method.__doc__ = Stream.collect.__doc__
    Stream.subscribe = subscribe_method      # type: ignore[method-assign]
    Stream.collect = collect_method          # type: ignore[method-assign]


_install()
