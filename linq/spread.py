"""``spread``: values sent along loop-invariant edges and folded per target, in arrays.

``x.spread(loop.enter(edges), share, combine, own)`` is the round of PageRank and of label
propagation in one operator.  Each record ``(key, x)`` of the iterated stream meets the
invariant record ``(key, targets)`` with its key and sends ``share(x, targets)`` to every
target (and ``own(x)`` to ``key`` itself, when ``own`` is given); per time, each target's
values are folded by ``combine`` (associative and commutative, as in ``aggregate``).  The
result is that of

    x.join(edges, first, first, lambda a, b: (a[0], a[1], b[1]))
     .select_many(lambda r: [(t, share(r[1], r[2])) for t in r[2]] + [(r[0], own(r[1]))])
     .aggregate(first, second, combine)

but the per-edge work runs in numpy.  Once per epoch, when the invariant side is complete,
each worker numbers the targets of its edges (dense ids, in the order of the held table) and
keeps the flat array of target ids.  Each batch then costs one ``share`` (and ``own``) call
per node; the values go to the edges by ``numpy.repeat`` and are folded per target by
``numpy.bincount`` (``operator.add`` over floats: sums in edge order, as a fold from ``0.0``)
or ``numpy.minimum.at``/``maximum.at`` over the ranks of the values (``min``/``max`` over
``str`` or ``int`` values: the least value by Python's ``<``).  Other combines, other value
types, several invariant records per key or a batch with a repeated key take the general
path (a Python fold per edge), which gives the same results.  Only the pre-combined
partials are exchanged, as columns (:mod:`linq.blocks`): per destination worker one record of
the targets' keys and their partials (a float array for the sums), the destinations of the
plan's targets computed once per epoch; they are folded again as ``aggregate`` does.

>>> import linq, operator
>>> from naiad.testing import run
>>> def build(comp, s):
...     edges = s.where(lambda r: r[0] == "e").select(lambda r: (r[1], r[2]))
...     start = s.where(lambda r: r[0] == "v").select(lambda r: (r[1], r[2]))
...     return start.iterate(lambda loop, x: x.spread(loop.enter(edges), lambda v, ts: v,
...                                                   min, own=lambda v: v), 2)
>>> run(build, [[("e", 1, (2,)), ("e", 2, (3,)), ("e", 3, ()), ("v", 1, 1), ("v", 2, 2),
...              ("v", 3, 3)]], workers=2)
{0: [(1, 1), (2, 1), (3, 1)]}
"""

from __future__ import annotations

import builtins
import operator
from itertools import chain, compress, count, repeat
from typing import Any, Callable, Dict, Hashable, Iterable, Optional, Sequence

from naiad.errors import GraphError
from naiad.graph import Stream
from naiad.partition import Explained
from naiad.optional import numpy as _numpy  # optional: without it every batch takes the general path
from linq.blocks import Router, merge_blocks
from linq.core import UserFunctionError, label, need_callable, need_stream
from linq.invariant import HeldVertex, held, last_of


__all__ = ["spread", "SpreadVertex"]

_first = operator.itemgetter(0)
_MISSING = object()
_ORDERED = (str, int)           # value types whose ranks stand for them in min and max


class _Plan:
    """The held table of one epoch in arrays: ``keys`` (held keys, and ``keyset`` their set),
    ``targets`` (their target
    tuples), ``tkeys`` (the distinct targets, by dense id), ``tid`` (the target id of every
    position: each key's targets, then the key itself when ``own``), ``size`` (positions per
    key), ``last`` (each key's last position) and ``got`` (the ids that some key reaches)."""

    def __init__(self, flat: Dict[Hashable, Sequence], own: bool):
        np = _numpy()
        self.keys = list(flat)
        self.keyset = flat.keys()
        self.targets = list(flat.values())
        groups = map(tuple.__add__, map(tuple, self.targets), map(_one, self.keys)) if own \
            else map(tuple, self.targets)
        positions = list(chain.from_iterable(groups))
        dense: Dict[Hashable, int] = {}
        ids = list(map(dense.setdefault, positions, count()))     # first position per target
        renumber = dict(zip(dense.values(), count()))
        self.tkeys = list(dense)
        self.tid = np.fromiter(map(renumber.__getitem__, ids), np.intp, len(ids))
        self.size = np.fromiter(map(len, self.targets), np.intp, len(self.targets)) + own
        self.last = np.cumsum(self.size) - 1
        self.got = np.bincount(self.tid, minlength=len(self.tkeys)) > 0


def _one(x: Any) -> tuple:
    return (x,)


