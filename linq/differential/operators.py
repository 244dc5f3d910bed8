"""The vertices of differential dataflow: linear maps, join, reduce and consolidate.

Batches carry changes.  Between collections they are ``(record, diff)`` pairs; into keyed
operators they are ``(key, value, diff)`` triples, exchanged on the key.  The time of a change is
the time of the message carrying it, so an operator that produces a change at a later time (a
least upper bound) sends it at that time.

* :class:`LinearVertex`: map, filter, flat_map, negate and inspect, fused into one batch function;
  no state, no exchange.
* :class:`JoinVertex`: both inputs arranged by key; a batch on one side is joined with the other
  side's trace at once (each pair of updates meets exactly once, when the second arrives), at
  the least upper bound of their times.  No notification is needed.
* :class:`ReduceVertex`: the seed's group operator.  Each change schedules its key at its time;
  at the notification of a time the key's input and output are accumulated at that time, the
  logic is applied to the input, and the difference from the output is emitted.  Processing a
  key at ``T`` also schedules it at ``lub(T, t)`` for every time ``t`` of its history not below
  ``T``: the interesting times at which two changes first hold together.  In the first epoch
  of a loop, whose times form a chain, none can arise: the notification then sums each key's
  updates without comparing times (:meth:`ReduceVertex._notify_ordered`).
* :class:`ConsolidateVertex`: sums the changes of a time at its notification.

Every stateful vertex compacts its traces when its frontier moves (:mod:`.trace`).
"""

from __future__ import annotations

import reprlib
from operator import itemgetter
from typing import Any, Callable, Dict, Hashable, Iterable, List, Set, Tuple

from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex

from linq.core import UserFunctionError, fn_name
from linq.differential.lattice import lower_bound, lub
from linq.differential.logic import Logic
from linq.differential.trace import _NONE, Trace, Update

__all__ = ["LinearVertex", "Arranged", "JoinVertex", "ReduceVertex", "ConsolidateVertex"]

_first = itemgetter(0)
_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60


class LinearVertex(Vertex):
    """``fn(batch, time) -> batch``: the fused linear operators of a collection."""

    def __init__(self, op: str, fn: Callable[[list, Timestamp], list],
                 diagnose: Callable[[list, Timestamp], None]):
        super().__init__()
        self.op = op
        self.fn = fn
        self.diagnose = diagnose

    def on_recv_batch(self, edge: int, records: list, time: Timestamp) -> None:
        try:
            out = self.fn(records, time)
        except UserFunctionError:
            raise
        except Exception as exc:
            self.diagnose(records, time)          # raises the precise error
            msg = f"{self.op} failed on a batch: {type(exc).__name__}: {exc}"
            raise RuntimeError(msg) from exc
        if out:
            self.send_batch_by(0, out, time)

    def checkpoint(self) -> Any:
        return None

    def restore(self, state: Any) -> None:
        pass


