"""The vertices that carry frames: each message is a whole ``pyarrow.Table``, never a row.

- :class:`MapTables` applies a function to each table (map_batches, filter, to_records).
- :class:`Split` cuts each table by the row hash of its key columns into one table per
  destination worker and tags it with a routing key that the exchange sends to that worker.
- :class:`Accumulate` gathers the tables of a time and, at its notification, combines them with
  Arrow kernels (a group-by aggregation, or a join of its two inputs), then sends the result,
  split again by key when another exchange follows (the local pre-combine of group_by).

Every vertex checks what it receives: a record that is not a table, a missing column, or a
schema that changes between the batches of one stream is an error naming the operator, the
column or both schemas.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import pyarrow as pa

import naiad
from linq.core import UserFunctionError
from linq.frames.hashing import route_destinations
from linq.frames.routes import recall

__all__ = ["FrameError", "MapTables", "call_on_table", "Split", "Accumulate", "require_columns",
           "split_table", "concat"]


def concat(tables: Sequence[pa.Table]) -> pa.Table:
    """One table of ``tables`` (of one schema), its dictionary columns given one dictionary:
    tables from different files or processes encode their strings differently, and Arrow's
    grouping and joins refuse chunks whose dictionaries differ.

    >>> a = pa.table({"k": pa.array(["a", "b"]).dictionary_encode()})
    >>> b = pa.table({"k": pa.array(["c", "b"]).dictionary_encode()})
    >>> concat([a, b]).group_by("k").aggregate([("k", "count")]).num_rows
    3
    """
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if any(pa.types.is_dictionary(f.type) for f in table.schema):
        table = table.unify_dictionaries()
    return table


class FrameError(ValueError):
    """A frame operator received a table it cannot use (wrong type, column or schema)."""


def require_table(op: str, value: Any) -> pa.Table:
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    if not isinstance(value, pa.Table):
        msg = (f"{op}: each message of a frame stream must be a pyarrow.Table; got "
               f"{type(value).__name__} (frames.of(stream) needs a stream of tables; "
               "turn rows into tables with pyarrow.Table.from_pylist first)")
        raise FrameError(msg)
    return value


def require_columns(op: str, table: pa.Table, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        msg = (f"{op}: no column {missing[0]!r} in the table; its columns are "
               f"{table.column_names}")
        raise FrameError(msg)


_FEW = 8            # up to this many workers, rows are cut by comparisons rather than a sort


def split_table(table: pa.Table, keys: Sequence[str], routes: Sequence[int],
                dest: Optional[np.ndarray] = None) -> List[tuple]:
    """``[(route, part)]``: the rows of ``table`` cut by the high bits of their ``route_hash``
    (or by ``dest``, each row's worker, when known), one part per destination that gets rows,
    in destination order (a stable sort keeps the row order)."""
    workers = len(routes)
    if workers == 1 or table.num_rows == 0:
        return [(routes[0], table)] if table.num_rows else []
    if dest is None:
        dest = row_workers(table, keys, workers)
    first = dest[0]
    if (dest == first).all():        # one destination (already partitioned): no copy
        return [(routes[int(first)], table)]
    if workers <= _FEW:
        # Few workers: the rows of each, in order, by one comparison each (faster than a sort).
        rows = [np.flatnonzero(dest == d) for d in range(workers)]
        counts = [len(r) for r in rows]
        ordered = table.take(np.concatenate(rows))
    else:
        counts = np.bincount(dest, minlength=workers).tolist()
        # A stable sort of small integers is a radix sort in numpy: linear in the rows.
        ordered = table.take(np.argsort(dest, kind="stable"))
    out, start = [], 0
    for d, n in enumerate(counts):
        if n:
            out.append((routes[d], ordered.slice(start, n)))
            start += n
    return out


def row_workers(table: pa.Table, keys: Sequence[str], workers: int) -> np.ndarray:
    """The worker (``0 .. workers-1``) of each row of ``table`` by its ``keys`` columns."""
    return route_destinations(table, keys, workers)


def _same_array(a: pa.Array, b: pa.Array) -> bool:
    """Whether two arrays are views of the same memory (same data buffer, offset, length)."""
    if a.type != b.type or len(a) != len(b) or a.offset != b.offset:
        return False
    ba, bb = a.buffers(), b.buffers()
    return (len(ba) == len(bb) and all(
        (x is None and y is None) or (x is not None and y is not None and x.address == y.address)
        for x, y in zip(ba, bb)))


class _Checked(naiad.Vertex):
    """Remembers the schema of each input and refuses a change."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op
        self.schemas: Dict[int, pa.Schema] = {}

    def _check(self, edge: int, table: pa.Table) -> pa.Table:
        table = require_table(self.op, table)
        seen = self.schemas.get(edge)
        if seen is None:
            self.schemas[edge] = table.schema
        elif not seen.equals(table.schema):
            msg = (f"{self.op}: the schema changed between batches of one stream: first "
                   f"{_schema(seen)}, now {_schema(table.schema)}; give every batch, in every "
                   "process, the same columns in the same order with the same types "
                   "(table.select(names) reorders, table.cast(schema) casts)")
            raise FrameError(msg)
        return table


def _schema(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


class _Shape:
    """A table as an error shows it: its rows and schema, not its values."""

    def __init__(self, table: pa.Table) -> None:
        self.text = f"a table of {table.num_rows} rows {_schema(table.schema)}"

    def __repr__(self) -> str:
        return self.text


def call_on_table(op: str, fn: Callable[[pa.Table], Any], table: pa.Table) -> Any:
    """``fn(table)``; an exception it raises is a :class:`~linq.UserFunctionError` naming the
    operator, the function and the table's shape.

    >>> def half(t): return t["y"]
    >>> try:
    ...     call_on_table("map_batches(half)", half, pa.table({"x": [1, 2]}))
    ... except UserFunctionError as exc:
    ...     print(exc)
    map_batches(half): the function half raised KeyError: 'Field "y" does not exist in schema' (called with a table of 2 rows (x: int64))
    """
    try:
        return fn(table)
    except Exception as exc:
        raise UserFunctionError(op, "function", fn, (_Shape(table),),
                                f"raised {type(exc).__name__}: {exc}") from exc


class MapTables(naiad.Vertex):
    """``fn(table)`` for each table; results that are tables (or row lists) go on.  With
    ``user``, ``fn`` is the program's and its exceptions are named (:func:`call_on_table`)."""

    def __init__(self, op: str, fn: Callable[[pa.Table], Any], rows: bool = False,
                 user: bool = False) -> None:
        super().__init__()
        self.op, self.fn, self.rows, self.user = op, fn, rows, user

    def on_recv_batch(self, edge: int, messages: List[Any], time: naiad.Timestamp) -> None:
        out = []
        for table in messages:
            table = require_table(self.op, table)
            result = call_on_table(self.op, self.fn, table) if self.user else self.fn(table)
            if self.rows:
                out.extend(result)
            elif result is not None:
                out.append(require_table(f"{self.op} (its function's result)", result))
        if out:
            self.send_batch_by(0, out, time)


class Split(_Checked):
    """Tags each table's parts with the routing key of their destination worker; with
    ``every``, a delivery also sends each worker it has no rows for an empty table of the
    schema (an outer join's workers must all know both sides' columns)."""

    def __init__(self, op: str, keys: Sequence[str], routes: Sequence[int],
                 every: bool = False) -> None:
        super().__init__(op)
        self.keys, self.routes, self.every = list(keys), list(routes), every
        # The last single-chunk key column routed and its rows' workers: a table that brings
        # the very same key array again (the keys of a loop's nodes, iteration after
        # iteration) is routed without hashing.  Holding the array keeps its memory alive.
        self._last: Optional[tuple] = None

    def on_recv_batch(self, edge: int, messages: List[Any], time: naiad.Timestamp) -> None:
        out = []
        for table in messages:
            table = self._check(edge, table)
            require_columns(self.op, table, self.keys)
            out.extend(split_table(table, self.keys, self.routes, self._workers(table)))
        if self.every and messages:
            empty = self.schemas[edge].empty_table()
            reached = {route for route, _ in out}
            out.extend((route, empty) for route in self.routes if route not in reached)
        if out:
            self.send_batch_by(0, out, time)

    def checkpoint(self) -> Any:
        """Without the routing cache: it holds a whole key column (and, of a slice, its
        parent's buffers), and the next table routes again without it."""
        state = super().checkpoint()
        state.pop("_last", None)
        return state

    def _workers(self, table: pa.Table) -> Optional[np.ndarray]:
        if len(self.routes) == 1 or len(self.keys) != 1 or table.num_rows == 0:
            return None
        column = table.column(self.keys[0])
        if column.num_chunks != 1:
            return None
        key = column.chunk(0)
        last = self._last
        if last is not None and _same_array(last[0], key):
            return last[1]
        dest = recall(key, len(self.routes))
        if dest is None:
            dest = row_workers(table, self.keys, len(self.routes))
        self._last = (key, dest)
        return dest


class Accumulate(_Checked):
    """Gathers a time's tables per input; at the notification ``combine(tables per input)``
    gives one table, sent whole or split by ``split_keys`` for a following exchange (or
    ``single(table)``, where given, when one table alone came: group_by's final step passes
    one worker's partial results on without grouping them again).  A
    ``streaming`` pre-combine (group_by's local step) inside a loop combines each delivery at
    once instead, so an iteration waits for one notification less.  With ``fill``, an input
    that brought no table at a time is given to ``combine`` as an empty table of the schema it
    has shown (None when it never brought one)."""

    def __init__(self, op: str, inputs: int, tagged: bool,
                 combine: Callable[[List[Optional[pa.Table]]], Optional[pa.Table]],
                 columns: Sequence[Sequence[str]] = (),
                 split_keys: Optional[Sequence[str]] = None,
                 routes: Sequence[int] = (), streaming: bool = False,
                 single: Optional[Callable[[pa.Table], pa.Table]] = None,
                 fill: bool = False) -> None:
        super().__init__(op)
        self.fill = fill
        self.single = single            # what one table alone becomes (one input only)
        self.inputs, self.tagged, self.combine = inputs, tagged, combine
        self.streaming = streaming      # a pre-combine: in a loop, combine batches as they come
        self.columns = [list(c) for c in columns] or [[] for _ in range(inputs)]
        self.split_keys, self.routes = split_keys, list(routes)
        self.pending: Dict[naiad.Timestamp, List[List[pa.Table]]] = {}
        self.checked: set = set()

    def on_recv_batch(self, edge: int, messages: List[Any], time: naiad.Timestamp) -> None:
        tables = []
        for message in messages:
            table = self._check(edge, message[1] if self.tagged else message)
            if edge not in self.checked:
                require_columns(self.op, table, self.columns[edge])
                self.checked.add(edge)
            tables.append(table)
        if self.streaming and time.counters:
            # A local pre-combine inside a loop combines what arrived and sends it on at once:
            # the final combine after the exchange makes the result exact, and the iteration
            # does not wait for one more round of progress.
            self._send(self.combine([concat(tables)]), time)
            return
        lists = self.pending.get(time)
        if lists is None:
            lists = self.pending[time] = [[] for _ in range(self.inputs)]
            self.notify_at(time)
        lists[edge].extend(tables)

    def on_notify(self, time: naiad.Timestamp) -> None:
        lists = self.pending.pop(time)
        if self.single is not None and len(lists) == 1 and len(lists[0]) == 1:
            self._send(self.single(lists[0][0]), time)
            return
        self._send(self.combine([concat(ts) if ts else self._empty(edge)
                                 for edge, ts in enumerate(lists)]), time)

    def _empty(self, edge: int) -> Optional[pa.Table]:
        schema = self.schemas.get(edge) if self.fill else None
        return None if schema is None else schema.empty_table()

    def _send(self, result: Optional[pa.Table], time: naiad.Timestamp) -> None:
        if result is None or result.num_rows == 0:
            return
        if self.split_keys is None:
            self.send_by(0, result, time)
        else:
            self.send_batch_by(0, split_table(result, self.split_keys, self.routes), time)
