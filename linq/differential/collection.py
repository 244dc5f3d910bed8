"""Collections that change: the fluent layer of differential dataflow.

A :class:`Collection` is a multiset of records that varies with logical time.  It wraps a
stream of changes ``(record, diff)``; the time of a change is the time of its message.  Linear
operators (``map``, ``filter``, ``flat_map``, ``negate``, ``inspect``) are not stages of their own:
they are kept as steps and fused into the next stage's batch function.  Keyed operators arrange
their input by key (one keying stage, then an exchange on the key) and keep it in traces
(:mod:`linq.differential.operators`).

>>> from linq import differential as dd
>>> from linq.differential.testing import run_dd
>>> run_dd(lambda c: c.map(lambda w: w[0]).count(), ["ant", "bee", "asp"], [[("bee", -1)]])
{0: [(('a', 2), 1), (('b', 1), 1)], 1: [(('b', 1), -1)]}
"""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter
from typing import (Any, Callable, Dict, Hashable, Iterable, List, Optional, Tuple, Union,
                    cast)

import stages
from naiad.errors import GraphError
from naiad.graph import Stream
from linq.core import (HASHABLE, HASHABLE_VALUE, call, emit, label,
                        need_callable, require_hashable)
from linq.differential.arrange import (Arrangement, ArrangeVertex, Handle, join_sides,
                                      no_other_key, not_a_collection)
from linq.differential.logic import group_logic, keyed_logic
from linq.differential.operators import ConsolidateVertex, JoinVertex, LinearVertex, ReduceVertex

__all__ = ["Collection", "Collected"]

_key = itemgetter(0)
_diff = itemgetter(1)
_ONLY_ONE = {1}
Step = Tuple[str, Callable, str]          # (kind, user function, operator label)


def _batch_fn(steps: Tuple[Step, ...], then: Optional[Callable[[list], list]] = None):
    """One function ``fn(batch, time) -> batch`` applying every step in order, then ``then``."""
    fns: List[Callable[[list, Any], list]] = []
    for kind, f, _ in steps:
        fns.append(_step_fn(kind, f))
    if then is not None:
        last = then
        fns.append(lambda b, t: last(b))
    if len(fns) == 1:
        return fns[0]

    def run(batch: list, time: Any) -> list:
        for fn in fns:
            batch = fn(batch, time)
        return batch
    return run


def _sum_changes(batch: list) -> Dict[Any, int]:
    """``{record: summed diff}`` of ``(record, diff)`` changes (zero sums kept).

    A batch of +1 changes only (a first epoch's, or a join of additions) is counted by record
    in C.  Otherwise equal ``(record, diff)`` pairs are counted by ``Counter`` in C; then the
    +1 counts make the dictionary in one comprehension, and only the other diffs are added by
    a Python loop."""
    if set(map(_diff, batch)) == _ONLY_ONE:      # a pass in C, no tuple made
        return Counter(map(_key, batch))
    pairs: Dict[Tuple[Any, int], int] = Counter(batch)
    acc = {r: n for (r, d), n in pairs.items() if d == 1}
    if len(acc) != len(pairs):
        get = acc.get
        for (r, d), n in pairs.items():
            if d != 1:
                acc[r] = get(r, 0) + d * n
    return acc


def _first_hashable(then: Callable[[list], list], valued: bool) -> Callable[[list], list]:
    """``then`` checking that the first triple it makes of a batch has a hashable key (and
    value): a key or value function returning a list fails here, where the diagnosis can name
    the record, not in the vertex that keeps the triples (or, for a join's values, epochs
    later when its trace is compacted).  One triple a batch: its records are alike."""
    def checked(batch: list) -> list:
        out = then(batch)
        if out:
            first = out[0]
            hash(first[0])
            if valued:
                hash(first[1])
        return out
    return checked


def _item_index(fn: Any) -> Optional[int]:
    """``i`` when ``fn`` is ``operator.itemgetter(i)`` with one integer index, else None."""
    if type(fn) is not itemgetter:
        return None
    m = re.fullmatch(r"operator\.itemgetter\((-?\d+)\)", repr(fn))
    return int(m.group(1)) if m else None