class Arranged(Vertex):
    """A vertex holding traces, compacted whenever its frontier moves."""

    _observer = True            # the worker tells it the frontier at its input
    observe_role = "compaction of its traces"
    _compacted_at = -1          # the least epoch of the frontier at the last compaction
    op: str
    key_fn: Any

    def traces(self) -> List[Trace]:
        raise NotImplementedError

    def observe_frontier(self, frontier: List[Timestamp]) -> None:
        """Compact when the least epoch of the frontier moves: within an epoch's loop, while a
        later epoch may still come, no two iterations can be told apart less (the advanced
        time of ``(e, i)`` stays ``(e, i)``), so compacting then would find nothing to merge."""
        if not frontier:
            return
        epoch = min(t[0] for t in frontier)
        if epoch == self._compacted_at:
            return
        self._compacted_at = epoch
        bound = lower_bound(frontier)
        for tr in self.traces():
            if tr.dirty:
                try:
                    tr.compact(bound)
                except TypeError as exc:
                    if "unhashable" not in str(exc):
                        raise
                    raise UserFunctionError(self.op, "record or value", None, (),
                                            f"is unhashable ({exc})", "hashable records and "
                                            "values: a collection is a multiset of them",
                                            "convert lists to tuples") from exc

    def _unhashable(self, exc: TypeError, batch: list) -> None:
        """The UserFunctionError for a batch of ``(key, value, diff)`` triples holding an
        unhashable key or value (the arrangement before this vertex checks the first triple
        of each batch and names its record; this names what it can of a later one)."""
        for k, v, d in batch:
            try:
                hash(k)
            except TypeError:
                raise UserFunctionError(self.op, "key", self.key_fn, (),
                                        f"returned unhashable {type(k).__name__} {_repr.repr(k)}",
                                        "a hashable key", "convert lists to tuples") from None
            try:
                hash(v)
            except TypeError:
                raise UserFunctionError(self.op, "value", None, (v,),
                                        f"of type {type(v).__name__} is unhashable",
                                        "hashable records and values: a collection is a "
                                        "multiset of them", "convert lists to tuples") from None
        raise exc

    def checkpoint(self) -> Any:
        return {k: v for k, v in self.__dict__.items()
                if isinstance(v, (Trace, dict, tuple))}

    def restore(self, state: Any) -> None:
        self.__dict__.update(state)


class JoinVertex(Arranged):
    """``result(a, b)`` for every pair of updates with equal keys, at the lub of their times."""

    def __init__(self, op: str, result: Callable[[Any, Any], Any], key_fn: Any):
        super().__init__()
        self.op = op
        self.result = result
        self.key_fn = key_fn
        self.sides = (Trace(), Trace())

    def traces(self) -> List[Trace]:
        return list(self.sides)

    def _other(self, edge: int, batch: list) -> Any:
        """The other side's updates by key, as far as this join has had them."""
        return self.sides[1 - edge].index

    def _trace_of(self, edge: int) -> Trace:
        """The trace of input ``edge``'s updates."""
        return self.sides[edge]

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        if self._trace_of(1 - edge).all_at_or_before(time):
            self._join_now(edge, batch, time)       # every pair at ``time``: one comprehension
        else:
            self._join_later(edge, batch, time)
        try:
            self.sides[edge].add_batch(batch, time)
        except TypeError as exc:
            self._unhashable(exc, batch)

    def _join_now(self, edge: int, batch: list, time: Timestamp) -> None:
        other = self._other(edge, batch)
        f = self.result
        try:
            if edge == 0:
                out = [(f(v, v2), d * d2) for k, v, d in batch if (ups := other.get(k))
                       for v2, _, d2 in ups]
            else:
                out = [(f(v2, v), d * d2) for k, v, d in batch if (ups := other.get(k))
                       for v2, _, d2 in ups]
        except Exception:
            # The pair-by-pair path names the failing pair (and raises); nothing was sent yet.
            self._join_later(edge, batch, time)
            return
        if out:
            self.send_batch_by(0, out, time)

    def _join_later(self, edge: int, batch: list, time: Timestamp) -> None:
        other = self._other(edge, batch)
        result = self.result
        now: list = []                            # pairs at ``time`` itself: the common case
        later: Dict[Timestamp, list] = {}         # pairs at a later least upper bound
        lubs: Dict[Timestamp, Timestamp] = {}
        last_t2: Any = None
        last_t: Any = None
        v = v2 = None
        try:
            for k, v, d in batch:
                ups = other.get(k)
                if not ups:
                    continue
                for v2, t2, d2 in ups:
                    if t2 is not last_t2:
                        last_t = lubs.get(t2)
                        if last_t is None:
                            last_t = lubs[t2] = lub(time, t2)
                        last_t2 = t2
                    out = now if last_t == time else later.setdefault(last_t, [])
                    if edge == 0:
                        out.append((result(v, v2), d * d2))
                    else:
                        out.append((result(v2, v), d * d2))
        except TypeError as exc:
            if "unhashable" in str(exc):
                self._unhashable(exc, batch)
            self._failed(exc, edge, v, v2)
        except Exception as exc:
            self._failed(exc, edge, v, v2)
        if now:
            self.send_batch_by(0, now, time)
        for t, lst in later.items():
            self.send_batch_by(0, lst, t)

    def _failed(self, exc: Exception, edge: int, v: Any, v2: Any):
        args = (v, v2) if edge == 0 else (v2, v)
        raise UserFunctionError(self.op, "result", self.result, args,
                                f"raised {type(exc).__name__}: {exc}") from exc


