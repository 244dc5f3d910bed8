"""``FrameStream.spread``: values sent along loop-invariant edges and summed per target, by columns.

``r.spread(loop.enter(edges), on="node", src="src", dst="dst", weight="w")`` is one round of
PageRank in one operator: per time, each row of ``r`` sends its value columns (every column
but ``on``) along the edges whose ``src`` equals its ``on``, multiplied by the edge's
``weight`` when one is named, and every ``dst`` receives the sum.  The result is that of

    r.join(edges, on=on, right_on=src)
     .map_batches(lambda t: pa.table({on: t[dst], **{c: t[c] * t[weight] for c in values}}))
     .group_by(on, **{c: (c, "sum") for c in values})

(one row per ``dst`` that some edge reached, the value columns in ``r``'s order), but the
edges are prepared once per epoch into integer positions.  :class:`SpreadPlan` indexes the
edges by ``src`` as soon as the epoch's first edge table arrives, while the worker waits for
the progress that says the edges are complete (a later edge table makes it index them all
again at the notification), and the first iteration's values are spread in that wait too.
The plan keeps a :class:`linq.frames.held.KeyIndex` (a probe by the same keys as the last,
the ranks of the same nodes iteration after iteration, is reused after one comparison) and
numbers the distinct ``dst`` keys so that those each worker owns are consecutive; the route
of each target is hashed once.  An iteration is then a
gather of the values along the edges (``numpy.take``), a multiplication by the weights, one
``numpy.bincount`` into the dense target numbering, and per worker a slice of the sums: the
partial sums of each worker travel, never the edges nor a per-row hash.  A slice carries the
worker's (precomputed) key column only the first time in an epoch, and again when the targets
reached change; otherwise its value columns travel alone (half the bytes of a table of one
float64 column), and :class:`PartialSums`, on the receiving worker, completes them with the
key column they name, kept from that sender for the epoch (messages of different iterations
may be delivered in any order: values that come first wait for their keys).  It sums the
partials of the time (the final step of ``group_by``, by a kept grouping: :class:`Sums`, which
recognises the same key arrays without comparing them) and hands on the same key array as
long as the keys are the same, so the next exchange by ``on`` finds its routing already known
(:class:`linq.frames.vertices.Split`).

The final sums are one stage per destination worker (``spread(...).sum[d]``, fed by output
``d`` of the spread, all of whose tables go to worker ``d``), not one stage for all workers.
Progress is tracked per stage, so with a single stage worker ``d``'s sums at an iteration would
wait until every other worker had consumed the partials ``d`` sent them, and said so: a
progress round trip between the processes per iteration.  With a stage per destination, the
partials that ``d`` sends are counted at the other stages, and the notification of ``d``'s own
stage comes as soon as the partials for ``d`` and the senders' progress (which travels in the
same message) have arrived.

The dense path takes a single integer ``on``/``src`` key and integer ``dst`` keys without nulls
and float64 values and weights without nulls; other tables (string keys, integer values,
nulls) are aggregated by Arrow's ``group_by`` instead, with the same result.  When the edges
are not loop-invariant, ``spread`` is the composition above.

>>> import pyarrow as pa
>>> plan = SpreadPlan(pa.table({"src": [0, 0, 1], "dst": [1, 2, 2], "w": [0.5, 0.5, 1.0]}),
...                   "src", "dst", "w", [0, 1])
>>> [p.to_pylist() for p in plan.keys]        # the targets each of 2 workers owns
[[2], [1]]
>>> parts = plan.spread(pa.table({"node": [1, 0], "rank": [4.0, 2.0]}), "node")
>>> [(route, t.to_pydict()) for route, t in parts]     # 1 gets 2 * 0.5; 2 gets 2 * 0.5 + 4
[(0, {'node': [2], 'rank': [5.0]}), (1, {'node': [1], 'rank': [1.0]})]
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import naiad
from linq.frames.hashing import destinations, route_hash
from linq.frames.held import HeldJoin, KeyIndex, check_key_types
from linq.frames.sums import _SPREAD, Sums, sum_by
from linq.frames.vertices import (Accumulate, FrameError, _same_array, concat, require_columns,
                                  split_table)

__all__ = ["SpreadPlan", "SpreadVertex", "PartialSums", "Sums", "sum_by"]

_FEW = 8           # up to this many workers, the targets are grouped by comparisons, not a sort


def _plain(column: pa.ChunkedArray) -> Optional[np.ndarray]:
    """A float64 column without nulls as one numpy array (no copy for one chunk), else None."""
    if column.type != pa.float64() or column.null_count:
        return None
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy()
    return column.to_numpy()


def _ints(column: pa.ChunkedArray) -> Optional[np.ndarray]:
    """An integer column without nulls (and within int64) as int64, else None."""
    if (not pa.types.is_integer(column.type) or column.type == pa.uint64()
            or column.null_count):
        return None
    values = column.chunk(0).to_numpy() if column.num_chunks == 1 else column.to_numpy()
    return values.astype(np.int64, copy=False)


class SpreadPlan:
    """The edge table of one epoch on one worker, prepared for :meth:`spread`.

    ``index`` finds the edges of each source key; ``slot`` numbers each edge's target so that
    the targets of worker ``d`` are ``offsets[d] .. offsets[d + 1] - 1`` and ``keys[d]`` is
    their key column (an Arrow array of the ``dst`` type, made once); ``weights`` is the
    weight column as numpy (None without weights, or when it is not float64 without nulls).
    A ``dst`` column that is not integers without nulls leaves ``slot`` None: the general path.
    """

    def __init__(self, table: pa.Table, src: str, dst: str, weight: Optional[str],
                 routes: Sequence[int], op: str = "spread"):
        self.table, self.src, self.dst, self.weight, self.op = table, src, dst, weight, op
        self.routes = list(routes)
        self.index = KeyIndex(table, [src])
        column = table.column(dst)
        self.dst_type = column.type
        self.weights = _plain(table.column(weight)) if weight is not None else None
        self.weighted_plain = weight is None or self.weights is not None
        self.slot: Optional[np.ndarray] = None
        self.keys: List[pa.Array] = []
        self.offsets = np.zeros(len(self.routes) + 1, np.int64)
        targets = _ints(column)
        if targets is not None:
            self._number(targets)

    def _number(self, targets: np.ndarray) -> None:
        """Dense target numbers, grouped by the worker that owns each target."""
        if not len(targets):
            self.slot = np.zeros(0, np.intp)
            self.keys = [pa.array([], self.dst_type) for _ in self.routes]
            return
        lo, hi = int(targets.min()), int(targets.max())
        rel = None
        if hi - lo + 1 <= _SPREAD * len(targets) + 1024:
            rel = targets - lo
            seen = np.zeros(hi - lo + 1, bool)
            seen[rel] = True
            present = np.flatnonzero(seen)
            distinct = present + lo
        else:
            distinct, inverse = np.unique(targets, return_inverse=True)
        workers = len(self.routes)
        owner = destinations(route_hash(pa.table({"k": distinct}), ["k"]), workers, reuse=True)
        if workers <= _FEW:     # the targets of each worker in order, by one comparison each
            order = np.concatenate([np.flatnonzero(owner == d) for d in range(workers)])
        else:
            order = np.argsort(owner, kind="stable")
        number = np.empty(len(distinct), np.intp)
        number[order] = np.arange(len(distinct))
        if rel is not None:
            position = np.zeros(hi - lo + 1, np.intp)
            position[present] = number
            self.slot = position[rel]
        else:
            self.slot = number[inverse.reshape(-1)]
        counts = np.bincount(owner, minlength=len(self.routes))
        self.offsets[1:] = np.cumsum(counts)
        ordered = distinct[order]
        self.keys = [pa.array(ordered[a:b], self.dst_type)
                     for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]

    def spread(self, varying: pa.Table, on: str) -> List[Tuple[int, pa.Table]]:
        """``[(route, partial sums)]`` of the rows of ``varying`` along the edges, one table per
        worker that owns a target reached."""
        values = [c for c in varying.column_names if c != on]
        left, right = self.index.probe(varying, [on])
        if not len(left):
            return []
        plain = [p for p in (_plain(varying.column(c)) for c in values) if p is not None]
        if self.slot is None or not self.weighted_plain or len(plain) < len(values):
            return self._general(varying, on, values, left, right)
        slot = self.slot if right is None else self.slot[right]
        n = int(self.offsets[-1])
        reached = None if right is None else np.bincount(slot, minlength=n) > 0
        w = None if self.weights is None else (self.weights if right is None
                                                 else self.weights[right])
        sums = []
        for p in plain:
            v = p[left]
            if w is not None:
                v *= w
            sums.append(np.bincount(slot, weights=v, minlength=n))
        out = []
        for d, route in enumerate(self.routes):
            a, b = int(self.offsets[d]), int(self.offsets[d + 1])
            if a == b:
                continue
            keys = self.keys[d]
            parts = [s[a:b] for s in sums]
            if reached is not None:
                mask = reached[a:b]
                if not mask.any():
                    continue
                if not mask.all():
                    keys = keys.filter(pa.array(mask))
                    parts = [p[mask] for p in parts]
            out.append((route, pa.table([keys] + parts, names=[on] + values)))
        return out

    def _general(self, varying: pa.Table, on: str, values: List[str], left: np.ndarray,
                 right: Optional[np.ndarray]) -> List[Tuple[int, pa.Table]]:
        """The same partial sums by Arrow kernels: any key and value types, nulls."""
        picked = varying.take(left)
        targets = self.table.column(self.dst)
        columns = {on: targets if right is None else targets.take(right)}
        for c in values:
            column = picked.column(c)
            if self.weight is not None:
                w = self.table.column(self.weight)
                column = pc.multiply(column, w if right is None else w.take(right))
            columns[c] = column
        return split_table(sum_by(pa.table(columns), on, values, self.op), [on], self.routes)


class SpreadVertex(HeldJoin):
    """The sending half of ``spread``: a :class:`HeldJoin` of the varying tables (input 0,
    key ``on``) with the invariant edges (input 1, key ``src``) whose match of a table is its
    partial sums per target, tagged with the route of the target's worker."""

    def __init__(self, op: str, last: int, on: str, src: str, dst: str,
                 weight: Optional[str], routes: Sequence[int]) -> None:
        super().__init__(op, 1, last, [[on], [src]], "inner")
        self.on, self.src, self.dst, self.weight = on, src, dst, weight
        self.routes = list(routes)
        self.ports = {route: d for d, route in enumerate(self.routes)}   # output d: worker d
        self.plans: dict = {}
        self.early: set = set()      # epochs whose plan was made from their first edge table
        # Results computed ahead of their notification: time -> (varying table, plan, result).
        self.ahead: Dict[naiad.Timestamp, Tuple[pa.Table, SpreadPlan, Any]] = {}
        # Per epoch and output, the key array last sent, its number and the earliest
        # iteration it was sent at (see _emit).
        self.sent: Dict[tuple, Dict[int, Tuple[pa.Array, int, int]]] = {}
        self.numbered = 0

    def on_recv_batch(self, edge: int, messages: list, time: naiad.Timestamp) -> None:
        super().on_recv_batch(edge, messages, time)
        ek = self._epoch(time)
        if ek in self.ready:
            return
        if edge == self.held_edge:
            self._early_plan(ek)
        self._compute_ahead(ek)

    def _early_plan(self, ek: tuple) -> None:
        held = self.held.get(ek)
        if not held:
            return
        if ek in self.early:
            # More edges after an early plan: the plan is remade from all of them when the
            # edges are known to be complete (the notification).
            self.early.discard(ek)
            plan = self.plans.pop(ek, None)
            if plan is not None:
                held.insert(0, plan.table)
        elif ek not in self.plans and len(held) == 1:
            # The epoch's first edge table (often its only one, for a program that feeds each
            # process the edges its workers own) is indexed at once, while the worker waits
            # for the progress that tells it the edges are complete.
            self.early.add(ek)
            self._index(ek)

    def _compute_ahead(self, ek: tuple) -> None:
        """With an early plan, the partial sums of a time's single varying table are computed
        while the worker waits for the notification; the notification sends them if neither
        more edges nor more varying tables came in the meantime (else it computes again)."""
        plan = self.plans.get(ek) if ek in self.early else None
        if plan is None:
            return
        for time, waiting in self.waiting.items():
            if self._epoch(time) != ek or len(waiting) != 1:
                continue
            ahead = self.ahead.get(time)
            if ahead is None or ahead[0] is not waiting[0] or ahead[1] is not plan:
                self.ahead[time] = (waiting[0], plan, self._join(plan, waiting[0]))

    def _index(self, ek: tuple) -> Any:
        plan = self.plans.get(ek)
        if plan is None and self.held.get(ek):
            table = concat(self.held[ek]).combine_chunks()
            require_columns(self.op, table,
                            [self.dst] + ([self.weight] if self.weight is not None else []))
            plan = self.plans[ek] = SpreadPlan(table, self.src, self.dst, self.weight,
                                               self.routes, self.op)
            self.held[ek] = []
        return plan

    def on_notify(self, time: naiad.Timestamp) -> None:
        ek = self._epoch(time)
        ahead = self.ahead.pop(time, None)
        waiting = self.waiting.get(time)
        if (ahead is not None and waiting is not None and len(waiting) == 1
                and waiting[0] is ahead[0] and self.plans.get(ek) is ahead[1]):
            del self.waiting[time]
            self._emit(ahead[2], time)
        super().on_notify(time)
        if time.counters[-1] == self.last:
            self.plans.pop(ek, None)
            self.sent.pop(ek, None)
            self.early.discard(ek)

    def _join(self, plan: Any, varying: Optional[pa.Table]) -> Any:
        if varying is None or varying.num_rows == 0:
            return None
        edges = plan.table.schema if plan is not None else self.schemas.get(self.held_edge)
        if edges is not None:           # every worker sees the edges' schema (every=True)
            check_key_types(self.op, varying, edges, [self.on], [self.src])
        if plan is None:
            return None
        return plan.spread(varying, self.on)

    def _emit(self, result: Any, time: naiad.Timestamp) -> None:
        """Each partial table to its worker's output as ``(route, table, sender, number,
        with_keys)``: with its key column unless that column is the array last sent to that
        worker in this epoch, at this iteration or an earlier one (the targets of one plan
        are the same arrays iteration after iteration), else the value columns alone, which
        :class:`PartialSums` completes with the keys it kept under ``number``.  Messages of
        different times may be delivered in any order, so the values name their keys, and a
        message at an earlier time than the keys' carries them again (the keys then arrive
        before the notification of every time that relies on them).  The table for this
        worker itself goes by reference, whole."""
        if not result:
            return
        ek = self._epoch(time)
        at = time.counters[-1]
        sent = self.sent.get(ek)
        if sent is None:
            sent = self.sent[ek] = {}
        for route, table in result:
            d = self.ports[route]
            if d == self.index:
                self.send_by(d, (route, table, d, -1, True), time)
                continue
            column = table.column(0)
            key = column.chunk(0) if column.num_chunks == 1 else None
            last = sent.get(d)
            if key is not None and last is not None and _same_array(last[0], key):
                if last[2] <= at:
                    values = pa.table(table.columns[1:], names=table.column_names[1:])
                    self.send_by(d, (route, values, self.index, last[1], False), time)
                    continue
                sent[d] = (key, last[1], at)
                self.send_by(d, (route, table, self.index, last[1], True), time)
                continue
            if key is None:
                sent.pop(d, None)
                self.send_by(d, (route, table, self.index, -1, True), time)
                continue
            self.numbered += 1
            sent[d] = (key, self.numbered, at)   # held: its memory is not reused meanwhile
            self.send_by(d, (route, table, self.index, self.numbered, True), time)


