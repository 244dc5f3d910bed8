"""Arrow tables in pickles: the Arrow IPC stream format, as one pickle buffer per table.

Once pyarrow is loaded, :func:`naiad.optional.pickle_dispatch` sends every ``pa.Table`` and
``pa.RecordBatch`` through :func:`reduce_table`: the table is written in the IPC stream format
(one copy of its buffers, no per-row work; from 512 KB on, its size is counted first and it is
written into a buffer of that size, not a growing one; a slice carries only its own rows, where
pickling a sliced table would carry the whole parent buffers).  On the wire
(:func:`naiad.transport.wire.encode`) that buffer leaves the pickle out of band, as a frame of
its own, and :func:`table_from_ipc` reads it back without copying (the table's columns point
into the received frame); in the recovery files (input logs, vertex states) it stays in band.

>>> import pickle
>>> import pyarrow as pa
>>> t = pa.table({"k": [1, 2, 3], "s": ["a", "b", "c"]}).slice(1, 2)
>>> buffers = []
>>> payload = pickle.dumps(reduce_table(t), protocol=5, buffer_callback=buffers.append)
>>> fn, args = pickle.loads(payload, buffers=buffers)
>>> fn(*args).to_pydict()
{'k': [2, 3], 's': ['b', 'c']}
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Tuple, Union

import pyarrow as pa

__all__ = ["reduce_table", "table_from_ipc", "batch_from_ipc", "sample_table", "DISPATCH"]


PRESIZE = 1 << 19      # bytes: a table this large is written into a buffer of its final size


def _ipc(obj: Union[pa.Table, pa.RecordBatch]) -> pickle.PickleBuffer:
    if obj.get_total_buffer_size() < PRESIZE:     # (of a slice: its parent's buffers)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, obj.schema) as writer:
            writer.write(obj)
        return pickle.PickleBuffer(sink.getvalue())
    # The stream's size first (a mock stream counts bytes without copying), then one write
    # into a buffer of that size: a growing buffer reallocates (and faults in fresh pages)
    # several times on the way to a large table's size.
    mock = pa.MockOutputStream()
    with pa.ipc.new_stream(mock, obj.schema) as writer:
        writer.write(obj)
    buffer = pa.allocate_buffer(mock.size())
    with pa.ipc.new_stream(pa.FixedSizeBufferWriter(buffer), obj.schema) as writer:
        writer.write(obj)
    return pickle.PickleBuffer(buffer)


def reduce_table(table: pa.Table) -> Tuple[Callable[..., pa.Table], tuple]:
    """The pickle reduction of ``table``: its IPC stream as one (out-of-band) buffer; or
    pyarrow's own, for a table with an extension type (IPC rebuilds one only where it is
    registered, and would give the storage type elsewhere)."""
    if _extended(table.schema):
        return table.__reduce__()
    return table_from_ipc, (_ipc(table),)


def reduce_batch(batch: pa.RecordBatch) -> Tuple[Callable[..., pa.RecordBatch], tuple]:
    if _extended(batch.schema):
        return batch.__reduce__()
    return batch_from_ipc, (_ipc(batch),)


def _extended(schema: pa.Schema) -> bool:
    """Whether an extension type is among ``schema``'s types, at any depth."""
    return any(_has_extension(f.type) for f in schema)


def _has_extension(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        return True
    return any(_has_extension(t.field(i).type) for i in range(t.num_fields))


def table_from_ipc(data: Any) -> pa.Table:
    """The table of an IPC stream held in ``data`` (any buffer), without copying."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def batch_from_ipc(data: Any) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


def sample_table() -> pa.Table:
    """A one-row table, for :func:`naiad.transport.wire.prepare`."""
    return pa.table({"k": pa.array([0], pa.int64())})


DISPATCH = {pa.Table: reduce_table, pa.RecordBatch: reduce_batch}
