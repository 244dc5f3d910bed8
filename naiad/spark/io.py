"""Conversions between Spark data and a computation's inputs and outputs.

Into a computation: :class:`PartitionRows` is one process's share of a DataFrame or RDD — Arrow
record batches (DataFrames) or records (RDDs) straight from the partitions that process owns —
iterated as tuples or fed to an input, as one epoch or one epoch per value of a column.  The
barrier runner (:func:`naiad.spark.execute`) hands each task the rows of its own partition;
:func:`source` serves programs run by :func:`naiad.execute`: Spark's executors write the
partitions to files, and each process reads a disjoint share of those files, so the driver never
collects the data.

Out of a computation: :func:`pack_results` / :func:`unpack_results` carry a barrier task's
results to Spark in pickled chunks (:func:`to_dataframe`, which makes a DataFrame of records in
the driver, is :mod:`naiad.spark.dataframes`'s).
"""

from __future__ import annotations

import glob
import os
import reprlib
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from naiad.errors import NaiadError
from naiad.files import private_dir
from naiad.spark.parts import read_parts, write_part
from naiad.spark.dataframes import to_dataframe
from naiad.spark.results import _CHUNK, pack_results, unpack_results

__all__ = ["EpochSpec", "PartitionRows", "SparkSource", "source", "to_dataframe", "epoch_spec",
           "check_columns", "pack_results", "unpack_results", "is_dataframe", "is_rdd"]

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80



def is_dataframe(data: Any) -> bool:
    from pyspark.sql import DataFrame
    return isinstance(data, DataFrame)


def is_rdd(data: Any) -> bool:
    from pyspark import RDD
    return isinstance(data, RDD)


def _need_spark_data(data: Any, what: str) -> None:
    if not (is_dataframe(data) or is_rdd(data)):
        msg = (f"{what} needs a pyspark.sql.DataFrame or a pyspark.RDD; got "
               f"{type(data).__name__}")
        raise TypeError(msg)


# ---- columns and epochs ------------------------------------------------------------------------
def check_columns(data: Any, names: Sequence[str], what: str) -> List[int]:
    """Positions of ``names`` among the DataFrame's columns; a clear error for a missing one."""
    columns = list(data.columns)
    positions = []
    for name in names:
        if name in columns:
            positions.append(columns.index(name))
            continue
        near = [c for c in columns if c.lower() == str(name).lower()]
        hint = f" (did you mean {near[0]!r}? names are case-sensitive here)" if near else ""
        msg = (f"{what}: column {name!r} does not exist{hint}; the DataFrame has columns: "
               f"{', '.join(columns) or '(none)'}")
        raise ValueError(msg)
    return positions


def _value_order(v: Any):
    """The sort key of an epoch column's value, in Spark's ascending order: null first, NaN
    after every number.

    >>> sorted([2.0, float("nan"), None, -1.0], key=_value_order)
    [None, -1.0, 2.0, nan]
    """
    nan = v != v
    return (v is not None, nan, None if v is None or nan else v)


def _instant_order(v: Any):
    """The sort key of a ``TimestampType`` value (a local naive datetime): null first, then
    by the instant it stands for (``timestamp()`` reads ``fold``)."""
    return (v is not None, None if v is None else v.timestamp())


class _NaN:
    """The one epoch of every NaN of an epoch column (Spark's distinct makes them one value;
    NaN equals nothing, not even itself, so a NaN cannot find its epoch in a dict)."""


class _Folded:
    """Marks the second of two equal wall-clock times (``fold=1``, the hour repeated when
    daylight saving time ends): Python's equality ignores ``fold``, Spark's instants differ."""


def _epoch_key(v: Any) -> Any:
    if v != v:
        return _NaN
    return (_Folded, v) if getattr(v, "fold", 0) else v


class EpochSpec:
    """One epoch per distinct value of a column: the column's position and the sorted values.

    The values are the same in every process (they are computed once, from the whole data), so
    every process calls ``on_next`` once per value, in the same order, as Naiad requires.
    """

    def __init__(self, column: Union[str, int], key: Callable[[Any], Any], values: List[Any]):
        self.column = column
        self.key = key
        self.values = values
        try:
            self.index = {_epoch_key(v): i for i, v in enumerate(values)}
        except TypeError:
            kind = type(next(v for v in values if not _hashable(v))).__name__
            msg = (f"epoch_column {column!r}: its values ({kind}) cannot be epochs; an epoch "
                   "column holds numbers, strings, dates or timestamps (not lists, maps or "
                   "structs)")
            raise TypeError(msg) from None

    def __repr__(self) -> str:
        return f"EpochSpec({self.column!r}, {len(self.values)} values)"


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