class ReduceVertex(Arranged):
    """Keeps ``output[t] == logic(input[t])`` per key, recomputing only keys that changed."""

    # Whether a notification whose times form a chain takes :meth:`_notify_ordered` (False
    # forces the general path everywhere: the tests compare the two).
    ordered = True

    def __init__(self, op: str, logic: Logic, key_fn: Any, fn: Any = None,
                 nonnegative: bool = True):
        super().__init__()
        self.op = op
        self.logic = logic
        self.key_fn = key_fn
        self.fn = fn
        self.nonnegative = nonnegative
        self.input = Trace()
        self.output = Trace()
        self.pending: Dict[Timestamp, Set[Hashable]] = {}

    def traces(self) -> List[Trace]:
        return [self.input, self.output]

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        keys = self.pending.get(time)
        if keys is None:
            keys = self.pending[time] = set()
            self.notify_at(time)
        try:
            self.input.add_batch(batch, time)
            keys.update(map(_first, batch))
        except TypeError as exc:
            self._unhashable(exc, batch)

    def _schedule(self, key: Hashable, time: Timestamp) -> None:
        keys = self.pending.get(time)
        if keys is None:
            keys = self.pending[time] = set()
            self.notify_at(time)
        keys.add(key)

    def on_notify(self, time: Timestamp) -> None:
        keys = self.pending.pop(time, ())
        if self.ordered:
            # chain_at refuses at once a trace holding two epochs (every epoch after the first).
            below = self.input.chain_at(time)
            if below is not None and self.output.all_at_or_before(time):
                self._notify_ordered(keys, time, below)
                return
        inputs = self.input
        outputs = self.output
        logic = self.logic
        out: List[Tuple[Any, int]] = []
        for key in keys:
            acc, later = inputs.accumulate(key, time)
            if acc:
                if self.nonnegative:
                    self._check(key, acc, time)
                desired = logic(key, acc)
            else:
                desired = {}
            if later:
                for t in {u[1] for u in later}:
                    self._schedule(key, lub(time, t))
            current = dict(outputs.accumulate(key, time)[0])
            for r, n in desired.items():
                d = n - current.pop(r, 0)
                if d:
                    out.append((r, d))
                    outputs.add(key, r, time, d)
            for r, n in current.items():
                out.append((r, -n))
                outputs.add(key, r, time, -n)
        if out:
            self.send_batch_by(0, out, time)

    def _notify_ordered(self, keys: Iterable[Hashable], time: Timestamp,
                        below: Dict[Timestamp, bool]) -> None:
        """:meth:`on_notify` when every output update is at a time ``<= time`` and every input
        update of this epoch only, at a time comparable with ``time`` (the first epoch of a
        loop: its iterations form a chain); ``below`` tells which input times are ``<= time``.

        A collection at ``time`` is then the sum of the updates at those times, without a
        comparison per update, and the whole sum when all are.  The interesting times are
        only the later times of a key's input updates, where the key is scheduled already
        (it got those updates then), so none is scheduled here."""
        if all(below.values()):
            added = self._ordered_all(keys, time)
        else:
            added = self._ordered_some(keys, time, below)
        if added:
            self.output.add_batch(added, time)
            self.send_batch_by(0, [(r, d) for _, r, d in added], time)

    def _ordered_all(self, keys: Iterable[Hashable], time: Timestamp
                     ) -> List[Tuple[Hashable, Any, int]]:
        """:meth:`_notify_ordered` when every input update is at a time ``<= time``: each
        key's input and output collections are the whole sums of their updates, read from the
        traces' caches plus the updates appended since (:meth:`Trace.accumulate_all`, inline:
        this loop runs once per key and iteration)."""
        inp, outp = self.input, self.output
        index, cache = inp.index, inp.cache
        out_index = outp.index
        added: List[Tuple[Hashable, Any, int]] = []
        for key in keys:
            lst = index.get(key)
            if lst:
                c = cache.get(key)
                if c is None:
                    acc: Dict[Any, int] = {}
                    todo: Iterable[Update] = lst
                elif c[3]:
                    acc = c[1]
                    todo = c[3] + lst[c[2]:]
                else:
                    acc = c[1]
                    todo = lst[c[2]:] if c[2] != len(lst) else ()
                get = acc.get
                for v, _, d in todo:
                    n = get(v, 0) + d
                    if n:
                        acc[v] = n
                    else:
                        del acc[v]
                cache[key] = (time, acc, len(lst), _NONE)
            else:
                acc = {}
            desired = self._desired(key, acc, time) if acc else {}
            olst = out_index.get(key)
            current = outp.accumulate_all(key, time) if olst else {}
            if current != desired:
                _changes(key, desired, current, added)
        return added

    def _ordered_some(self, keys: Iterable[Hashable], time: Timestamp,
                      below: Dict[Timestamp, bool]) -> List[Tuple[Hashable, Any, int]]:
        """:meth:`_notify_ordered` when some input updates are after ``time``."""
        acc_some = self.input.accumulate
        acc_out = self.output.accumulate_all
        added: List[Tuple[Hashable, Any, int]] = []
        for key in keys:
            acc = acc_some(key, time, below)[0]
            desired = self._desired(key, acc, time) if acc else {}
            current = acc_out(key, time)
            if current != desired:
                _changes(key, desired, current, added)
        return added

    def _desired(self, key: Hashable, acc: Dict[Any, int], time: Timestamp) -> Dict[Any, int]:
        """The logic's output for ``key`` from its accumulated input ``acc`` (not empty)."""
        if self.nonnegative and min(acc.values()) < 0:
            self._check(key, acc, time)
        return self.logic(key, acc)

    def _check(self, key: Hashable, acc: Dict[Any, int], time: Timestamp) -> None:
        for v, n in acc.items():
            if n < 0:
                who = f" (user function {fn_name(self.fn)})" if self.fn is not None else ""
                msg = (f"{self.op}{who}: key {_repr.repr(key)} has a negative count {n} for "
                       f"{_repr.repr(v)} at {time!r}; {self.op.split('(')[0]} needs a collection "
                       "with non-negative counts (did a negate() or update() remove a record "
                       "that was never added?)")
                raise ValueError(msg)


