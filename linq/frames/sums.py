"""Sums per key of partial tables: the final step of ``spread`` and of its composed form.

:func:`sum_by` sums value columns per key as ``group_by`` does; :class:`Sums` keeps the
grouping of a dense integer key from one time to the next, so that the same partial key arrays
iteration after iteration are summed by one ``numpy.bincount`` without comparing them.

>>> import pyarrow as pa
>>> sums = Sums("node", "spread")
>>> part = pa.table({"node": [3, 1, 3], "x": [1.0, 2.0, 4.0]})
>>> sums([part]).to_pydict()
{'node': [1, 3], 'x': [2.0, 5.0]}
>>> sum_by(pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}), "k", ["v"], "op").to_pydict()
{'k': ['a', 'b'], 'v': [4, 2]}
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from linq.frames.dense import dense_group_by
from linq.frames.vertices import FrameError, _same_array

__all__ = ["Sums", "sum_by"]

_SPREAD = 4        # a key range at most this many times the keys is numbered directly


def _same_arrays(kept: Sequence[pa.Array], now: Sequence[pa.Array]) -> bool:
    """Whether ``now`` are views of the same memory as ``kept``, one by one."""
    return len(kept) == len(now) and all(_same_array(a, b) for a, b in zip(kept, now))



def sum_by(table: pa.Table, on: str, values: Sequence[str], op: str) -> pa.Table:
    """One row per ``on`` key with the sums of ``values`` (named as they are), as ``group_by``
    sums them (bincount over dense integer keys, Arrow's hash aggregation otherwise)."""
    specs = [(c, "sum") for c in values]
    got = dense_group_by(table, [on], specs)
    if got is None:
        try:
            got = table.group_by([on], use_threads=False).aggregate(specs)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
            types = ", ".join(f"{c}: {table.column(c).type}" for c in values)
            msg = (f"{op}: cannot sum the value columns ({types}) per {on!r}: {exc}; every "
                   f"column but {on!r} is summed, so select numeric value columns first")
            raise FrameError(msg) from exc
    return pa.table([got.column(on)] + [got.column(f"{c}_sum") for c in values],
                    names=[on] + list(values))


class Sums:
    """The final step of ``spread`` (and of its composed form): the sums of a time's partial
    tables per ``on`` key.

    Integer keys without nulls and float64 values take a dense path whose grouping is kept:
    the partial tables (one per sending worker, as chunks of the table) are put in an order
    that does not depend on their arrival (by length and first key), and while the keys in
    that order are the same as the last time (the same targets reached, iteration after
    iteration) the sums are one ``numpy.bincount`` into the kept numbering and the last key
    array is handed on (the same memory), so that an exchange by ``on`` downstream reuses its
    routing.  Other tables are summed by :func:`sum_by`."""

    def __init__(self, on: str, op: str):
        self.on, self.op = on, op
        self._last: Optional[Tuple[np.ndarray, pa.ChunkedArray]] = None
        # The dense grouping: (keys in canonical order, slot of each row, key column out, the
        # key chunks it was made from, kept alive so that their memory is not reused).
        self._grouping: Optional[Tuple[np.ndarray, np.ndarray, pa.ChunkedArray,
                                       List[pa.Array]]] = None

    def __call__(self, tables: List[Optional[pa.Table]]) -> Optional[pa.Table]:
        table = tables[0]
        if table is None or table.num_rows == 0:
            return None
        values = [c for c in table.column_names if c != self.on]
        dense = self._dense(table, values)
        if dense is not None:
            return dense
        out = sum_by(table, self.on, values, self.op)
        keys = out.column(0)
        if keys.num_chunks == 1 and pa.types.is_integer(keys.type) and not keys.null_count:
            now = keys.chunk(0).to_numpy()
            last = self._last
            if last is not None and last[1].type == keys.type and np.array_equal(last[0], now):
                return pa.table([last[1]] + out.columns[1:], names=out.column_names)
            self._last = (now, keys)
        return out

    def _dense(self, table: pa.Table, values: List[str]) -> Optional[pa.Table]:
        keys = table.column(self.on)
        columns = [table.column(c) for c in values]
        if (not pa.types.is_integer(keys.type) or keys.type == pa.uint64() or keys.null_count
                or any(c.type != pa.float64() or c.null_count for c in columns)):
            return None
        lengths = [len(chunk) for chunk in keys.chunks]
        if any([len(chunk) for chunk in c.chunks] != lengths for c in columns):
            return None
        order = sorted((n, chunk[0].as_py(), i) for i, (n, chunk) in
                       enumerate(zip(lengths, keys.chunks)) if n)
        picked = [i for _, _, i in order]

        def numbers(column: pa.ChunkedArray) -> np.ndarray:
            parts = [column.chunk(i).to_numpy() for i in picked]
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        chunks = [keys.chunk(i) for i in picked]
        grouping = self._grouping
        # The very same key arrays as the last time (the partials' keys, held once per sender
        # and epoch by PartialSums) keep the grouping without a comparison.
        if grouping is None or not _same_arrays(grouping[3], chunks):
            k = numbers(keys).astype(np.int64, copy=False)
            if grouping is None or not np.array_equal(grouping[0], k):
                lo, hi = int(k.min()), int(k.max())
                width = hi - lo + 1
                if width > _SPREAD * len(k) + 1024:
                    return None
                rel = k - lo
                present = np.flatnonzero(np.bincount(rel, minlength=width))
                position = np.empty(width, np.intp)
                position[present] = np.arange(len(present))
                grouping = (k, position[rel],
                            pa.chunked_array([pa.array(present + lo, keys.type)]), chunks)
            grouping = self._grouping = (grouping[0], grouping[1], grouping[2], chunks)
        _, slot, out, _ = grouping
        n = len(out)
        sums = [pa.array(np.bincount(slot, weights=numbers(c), minlength=n)) for c in columns]
        return pa.table([out] + sums, names=[self.on] + values)
