"""Shared arrangements: a collection arranged by key once, read by any number of joins and
reductions.

``collection.arrange(key)`` keys the collection, exchanges it on the key and keeps it, on every
worker, in one :class:`~linq.differential.trace.Trace` (an :class:`ArrangeVertex`).  The joins
that read the :class:`Arrangement` keep no copy of it: each reads the same trace, so a
collection joined three times is keyed, exchanged and stored once instead of three times.  Its
reductions (``group_by``, ``count``, ``sum``, ``min``, ``max``: an
:class:`ArrangedReduceVertex` each) keep only their outputs.

The trace runs ahead of its readers.  The arrange vertex adds a batch to the trace when the
batch arrives, and sends it on (numbered) to every reader on its worker; a reader gets it later,
and batches of different times may reach it in another order than they were sent.  A join must
pair each update with each update of the other side exactly once, when the second of the two
reaches the join.  So when a join reads a shared side, it reads the trace *minus* the batches
still on their way to it: the arrange vertex keeps every batch until each reader has had it,
and a reader takes those it has not had back out of the updates of the keys it looks up.

Compaction of a shared trace waits for the slowest reader: the trace is compacted to the meet
of the frontiers of the arrange vertex and of every reader (a reader whose other input lags
still joins at the times of that input).  The updates still on their way are at or after every
reader's frontier, so compaction never changes their times.

An arrangement is read in the scope it was built in: inside a loop, arrange the entered
collection there (``loop.enter(c).arrange(key)``), once for all the joins of the loop body.

>>> from linq.differential.testing import run_dd
>>> def build(c):
...     by_first = c.arrange(key=lambda r: r[0])       # kept once on each worker
...     pairs = c.join(by_first, key=lambda r: r[1], result=lambda a, b: (a[0], b[1]))
...     return pairs.concat(by_first.join(by_first, result=lambda a, b: (a[1], b[1])))
>>> run_dd(build, [(1, 2), (2, 3)], [[((2, 3), -1)]])
{0: [((1, 3), 1), ((2, 2), 1), ((3, 3), 1)], 1: [((1, 3), -1), ((3, 3), -1)]}
>>> run_dd(lambda c: c.arrange(key=lambda r: r[0]).count(), [(1, 2), (2, 3)], [[((2, 3), -1)]])
{0: [((1, 1), 1), ((2, 1), 1)], 1: [((2, 1), -1)]}
"""

from __future__ import annotations

from collections import Counter, deque
from operator import itemgetter
from typing import (Any, Callable, Dict, Hashable, Iterable, List, Optional, Sequence, Set,
                    Tuple, cast)

import stages
from naiad.errors import GraphError
from naiad.graph import Stream
from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex
from linq.core import label, need_callable
from linq.differential.lattice import lower_bound
from linq.differential.logic import Logic, group_logic, keyed_logic, valued_logic
from linq.differential.operators import Arranged, JoinVertex, ReduceVertex
from linq.differential.trace import Trace, Update

__all__ = ["Arrangement", "ArrangeVertex", "Handle", "SharedTrace", "ArrangedJoinVertex",
           "ArrangedReduceVertex", "join_sides", "no_other_key", "not_a_collection"]

_key = itemgetter(0)
_value = itemgetter(1)
_ARRANGE = -1               # the arrange vertex's own place among the parties of a trace


class SharedTrace:
    """One worker's trace of an arrangement, the batches its readers have yet to get, and the
    frontiers that bound its compaction."""

    def __init__(self, parties: Set[int]) -> None:
        self.trace = Trace()
        self.parties = parties              # the readers (shared by every worker's trace)
        # seq -> (time, triples, the readers that have had it)
        self.pending: Dict[int, Tuple[Timestamp, list, Set[int]]] = {}
        self.frontiers: Dict[int, List[Timestamp]] = {}
        self.compacted_at = -1

    def add(self, seq: int, triples: list, time: Timestamp) -> None:
        self.trace.add_batch(triples, time)
        if self.parties:
            self.pending[seq] = (time, triples, set())

    def had(self, party: int, seqs: Sequence[int]) -> None:
        """``party`` has had the batches ``seqs``: those every reader has had are forgotten."""
        pending, everyone = self.pending, len(self.parties)
        for seq in seqs:
            entry = pending.get(seq)
            if entry is not None:
                entry[2].add(party)
                if len(entry[2]) >= everyone:
                    del pending[seq]

    def view(self, party: int, keys: Set[Hashable]) -> Any:
        """What ``party`` may read of the trace for ``keys``: an object whose ``get(key)`` gives
        the key's updates without those of batches on their way to ``party``."""
        index = self.trace.index
        unseen: Dict[Hashable, List[Update]] = {}
        for time, triples, had in self.pending.values():
            if party not in had:
                for k, v, d in triples:
                    if k in keys:
                        unseen.setdefault(k, []).append((v, time, d))
        return _Minus(index, unseen) if unseen else index

    def observe(self, party: int, frontier: List[Timestamp]) -> None:
        """Compact to the meet of every party's frontier once each has told its own."""
        self.frontiers[party] = frontier
        if len(self.frontiers) <= len(self.parties):
            return                           # a reader has not said where it is yet
        times = [t for f in self.frontiers.values() for t in f]
        if not times:
            return
        epoch = min(t[0] for t in times)
        if epoch == self.compacted_at or not self.trace.dirty:
            return
        self.compacted_at = epoch
        self.trace.compact(lower_bound(times))