class ConsolidateVertex(Vertex):
    """The changes of each time, summed by record at the time's notification."""

    def __init__(self) -> None:
        super().__init__()
        self.state: Dict[Timestamp, Dict[Any, int]] = {}

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        acc = self.state.get(time)
        if acc is None:
            acc = self.state[time] = {}
            self.notify_at(time)
        get = acc.get
        try:
            for r, d in batch:
                acc[r] = get(r, 0) + d
        except TypeError:
            for r, _ in batch:
                try:
                    hash(r)
                except TypeError:
                    raise UserFunctionError("consolidate", "record", None, (r,),
                                            f"of type {type(r).__name__} is unhashable",
                                            "hashable records: a collection is a multiset of "
                                            "them", "convert lists to tuples") from None
            raise

    def on_notify(self, time: Timestamp) -> None:
        acc = self.state.pop(time, {})
        out = [(r, d) for r, d in acc.items() if d]
        if out:
            self.send_batch_by(0, out, time)


def _changes(key: Hashable, desired: Dict[Any, int], current: Dict[Any, int],
             added: List[Tuple[Hashable, Any, int]]) -> None:
    """Append to ``added`` the ``(key, record, diff)`` that turn ``current`` into ``desired``."""
    for r, n in desired.items():
        d = n - current.get(r, 0)
        if d:
            added.append((key, r, d))
    for r, n in current.items():
        if r not in desired:
            added.append((key, r, -n))