def _step_fn(kind: str, f: Callable) -> Callable[[list, Any], list]:
    if kind == "map":
        return lambda b, t: [(f(r), d) for r, d in b]
    if kind == "filter":
        return lambda b, t: [(r, d) for r, d in b if f(r)]
    if kind == "flat_map":
        return lambda b, t: [(x, d) for r, d in b for x in f(r)]
    if kind == "negate":
        return lambda b, t: [(r, -d) for r, d in b]
    if kind == "inspect":
        def inspect(b: list, t: Any) -> list:
            for r, d in b:
                f(r, t, d)
            return b
        return inspect
    msg = f"unknown step {kind!r}"
    raise ValueError(msg)


def _diagnose(steps: Tuple[Step, ...], then: Optional[Tuple[str, Any, Any]] = None):
    """Replays a failing batch record by record to name the operator, function and record;
    ``then`` is ``(op, key, value)`` of the arrangement that follows the steps (as
    :meth:`Collection._keyed` takes them): keys and values must be hashable."""
    def diagnose(batch: list, time: Any) -> None:
        for r, d in batch:
            recs = [r]
            for kind, f, op in steps:
                nxt: list = []
                for x in recs:
                    if kind == "map":
                        nxt.append(call(op, "function", f, (x,)))
                    elif kind == "filter":
                        if call(op, "predicate", f, (x,)):
                            nxt.append(x)
                    elif kind == "flat_map":
                        emit(nxt, op, "function", f, (x,))
                    elif kind == "inspect":
                        call(op, "function", f, (x, time, d))
                        nxt.append(x)
                    else:
                        nxt.append(x)
                recs = nxt
            if then is not None:
                op, key, value = then
                for x in recs:
                    if key is None:
                        require_hashable(op, "record", x)
                    else:
                        call(op, "key", key, (x,), HASHABLE)
                    if callable(value):
                        call(op, "value", value, (x,), HASHABLE_VALUE)
                    elif value is None and key is not None:
                        require_hashable(op, "record", x)
    return diagnose


