"""A numpy fast path for ``group_by`` sums and counts over one dense integer key column.

When the key is a single integer column without nulls whose values span a range no wider than
a few times the number of rows (node ids, bucket numbers), ``np.bincount`` sums and counts per
key in one pass, several times faster than a hash aggregation.  Only float64 sums, counts and
signed integer sums that stay below 2**53 (bincount adds in float64) take this path; anything
else returns ``None`` and the caller uses Arrow's ``group_by``.  The result has Arrow's column
names (``{column}_{kernel}``) and types (int64 counts, float64 sums), keys in ascending order.

>>> import pyarrow as pa
>>> t = pa.table({"k": [3, 1, 3, 2], "x": [0.5, 1.0, 2.0, 4.0]})
>>> dense_group_by(t, ["k"], [("x", "sum"), ("x", "count")]).to_pydict()
{'k': [1, 2, 3], 'x_sum': [1.0, 4.0, 2.5], 'x_count': [1, 1, 2]}
>>> dense_group_by(t, ["k"], [("x", "max")]) is None
True
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["dense_group_by", "aggregate"]

SPREAD = 4        # the key range may be at most this many times the number of rows


def _float_sum(values: pa.ChunkedArray) -> bool:
    return values.type == pa.float64() and not values.null_count


def _exact_int_sum(values: pa.ChunkedArray) -> bool:
    """A signed integer column whose sums stay exact in float64 (below 2**53)."""
    if not pa.types.is_signed_integer(values.type) or values.null_count or not len(values):
        return False
    lo, hi = pc.min_max(values).values()
    return max(abs(lo.as_py()), abs(hi.as_py())) * len(values) < 2 ** 53


def dense_group_by(table: pa.Table, keys: Sequence[str],
                   aggs: Sequence[Tuple[str, str]]) -> Optional[pa.Table]:
    """``table.group_by(keys).aggregate(aggs)`` by ``bincount``, or None when it does not apply."""
    if len(keys) != 1 or table.num_rows == 0:
        return None
    key = table.column(keys[0])
    if not pa.types.is_integer(key.type) or key.null_count:
        return None
    for column, kernel in aggs:
        values = table.column(column)
        if kernel == "sum" and not (_float_sum(values) or _exact_int_sum(values)):
            return None
        if kernel not in ("sum", "count"):
            return None
    lo, hi = pc.min_max(key).values()
    lo, hi = lo.as_py(), hi.as_py()
    if hi >= 2 ** 63:         # uint64 keys beyond int64: Arrow's own grouping
        return None
    width = hi - lo + 1
    if width > SPREAD * table.num_rows + 1024:
        return None
    k = key.to_numpy() if key.num_chunks == 1 else np.concatenate(
        [c.to_numpy() for c in key.chunks])
    k = k.astype(np.int64, copy=False) - lo
    counts = np.bincount(k, minlength=width)
    present = np.flatnonzero(counts)
    out = {keys[0]: pa.array(present + lo, key.type)}
    columns: List[str] = []
    for column, kernel in aggs:
        name = f"{column}_{kernel}"
        if name in columns:
            continue
        columns.append(name)
        if kernel == "count":
            values = table.column(column)
            n = counts if not values.null_count else np.bincount(
                k, weights=values.is_valid().to_numpy(zero_copy_only=False), minlength=width)
            out[name] = pa.array(n[present].astype(np.int64))
        else:
            values = table.column(column)
            sums = np.bincount(k, weights=values.to_numpy(), minlength=width)[present]
            out[name] = pa.array(sums if _float_sum(values) else np.rint(sums).astype(np.int64))
    return pa.table(out)


def aggregate(table: pa.Table, keys: Sequence[str], specs: Sequence[Tuple[str, str]],
              threads: bool = False) -> Tuple[List[pa.ChunkedArray], List[pa.ChunkedArray]]:
    """``table`` grouped by ``keys`` with ``specs`` ``[(column, kernel)]``: the key columns and
    the aggregates, in the order given, by :func:`dense_group_by` or else Arrow's ``group_by``.
    The columns are renamed first (``c0``, ``c1``, ...), so that a key named like an aggregate's
    output (Arrow's ``{column}_{kernel}``: a key ``x_sum`` beside a sum of ``x``) can neither
    be replaced by it nor make two columns of one name.

    >>> t = pa.table({"x_sum": [1, 1, 2], "x": [1.0, 2.0, 3.0]})
    >>> ks, vs = aggregate(t, ["x_sum"], [("x", "sum")])
    >>> ks[0].to_pylist(), vs[0].to_pylist()
    ([1, 2], [3.0, 3.0])
    """
    columns = list(dict.fromkeys([*keys, *(c for c, _ in specs)]))
    name = {c: f"c{i}" for i, c in enumerate(columns)}
    renamed = table.select(columns).rename_columns([name[c] for c in columns])
    ks = [name[k] for k in keys]
    ss = [(name[c], k) for c, k in specs]
    got = dense_group_by(renamed, ks, ss)
    if got is None:
        got = renamed.group_by(ks, use_threads=threads).aggregate(ss)
    return [got.column(k) for k in ks], [got.column(f"{c}_{k}") for c, k in ss]
