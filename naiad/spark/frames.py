"""``naiad.spark.execute(df, program, frames=True)``: Arrow tables in, Arrow tables out.

With ``frames=True`` each task's program receives its partition as :class:`PartitionTables`,
an iterator of ``pyarrow.Table`` (one per Arrow record batch that ``mapInArrow`` hands over,
so nothing becomes a Python row), and returns a ``pa.Table``, a ``pa.RecordBatch`` or a list
of them.  :func:`result_batches` selects the result schema's columns by name and casts them,
and the batches go back to Spark through the same ``mapInArrow``: the result DataFrame is
built from Arrow, without Python rows.  Without a ``schema`` it is inferred from the tables the
programs return: a first pass keeps them in Spark as Arrow IPC payloads
(:func:`payload_batches`), their schemas are unified on the driver (:func:`inferred_schema`),
and a second pass turns the payloads into batches of that schema (:func:`decoded_batches`).

>>> import pyarrow as pa
>>> target = pa.schema([("node", pa.int64()), ("rank", pa.float64())])
>>> out = list(result_batches([pa.table({"rank": [0.5], "node": pa.array([3], pa.int32())})], target))
>>> out[0].schema == target, out[0].to_pydict()
(True, {'node': [3], 'rank': [0.5]})
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator, List, Optional

import pyarrow as pa

from naiad.errors import NaiadError
from naiad.spark.results import CHUNK_BYTES

__all__ = ["PartitionTables", "result_batches", "payload_batches", "decoded_batches",
           "inferred_schema", "PAYLOADS"]


class PartitionTables:
    """The Arrow batches of this process's partition, as ``pa.Table`` s; read them once.

    With ``ahead`` > 0 a thread starts reading the batches at once and keeps up to ``ahead``
    of them, so that Spark's side of the stream does not wait while the computation starts
    (the rendezvous, the connections to the other processes); :meth:`close` waits for that
    thread, reading and dropping what the program did not read, so that the stream is at its
    end when the task goes on.
    """

    def __init__(self, batches: Iterable[pa.RecordBatch], columns: List[str],
                 process_index: int, ahead: int = 0, schema: Optional[pa.Schema] = None):
        self.columns = columns
        self.schema = schema        # the DataFrame's, as Arrow: an empty partition's table
        self.process_index = process_index
        self._batches = batches
        self._used = False
        self._queue: Optional[queue.Queue] = None
        self._drop = threading.Event()
        self._ended = False         # the reader's last item was taken
        if ahead > 0:
            self._queue = queue.Queue(ahead)
            self._reader = threading.Thread(target=self._read, name="naiad-spark-batches",
                                            daemon=True)
            self._reader.start()

    def _read(self) -> None:
        assert self._queue is not None
        try:
            for batch in self._batches:
                if not self._drop.is_set():
                    self._queue.put((True, batch))
        except BaseException as exc:  # noqa: BLE001 - raised where the batches are read
            self._queue.put((False, exc))
            return
        self._queue.put((False, None))

    def _read_ahead(self) -> Iterator[pa.RecordBatch]:
        assert self._queue is not None
        while True:
            ok, item = self._queue.get()
            if ok:
                yield item
                continue
            self._ended = True
            if item is not None:
                raise item
            return

    def __iter__(self) -> Iterator[pa.Table]:
        if self._used:
            msg = (f"process {self.process_index}: the partition's tables were already read; "
                   "they stream from Spark once, so keep them (list(tables)) to read them again")
            raise NaiadError(msg)
        self._used = True
        batches = self._batches if self._queue is None else self._read_ahead()
        return (pa.Table.from_batches([b]) for b in batches if b.num_rows)

    def table(self) -> pa.Table:
        """All of the partition's batches as one table (no copy: one chunk per batch)."""
        tables = list(self)
        if tables:
            return pa.concat_tables(tables)
        if self.schema is not None:       # an empty partition: the DataFrame's own types
            return self.schema.empty_table()
        return pa.table({c: pa.array([], pa.null()) for c in self.columns})

    def close(self) -> None:
        """Read and drop the batches the program did not read, and wait for the reader."""
        if self._queue is None:
            return
        self._drop.set()
        while not self._ended:
            ok, _ = self._queue.get()
            self._ended = not ok
        self._reader.join()

    def __repr__(self) -> str:
        return f"PartitionTables(process {self.process_index}, columns={self.columns})"


def _tables(result: Any) -> Iterator[pa.Table]:
    """The program's ``result`` (a table, a batch, a list of them, or None) as tables."""
    if result is None:
        return
    items = result if isinstance(result, (list, tuple)) else [result]
    for item in items:
        if isinstance(item, pa.RecordBatch):
            item = pa.Table.from_batches([item])
        if not isinstance(item, pa.Table):
            msg = (f"with frames=True the program must return a pyarrow.Table, a RecordBatch or "
                   f"a list of them; got {type(item).__name__}")
            raise TypeError(msg)
        yield item


