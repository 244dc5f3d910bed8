"""A join whose one side is loop-invariant: the static side's index is built once per epoch.

Inside ``f.iterate(lambda loop, r: r.join(loop.enter(edges), ...), n)`` the entered side holds
at every iteration of an epoch and arrives once, at iteration 0.  :class:`HeldJoin` keeps its
tables for the epoch and, at the first iteration that needs it, makes a :class:`KeyIndex` of
them: integer keys by direct addressing over their range (a dense probe costs one gather per
static row, and the static columns are then used without a copy), otherwise the rows sorted by
key (or by row hash, matches then checked column by column) and probed by ``searchsorted``; the
last probe's answer is kept, and a probe by the same integer keys in the same order (the
iterated side of a loop, iteration after iteration) reuses it after one comparison.  So
the static side is neither shipped nor re-hashed again until the epoch's last iteration, when
the index is dropped.  The output is that of :meth:`FrameStream.join`: the same columns, in
the same order, for every ``how``.

>>> import pyarrow as pa
>>> index = KeyIndex(pa.table({"src": [3, 1, 3], "w": [0.5, 1.0, 2.0]}), ["src"])
>>> probe, matched = index.probe(pa.table({"node": [3, 2, 1]}), ["node"])
>>> probe.tolist(), matched                # every static row matched, in its own order
([0, 2, 0], None)
>>> probe, matched = index.probe(pa.table({"node": [3, 3]}), ["node"])   # repeated keys
>>> sorted(zip(probe.tolist(), index.table["w"].take(matched).to_pylist()))
[(0, 0.5), (0, 2.0), (1, 0.5), (1, 2.0)]
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import naiad
from linq.frames.hashing import row_hash
from linq.frames.vertices import FrameError, _Checked, concat, require_columns

__all__ = ["KeyIndex", "HeldJoin", "join_tables", "check_key_types", "check_clash"]


def check_key_types(op: str, a: Union[pa.Table, pa.Schema], b: Union[pa.Table, pa.Schema],
                    a_keys: Sequence[str], b_keys: Sequence[str]) -> None:
    """Arrow joins key columns of equal types only: a FrameError naming both otherwise."""
    sa = a if isinstance(a, pa.Schema) else a.schema
    sb = b if isinstance(b, pa.Schema) else b.schema
    for x, y in zip(a_keys, b_keys):
        tx, ty = sa.field(x).type, sb.field(y).type
        if tx != ty:
            msg = (f"{op}: the key columns {x!r} ({tx}) and {y!r} ({ty}) have different "
                   f"types, and Arrow joins equal types only; cast one side's key column "
                   f"first (map_batches with table.cast(schema))")
            raise FrameError(msg)


def check_clash(op: str, a: pa.Table, b: pa.Table, a_keys: Sequence[str],
                b_keys: Sequence[str], how: str) -> None:
    """A FrameError naming the columns both sides of a join have, besides the keys it
    merges: Arrow's join would give the result two columns of one name."""
    a_rest = [c for c in a.column_names if c not in a_keys]
    b_rest = [c for c in b.column_names if c not in b_keys]
    clash = sorted(set(a.column_names if how != "right" else a_rest)
                   & set(b_rest if how != "right" else b.column_names))
    if clash:
        msg = (f"{op}: both sides have the column(s) {clash}; rename one side's columns "
               "(map_batches with table.rename_columns) before joining")
        raise FrameError(msg)


def _int_key(table: pa.Table, keys: Sequence[str]) -> Optional[np.ndarray]:
    """The single integer key column as int64 (nulls excluded by the caller), else None."""
    if len(keys) != 1:
        return None
    column = table.column(keys[0])
    if not pa.types.is_integer(column.type):
        return None
    if column.null_count:
        column = column.fill_null(0)
    values = (column.chunk(0).to_numpy(zero_copy_only=False) if column.num_chunks == 1
              else column.to_numpy())
    return values.astype(np.int64, copy=False)


def _valid(table: pa.Table, keys: Sequence[str]) -> Optional[np.ndarray]:
    """A mask of the rows whose keys are all non-null, or None when no key is null."""
    mask = None
    for k in keys:
        column = table.column(k)
        if column.null_count:
            ok = column.is_valid().to_numpy(zero_copy_only=False)
            mask = ok if mask is None else mask & ok
    return mask


_FLOAT_BITS = {pa.float16(): pa.int16(), pa.float32(): pa.int32(), pa.float64(): pa.int64()}


