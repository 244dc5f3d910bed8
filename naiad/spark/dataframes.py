"""A DataFrame, in the driver, of a computation's records, and the schemas that go with it.

:func:`to_dataframe` takes the records a computation returned (a list of rows, or per-epoch
results ``{epoch: rows}``) and a schema given as Spark takes it everywhere else: a DDL string
(``"node string, rank double"``, or a single type such as ``"long"``), a ``DataType`` or a list of
column names.  Plain values become one-column rows, so a single type is read as one column named
``value``, as ``createDataFrame`` names it; :func:`struct_of` does that reading, for the barrier
runner's result schemas too.
"""

from __future__ import annotations

import reprlib
from typing import Any, Optional, Tuple

from naiad.spark.results import _as_row

__all__ = ["to_dataframe", "struct_of", "struct_and_single"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def struct_of(ddl: str):
    """The StructType of a DDL string (one py4j call; ``createDataFrame([], ddl)`` took
    several): a single type becomes one column ``value``, as ``createDataFrame`` makes it."""
    from pyspark.sql.types import DataType, StructField, StructType
    parsed = DataType.fromDDL(ddl)
    return parsed if isinstance(parsed, StructType) else StructType([StructField("value", parsed)])


def struct_and_single(schema: Any) -> Tuple[Any, bool]:
    """``(StructType, single)`` of a DDL string or a Spark DataType: ``single`` when it is one
    type, not a struct, so that every record is one value of it (a list, too, for an array
    type), as ``createDataFrame`` takes records for such a schema.

    >>> from pyspark.sql.types import ArrayType, LongType
    >>> struct, single = struct_and_single(ArrayType(LongType()))
    >>> struct.simpleString(), single
    ('struct<value:array<bigint>>', True)
    """
    from pyspark.sql.types import DataType, StructField, StructType
    parsed = DataType.fromDDL(schema) if isinstance(schema, str) else schema
    if isinstance(parsed, StructType):
        return parsed, False
    return StructType([StructField("value", parsed)]), True


def _rows_schema(schema: Any) -> Tuple[Any, bool]:
    """``schema`` as ``createDataFrame`` should get it for rows that are all tuples, lists or
    dicts: a DDL string or a DataType as a StructType; a list of names, or None, as it is;
    and whether it is a single type (:func:`struct_and_single`)."""
    from pyspark.sql.types import DataType
    if schema is None or isinstance(schema, (list, tuple)):
        return schema, False
    if isinstance(schema, str):
        try:
            return struct_and_single(schema)
        except Exception as exc:  # noqa: BLE001 - Spark's ParseException, named
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            msg = (f"to_dataframe: Spark cannot read the schema {schema!r} ({type(exc).__name__}: "
                   f"{first}); give a DDL string such as 'node string, rank double' or 'long'")
            raise ValueError(msg) from exc
    if isinstance(schema, DataType):
        return struct_and_single(schema)
    msg = (f"to_dataframe: schema must be a DDL string, a Spark DataType or a list of column "
           f"names; got {type(schema).__name__} {_repr.repr(schema)}")
    raise TypeError(msg)


def _with_epoch_schema(schema: Any, column: str) -> Any:
    """``schema`` (as :func:`_rows_schema` gives it) with the epoch column first."""
    from pyspark.sql.types import LongType, StructField, StructType
    if schema is None:
        return None
    if isinstance(schema, StructType):
        return StructType([StructField(column, LongType(), False)] + list(schema.fields))
    return [column] + list(schema)


def to_dataframe(spark, records: Any, schema: Any = None, *,
                 epoch_column: Optional[str] = None):
    """A DataFrame in ``spark`` of a computation's records.

    ``records`` is a list of rows (tuples, lists, dicts or Rows; plain values become one-column
    rows), or per-epoch results such as ``stream.collect().results`` (``{epoch: rows}``): all
    epochs in order, with the epoch number as a first column named ``epoch_column`` if given.
    ``schema`` is a DDL string (a single type such as ``"long"`` is one column ``value``), a
    Spark DataType or a list of column names; omitted, Spark infers it.
    """
    schema, single = _rows_schema(schema)
    row = _one if single else _as_row          # a single type: every record is one value
    if hasattr(records, "results") and isinstance(getattr(records, "results"), dict):
        records = records.results
    if isinstance(records, dict):
        epochs = sorted(records)
        if epoch_column is not None:
            names = schema.names if hasattr(schema, "names") else list(schema or [])
            exact = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
            same = (lambda a, b: a == b) if exact else (lambda a, b: a.lower() == b.lower())
            if any(same(epoch_column, n) for n in names):
                # Spark compares names without case (unless spark.sql.caseSensitive is set):
                # 'Epoch' and 'epoch' would be one name.
                msg = (f"to_dataframe: epoch_column {epoch_column!r} is also a column of the "
                       f"schema ({', '.join(names)}"
                       f"{'' if exact else '; Spark compares names without case'}); "
                       "name the epoch column otherwise")
                raise ValueError(msg)
            tup = _one if single else _as_tuple
            rows = [(e,) + tuple(tup(r)) for e in epochs for r in records[e]]
            schema = _with_epoch_schema(schema, epoch_column)
        else:
            rows = [row(r) for e in epochs for r in records[e]]
    else:
        if epoch_column is not None:
            msg = ("epoch_column needs per-epoch results ({epoch: rows}, e.g. "
                   "stream.collect().results); got a plain list of rows")
            raise TypeError(msg)
        rows = [row(r) for r in records]
    if schema is None and not rows:
        msg = ("to_dataframe: there are no rows to infer a schema from; give schema= (a DDL "
               "string such as 'node string, rank double')")
        raise ValueError(msg)
    try:
        df = spark.createDataFrame(rows, schema)
        if epoch_column is not None and schema is None:     # inferred: named _1, _2, ...
            df = df.withColumnRenamed(df.columns[0], epoch_column)
        return df
    except Exception as exc:  # noqa: BLE001 - re-raised with the offending row
        shown = schema.simpleString() if hasattr(schema, "simpleString") else schema
        msg = (f"to_dataframe: Spark cannot make a DataFrame of these rows "
               f"({type(exc).__name__}: {exc}); the first row is "
               f"{_repr.repr(rows[0]) if rows else None}"
               f"{'' if schema is None else f' and the schema {shown!r}'}")
        raise TypeError(msg) from exc


def _one(record: Any) -> tuple:
    return (record,)


def _as_tuple(record: Any) -> tuple:
    if isinstance(record, tuple):
        return record
    if isinstance(record, list):
        return tuple(record)
    if isinstance(record, dict):
        msg = "epoch_column needs rows as tuples or lists, not dicts (the order of fields matters)"
        raise TypeError(msg)
    return (record,)
