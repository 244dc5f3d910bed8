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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import pyarrow as pa

__all__ = ["tuples", "column_values", "as_utc_instants", "instant_marks"]

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


def as_utc_instants(batch: pa.RecordBatch, columns: Dict[str, Any]) -> pa.RecordBatch:
    """``batch`` with the naive timestamps of ``columns`` read as UTC instants: Spark writes
    its ``TimestampType`` to Parquet as INT96 in UTC, which Arrow reads as naive timestamps.
    ``columns`` maps a column to where its instants are (:func:`instant_marks`), at the top
    or inside lists, structs and maps (``TimestampNTZType`` values stay naive)."""
    if not columns:
        return batch
    arrays = []
    for name, col in zip(batch.schema.names, batch.columns):
        marks = columns.get(name)
        if marks is not None:
            target = _utc_type(col.type, marks)
            if target != col.type:
                col = col.cast(target)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def instant_marks(spark_type: Any) -> Any:
    """Where a Spark type holds ``TimestampType`` values: True for one, ``("list", m)``,
    ``("map", k, v)`` or ``("struct", {field: m})`` around them, None where there is none."""
    name = spark_type.typeName()
    if name == "timestamp":
        return True
    if name == "array":
        inner = instant_marks(spark_type.elementType)
        return None if inner is None else ("list", inner)
    if name == "map":
        k, v = instant_marks(spark_type.keyType), instant_marks(spark_type.valueType)
        return None if k is None and v is None else ("map", k, v)
    if name == "struct":
        fields = {f.name: instant_marks(f.dataType) for f in spark_type.fields}
        fields = {n: m for n, m in fields.items() if m is not None}
        return ("struct", fields) if fields else None
    return None


def _utc_type(t: pa.DataType, marks: Any) -> pa.DataType:
    """``t`` with the naive timestamps ``marks`` points at made UTC."""
    if marks is None:
        return t
    if marks is True:
        return pa.timestamp(t.unit, tz="UTC") if pa.types.is_timestamp(t) and t.tz is None else t
    if marks[0] == "list" and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        inner = _utc_type(t.value_type, marks[1])
        return pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner)
    if marks[0] == "map" and pa.types.is_map(t):
        return pa.map_(_utc_type(t.key_type, marks[1]), _utc_type(t.item_type, marks[2]))
    if marks[0] == "struct" and pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_utc_type(t.field(i).type,
                                                         marks[1].get(t.field(i).name)))
                          for i in range(t.num_fields)])
    return t


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
