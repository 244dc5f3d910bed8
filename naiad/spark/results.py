"""A barrier task's results on their way to Spark: rows checked against the result schema,
pickled in chunks of bounded size (each chunk is one binary cell of a Spark row), and read
back in the driver's DataFrame.

>>> unpack_results(pack_results([(1, "a"), 2], 0)[0])
[(1, 'a'), (2,)]
"""

from __future__ import annotations

import pickle
import reprlib
from typing import Any, Callable, Iterable, List

from naiad.spark.parts import pickle_chunk

__all__ = ["pack_results", "unpack_results", "CHUNK_BYTES"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80

# Records per pickled chunk of results sent from a barrier task to Spark, and the bytes a chunk
# holds at most: each chunk is one binary cell, which the JVM copies whole (cells of tens of MB
# ran a local driver out of heap), so a chunk of large rows is cut smaller.
_CHUNK = 4096
CHUNK_BYTES = 4 << 20


def _as_row(record: Any) -> Any:
    if isinstance(record, (tuple, list, dict)):
        return record
    return (record,)


def pack_results(result: Any, process_index: int, schema: Any = None,
                 single: bool = False) -> List[bytes]:
    """A barrier task's return value as pickled chunks of rows (scalars become 1-tuples; with
    ``single``, the schema is one type and every record is one value), each row checked
    against ``schema`` (a StructType) when given: numpy scalars become Python's, and a row
    the schema cannot hold is an error of this process, at once."""
    if result is None:
        return []
    if isinstance(result, (dict, str, bytes)) or not isinstance(result, Iterable):
        msg = (f"process {process_index}: the program returned {type(result).__name__}; return "
               "an iterable of rows (tuples, lists, dicts or Rows; plain values become "
               "one-column rows), or None for no rows")
        raise TypeError(msg)
    out: List[bytes] = []
    chunk: list = []
    fit = _fitter(schema, process_index, single) if schema is not None else _as_row
    for r in result:
        chunk.append(fit(r))
        if len(chunk) >= _CHUNK:
            out.extend(_pickle_chunks(chunk, process_index))
            chunk = []
    if chunk:
        out.extend(_pickle_chunks(chunk, process_index))
    return out


def _fitter(schema: Any, process_index: int, single: bool = False) -> Callable[[Any], Any]:
    """``row -> row`` checked against the StructType ``schema`` as ``createDataFrame`` checks
    it (numpy scalars made Python's first if the row does not fit as it is)."""
    from pyspark.sql.types import ArrayType, MapType, StructType, _make_type_verifier
    verify = _make_type_verifier(schema)
    # Arrays, maps and structs may hold numpy values too: looked for inside those only.
    nested = any(isinstance(f.dataType, (ArrayType, MapType, StructType)) for f in schema.fields)
    has_numpy = _deep_numpy if nested else _top_numpy

    def fit(record: Any) -> Any:
        row = (record,) if single else _as_row(record)
        try:
            verify(row)
            if has_numpy(row.values() if isinstance(row, dict) else row):
                return _plain(row)      # np.str_ and np.float64 pass (subclasses): Spark's
            return row                  # pickler refuses them all the same
        except (TypeError, ValueError):
            plain = _plain(row)
            try:
                verify(plain)
                return plain
            except (TypeError, ValueError) as again:
                exc = again             # what does not fit once numpy values are Python's
            msg = (f"process {process_index}: the program returned a row that does not fit "
                   f"schema {schema.simpleString()}: {_repr.repr(record)} ({exc}); return "
                   "values of the schema's types, or change schema=")
            raise TypeError(msg) from None
    return fit


def _top_numpy(values: Iterable[Any]) -> bool:
    return any(type(v).__module__ == "numpy" for v in values)


def _deep_numpy(values: Iterable[Any]) -> bool:
    """Whether a numpy value is anywhere in ``values``, inside lists, tuples and dicts too."""
    for v in values:
        if type(v).__module__ == "numpy":
            return True
        if isinstance(v, (list, tuple)) and _deep_numpy(v):
            return True
        if isinstance(v, dict) and (_deep_numpy(v.keys()) or _deep_numpy(v.values())):
            return True
    return False


def _item(v: Any) -> Any:
    """``v`` with numpy scalars and arrays, at any depth of lists, tuples and dicts, made
    Python's (a Row keeps its names)."""
    if type(v).__module__ == "numpy":
        return v.tolist() if hasattr(v, "tolist") else v
    if isinstance(v, dict):
        return {_item(k): _item(x) for k, x in v.items()}
    if hasattr(v, "__fields__"):
        return type(v)(**{k: _item(x) for k, x in v.asDict().items()})
    if isinstance(v, list):
        return [_item(x) for x in v]
    if type(v) is tuple:
        return tuple(_item(x) for x in v)
    return v


def _plain(row: Any) -> Any:
    """``row`` with numpy scalars (np.int64, np.float32, ...) made Python's, in nested lists,
    tuples and dicts too."""
    item = _item
    if isinstance(row, dict):
        return {k: item(v) for k, v in row.items()}
    if hasattr(row, "__fields__"):                     # a pyspark Row: its names kept
        return type(row)(**{k: item(v) for k, v in row.asDict().items()})
    return type(row)(item(v) for v in row) if isinstance(row, tuple) and type(row) is tuple \
        else [item(v) for v in row]


def _pickle_chunks(chunk: list, process_index: int) -> List[bytes]:
    """``chunk`` pickled, cut in halves until each part is at most :data:`CHUNK_BYTES` (a
    single row may be larger)."""
    data = _pickle_chunk(chunk, process_index)
    if len(data) <= CHUNK_BYTES or len(chunk) == 1:
        return [data]
    half = len(chunk) // 2
    return _pickle_chunks(chunk[:half], process_index) + _pickle_chunks(chunk[half:],
                                                                         process_index)


def _pickle_chunk(chunk: list, process_index: int) -> bytes:
    return pickle_chunk(chunk, lambda bad, exc: (
        f"process {process_index}: the program returned a row that cannot be pickled to "
        f"reach Spark: {_repr.repr(bad)} ({type(exc).__name__}: {exc}); return rows of "
        "plain data (numbers, strings, tuples, lists, dicts)"))


def unpack_results(payload: bytes) -> list:
    """The rows of one chunk made by :func:`pack_results`."""
    return pickle.loads(payload)