class _Position:
    """Picklable ``record[i]``."""

    def __init__(self, i: int):
        self.i = i

    def __call__(self, record):
        return record[self.i]


class _Field:
    """Picklable field access for Rows, dicts and objects."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, record):
        if isinstance(record, dict):
            return record[self.name]
        try:
            return getattr(record, self.name)
        except AttributeError:
            msg = (f"epoch_column {self.name!r}: the record {_repr.repr(record)} has no field "
                   f"{self.name!r}; RDD records need that field (pyspark Rows, dicts), or give "
                   "the column's position as an int")
            raise ValueError(msg) from None


def readable_columns(names: List[str], what: str) -> None:
    """A ValueError naming the columns a barrier stage cannot read: repeated names (a join's
    two ``v`` columns; Spark compares names without case, so ``v`` and ``V`` are one) and names
    with a dot or a backquote, which Spark's ``mapInArrow`` takes for a field of a struct.

    >>> readable_columns(["k", "v", "v"], "execute")
    Traceback (most recent call last):
      ...
    ValueError: naiad.spark.execute: column 'v' appears 2 times (a join's columns of one name, say; Spark compares names without case); rename them first, e.g. data.toDF('k', 'v_1', 'v_2')
    >>> readable_columns(["a.b", "a_b"], "execute")
    Traceback (most recent call last):
      ...
    ValueError: naiad.spark.execute: Spark cannot read column 'a.b' in a barrier stage (a dot or a backquote reads as a struct's field); rename it first, e.g. data.toDF('a_b_1', 'a_b')
    """
    counts: Dict[str, int] = {}
    for n in names:
        counts[n.lower()] = counts.get(n.lower(), 0) + 1
    seen: Dict[str, int] = {}
    renamed = []
    for n in names:
        if counts[n.lower()] > 1:
            seen[n.lower()] = seen.get(n.lower(), 0) + 1
            renamed.append(f"{n}_{seen[n.lower()]}")
        else:
            renamed.append(n.replace(".", "_").replace("`", "_"))
    taken = {n.lower() for n, r in zip(names, renamed) if n == r}
    for i, (n, r) in enumerate(zip(names, renamed)):
        if n != r:                      # a new name no other column has
            base, k = r, 1
            while r.lower() in taken:
                r, k = f"{base}_{k}", k + 1
            renamed[i] = r
            taken.add(r.lower())
    suggestion = f"data.toDF({', '.join(map(repr, renamed))})"
    for n in names:
        if counts[n.lower()] > 1:
            msg = (f"naiad.spark.{what}: column {n!r} appears {counts[n.lower()]} times (a "
                   "join's columns of one name, say; Spark compares names without case); "
                   f"rename them first, e.g. {suggestion}")
            raise ValueError(msg)
    for n in names:
        if "." in n or "`" in n:
            msg = (f"naiad.spark.{what}: Spark cannot read column {n!r} in a barrier stage (a "
                   "dot or a backquote reads as a struct's field); rename it first, e.g. "
                   f"{suggestion}")
            raise ValueError(msg)


def epoch_spec(data: Any, column: Optional[Union[str, int]]) -> Optional[EpochSpec]:
    """Validate ``column`` and compute its sorted distinct values with one small Spark job."""
    if column is None:
        return None
    if is_dataframe(data):
        if not isinstance(column, str):
            msg = f"epoch_column must name a column of the DataFrame; got {column!r}"
            raise TypeError(msg)
        (pos,) = check_columns(data, [column], "epoch_column")
        kind = data.schema.fields[pos].dataType.typeName()
        if kind in ("array", "map", "struct"):
            msg = (f"epoch_column {column!r} is a column of {kind}s, whose values cannot be "
                   "epochs: name a column of numbers, strings, dates or timestamps")
            raise TypeError(msg)
        values = [r[0] for r in data.select(data.columns[pos]).distinct().collect()]
        key: Callable = _Position(pos)
        if kind == "timestamp":
            # Instants, which pyspark gives as local wall times: the hour repeated when summer
            # time ends has two instants per wall time (fold 0 then 1), and only the instant
            # orders them as Spark does.
            values.sort(key=_instant_order)
            return EpochSpec(column, key, values)
    else:
        key = _Position(column) if isinstance(column, int) else _Field(column)
        values = data.map(key).distinct().collect()
    try:
        values.sort(key=_value_order)
    except TypeError as exc:
        msg = (f"epoch_column {column!r}: its values cannot be ordered ({exc}); epochs follow "
               "the sorted order of the values, so they must be of one comparable type")
        raise TypeError(msg) from None
    return EpochSpec(column, key, values)


# ---- one process's share -------------------------------------------------------------------------
class PartitionRows:
    """The rows of the partitions one process owns, read lazily, once.

    Iterating gives tuples (DataFrame rows in column order) or the RDD's own records.
    :meth:`batches` gives the Arrow record batches of a DataFrame as they come from Spark;
    :meth:`rows` gives ``pyspark.sql.Row`` objects; :meth:`by_epoch` and :meth:`feed` split the
    rows into epochs when an epoch column was named.
    """

    def __init__(self, *, columns: Optional[List[str]], batches: Optional[Iterator] = None,
                 records: Optional[Iterator] = None, epochs: Optional[EpochSpec] = None,
                 process_index: int = 0):
        self.columns = columns
        self.epochs = epochs
        self.process_index = process_index
        self._batches = batches
        self._records = records
        self._used = False

    def _take(self, what: str):
        if self._used:
            msg = (f"process {self.process_index}: the partition's rows were already read; they "
                   f"stream from Spark once, so keep them (e.g. list(rows)) before {what}")
            raise NaiadError(msg)
        self._used = True

    def batches(self) -> Iterator:
        """The Arrow record batches of this process's partitions (DataFrames only)."""
        if self._batches is None:
            msg = ("batches() needs a DataFrame; an RDD's records are Python objects: iterate "
                   "over the rows instead")
            raise TypeError(msg)
        self._take("batches()")
        return self._batches

    def __iter__(self) -> Iterator:
        if self._batches is None:
            self._take("iterating")
            return iter(self._records)
        from naiad.spark.values import tuples      # pyarrow: only where batches are read
        return tuples(self.batches())

    def rows(self) -> Iterator:
        """``pyspark.sql.Row`` objects with the DataFrame's column names."""
        if self._batches is None:
            return iter(self)
        from pyspark.sql import Row
        make = Row(*self.columns)
        return (make(*t) for t in self)

    def by_epoch(self, rows: bool = False) -> List[list]:
        """The records of every epoch, in epoch order (one list per distinct value of the epoch
        column, empty where this process has none; a single list without an epoch column)."""
        records = self.rows() if rows else iter(self)
        if self.epochs is None:
            return [list(records)]
        spec = self.epochs
        out: List[list] = [[] for _ in spec.values]
        key, index = spec.key, spec.index
        for r in records:
            v = key(r)
            try:
                out[index[_epoch_key(v)]].append(r)
            except KeyError:
                msg = (f"epoch_column {spec.column!r}: value {v!r} was not among the values "
                       "found when the stage started (did the data change?)")
                raise NaiadError(msg) from None
        return out

    def feed(self, inp, *, rows: bool = False, complete: bool = True) -> int:
        """Feed this process's records to ``inp`` (an input of an activated computation): one
        ``on_next`` per epoch, then ``on_completed()`` unless ``complete=False``.  Returns the
        number of epochs fed (the same in every process)."""
        epochs = self.by_epoch(rows=rows)
        for records in epochs:
            inp.on_next(records)
        if complete:
            inp.on_completed()
        return len(epochs)

    def __repr__(self) -> str:
        kind = "DataFrame" if self._batches is not None else "RDD"
        return f"PartitionRows({kind}, process {self.process_index}, epochs={self.epochs!r})"


# ---- the naiad.execute path: Spark writes, each process reads its share --------------------------
class SparkSource:
    """A DataFrame or RDD written by Spark's executors to a directory of partition files, for
    programs run by :func:`naiad.execute`.  Picklable: the program's closure carries it."""

    def __init__(self, path: str, kind: str, columns: Optional[List[str]],
                 epochs: Optional[EpochSpec], owned: bool, names: Sequence[str] = (),
                 key: Optional[bytes] = None):
        self.path = path
        self.kind = kind
        self.columns = columns
        self.epochs = epochs
        self.owned = owned
        self.names = list(names)        # the partition files Spark wrote, in partition order
        self.key = key                  # the HMAC key of pickled partitions
        # Columns holding TimestampType values (Parquet's INT96, in UTC), and where in them.
        self.instants: Dict[str, Any] = {}

    def files(self) -> List[str]:
        """The partition files Spark wrote for this source, in partition order (nothing else
        that the directory may hold)."""
        return [os.path.join(self.path, n) for n in self.names]

    def rows(self, comp=None, *, process_index: Optional[int] = None,
             processes: Optional[int] = None) -> PartitionRows:
        """This process's share: file ``i`` belongs to process ``i % processes``."""
        if comp is not None:
            process_index, processes = comp.process_index, comp.processes
        process_index = process_index or 0
        processes = processes or 1
        if not os.path.isdir(self.path):
            msg = (f"the Spark source directory {self.path} is gone: was the source closed "
                   "before the program ran, or is this process on another machine?")
            raise NaiadError(msg)
        mine = self.files()[process_index::processes]
        if self.kind == "parquet":
            return PartitionRows(columns=self.columns,
                                 batches=_parquet_batches(mine, self.instants),
                                 epochs=self.epochs, process_index=process_index)
        assert self.key is not None
        indexes = list(range(len(self.names)))[process_index::processes]
        return PartitionRows(columns=None, records=read_parts(mine, self.key, indexes),
                             epochs=self.epochs, process_index=process_index)

    def close(self) -> None:
        """Remove the files (only a directory this source created)."""
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "SparkSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparkSource({self.path!r}, {self.kind}, epochs={self.epochs!r})"


def _parquet_batches(files: List[str], instants: Optional[Dict[str, Any]] = None) -> Iterator:
    import pyarrow.parquet as pq
    from naiad.spark.values import as_utc_instants
    for f in files:
        # INT96 read as microseconds, Spark's unit: as nanoseconds, years outside 1677-2262
        # overflowed silently.
        parquet = pq.ParquetFile(f, coerce_int96_timestamp_unit="us")
        for batch in parquet.iter_batches(batch_size=65536):
            yield as_utc_instants(batch, instants or {})


class _WritePickled:
    """Executor side of :func:`source` for RDDs: one authenticated file per partition."""

    def __init__(self, path: str, key: bytes):
        self.path = path
        self.key = key

    def __call__(self, index: int, records: Iterator) -> Iterator[int]:
        yield write_part(os.path.join(self.path, f"part-{index:05d}.pkl"), self.key, index,
                         records, _CHUNK)


def source(data: Any, *, epoch_column: Optional[Union[str, int]] = None,
           path: Optional[str] = None) -> SparkSource:
    """Make a DataFrame or RDD readable by the processes of :func:`naiad.execute`.

    Spark's executors write the partitions (Parquet for a DataFrame, pickled chunks for an RDD)
    to a new directory, removed by ``close()``: a temporary one, or one made inside ``path``
    (a private directory on a file system every executor and process sees; what it already
    holds is left alone); each process then reads the files ``i`` with
    ``i % processes == process_index`` in Arrow batches.  The driver computes only the sorted
    distinct values of ``epoch_column``, when one is named.
    """
    _need_spark_data(data, "naiad.spark.source")
    epochs = epoch_spec(data, epoch_column)
    if path is not None:
        if os.path.lexists(path):
            private_dir(Path(path), "Spark source directory",
                        "its files are read back as records")
        else:
            os.makedirs(path, mode=0o700)
    path = tempfile.mkdtemp(prefix="naiad-spark-", dir=path)
    try:
        if is_dataframe(data):
            # Files are named part-NNNNN-<uuid>...: sorted by name, they follow the partitions.
            # The names are taken now: a file that appears later is not this source's.
            data.write.mode("overwrite").parquet(path)
            names = sorted(os.path.basename(f)
                           for f in glob.glob(os.path.join(path, "part-*.parquet")))
            source = SparkSource(path, "parquet", list(data.columns), epochs, True, names)
            from naiad.spark.values import instant_marks
            marks = {f.name: instant_marks(f.dataType) for f in data.schema.fields}
            source.instants = {n: m for n, m in marks.items() if m is not None}
            return source
        os.makedirs(path, mode=0o700, exist_ok=True)
        key = secrets.token_bytes(32)
        parts = data.getNumPartitions()
        data.mapPartitionsWithIndex(_WritePickled(path, key)).count()
        names = [f"part-{i:05d}.pkl" for i in range(parts)]
        return SparkSource(path, "pickle", None, epochs, True, names, key)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