class SpreadVertex(HeldVertex):
    """The local half of :func:`spread`: a :class:`HeldVertex` whose match of a batch is the
    partials of the batch, folded per target, in blocks for the workers (:mod:`linq.blocks`)."""

    def __init__(self, op: str, last: int, share: Callable, combine: Callable,
                 own: Optional[Callable], diagnose, router: Router):
        super().__init__(op, 1, last, result=share, diagnose=diagnose)
        self.share, self.combine, self.own = share, combine, own
        self.router = router
        self._plans: Dict[int, Any] = {}          # id(held table) -> (table, _Plan or None)

    def _match(self, table: dict, records: list) -> list:
        try:
            return self._spread(table, records)
        except UserFunctionError:
            raise
        except Exception:
            if self.diagnose is not None:           # a record of the wrong shape, named
                self.diagnose(1, [(k, v) for k, vs in table.items() for v in vs])
                self.diagnose(0, records)
            raise

    def _spread(self, table: dict, records: list) -> list:
        plan = self._plan(table)
        if plan is not None and 4 * len(records) >= len(plan.keys):
            xs = dict(records)
            if len(xs) == len(records):           # one varying record per key
                out = self._arrays(plan, xs)
                if out is not None:
                    return self.router.split(*out)
        acc = self._fold(table, records)
        return self.router.split(list(acc), list(acc.values()))

    def on_notify(self, time) -> None:
        super().on_notify(time)
        if time[1][-1] == self.last:              # the epoch's held table is gone
            self._plans.clear()
            self.router.forget()

    def _plan(self, table: dict):
        entry = self._plans.get(id(table))
        if entry is None or entry[0] is not table:
            plan = None
            if _numpy() is not None and table and all(map(_single, table.values())):
                plan = _Plan(dict(zip(table.keys(), map(_first, table.values()))),
                             self.own is not None)
            self._plans = {id(table): (table, plan)}      # one epoch at a time, typically
            if plan is not None:
                self.router.remember(plan.tkeys)          # the targets of every full batch
            entry = self._plans[id(table)]
        return entry[1]

    def _arrays(self, plan: _Plan, xs: dict) -> Optional[tuple]:
        """``(targets, partials)`` of the batch ``xs`` (a dict), or None for the general path;
        when every held key has its record, the targets are ``plan.tkeys`` itself."""
        np = _numpy()
        hit = None if len(xs) == len(plan.keys) and xs.keys() == plan.keyset else \
            list(map(xs.__contains__, plan.keys))
        if hit is None:                           # every held key has its record
            keys, targets, size, tid, last, got = (plan.keys, plan.targets, plan.size, plan.tid,
                                                   plan.last, plan.got)
        else:
            mask = np.array(hit, dtype=bool)
            keys, targets = list(compress(plan.keys, hit)), list(compress(plan.targets, hit))
            size = plan.size[mask]
            tid = plan.tid[np.repeat(mask, plan.size)]
            last = np.cumsum(size) - 1
            got = np.bincount(tid, minlength=len(plan.tkeys)) > 0
        values = list(map(xs.__getitem__, keys))
        shares = self._calls(self.share, "share", values, targets)
        owns = self._calls(self.own, "own", values) if self.own is not None else []
        kinds = set(map(type, chain(shares, owns)))
        combine = self.combine
        if combine is operator.add and kinds == {float}:
            w = np.repeat(np.array(shares, dtype=float), size)
            if owns:
                w[last] = owns
            sums = np.bincount(tid, weights=w, minlength=len(plan.tkeys))
            if hit is None:                       # every target is reached
                return plan.tkeys, sums
            return list(compress(plan.tkeys, got)), sums[got]
        if (combine is builtins.min or combine is builtins.max) and len(kinds) == 1:
            return self._extremes(plan, shares, owns, kinds.pop(), hit, size, tid, last, got)
        return None

    def _extremes(self, plan: _Plan, shares: list, owns: list, kind: type, hit, size, tid, last,
                  got) -> Optional[tuple]:
        """The least (or greatest) share per target, in arrays: integers as they are (when
        they fit in 64 bits), other ordered values by their rank among the batch's values."""
        np = _numpy()
        codes = mine = ranked = None
        if kind is int:
            try:
                codes = np.fromiter(shares, np.int64, len(shares))
                mine = np.fromiter(owns, np.int64, len(owns))
            except OverflowError:
                codes = None
        if codes is None:
            if kind not in _ORDERED:
                return None
            ranked = sorted(set(shares).union(owns))
            rank = dict(zip(ranked, count()))
            codes = np.fromiter(map(rank.__getitem__, shares), np.int64, len(shares))
            mine = np.fromiter(map(rank.__getitem__, owns), np.int64, len(owns))
        codes = np.repeat(codes, size)
        if owns:
            codes[last] = mine
        limits = np.iinfo(np.int64)
        if self.combine is builtins.min:
            best = np.full(len(plan.tkeys), limits.max, np.int64)
            np.minimum.at(best, tid, codes)
        else:
            best = np.full(len(plan.tkeys), limits.min, np.int64)
            np.maximum.at(best, tid, codes)
        if hit is None:                           # every target is reached
            targets = plan.tkeys
        else:
            targets, best = list(compress(plan.tkeys, got)), best[got]
        values = best.tolist()
        return targets, values if ranked is None else list(map(ranked.__getitem__, values))

    def _calls(self, fn: Callable, role: str, *args: list) -> list:
        try:
            return list(map(fn, *args))
        except Exception:
            for one in zip(*args):              # the failing call, named precisely
                self._call(fn, role, one)
            raise

    def _call(self, fn: Callable, role: str, args: tuple) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise UserFunctionError(self.op, role, fn, args,
                                    f"raised {type(exc).__name__}: {exc}") from exc

    def _fold(self, table: dict, records: list) -> dict:
        """The general path: every held record of the key, every target, one at a time."""
        acc: dict = {}
        get = acc.get
        combine, share, own = self.combine, self.share, self.own
        empty: list = []
        for k, x in records:
            for targets in table.get(k, empty):
                v = self._call(share, "share", (x, targets))
                pairs: Iterable = zip(targets, repeat(v))
                if own is not None:
                    pairs = chain(pairs, ((k, self._call(own, "own", (x,))),))
                for t, v in pairs:
                    cur = get(t, _MISSING)
                    acc[t] = v if cur is _MISSING else self._call(combine, "combine", (cur, v))
        return acc