class _Minus:
    """``index.get(key)`` less the updates in ``unseen[key]`` (summed by value and time)."""

    __slots__ = ("index", "unseen")

    def __init__(self, index: Dict[Hashable, List[Update]],
                 unseen: Dict[Hashable, List[Update]]) -> None:
        self.index, self.unseen = index, unseen

    def get(self, key: Hashable) -> Optional[List[Update]]:
        ups = self.index.get(key)
        less = self.unseen.get(key)
        if less is None or not ups:
            return ups
        acc: Counter = Counter()
        for v, t, d in ups:
            acc[(v, t)] += d
        for v, t, d in less:
            acc[(v, t)] -= d
        return [(v, t, d) for (v, t), d in acc.items() if d]


class Handle:
    """The shared traces of one arrangement, by worker, and the readers registered so far
    (a reader registers when its vertex is made, so a stage pruned from the graph never
    holds a batch back)."""

    def __init__(self) -> None:
        self.parties: Set[int] = set()
        self.traces: Dict[int, SharedTrace] = {}
        self.numbered = 0

    def new_party(self) -> int:
        self.numbered += 1
        return self.numbered

    def at(self, worker: int) -> SharedTrace:
        shared = self.traces.get(worker)
        if shared is None:
            shared = self.traces.setdefault(worker, SharedTrace(self.parties))
        return shared


class ArrangeVertex(Arranged):
    """Adds each batch of ``(key, value, diff)`` triples to its worker's shared trace and sends
    it on, numbered, as one ``(seq, triples)`` record."""

    def __init__(self, op: str, handle: Handle, key_fn: Any) -> None:
        super().__init__()
        self.op, self.handle, self.key_fn = op, handle, key_fn
        self.seq = 0

    def traces(self) -> List[Trace]:
        return [self.handle.at(self.index).trace]

    def observe_frontier(self, frontier: List[Timestamp]) -> None:
        self.handle.at(self.index).observe(_ARRANGE, frontier)

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        self.seq += 1
        try:
            # Every value is hashed here, where it enters (the readers sum updates by value):
            # an unhashable one is named by this stage, not by a reader or a compaction.
            deque(map(hash, map(_value, batch)), maxlen=0)
            self.handle.at(self.index).add(self.seq, batch, time)
        except TypeError as exc:
            self._unhashable(exc, batch)
        self.send_by(0, (self.seq, batch), time)

    def checkpoint(self) -> Any:
        shared = self.handle.at(self.index)
        return {"seq": self.seq, "trace": shared.trace, "pending": shared.pending}

    def restore(self, state: Any) -> None:
        shared = self.handle.at(self.index)
        self.seq, shared.trace, shared.pending = state["seq"], state["trace"], state["pending"]


