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


def tuples(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple]:
    """The rows of ``batches`` as tuples of pyspark's values, in column order."""
    for batch in batches:
        if batch.num_rows:
            yield from zip(*[column_values(col) for col in batch.columns])


def column_values(column: Any) -> List[Any]:
    """The values of one Arrow column as pyspark gives them.  Instants are read as integers
    (``_as_integers``) and made local from those, as pyspark does: Arrow would first make an
    aware datetime in UTC, which does not exist for a local 9999-12-31 23:00 west of UTC."""
    convert = _converter(column.type)
    if convert is None:
        return column.to_pylist()
    ints = _as_integers(column.type)
    if ints != column.type:
        column = column.cast(ints)
    return [None if v is None else convert(v) for v in column.to_pylist()]


def _as_integers(t: pa.DataType) -> pa.DataType:
    """``t`` with each time-zone aware timestamp made an int64 of its unit, where it is (at
    the top, in lists, maps and structs)."""
    if pa.types.is_timestamp(t):
        return pa.int64() if t.tz is not None else t
    if pa.types.is_map(t):
        return pa.map_(_as_integers(t.key_type), _as_integers(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_as_integers(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(_as_integers(t.value_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_as_integers(t.value_type))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_as_integers(t.value_type), t.list_size)
    return t


def as_utc_instants(batch: pa.RecordBatch, columns: Dict[str, Any]) -> pa.RecordBatch:
    """``batch`` with the naive timestamps of ``columns`` read as UTC instants: Spark writes
    its ``TimestampType`` to Parquet as INT96 in UTC, which Arrow reads as naive timestamps
    (and its day-time intervals, which Arrow reads as integers, as durations).
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
    ``("map", k, v)`` or ``("struct", {field: m})`` around them, None where there is none.
    A ``DayTimeIntervalType`` (Parquet keeps it as an int64 of microseconds) is marked
    ``"interval"``, to be read back as a duration (a ``timedelta``, as ``collect()`` gives)."""
    name = spark_type.typeName()
    if name == "timestamp":
        return True
    if name == "daytimeinterval":
        return "interval"
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
    if marks == "interval":
        return pa.duration("us") if pa.types.is_integer(t) else t
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
        return _local_naive_of(t.unit) if t.tz is not None else None
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


_PER_US = {"s": (1_000_000, 1), "ms": (1_000, 1), "us": (1, 1), "ns": (1, 1_000)}


def _local_naive_of(unit: str) -> Callable[[int], datetime.datetime]:
    """From an instant of ``unit`` since 1970 (an integer) to pyspark's ``TimestampType``
    value: a naive datetime in the local time zone (``TimestampType.fromInternal``, from whole
    microseconds)."""
    times, per = _PER_US[unit]

    def local(value: int) -> datetime.datetime:
        us = value * times // per
        return datetime.datetime.fromtimestamp(us // 1_000_000).replace(
            microsecond=us % 1_000_000)
    return local