def _bits(column: Any) -> Any:
    """A float key column as its bit patterns, so that keys compare as Arrow's own hash join
    compares them (a NaN meets a NaN, 0.0 does not meet -0.0); other columns as they are.

    >>> a, b = pa.array([float("nan"), 0.0, 1.5]), pa.array([float("nan"), -0.0, 1.5])
    >>> pc.equal(_bits(a), _bits(b)).to_pylist()
    [True, False, True]
    """
    bits = _FLOAT_BITS.get(column.type)
    if bits is None:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([c.view(bits) for c in column.chunks], bits)
    return column.view(bits)


class KeyIndex:
    """The static side of a join, kept for an epoch and probed by whole tables.

    Integer keys (a single integer column) are kept as a numpy array in the table's order.  A
    probe whose keys are unique and dense (node ids, bucket numbers) is answered by direct
    addressing: a position array over the key range, one gather per static row; when every
    static row matches, the static columns are used as they are, without a ``take``.  Other
    probes use the rows sorted by key (sorted once, when first needed) and ``searchsorted``;
    keys that are not one integer column are sorted by their row hash, and the matches are then
    checked column by column.
    """

    def __init__(self, table: pa.Table, keys: Sequence[str]):
        self.keys = list(keys)
        self.table = table
        self.valid = _valid(table, self.keys)
        self.ints = _int_key(table, self.keys)
        self.exact = self.ints is not None
        self.range: Optional[Tuple[int, int]] = None
        if self.ints is not None and table.num_rows:
            mine = self.ints if self.valid is None else self.ints[self.valid]
            if len(mine):
                self.range = (int(mine.min()), int(mine.max()))
        self._sorted: Optional[Tuple[np.ndarray, np.ndarray]] = None
        # The last probe's keys and answer: inside a loop the varying side usually brings the
        # same keys in the same order every iteration (the ranks of the same nodes), and then
        # the answer is reused after one comparison of the key arrays.
        self._last: Optional[Tuple[np.ndarray, Tuple[np.ndarray, Optional[np.ndarray]]]] = None

    def __getstate__(self) -> Dict[str, Any]:
        """Pickled (in a checkpoint) without the sorted index and the last answer: both are
        made again from the table when needed."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_sorted", "_last")}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state, _sorted=None, _last=None)

    def _sorted_index(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(rows in key order, their sorted keys)``, made on first use and kept."""
        if self._sorted is None:
            t = self.table
            rows = np.arange(t.num_rows) if self.valid is None else np.flatnonzero(self.valid)
            values = self.ints if self.ints is not None else row_hash(t, self.keys)
            values = values[rows]
            order = np.argsort(values, kind="stable")
            self._sorted = (rows[order], values[order])
        return self._sorted

    def probe(self, other: pa.Table, keys: Sequence[str]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """``(rows of other, rows of the index table)`` of every pair with equal keys; the
        second is None when it is every row of the index table, in order."""
        ints = _int_key(other, keys) if self.exact else None
        if self.exact and ints is None:
            msg = (f"join: the key {list(keys)} of the varying side is not an integer column, "
                   f"but the loop-invariant side's key {self.keys} is")
            raise FrameError(msg)
        valid = _valid(other, keys)
        if ints is not None and valid is None:
            last = self._last
            if last is not None and np.array_equal(last[0], ints):
                return last[1]
        answer = self._answer(other, keys, ints, valid)
        if ints is not None and valid is None:
            self._last = (ints, answer)
        return answer

    def _answer(self, other: pa.Table, keys: Sequence[str], ints: Optional[np.ndarray],
                valid: Optional[np.ndarray]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        if ints is not None:
            direct = self._direct(ints, valid)
            if direct is not None:
                return direct
        values = ints if ints is not None else row_hash(other, keys)
        rows, ordered = self._sorted_index()
        lo = np.searchsorted(ordered, values, "left")
        hi = np.searchsorted(ordered, values, "right")
        counts = hi - lo
        if valid is not None:
            counts[~valid] = 0
        total = int(counts.sum())
        left = np.repeat(np.arange(len(values)), counts)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        right = rows[np.arange(total) + starts]
        if ints is None and total:              # equal hashes: check the values themselves
            same = None
            for mine, theirs in zip(keys, self.keys):
                eq = pc.equal(_bits(other.column(mine).take(left)),
                              _bits(self.table.column(theirs).take(right)))
                same = eq if same is None else pc.and_(same, eq)
            keep = same.fill_null(False).to_numpy(zero_copy_only=False)
            left, right = left[keep], right[keep]
        return left, right

    def _direct(self, ints: np.ndarray, valid: Optional[np.ndarray]
                ) -> Optional[Tuple[np.ndarray, Optional[np.ndarray]]]:
        """Direct addressing over the static key range, when the probe keys are unique."""
        if self.range is None or self.ints is None:
            return None
        lo, hi = self.range
        width = hi - lo + 1
        if width > 4 * (len(self.ints) + len(ints)) + 1024:
            return None
        inside = (ints >= lo) & (ints <= hi)
        if valid is not None:
            inside &= valid
        where = np.flatnonzero(inside)
        slots = ints[where] - lo
        position = np.full(width, -1, np.int64)
        position[slots] = where
        if np.count_nonzero(position >= 0) != len(where):
            return None                          # repeated probe keys: the sorted path
        static = self.ints if self.valid is None else np.where(self.valid, self.ints, lo)
        match = position[static - lo]
        if self.valid is not None:
            match[~self.valid] = -1
        hit = match >= 0
        if hit.all():
            return match, None
        right = np.flatnonzero(hit)
        return match[right], right


def _unmatched(n: int, hit: Optional[np.ndarray]) -> np.ndarray:
    if hit is None:                          # every row matched
        return np.zeros(0, np.int64)
    seen = np.zeros(n, bool)
    seen[hit] = True
    return np.flatnonzero(~seen)


def _pick(column: pa.ChunkedArray, rows: Optional[np.ndarray]) -> pa.ChunkedArray:
    """``column`` at ``rows`` (None: every row, in order, without a copy)."""
    return column if rows is None else column.take(rows)


def join_tables(a: pa.Table, b: pa.Table, a_keys: Sequence[str], b_keys: Sequence[str],
                pairs: Tuple[Optional[np.ndarray], Optional[np.ndarray]], how: str,
                op: str = "join") -> pa.Table:
    """The join of ``a`` and ``b`` given their matching row ``pairs`` (None for one side:
    each of its rows once, in order), laid out as Arrow's hash join lays it out (left columns,
    then the right's without its keys; a right join leads with the left's non-key columns; a
    full join coalesces the keys)."""
    ai, bi = pairs
    extra_a = _unmatched(a.num_rows, ai) if how in ("left", "outer") else np.zeros(0, np.int64)
    extra_b = _unmatched(b.num_rows, bi) if how in ("right", "outer") else np.zeros(0, np.int64)
    a_rest = [c for c in a.column_names if c not in a_keys]
    b_rest = [c for c in b.column_names if c not in b_keys]
    check_clash(op, a, b, a_keys, b_keys, how)
    out: Dict[str, pa.ChunkedArray] = {}

    def side(table: pa.Table, name: str, matched: Optional[np.ndarray], own: np.ndarray,
             nulls_before: int, nulls_after: int) -> pa.ChunkedArray:
        column = table.column(name)
        if not len(own) and not nulls_before and not nulls_after:
            return _pick(column, matched)
        parts = (_pick(column, matched).chunks + [pa.nulls(nulls_before, column.type)]
                 + column.take(own).chunks + [pa.nulls(nulls_after, column.type)])
        return pa.chunked_array([p for p in parts if len(p)] or [pa.array([], column.type)],
                                column.type)

    def a_col(name: str) -> pa.ChunkedArray:        # matched, a's unmatched, nulls for b's
        return side(a, name, ai, extra_a, 0, len(extra_b))

    def b_col(name: str) -> pa.ChunkedArray:        # matched, nulls for a's, b's unmatched
        column = b.column(name)
        if not len(extra_a):
            return side(b, name, bi, extra_b, 0, 0)
        parts = (_pick(column, bi).chunks + [pa.nulls(len(extra_a), column.type)]
                 + column.take(extra_b).chunks)
        return pa.chunked_array([p for p in parts if len(p)] or [pa.array([], column.type)],
                                column.type)

    if how == "right":
        for name in a_rest:
            out[name] = a_col(name)
        for name in b.column_names:
            out[name] = b_col(name)
    else:
        for name in a.column_names:
            if name in a_keys:
                other = b_keys[a_keys.index(name)]
                if how == "inner" and bi is None and b.column(other).type == a.column(name).type:
                    out[name] = b.column(other)        # equal keys: b's column, uncopied
                    continue
            column = a_col(name)
            if how == "outer" and name in a_keys and len(extra_b):
                column = pc.coalesce(column, b_col(b_keys[a_keys.index(name)]).cast(column.type))
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
        self.indexes: Dict[tuple, KeyIndex] = {}
        self.waiting: Dict[naiad.Timestamp, List[pa.Table]] = {}
        self.ready: set = set()         # epochs whose static side is complete
        self.covered: Dict[tuple, int] = {}   # epoch -> the lowest iteration notified (every)
        self.checked: set = set()

    def _epoch(self, time: naiad.Timestamp) -> tuple:
        return (time.epoch, time.counters[:-1])

    def on_recv_batch(self, edge: int, messages: list, time: naiad.Timestamp) -> None:
        ek = self._epoch(time)
        if ek not in self.held:
            self.held[ek] = []
            if not self.every:
                self.notify_at(naiad.Timestamp(ek[0], ek[1] + (self.last,)))
        if self.every:
            # A result at every iteration from the lowest one a table came at (a later
            # iteration's table may come first: the invariant side, at the epoch's first
            # iteration, may be the last to arrive).
            c, top = time.counters[-1], self.covered.get(ek, self.last + 1)
            if c < top:
                self.covered[ek] = c
                for i in range(c, top):
                    self.notify_at(naiad.Timestamp(ek[0], ek[1] + (i,)))
        for message in messages:
            table = self._check(edge, message[1])
            if edge not in self.checked:
                require_columns(self.op, table, self.keys[edge])
                self.checked.add(edge)
            if edge == self.held_edge:
                self.held[ek].append(table)
            elif ek in self.ready and not self.every:
                # The static side is complete (a notification of this epoch has passed): match
                # at once, without waiting for this iteration's notification.
                self._emit(self._join(self._index(ek), table), time)
            else:
                waiting = self.waiting.get(time)
                if waiting is None:
                    waiting = self.waiting[time] = []
                    if not self.every:
                        self.notify_at(time)
                waiting.append(table)

    def _index(self, ek: tuple) -> Optional[KeyIndex]:
        index = self.indexes.get(ek)
        if index is None and self.held.get(ek):
            tables = self.held[ek]
            # One chunk per column (a copy once per epoch): the columns taken into every
            # iteration's output then convert to numpy without a copy.
            table = concat(tables).combine_chunks()
            index = self.indexes[ek] = KeyIndex(table, self.keys[self.held_edge])
            self.held[ek] = []
        return index

    def on_notify(self, time: naiad.Timestamp) -> None:
        ek = self._epoch(time)
        self.ready.add(ek)
        waiting = self.waiting.pop(time, None)
        if waiting is not None or self.every:
            self._emit(self._join(self._index(ek), concat(waiting) if waiting else None),
                       time)
        if time.counters[-1] == self.last:
            self.held.pop(ek, None)
            self.indexes.pop(ek, None)
            self.ready.discard(ek)
            self.covered.pop(ek, None)

    def _emit(self, result: Optional[pa.Table], time: naiad.Timestamp) -> None:
        if result is not None and result.num_rows:
            self.send_by(0, result, time)

    def _side(self, edge: int, table: Optional[pa.Table]) -> Optional[pa.Table]:
        """``table``, or an empty table of the schema this input has shown, if any."""
        if table is not None:
            return table
        schema = self.schemas.get(edge)
        return None if schema is None else schema.empty_table()

    def _join(self, index: Optional[KeyIndex], varying: Optional[pa.Table]) -> Optional[pa.Table]:
        h, v = self.held_edge, 1 - self.held_edge
        if index is None:
            held = self._side(h, None)
            index = None if held is None else KeyIndex(held, self.keys[h])
        varying = self._side(v, varying)
        if index is None or varying is None:     # one side never seen: as FrameStream.join
            keep = self.how in ("outer", "left" if v == 0 else "right")
            if varying is not None and keep:
                return varying
            return index.table if index is not None and self.every else None
        tables = [varying, index.table] if h == 1 else [index.table, varying]
        check_key_types(self.op, tables[0], tables[1], self.keys[0], self.keys[1])
        if varying.num_rows == 0 and not self.every:
            return None
        pairs = index.probe(varying, self.keys[v])
        tables = [varying, index.table]
        if h == 0:
            tables, pairs = tables[::-1], (pairs[1], pairs[0])
        return join_tables(tables[0], tables[1], self.keys[0], self.keys[1], pairs, self.how,
                           self.op)