def _single(values: list) -> bool:
    return len(values) == 1


def _check_pairs(op: str):
    """The diagnosis of spread's inputs: ``(key, value)`` pairs with hashable keys, the edges'
    values iterables of hashable targets."""
    def diagnose(edge: int, records: Iterable[Any]) -> None:
        side = "record of the iterated stream" if edge == 0 else "record of the edges"
        want = "(key, value) with a hashable key" if edge == 0 else \
            "(key, targets) with a hashable key and an iterable of hashable targets"
        for r in records:
            try:
                k, v = r
                hash(k)
                if edge == 1:
                    for t in v:
                        hash(t)
            except Exception as exc:
                raise UserFunctionError(op, side, None, (r,),
                                        f"is not {want} ({type(exc).__name__}: {exc})",
                                        hint="make the records such pairs, e.g. with select"
                                        ) from exc
    return diagnose


def spread(stream: Stream, edges: Stream, share: Callable[[Any, Any], Any],
           combine: Callable[[Any, Any], Any],
           own: Optional[Callable[[Any], Any]] = None) -> Stream:
    """Per time, ``(target, acc)``: ``share(x, targets)`` sent from every ``(key, x)`` of this
    stream to each target of the loop-invariant ``(key, targets)`` of ``edges`` (and
    ``own(x)`` to ``key``), folded per target by ``combine``.  ``edges`` must come from
    ``loop.enter`` in the loop where this runs (see the module documentation)."""
    import stages
    op = "spread"
    need_stream(op, stream, edges)
    need_callable(op, "share", share, "share(value, targets) -> value")
    need_callable(op, "combine", combine, "combine(a, b) -> value")
    if own is not None:
        need_callable(op, "own", own, "own(value) -> value")
    op = label(op, share, combine)
    mark = held(edges)
    if mark is None or held(stream) is not None:
        msg = (f"{op}: the edges must be loop-invariant (from loop.enter) and the iterated "
               "stream must not be; use join, select_many and aggregate otherwise")
        raise GraphError(msg)
    scope, last = mark[0], last_of(op, mark)
    if scope is not stream.scope:
        msg = (f"{op}: the edges belong to loop {scope.path()}, but the operator runs in "
               f"{stream.scope.path()}; enter the stream in the loop that uses it")
        raise GraphError(msg)
    diagnose = _check_pairs(op)
    workers = stream.computation.workers
    st = stages.new_stage(lambda: SpreadVertex(op, last, share, combine, own, diagnose,
                                               Router(workers)), name=f"{op}.local")
    st.new_input(stream, Explained(_first, lambda records: diagnose(0, records)))
    st.new_input(edges, Explained(_first, lambda records: diagnose(1, records)))
    return merge_blocks(st.new_output(), op, combine, "combine")