class Collection:
    """A multiset of records varying with time: a stream of ``(record, diff)`` changes."""

    def __init__(self, stream: Stream, steps: Tuple[Step, ...] = ()):
        if not isinstance(stream, Stream):
            msg = f"Collection wraps a naiad Stream of (record, diff) pairs; got {type(stream).__name__}"
            raise TypeError(msg)
        self._stream = stream
        self._steps = steps
        # The output of an operator that emits, per time, only real changes of its own records
        # (a reduction, consolidate): a loop ending with one needs no consolidation of its own.
        self.consolidated = False
        # The output of a join, or made from one: a batch may repeat a record many times (each
        # pair of updates is one change), so what arranges it sums it first, as differential
        # dataflow's arrangements do; a join of joins then pairs sums, not every repetition.
        self.repeats = False

    # ---- plumbing ------------------------------------------------------------------------
    @property
    def stream(self) -> Stream:
        """The stream of ``(record, diff)`` changes (the pending linear steps applied)."""
        if not self._steps:
            return self._stream
        steps = self._steps
        op = "+".join(s[2] for s in steps)
        fn = _batch_fn(steps)
        diagnose = _diagnose(steps)
        out = stages.unary(self._stream, lambda: LinearVertex(op, fn, diagnose), name=op)
        self._stream, self._steps = out, ()
        return out

    @property
    def scope(self) -> Any:
        """The loop scope the collection lives in (the computation's top scope outside loops)."""
        return self._stream.scope

    def _with(self, kind: str, f: Callable, op: str) -> "Collection":
        return Collection(self._stream, self._steps + ((kind, f, op),))._repeating(self.repeats)

    def _repeating(self, repeats: bool = True) -> "Collection":
        self.repeats = repeats
        return self

    def _keyed(self, op: str, key: Optional[Callable], value: Union[Callable, None, bool],
               consolidate: bool = False) -> Stream:
        """``(key, value, diff)`` triples; ``key`` None keys by the record, ``value`` None gives
        the record itself (``False``: no value).  With ``consolidate`` the triples of a batch
        are summed by ``(key, value)`` before they leave: a reduction's input often repeats
        (the same label offered to a node by many neighbours), and only the sum matters."""
        k = key
        v = value
        # kv(record) -> (key, value); ones(batch) -> the (key, value) of its +1 changes, and
        # triples(sums) -> the triples of the non-zero sums of {record: diff}; inline.
        if k is None and v is False:
            kv: Callable[[Any], tuple] = lambda r: (r, None)
            ones: Callable[[list], list] = lambda b: [(r, None) for r, d in b if d == 1]
            triples: Callable[[Dict[Any, int]], list] = \
                lambda a: [(r, None, d) for r, d in a.items() if d]
        elif k is None:
            kv = lambda r: (r, r)
            ones = lambda b: [(r, r) for r, d in b if d == 1]
            triples = lambda a: [(r, r, d) for r, d in a.items() if d]
        elif v is False:
            kv = lambda r: (k(r), None)
            ones = lambda b: [(k(r), None) for r, d in b if d == 1]
            triples = lambda a: [(k(r), None, d) for r, d in a.items() if d]
        elif v is None:
            kv = lambda r: (k(r), r)
            ones = lambda b: [(k(r), r) for r, d in b if d == 1]
            triples = lambda a: [(k(r), r, d) for r, d in a.items() if d]
        else:
            vf = cast(Callable[[Any], Any], v)
            kv = lambda r: (k(r), vf(r))
            ones = lambda b: [(k(r), vf(r)) for r, d in b if d == 1]
            triples = lambda a: [(k(r), vf(r), d) for r, d in a.items() if d]
        plain: Callable[[list], list] = lambda b: [kv(r) + (d,) for r, d in b]
        i = _item_index(k)
        j = _item_index(v) if callable(v) else None
        if i is not None and (v is None or j is not None):
            # operator.itemgetter key (and value): ``r[i]`` inline, no call per record.
            ki: int = i
            if j is None:
                triples = lambda a: [(r[ki], r, d) for r, d in a.items() if d]
                plain = lambda b: [(r[ki], r, d) for r, d in b]
            else:
                vj: int = j
                triples = lambda a: [(r[ki], r[vj], d) for r, d in a.items() if d]
                plain = lambda b: [(r[ki], r[vj], d) for r, d in b]
        then: Callable[[list], list] = plain
        if consolidate:
            def by_pair(b: list) -> list:
                acc: Counter = Counter(ones(b))          # the +1 changes, counted in C
                for r, d in [rd for rd in b if rd[1] != 1]:
                    acc[kv(r)] += d
                return [(kk, vv, d) for (kk, vv), d in acc.items() if d]

            def summed(b: list) -> list:
                # Summed by record first (counted in C), then keyed: the key and value
                # functions run once per distinct record.
                try:
                    sums = _sum_changes(b)
                except TypeError:                # unhashable records: sum by (key, value)
                    return by_pair(b)
                return triples(sums)
            then = summed
        fn = _batch_fn(self._steps, _first_hashable(then, v is not False))
        diagnose = _diagnose(self._steps, (op, k, v))
        name = f"{op}.arrange"
        return stages.unary(self._stream, lambda: LinearVertex(name, fn, diagnose), name=name)

    def _same(self, op: str, other: Any) -> "Collection":
        if not isinstance(other, Collection):
            raise not_a_collection(op, other)
        if other._stream.graph is not self._stream.graph:
            msg = f"{op}: the collection belongs to another computation"
            raise GraphError(msg)
        self._stream.graph.check_same_scope(self.scope, other.scope, op)
        return other

    # ---- linear operators ------------------------------------------------------------------
    def map(self, f: Callable[[Any], Any]) -> "Collection":
        """Each record ``r`` becomes ``f(r)``, with the same multiplicity."""
        need_callable("map", "function", f, "f(record) -> record")
        return self._with("map", f, label("map", f))

    def filter(self, p: Callable[[Any], bool]) -> "Collection":
        """The records for which ``p(record)`` is true."""
        need_callable("filter", "predicate", p, "p(record) -> bool")
        return self._with("filter", p, label("filter", p))

    def flat_map(self, f: Callable[[Any], Iterable[Any]]) -> "Collection":
        """Each record ``r`` becomes every record of ``f(r)``."""
        need_callable("flat_map", "function", f, "f(record) -> iterable of records")
        return self._with("flat_map", f, label("flat_map", f))

    def negate(self) -> "Collection":
        """Every multiplicity negated."""
        return self._with("negate", _identity, "negate")

    def inspect(self, fn: Callable[[Any, Any, int], Any]) -> "Collection":
        """Calls ``fn(record, time, diff)`` for every change passing, once however many
        operators read the result; the collection is unchanged."""
        need_callable("inspect", "function", fn, "fn(record, time, diff)")
        # Made a stage of its own at once (with the steps before it), not fused into each
        # reader's arrangement, which would call ``fn`` once per reader.
        return Collection(self._with("inspect", fn, label("inspect", fn)).stream)._repeating(
            self.repeats)

    def concat(self, *others: "Collection") -> "Collection":
        """The multiset sum of this collection and ``others``."""
        for o in others:
            self._same("concat", o)
        if not others:
            return self
        return Collection(self.stream.concat(*[o.stream for o in others]))._repeating(
            self.repeats or any(o.repeats for o in others))

    # ---- keyed operators -------------------------------------------------------------------
    def _reduce(self, op: str, logic, key: Optional[Callable], value: Any, fn: Any,
                nonnegative: bool) -> "Collection":
        keyed = self._keyed(op, key, value, consolidate=True)
        out = stages.unary(keyed, lambda: ReduceVertex(op, logic, key, fn, nonnegative),
                           partition_by=_key, name=op)
        return Collection(out)._mark_consolidated()

    def consolidate(self) -> "Collection":
        """The changes of each time summed by record (zeros dropped), exchanged by record."""
        return Collection(stages.unary(self.stream, ConsolidateVertex, partition_by=_key,
                                       name="consolidate"))._mark_consolidated()

    def _mark_consolidated(self) -> "Collection":
        self.consolidated = True
        return self

    def distinct(self) -> "Collection":
        """Each record with a positive count, once."""
        return self._reduce("distinct", keyed_logic("distinct"), None, False, None, True)

    def count(self, key: Optional[Callable[[Any], Hashable]] = None) -> "Collection":
        """``(key, n)``: the number of records per key (per record when ``key`` is None)."""
        if key is not None:
            need_callable("count", "key", key, "key(record) -> hashable")
        op = label("count", key) if key is not None else "count"
        return self._reduce(op, keyed_logic("count"), key, False, key, False)

    def sum(self, key: Callable[[Any], Hashable], value: Callable[[Any], Any]) -> "Collection":
        """``(key, total)``: the sum of ``value(record)`` times multiplicity, per key."""
        return self._agg("sum", key, value, False)

    def min(self, key: Callable[[Any], Hashable], value: Callable[[Any], Any]) -> "Collection":
        """``(key, least value(record))`` per key."""
        return self._agg("min", key, value, True)

    def max(self, key: Callable[[Any], Hashable], value: Callable[[Any], Any]) -> "Collection":
        """``(key, greatest value(record))`` per key."""
        return self._agg("max", key, value, True)

    def _agg(self, kind: str, key: Callable, value: Callable, nonnegative: bool) -> "Collection":
        need_callable(kind, "key", key, "key(record) -> hashable")
        need_callable(kind, "value", value, "value(record) -> value")
        op = label(kind, key, value)
        return self._reduce(op, keyed_logic(kind, value, op), key, value, value, nonnegative)

    def group_by(self, key: Callable[[Any], Hashable],
                 reducer: Callable[[Hashable, list], Iterable[Any]]) -> "Collection":
        """``reducer(key, records)`` per key, records repeated by multiplicity; re-run only for
        keys whose input changed, emitting the difference from its previous output."""
        need_callable("group_by", "key", key, "key(record) -> hashable")
        need_callable("group_by", "reducer", reducer, "reducer(key, records) -> iterable")
        op = label("group_by", key, reducer)
        return self._reduce(op, group_logic(op, reducer), key, None, reducer, True)

    def arrange(self, key: Callable[[Any], Hashable]) -> Arrangement:
        """The collection arranged by ``key`` once on every worker, for any number of joins
        to read without keeping copies of their own (:mod:`linq.differential.arrange`)."""
        need_callable("arrange", "key", key, "key(record) -> hashable")
        op = label("arrange", key)
        handle = Handle()
        stream = stages.unary(self._keyed(op, key, None, self.repeats),
                              lambda: ArrangeVertex(op, handle, key),
                              partition_by=_key, name=op)
        return Arrangement(stream, handle, key, op)

    def join(self, other: Union["Collection", Arrangement], key: Callable[[Any], Hashable],
             other_key: Optional[Callable[[Any], Hashable]] = None,
             result: Optional[Callable[[Any, Any], Any]] = None) -> "Collection":
        """``result(a, b)`` for every ``a`` here and ``b`` in ``other`` with equal keys;
        multiplicities multiply.  ``other`` may be an :class:`Arrangement` (then it is read
        shared, by its own key, and ``other_key`` is left out)."""
        if isinstance(other, Arrangement):
            no_other_key(other_key)
            need_callable("join", "key", key, "key(record) -> hashable")
            need_callable("join", "result", result, "result(a, b) -> record")
            op = label("join", key, other.key, result)
            return Collection(join_sides(op, self._keyed(op, key, None, self.repeats), other,
                                         cast(Callable, result), key))._repeating()
        self._same("join", other)
        need_callable("join", "key", key, "key(record) -> hashable")
        need_callable("join", "other_key", other_key, "other_key(record) -> hashable")
        need_callable("join", "result", result, "result(a, b) -> record")
        op = label("join", key, other_key, result)
        left = self._keyed(op, key, None, self.repeats)
        right = other._keyed(op, other_key, None, other.repeats)
        pair = cast(Callable[[Any, Any], Any], result)
        out = stages.binary(left, right, lambda: JoinVertex(op, pair, key),
                            partition_by_left=_key, partition_by_right=_key, name=op)
        return Collection(out)._repeating()

    def semijoin(self, keys: "Collection", key: Callable[[Any], Hashable]) -> "Collection":
        """The records whose ``key(record)`` is in ``keys`` (taken as a set)."""
        return self._semijoin("semijoin", keys, key)

    def _semijoin(self, name: str, keys: "Collection", key: Callable[[Any], Hashable]
                  ) -> "Collection":
        self._same(name, keys)
        need_callable(name, "key", key, "key(record) -> hashable")
        op = label(name, key)
        left = self._keyed(op, key, None, self.repeats)
        right = keys.distinct()._keyed(op, None, False)
        out = stages.binary(left, right, lambda: JoinVertex(op, _left, key),
                            partition_by_left=_key, partition_by_right=_key, name=op)
        return Collection(out)._repeating(self.repeats)

    def antijoin(self, keys: "Collection", key: Callable[[Any], Hashable]) -> "Collection":
        """The records whose ``key(record)`` is not in ``keys`` (taken as a set)."""
        return self.concat(self._semijoin("antijoin", keys, key).negate())

    # ---- outputs ---------------------------------------------------------------------------
    def collect(self) -> "Collected":
        """Gather the consolidated changes of every epoch reaching this process."""
        self._top("collect")
        return Collected(self.consolidate().stream.collect())

    def subscribe(self, fn: Callable[[int, list], Any]) -> Any:
        """``fn(epoch, changes)`` once per completed epoch, with its consolidated changes."""
        need_callable("subscribe", "fn", fn, "fn(epoch, changes)")
        self._top("subscribe")
        return self.consolidate().stream.subscribe(fn)

    def probe(self) -> Any:
        """A probe on the collection's stream (``probe.wait(epoch)``: its changes are complete)."""
        return self.stream.probe()

    def _top(self, what: str) -> None:
        if self.scope is not self._stream.graph.top:
            msg = (f"{what} needs a collection outside any loop (this one is in "
                   f"{self.scope.path()}); use the result of iterate")
            raise GraphError(msg)

    def __repr__(self) -> str:
        return f"Collection({self._stream!r})"

    # Set by linq.differential.iterate (it needs this class).
    iterate: Callable[..., "Collection"]


def _identity(x: Any) -> Any:
    return x


def _left(a: Any, b: Any) -> Any:
    return a


class Collected:
    """What :meth:`Collection.collect` gathered in this process.

    ``results[epoch]`` is the list of consolidated ``(record, diff)`` changes of that epoch;
    :meth:`at` accumulates them into the collection at an epoch.
    """

    def __init__(self, inner: Any):
        self._inner = inner

    @property
    def results(self) -> Dict[int, List[Tuple[Any, int]]]:
        """``{epoch: [(record, diff), ...]}``, consolidated."""
        return self._inner.results

    def at(self, epoch: int) -> Dict[Any, int]:
        """The collection at ``epoch``: ``{record: count}`` from the changes up to it."""
        acc: Dict[Any, int] = {}
        for e, changes in self._inner.results.items():
            if e <= epoch:
                for r, d in changes:
                    acc[r] = acc.get(r, 0) + d
        return {r: n for r, n in acc.items() if n}
