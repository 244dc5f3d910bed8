"""Arrow values as pyspark gives them, so that a program sees the rows ``DataFrame.collect()``
shows.

Arrow's own conversion (``to_pylist``) differs from pyspark's for a few types: a timestamp
(Spark's ``TimestampType``, an instant) comes out time-zone aware in UTC, where pyspark gives a
naive datetime in the local time zone; a map comes out as a list of pairs, where pyspark gives a
dict; a struct as a dict, where pyspark gives a ``Row``.  Columns of other types (numbers,
strings, dates, ``timestamp_ntz``, decimals, ...) are taken as Arrow gives them.

>>> import datetime, pyarrow as pa
>>> batch = pa.record_batch({"m": pa.array([[("x", 1)]], pa.map_(pa.string(), pa.int64())),
...                          "s": pa.array([{"a": 1, "b": "p"}])})
>>> list(tuples([batch]))
[({'x': 1}, Row(a=1, b='p'))]
>>> ts = pa.array([datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc)],
...               pa.timestamp("us", tz="UTC"))
>>> local = datetime.datetime.fromtimestamp(1704110400)   # 2024-01-01 12:00 UTC, local time
>>> column_values(ts) == [local]
True
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Iterable, Iterator, List, Optional

import pyarrow as pa

__all__ = ["tuples", "column_values", "as_utc_instants"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)


def tuples(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple]:
    """The rows of ``batches`` as tuples of pyspark's values, in column order."""
    for batch in batches:
        if batch.num_rows:
            yield from zip(*[column_values(col) for col in batch.columns])


def column_values(column: Any) -> List[Any]:
    """The values of one Arrow column as pyspark gives them."""
    convert = _converter(column.type)
    values = column.to_pylist()
    return values if convert is None else [None if v is None else convert(v) for v in values]


def as_utc_instants(batch: pa.RecordBatch, columns: Iterable[str]) -> pa.RecordBatch:
    """``batch`` with its naive timestamp ``columns`` read as UTC instants (Spark writes its
    ``TimestampType`` to Parquet as INT96 in UTC, which Arrow reads as naive timestamps)."""
    names = set(columns)
    if not names:
        return batch
    arrays = [col.cast(pa.timestamp(col.type.unit, tz="UTC"))
              if name in names and pa.types.is_timestamp(col.type) and col.type.tz is None
              else col for name, col in zip(batch.schema.names, batch.columns)]
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _converter(t: pa.DataType) -> Optional[Callable[[Any], Any]]:
    """A function from Arrow's Python value of type ``t`` to pyspark's, or None when the two
    are the same."""
    if pa.types.is_timestamp(t):
        return _local_naive if t.tz is not None else None
    if pa.types.is_map(t):
        key, item = _converter(t.key_type), _converter(t.item_type)
        return lambda pairs: {(k if key is None or k is None else key(k)):
                              (v if item is None or v is None else item(v)) for k, v in pairs}
    if pa.types.is_struct(t):
        from pyspark.sql import Row
        names = [t.field(i).name for i in range(t.num_fields)]
        fields = [_converter(t.field(i).type) for i in range(t.num_fields)]
        make = Row(*names)
        return lambda d: make(*[v if f is None or v is None else f(v)
                                for f, v in zip(fields, d.values())])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _converter(t.value_type)
        return None if inner is None else (
            lambda xs: [None if x is None else inner(x) for x in xs])
    return None


def _local_naive(value: datetime.datetime) -> datetime.datetime:
    """A time-zone aware instant as pyspark gives a ``TimestampType`` value: a naive datetime
    in the local time zone (``TimestampType.fromInternal``, from whole microseconds)."""
    us = (value - _EPOCH) // _MICROSECOND
    return datetime.datetime.fromtimestamp(us // 1_000_000).replace(microsecond=us % 1_000_000)
