"""Which worker owns each row of a table, and the rows this process's own workers own.

An exchange by key columns (``exchange``, ``group_by``, ``join``, ``spread``) sends each row
to the worker chosen by the high bits of its route hash (:func:`linq.frames.hashing.route_hash`),
the same in every process and run.  A program that reads its own input can read just the rows
its own workers will own: then every exchange by those keys finds each row already in its
process, nothing crosses to another process, and with one worker per process the table is
passed on as it is (the split checks the rows' workers, one multiply per row, and sends the
table uncopied when they are all the same; for a table :func:`share` kept, the split recalls
its rows' workers instead of hashing them again: :mod:`linq.frames.routes`).  :func:`owned` is the test a reader applies to
what it reads, :func:`share` the rows of a table it keeps, :func:`owners` each row's worker.

>>> import pyarrow as pa
>>> t = pa.table({"node": list(range(10))})
>>> w = owners(t, "node", 4)                 # the worker of each row among 4
>>> sorted(set(w.tolist())) == [0, 1, 2, 3]
True
>>> class Process:                    # a computation's layout: process 1 of 2, 2 workers each
...     processes, process_index, workers_per_process = 2, 1, 2
>>> share(t, "node", Process())["node"].to_pylist() == [i for i in range(10) if w[i] >= 2]
True
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import pyarrow as pa

from linq.frames import routes
from linq.frames.hashing import key_names, route_destinations
from linq.frames.vertices import require_columns

__all__ = ["owners", "owned", "share"]

Keys = Union[str, Sequence[str]]


def owners(table: pa.Table, keys: Keys, workers: int) -> np.ndarray:
    """The worker (``0 .. workers-1``, over all processes) that an exchange by ``keys`` among
    ``workers`` workers sends each row of ``table`` to."""
    names = key_names(keys, "share")
    require_columns("frames.owners", table, names)
    if workers < 1:
        msg = f"frames.owners: workers must be at least 1; got {workers!r}"
        raise ValueError(msg)
    if workers == 1:
        return np.zeros(table.num_rows, np.uint16)
    key = _single(table, names)
    known = None if key is None else routes.recall(key, workers)
    if known is not None:
        return known
    dest = route_destinations(table, names, workers)
    if key is not None:
        routes.remember(key, workers, dest)
    return dest


def _single(table: pa.Table, names: list) -> "pa.Array | None":
    """The key array of a single key column in one chunk (what an exchange can recall)."""
    if len(names) != 1 or table.num_rows == 0:
        return None
    column = table.column(names[0])
    return column.chunk(0) if column.num_chunks == 1 else None


def owned(table: pa.Table, keys: Keys, comp: Any) -> np.ndarray:
    """A boolean mask of the rows of ``table`` whose ``keys`` belong to a worker of this
    process of ``comp`` (a :class:`naiad.Computation`: its ``processes``,
    ``process_index`` and ``workers_per_process``)."""
    per = comp.workers_per_process
    if comp.processes == 1:
        return np.ones(table.num_rows, bool)
    worker = owners(table, keys, comp.processes * per)
    first = comp.process_index * per
    if per == 1:
        return worker == first
    return (worker >= first) & (worker < first + per)


def share(table: pa.Table, keys: Keys, comp: Any) -> pa.Table:
    """The rows of ``table`` that this process's workers own by ``keys`` (see :func:`owned`),
    in their order: what this process feeds when every process reads the whole input."""
    mask = owned(table, keys, comp)
    if mask.all():
        return table
    kept = _compressed(table, mask)
    if kept is None:
        kept = table.filter(pa.array(mask))
    names = key_names(keys, "share")
    key = _single(kept, names)
    workers = comp.processes * comp.workers_per_process
    if key is not None and workers > 1:
        # The kept rows' workers, for the first exchange by these keys (linq.frames.routes).
        routes.remember(key, workers, np.compress(mask, owners(table, names, workers)))
    return kept


_NUMERIC = {pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
            pa.uint64(), pa.float32(), pa.float64()}


def _compressed(table: pa.Table, mask: np.ndarray) -> "pa.Table | None":
    """The rows of ``mask``, selected by numpy, when every column is one chunk of integers or
    floats without nulls (read and wrapped without copying; about twice as fast as Arrow's
    filter and its boolean array, and no Arrow allocation); None for any other table."""
    columns = []
    for column in table.columns:
        if column.type not in _NUMERIC or column.num_chunks != 1 or column.null_count:
            return None
        columns.append(pa.array(np.compress(mask, column.chunk(0).to_numpy())))
    return pa.Table.from_arrays(columns, schema=table.schema)