class ArrangedJoinVertex(JoinVertex):
    """A join with one or both sides read from shared arrangements (``parties[edge]`` not
    None): a batch on one side is joined with what the join has had of the other, as
    :class:`~linq.differential.operators.JoinVertex` joins, and a shared side is told the
    batch has been had instead of keeping a copy."""

    def __init__(self, op: str, result: Callable[[Any, Any], Any], key_fn: Any,
                 handles: Sequence[Optional[Handle]], parties: Sequence[Optional[int]]) -> None:
        super().__init__(op, result, key_fn)
        self._shared = list(handles)
        self._parties = list(parties)

    def traces(self) -> List[Trace]:
        return [tr for tr, h in zip(self.sides, self._shared) if h is None]

    def observe_frontier(self, frontier: List[Timestamp]) -> None:
        for h, party in zip(self._shared, self._parties):
            if h is not None and party is not None:
                h.at(self.index).observe(party, frontier)
        super().observe_frontier(frontier)

    def _other(self, edge: int, batch: list) -> Any:
        h = self._shared[1 - edge]
        if h is None:
            return self.sides[1 - edge].index
        return h.at(self.index).view(cast(int, self._parties[1 - edge]), set(map(_key, batch)))

    def _trace_of(self, edge: int) -> Trace:
        h = self._shared[edge]
        return self.sides[edge] if h is None else h.at(self.index).trace

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        h = self._shared[edge]
        if h is None:
            super().on_recv_batch(edge, batch, time)        # a side of its own: kept here
            return
        seqs = [seq for seq, _ in batch]
        triples = batch[0][1] if len(batch) == 1 else [x for _, b in batch for x in b]
        if self._trace_of(1 - edge).all_at_or_before(time):
            self._join_now(edge, triples, time)
        else:
            self._join_later(edge, triples, time)
        h.at(self.index).had(cast(int, self._parties[edge]), seqs)

    def checkpoint(self) -> Any:
        return {"sides": self.sides}

    def restore(self, state: Any) -> None:
        self.sides = state["sides"]


class ArrangedReduceVertex(ReduceVertex):
    """A reduction whose input is a shared arrangement: it schedules the keys of each batch
    it gets and, at a notification, reads their input from the shared trace.

    No batch needs taking back out (as a join must): when time ``t`` is notified, every batch
    at a time ``<= t`` has reached this vertex, so the batches still on their way are at
    other times, which accumulating at ``t`` leaves out.  They may add interesting times
    ``lub(t, t')``, at which the key is computed once more, without change."""

    def __init__(self, op: str, logic: Logic, fn: Any, nonnegative: bool, handle: Handle,
                 party: int) -> None:
        super().__init__(op, logic, None, fn, nonnegative)
        self._handle, self._party = handle, party

    @property                      # type: ignore[override]
    def input(self) -> Trace:
        """The shared trace (looked up each time: a restore replaces it)."""
        return self._handle.at(self.index).trace

    @input.setter
    def input(self, value: Trace) -> None:
        pass                        # the arrange vertex keeps it

    def traces(self) -> List[Trace]:
        return [self.output]

    def observe_frontier(self, frontier: List[Timestamp]) -> None:
        self._handle.at(self.index).observe(self._party, frontier)
        super().observe_frontier(frontier)

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        keys = self.pending.get(time)
        if keys is None:
            keys = self.pending[time] = set()
            self.notify_at(time)
        for _, triples in batch:
            keys.update(map(_key, triples))
        self._handle.at(self.index).had(self._party, [seq for seq, _ in batch])