PAYLOADS = "kind tinyint, payload binary"
"""The rows of the first pass when the result schema is inferred (:func:`payload_batches`)."""


def payload_batches(result: Any) -> Iterator[pa.RecordBatch]:
    """With ``frames=True`` and no ``schema``: the program's tables, for Spark to keep until
    their schema is known, as one-row batches of :data:`PAYLOADS`: kind 0 a table's schema
    (Arrow IPC), kind 1 one of its record batches (an Arrow IPC stream)."""
    for table in _tables(result):
        yield _payload(0, table.schema.serialize().to_pybytes())
        # Each batch is one binary cell, copied whole by the JVM: at most about CHUNK_BYTES.
        rows = max(1, CHUNK_BYTES * table.num_rows // max(1, table.nbytes))
        for batch in table.to_batches(max_chunksize=rows):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            yield _payload(1, sink.getvalue().to_pybytes())


def _payload(kind: int, data: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([kind], pa.int8()), pa.array([data], pa.binary())],
                                      names=["kind", "payload"])


def inferred_schema(schemas: List[bytes]) -> pa.Schema:
    """One schema for the serialized schemas of every table the programs returned: columns in
    the order they first appear, each of a type every table's column casts to."""
    if not schemas:
        msg = ("naiad.spark.execute: the programs returned no table, so the result schema "
               "cannot be inferred; give schema= (a DDL string such as 'node long, rank double')")
        raise ValueError(msg)
    read = [pa.ipc.read_schema(pa.py_buffer(s)) for s in schemas]
    try:
        return pa.unify_schemas(read, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        msg = (f"naiad.spark.execute: the programs returned tables whose schemas do not unify "
               f"({exc}); return tables of one schema, or give schema=")
        raise TypeError(msg) from exc


def decoded_batches(batches: Iterable[pa.RecordBatch], schema: pa.Schema
                    ) -> Iterator[pa.RecordBatch]:
    """The second pass: the kept record batches (payloads of kind 1), in ``schema``."""
    for batch in batches:
        payloads = batch.column("payload")
        for i in range(len(payloads)):
            with pa.ipc.open_stream(payloads[i].as_buffer()) as reader:   # no copy
                yield from result_batches(reader.read_all(), schema, inferred=True)


def result_batches(result: Any, schema: pa.Schema, inferred: bool = False
                   ) -> Iterator[pa.RecordBatch]:
    """The record batches of the program's ``result`` (a table, a batch, a list of them, or
    None), with the columns of ``schema`` in its order and types (with ``inferred``, a column
    the schema has and a table lacks is all nulls: another table had it)."""
    for item in _tables(result):
        missing = [f.name for f in schema if f.name not in item.column_names]
        if missing and inferred:
            for name in missing:
                item = item.append_column(name, pa.nulls(item.num_rows, schema.field(name).type))
        elif missing:
            msg = (f"the program returned a table without the column {missing[0]!r} of the "
                   f"result schema ({', '.join(f'{f.name} {f.type}' for f in schema)}); its "
                   f"columns are {item.column_names}")
            raise ValueError(msg)
        try:
            table = _wall_times(item.select(schema.names), schema).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError) as exc:
            msg = (f"the program's table {item.schema} does not cast to the result schema "
                   f"{schema}: {exc}")
            raise TypeError(msg) from exc
        yield from table.to_batches()


def _wall_times(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the naive timestamps bound for instants (Spark's ``TimestampType``, a
    timestamp of the session's zone in ``schema``, at the top or inside lists, maps and structs)
    read as wall times of that zone, as Spark's ``createDataFrame`` reads them (by pyspark's
    own function): a cast alone reads them as UTC."""
    for i, field in enumerate(schema):
        zone = _zone(field.type)
        if zone is None or not _naive(table.schema.field(i).type):
            continue
        from pyspark.sql.pandas.types import from_arrow_type
        try:
            from pyspark.sql.pandas.types import _check_arrow_array_timestamps_localize as local
        except ImportError:     # another pyspark: the top-level columns, as it does them
            import pyarrow.compute as pc

            def local(a, dt, truncate, timezone):
                if not pa.types.is_timestamp(a.type):
                    return a
                return pc.assume_timezone(a, timezone=timezone)
        column = local(table.column(i), from_arrow_type(field.type), True, zone)
        table = table.set_column(i, field.name, column)
    return table


def _zone(t: pa.DataType):
    """The time zone of the first aware timestamp in ``t`` (the session's), or None."""
    if pa.types.is_timestamp(t):
        return t.tz
    for j in range(t.num_fields):
        zone = _zone(t.field(j).type)
        if zone is not None:
            return zone
    return None


def _naive(t: pa.DataType) -> bool:
    """Whether ``t`` holds a naive timestamp, at any depth."""
    if pa.types.is_timestamp(t):
        return t.tz is None
    return any(_naive(t.field(j).type) for j in range(t.num_fields))