class PartialSums(Accumulate):
    """The receiving half of ``spread``: :class:`Sums` of the partial tables of a time, each
    ``(route, table, sender, number, with_keys)`` from a :class:`SpreadVertex`.  A table with
    keys is kept as its sender's key column ``number`` for the epoch; a table without (the
    value columns alone) gets that column back, the same array, so that :class:`Sums` finds
    its grouping without comparing keys.  Values that arrive before their keys (another time's
    message, delivered first) wait for them: the keys' time is at most the values', so they
    arrive before its notification.  The kept columns are dropped at the notification of
    iteration ``last`` (requested when an epoch's first keys arrive).  ``(route, table)``
    messages (the composed form of ``spread``) are summed as they are."""

    def __init__(self, op: str, on: str, last: Optional[int]) -> None:
        super().__init__(f"{op}.sum", 1, True, Sums(on, op))
        self.on, self.last = on, last
        self.keys: Dict[tuple, Dict[Tuple[int, int], pa.ChunkedArray]] = {}
        # (epoch, sender, number) -> [(route, values, time)] waiting for their keys
        self.early: Dict[tuple, List[tuple]] = {}

    def on_recv_batch(self, edge: int, messages: List[Any], time: naiad.Timestamp) -> None:
        tables = []
        for message in messages:
            if len(message) == 5:
                route, table, sender, number, with_keys = message
                if with_keys:
                    self._keep(edge, table.column(0), sender, number, time)
                else:
                    table = self._complete(table, sender, number, route, time)
                    if table is None:
                        continue
                message = (route, table)
            tables.append(message)
        super().on_recv_batch(edge, tables, time)

    def _kept(self, time: naiad.Timestamp) -> Tuple[tuple, Dict[Tuple[int, int], Any]]:
        ek = (time.epoch, time.counters[:-1])
        kept = self.keys.get(ek)
        if kept is None:
            kept = self.keys[ek] = {}
            if self.last is not None:
                self.notify_at(naiad.Timestamp(ek[0], ek[1] + (self.last,)))
        return ek, kept

    def _keep(self, edge: int, keys: pa.ChunkedArray, sender: int, number: int,
              time: naiad.Timestamp) -> None:
        ek, kept = self._kept(time)
        if number < 0:
            return
        kept[(sender, number)] = keys
        for route, values, at in self.early.pop((ek, sender, number), ()):
            table = pa.table([keys] + values.columns, names=[self.on] + values.column_names)
            super().on_recv_batch(edge, [(route, table)], at)

    def _complete(self, values: pa.Table, sender: int, number: int, route: int,
                  time: naiad.Timestamp) -> Optional[pa.Table]:
        ek, kept = self._kept(time)
        keys = kept.get((sender, number))
        if keys is None:
            self.early.setdefault((ek, sender, number), []).append((route, values, time))
            return None
        return pa.table([keys] + values.columns, names=[self.on] + values.column_names)

    def on_notify(self, time: naiad.Timestamp) -> None:
        ek = (time.epoch, time.counters[:-1])
        for (e, sender, number), early in self.early.items():
            if e == ek and any(at == time for _, _, at in early):
                msg = (f"{self.op}: partial sums from worker {sender} at {time!r} came without "
                       f"their keys (number {number}), and the keys never arrived")
                raise FrameError(msg)
        if time in self.pending:
            super().on_notify(time)
        if self.last is not None and time.counters and time.counters[-1] == self.last:
            self.keys.pop(ek, None)
