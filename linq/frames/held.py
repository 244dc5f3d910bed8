"""A join whose one side is loop-invariant: the static side's index is built once per epoch.

Inside ``f.iterate(lambda loop, r: r.join(loop.enter(edges), ...), n)`` the entered side holds
at every iteration of an epoch and arrives once, at iteration 0.  :class:`HeldJoin` keeps its
tables for the epoch and, at the first iteration that needs it, builds a :class:`SortedIndex`:
the static rows sorted by key (a single integer key column is sorted by value; other keys by
their row hash, with the matches checked column by column afterwards).  Every iteration then
probes the index with the varying side's tables (two ``searchsorted`` and a few ``take``), so
the static side is neither shipped nor re-hashed again until the epoch's last iteration, when
the index is dropped.  The output is that of :meth:`FrameStream.join`: the same columns, in
the same order, for every ``how``.

>>> import pyarrow as pa
>>> index = SortedIndex(pa.table({"src": [3, 1, 3], "w": [0.5, 1.0, 2.0]}), ["src"])
>>> probe, matched = index.probe(pa.table({"node": [3, 2, 1]}), ["node"])
>>> sorted(zip(probe.tolist(), index.table["w"].take(matched).to_pylist()))
[(0, 0.5), (0, 2.0), (2, 1.0)]
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import naiad
from linq.frames.hashing import row_hash
from linq.frames.vertices import FrameError, _Checked, require_columns

__all__ = ["SortedIndex", "HeldJoin", "join_tables"]


def _int_key(table: pa.Table, keys: Sequence[str]) -> Optional[np.ndarray]:
    """The single integer key column as int64 (nulls excluded by the caller), else None."""
    if len(keys) != 1:
        return None
    column = table.column(keys[0])
    if not pa.types.is_integer(column.type):
        return None
    return column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _valid(table: pa.Table, keys: Sequence[str]) -> Optional[np.ndarray]:
    """A mask of the rows whose keys are all non-null, or None when no key is null."""
    mask = None
    for k in keys:
        column = table.column(k)
        if column.null_count:
            ok = column.is_valid().to_numpy(zero_copy_only=False)
            mask = ok if mask is None else mask & ok
    return mask


class SortedIndex:
    """The rows of ``table`` sorted by their ``keys``, probed by ``searchsorted``."""

    def __init__(self, table: pa.Table, keys: Sequence[str]):
        self.keys = list(keys)
        valid = _valid(table, self.keys)
        rows = np.arange(table.num_rows) if valid is None else np.flatnonzero(valid)
        ints = _int_key(table, self.keys)
        self.exact = ints is not None
        values = ints if ints is not None else row_hash(table, self.keys)
        values = values[rows]
        order = np.argsort(values, kind="stable")
        self.rows = rows[order]                  # index position -> row of the original table
        self.sorted = values[order]
        self.table = table

    def probe(self, other: pa.Table, keys: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """``(rows of other, rows of the index table)`` of every pair with equal keys."""
        ints = _int_key(other, keys) if self.exact else None
        exact = ints is not None
        if self.exact and not exact:
            msg = (f"join: the key {list(keys)} of the varying side is not an integer column, "
                   f"but the loop-invariant side's key {self.keys} is")
            raise FrameError(msg)
        values = ints if exact else row_hash(other, keys)
        valid = _valid(other, keys)
        lo = np.searchsorted(self.sorted, values, "left")
        hi = np.searchsorted(self.sorted, values, "right")
        counts = hi - lo
        if valid is not None:
            counts[~valid] = 0
        total = int(counts.sum())
        left = np.repeat(np.arange(len(values)), counts)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        right = self.rows[np.arange(total) + starts]
        if not exact and total:                  # equal hashes: check the values themselves
            same = None
            for mine, theirs in zip(keys, self.keys):
                eq = pc.equal(other.column(mine).take(left), self.table.column(theirs).take(right))
                same = eq if same is None else pc.and_(same, eq)
            keep = same.fill_null(False).to_numpy(zero_copy_only=False)
            left, right = left[keep], right[keep]
        return left, right


def _unmatched(n: int, hit: np.ndarray) -> np.ndarray:
    seen = np.zeros(n, bool)
    seen[hit] = True
    return np.flatnonzero(~seen)


def _take(table: pa.Table, name: str, rows: np.ndarray, nulls: int) -> pa.ChunkedArray:
    column = table.column(name).take(rows)
    if nulls:
        column = pa.chunked_array(column.chunks + [pa.nulls(nulls, column.type)], column.type)
    return column


def join_tables(a: pa.Table, b: pa.Table, a_keys: Sequence[str], b_keys: Sequence[str],
                pairs: Tuple[np.ndarray, np.ndarray], how: str) -> pa.Table:
    """The join of ``a`` and ``b`` given their matching row ``pairs``, laid out as Arrow's
    hash join lays it out (left columns, then the right's without its keys; a right join
    leads with the left's non-key columns; a full join coalesces the keys)."""
    ai, bi = pairs
    extra_a = _unmatched(a.num_rows, ai) if how in ("left", "outer") else ai[:0]
    extra_b = _unmatched(b.num_rows, bi) if how in ("right", "outer") else bi[:0]
    a_rows = np.concatenate([ai, extra_a])
    a_rest = [c for c in a.column_names if c not in a_keys]
    b_rest = [c for c in b.column_names if c not in b_keys]
    clash = sorted(set(a.column_names if how != "right" else a_rest)
                   & set(b_rest if how != "right" else b.column_names))
    if clash:
        msg = (f"join: both sides have the column(s) {clash}; rename one side's columns "
               "(map_batches with table.rename_columns) before joining")
        raise FrameError(msg)
    out: Dict[str, pa.ChunkedArray] = {}

    def b_col(name: str) -> pa.ChunkedArray:
        column = b.column(name)
        if not len(extra_a) and not len(extra_b):
            return column.take(bi)
        parts = (column.take(bi).chunks + [pa.nulls(len(extra_a), column.type)]
                 + column.take(extra_b).chunks)
        return pa.chunked_array(parts, column.type)

    if how == "right":
        for name in a_rest:
            out[name] = _take(a, name, a_rows, len(extra_b))
        for name in b.column_names:
            out[name] = b_col(name)
    else:
        for name in a.column_names:
            column = _take(a, name, a_rows, len(extra_b))
            if how == "outer" and name in a_keys and len(extra_b):
                other = b_col(b_keys[a_keys.index(name)]).cast(column.type)
                column = pc.coalesce(column, other)
            out[name] = column
        for name in b_rest:
            out[name] = b_col(name)
    return pa.table(out)


class HeldJoin(_Checked):
    """A per-time join of tagged tables where input ``held_edge`` is loop-invariant (it
    arrives at iteration 0); its index is kept until the notification of iteration ``last``."""

    def __init__(self, op: str, held_edge: int, last: int, keys: Sequence[Sequence[str]],
                 how: str) -> None:
        super().__init__(op)
        self.held_edge, self.last, self.how = held_edge, last, how
        self.keys = [list(k) for k in keys]
        # An outer join on the invariant side gives its unmatched rows at every iteration.
        self.every = how == "outer" or how == ("left" if held_edge == 0 else "right")
        self.held: Dict[tuple, List[pa.Table]] = {}
        self.indexes: Dict[tuple, SortedIndex] = {}
        self.waiting: Dict[naiad.Timestamp, List[pa.Table]] = {}
        self.checked: set = set()

    def _epoch(self, time: naiad.Timestamp) -> tuple:
        return (time.epoch, time.counters[:-1])

    def on_recv_batch(self, edge: int, messages: list, time: naiad.Timestamp) -> None:
        ek = self._epoch(time)
        if ek not in self.held:
            self.held[ek] = []
            first = time.counters[-1]
            for c in (range(first, self.last + 1) if self.every else (self.last,)):
                self.notify_at(naiad.Timestamp(ek[0], ek[1] + (c,)))
        for message in messages:
            table = self._check(edge, message[1])
            if edge not in self.checked:
                require_columns(self.op, table, self.keys[edge])
                self.checked.add(edge)
            if edge == self.held_edge:
                self.held[ek].append(table)
            else:
                waiting = self.waiting.get(time)
                if waiting is None:
                    waiting = self.waiting[time] = []
                    if not self.every:
                        self.notify_at(time)
                waiting.append(table)

    def _index(self, ek: tuple) -> Optional[SortedIndex]:
        index = self.indexes.get(ek)
        if index is None and self.held.get(ek):
            tables = self.held[ek]
            index = self.indexes[ek] = SortedIndex(pa.concat_tables(tables), self.keys[self.held_edge])
            self.held[ek] = []
        return index

    def on_notify(self, time: naiad.Timestamp) -> None:
        ek = self._epoch(time)
        waiting = self.waiting.pop(time, None)
        index = self._index(ek)
        result = self._join(index, pa.concat_tables(waiting) if waiting else None)
        if result is not None and result.num_rows:
            self.send_by(0, result, time)
        if time.counters[-1] == self.last:
            self.held.pop(ek, None)
            self.indexes.pop(ek, None)

    def _side(self, edge: int, table: Optional[pa.Table]) -> Optional[pa.Table]:
        """``table``, or an empty table of the schema this input has shown, if any."""
        if table is not None:
            return table
        schema = self.schemas.get(edge)
        return None if schema is None else schema.empty_table()

    def _join(self, index: Optional[SortedIndex], varying: Optional[pa.Table]) -> Optional[pa.Table]:
        h, v = self.held_edge, 1 - self.held_edge
        if index is None:
            held = self._side(h, None)
            index = None if held is None else SortedIndex(held, self.keys[h])
        varying = self._side(v, varying)
        if index is None or varying is None:     # one side never seen: as FrameStream.join
            keep = self.how in ("outer", "left" if v == 0 else "right")
            if varying is not None and keep:
                return varying
            return index.table if index is not None and self.every else None
        if varying.num_rows == 0 and not self.every:
            return None
        pairs = index.probe(varying, self.keys[v])
        tables = [varying, index.table]
        if h == 0:
            tables, pairs = tables[::-1], (pairs[1], pairs[0])
        return join_tables(tables[0], tables[1], self.keys[0], self.keys[1], pairs, self.how)