class Arrangement:
    """A collection arranged by ``key`` on every worker, for joins to share
    (:meth:`linq.differential.Collection.arrange`)."""

    def __init__(self, stream: Stream, handle: Handle, key: Callable[[Any], Hashable],
                 op: str) -> None:
        self.stream, self.handle, self.key, self.op = stream, handle, key, op

    @property
    def scope(self) -> Any:
        return self.stream.scope

    @property
    def collection(self) -> Any:
        """The arranged collection itself, as a :class:`~linq.differential.Collection`."""
        from linq.differential.collection import Collection
        return Collection(stages.unary(self.stream, lambda: _Records(self.op),
                                       name=f"{self.op}.records"))

    def join(self, other: Any, result: Callable[[Any, Any], Any],
             other_key: Optional[Callable[[Any], Hashable]] = None) -> Any:
        """``result(a, b)`` for every ``a`` here and ``b`` in ``other`` (an Arrangement, or a
        Collection keyed by ``other_key``) with equal keys; multiplicities multiply."""
        from linq.differential.collection import Collection
        if isinstance(other, Arrangement):
            no_other_key(other_key)
            need_callable("join", "result", result, "result(a, b) -> record")
            op = label("join", self.key, other.key, result)
            return Collection(join_sides(op, self, other, result, self.key))._repeating()
        if not isinstance(other, Collection):
            msg = (f"join needs a differential Collection or Arrangement; got "
                   f"{type(other).__name__}")
            raise TypeError(msg)
        need_callable("join", "other_key", other_key, "other_key(record) -> hashable")
        need_callable("join", "result", result, "result(a, b) -> record")
        op = label("join", self.key, other_key, result)
        return Collection(join_sides(op, self, other._keyed(op, other_key, None, other.repeats),
                                     result, other_key))._repeating()

    # ---- reductions, reading the shared trace ------------------------------------------------
    def group_by(self, reducer: Callable[[Hashable, list], Iterable[Any]]) -> Any:
        """``reducer(key, records)`` per key, records repeated by multiplicity
        (:meth:`linq.differential.Collection.group_by` by the arrangement's key)."""
        need_callable("group_by", "reducer", reducer, "reducer(key, records) -> iterable")
        op = label("group_by", self.key, reducer)
        return self._reduce(op, group_logic(op, reducer), reducer, True)

    def count(self) -> Any:
        """``(key, n)``: the number of records per key."""
        return self._reduce(label("count", self.key), keyed_logic("count"), self.key, False)

    def sum(self, value: Callable[[Any], Any]) -> Any:
        """``(key, total)``: the sum of ``value(record)`` times multiplicity, per key."""
        return self._valued("sum", value, False)

    def min(self, value: Callable[[Any], Any]) -> Any:
        """``(key, least value(record))`` per key."""
        return self._valued("min", value, True)

    def max(self, value: Callable[[Any], Any]) -> Any:
        """``(key, greatest value(record))`` per key."""
        return self._valued("max", value, True)

    def _valued(self, kind: str, value: Callable[[Any], Any], nonnegative: bool) -> Any:
        need_callable(kind, "value", value, "value(record) -> value")
        op = label(kind, self.key, value)
        return self._reduce(op, valued_logic(kind, op, value), value, nonnegative)

    def _reduce(self, op: str, logic: Logic, fn: Any, nonnegative: bool) -> Any:
        from linq.differential.collection import Collection
        handle = self.handle
        party = handle.new_party()

        def factory() -> ArrangedReduceVertex:
            handle.parties.add(party)
            return ArrangedReduceVertex(op, logic, fn, nonnegative, handle, party)
        st = stages.new_stage(factory, name=op)
        st.new_input(self.stream)                # the same worker: its trace is there
        return Collection(st.new_output())._mark_consolidated()

    def __repr__(self) -> str:
        return f"Arrangement({self.op})"


class _Records(Vertex):
    """``(seq, triples)`` records back to ``(record, diff)`` changes."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op

    def checkpoint(self) -> Any:
        return None

    def restore(self, state: Any) -> None:
        pass

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        out = [(v, d) for _, triples in batch for _, v, d in triples]
        if out:
            self.send_batch_by(0, out, time)


def not_a_collection(what: str, other: Any) -> TypeError:
    """The error for ``other`` given where a Collection is needed, with what to pass instead."""
    if isinstance(other, Arrangement):
        hint = "an Arrangement: its records are arrangement.collection"
    else:
        hint = (f"{type(other).__name__} (did you pass an InputCollection instead of its "
                ".collection?)")
    return TypeError(f"{what} needs a differential Collection; got {hint}")


def no_other_key(other_key: Any) -> None:
    """Refuse ``other_key`` for an arrangement, which is keyed already."""
    if other_key is not None:
        msg = "join: other is an Arrangement, already keyed by its own key; leave other_key out"
        raise TypeError(msg)


def join_sides(op: str, left: Any, right: Any, result: Callable[[Any, Any], Any],
               key_fn: Any) -> Stream:
    """The join stage of ``left`` and ``right``, each an :class:`Arrangement` (read shared)
    or a stream of ``(key, value, diff)`` triples (exchanged on the key and kept by the join)."""
    sides = (left, right)
    scopes = [s.scope for s in sides]
    if scopes[0] is not scopes[1]:
        inner = next(s for s in sides if isinstance(s, Arrangement))
        msg = (f"{op}: the arrangement {inner.op} belongs to {inner.scope.path()}, but the "
               f"other side to {[sc for sc in scopes if sc is not inner.scope][0].path()}; an "
               "arrangement is read in the scope it was built in (inside a loop, arrange the "
               "entered collection there: loop.enter(c).arrange(key))")
        raise GraphError(msg)
    handles = [s.handle if isinstance(s, Arrangement) else None for s in sides]
    parties = [h.new_party() if h is not None else None for h in handles]

    def factory() -> ArrangedJoinVertex:
        for h, party in zip(handles, parties):
            if h is not None and party is not None:
                h.parties.add(party)
        return ArrangedJoinVertex(op, result, key_fn, handles, parties)
    st = stages.new_stage(factory, name=op)
    for s in sides:
        if isinstance(s, Arrangement):
            st.new_input(s.stream)               # the same worker: its trace is there
        else:
            st.new_input(s, _key)
    return st.new_output()
