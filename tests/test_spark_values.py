"""Spark's values reach the program as ``DataFrame.collect()`` shows them, whatever their type:
timestamps (instants, shown in local time), maps, structs, arrays of structs, NaN; with
``frames=True``, timestamps and empty partitions keep the DataFrame's types.  Against Spark's
own ``collect()`` of the same DataFrame, in a real local session."""

from __future__ import annotations

import datetime
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed: pip install 'naiad[spark]'")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Spark needs a Java runtime and none is installed", allow_module_level=True)

import naiad  # noqa: E402
import naiad.spark  # noqa: E402

pytestmark = pytest.mark.timeout(240)

from pyspark import cloudpickle as _spark_cloudpickle  # noqa: E402

_spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = ("id long, ts timestamp, m map<string,int>, st struct<a:int,b:string>, "
          "xs array<struct<k:string,t:timestamp>>, x double")


@pytest.fixture(scope="session")
def spark():
    return naiad.spark.local_session("local[2]")      # the session test_spark uses, reused


@pytest.fixture(scope="module")
def typed(spark):
    day = datetime.datetime(2024, 1, 1, 12, 30, 15, 123456)
    rows = [(i, day + datetime.timedelta(hours=7 * i), {"k": i, "j": -i}, (i, f"s{i}"),
             [(f"k{i}", day)], float("nan") if i % 3 == 0 else float(i % 2))
            for i in range(9)]
    return spark.createDataFrame(rows, SCHEMA).repartition(2)


def _rows(comp, rows):
    return [(repr(_shape(r)),) for r in rows.rows()]


def _shape(v):
    """A value with its kind made explicit (a struct must be a Row, a map a dict), NaN equal to
    NaN and a map's items in order."""
    from pyspark.sql import Row
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, Row):
        return ("Row", tuple(v.__fields__), tuple(_shape(x) for x in v))
    if isinstance(v, dict):
        return ("dict", sorted((_shape(k), _shape(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_shape(x) for x in v))
    return v


def _same(a, b) -> bool:
    return sorted(map(repr, map(_shape, a))) == sorted(map(repr, map(_shape, b)))


def test_rows_are_spark_rows(typed):
    """Maps came as lists of pairs, structs as dicts and timestamps in UTC with a time zone,
    so the rows were not the ones Spark shows, and passing them back failed."""
    seen = [r.r for r in naiad.spark.execute(typed, _rows, schema="r string").collect()]
    assert sorted(seen) == sorted(repr(_shape(r)) for r in typed.collect())
    back = naiad.spark.execute(typed, lambda comp, rows: list(rows), schema=SCHEMA).collect()
    assert _same(back, typed.collect())


def test_frames_take_and_give_timestamps(typed):
    """A timestamp column made frames=True fail in Arrow's schema (no time zone)."""
    plain = typed.select("id", "ts")
    for schema in (None, "id long, ts timestamp"):
        out = naiad.spark.execute(plain, lambda comp, tables: list(tables), processes=2,
                                  frames=True, schema=schema)
        assert sorted(out.collect()) == sorted(plain.collect())


def test_an_empty_partition_is_a_table_of_the_dataframes_types(spark):
    one = spark.createDataFrame([("tea", 2.0)], "item string, amount double").repartition(2)

    def types(comp, tables):
        import pyarrow as pa
        t = tables.table()
        return [pa.table({"kinds": [str(t.schema)]})]
    got = naiad.spark.execute(one, types, processes=2, frames=True, schema="kinds string")
    assert [r.kinds for r in got.collect()] == ["item: string\namount: double"] * 2


@pytest.mark.parametrize("column", ["ts", "x"])
def test_epochs_of_timestamps_and_of_nan(typed, column):
    """The epochs' values came from collect() (local naive datetimes) and the rows from Arrow
    (UTC, with a time zone), and NaN equals nothing: every such run failed."""
    def count(comp, rows):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return [(e, len(v)) for e, v in got.results.items()]
    out = naiad.spark.execute(typed, count, epoch_column=column, schema="epoch long, n long")
    per_epoch: dict = {}
    for r in out.collect():
        per_epoch[r.epoch] = per_epoch.get(r.epoch, 0) + r.n
    values = [getattr(r, column) for r in typed.collect()]
    distinct = sorted({"nan" if v != v else v for v in values}, key=lambda v: (v == "nan", v))
    expected = [sum(1 for v in values if ("nan" if v != v else v) == d) for d in distinct]
    assert [per_epoch[e] for e in sorted(per_epoch)] == expected


@pytest.mark.parametrize("kind", ["double", "string"])
def test_epochs_follow_sparks_own_order_of_nulls_and_nan(spark, kind):
    """Epoch i holds the rows of the i-th value of Spark's ``orderBy`` of the column's
    distinct values: null first, NaN after the numbers (null epochs came last)."""
    values = ([None, 2.0, float("nan"), -1.0, None, 2.0] if kind == "double"
              else [None, "b", "a", None, "b"])
    data = spark.createDataFrame([(i, v) for i, v in enumerate(values)],
                                 f"i long, v {kind}").repartition(2)

    def epochs(comp, rows):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return [(e, r[0]) for e, recs in got.results.items() for r in recs]
    out = naiad.spark.execute(data, epochs, epoch_column="v", schema="epoch long, i long")
    got: dict = {}
    for r in out.collect():
        got.setdefault(r.epoch, set()).add(r.i)
    order = [r.v for r in data.select("v").distinct().orderBy("v").collect()]
    same = (lambda a, b: (a is None and b is None)
            or (a is not None and b is not None and (a == b or (a != a and b != b))))
    expected = [{i for i, v in enumerate(values) if same(v, o)} for o in order]
    assert [got[e] for e in sorted(got)] == expected, (order, got)


def test_an_epoch_column_of_arrays_maps_or_structs_is_refused_by_name(spark):
    """Before any job: a struct column was taken (an epoch per struct) and a map one failed
    in Spark's own words."""
    nested = spark.createDataFrame([(1, [1], {"a": 1}, (1,))],
                                   "n long, a array<long>, m map<string,long>, s struct<x:long>")
    for column, kind in (("a", "array"), ("m", "map"), ("s", "struct")):
        with pytest.raises(TypeError, match=rf"epoch_column '{column}' is a column of {kind}s, "
                                            "whose values cannot be epochs"):
            naiad.spark.execute(nested, lambda comp, rows: [], epoch_column=column,
                                schema="n long")


def test_to_dataframe_names_the_epoch_column_without_a_schema(spark):
    df = naiad.spark.to_dataframe(spark, {0: [("a", 1.0)], 1: [("b", 2.0)]},
                                  epoch_column="epoch")
    assert df.columns[0] == "epoch"
    assert sorted(tuple(r) for r in df.select("epoch", df.columns[1]).collect()) == \
        [(0, "a"), (1, "b")]


def test_to_dataframe_takes_a_single_type_as_execute_does(spark):
    """Plain values with a single-type DDL or DataType: one column ``value``, with and without
    the epoch column, as ``createDataFrame`` and ``execute(schema="long")`` make it."""
    from pyspark.sql.types import LongType
    plain = naiad.spark.to_dataframe(spark, [3, 1, 2], "long")
    assert plain.schema.simpleString() == "struct<value:bigint>"
    assert sorted(r.value for r in plain.collect()) == [1, 2, 3]
    typed = naiad.spark.to_dataframe(spark, [7], LongType())
    assert [tuple(r) for r in typed.collect()] == [(7,)]
    per_epoch = naiad.spark.to_dataframe(spark, {1: [5], 0: [4, 6]}, "long",
                                         epoch_column="epoch")
    assert per_epoch.columns == ["epoch", "value"]
    assert [tuple(r) for r in per_epoch.collect()] == [(0, 4), (0, 6), (1, 5)]
    with pytest.raises(ValueError, match=r"to_dataframe: Spark cannot read the schema 'lon g'"):
        naiad.spark.to_dataframe(spark, [1], "lon g")
    with pytest.raises(TypeError, match=r"schema must be a DDL string, a Spark DataType or a list"):
        naiad.spark.to_dataframe(spark, [1], 5)
    # An array type: each record (a list) is one value, as createDataFrame takes it.
    from pyspark.sql.types import ArrayType
    for schema in ("array<long>", ArrayType(LongType())):
        arrays = naiad.spark.to_dataframe(spark, [[1, 2], [3]], schema)
        assert [tuple(r) for r in arrays.collect()] == \
            [tuple(r) for r in spark.createDataFrame([[1, 2], [3]], "array<long>").collect()]
    listed = naiad.spark.to_dataframe(spark, {0: [[1, 2]], 1: [[3]]}, "array<long>",
                                      epoch_column="epoch")
    assert [tuple(r) for r in listed.collect()] == [(0, [1, 2]), (1, [3])]
    with pytest.raises(ValueError, match=r"epoch_column 'epoch' is also a column of the schema"):
        naiad.spark.to_dataframe(spark, {0: [(1,)]}, "epoch long", epoch_column="epoch")


def test_execute_takes_a_single_array_type(spark):
    """schema="array<long>": each record the program returns is one array (it was read as a
    row of two columns, and refused)."""
    def lists(comp, rows):
        return [[comp.process_index, 1], [comp.process_index]]
    data = spark.createDataFrame([(1,), (2,)], "n long").repartition(2)
    out = naiad.spark.execute(data, lists, schema="array<long>")
    assert out.schema.simpleString() == "struct<value:array<bigint>>"
    assert sorted(r.value for r in out.collect()) == [[0], [0, 1], [1], [1, 1]]


def test_a_bad_schema_is_refused_before_the_program_runs(spark, tmp_path):
    marker = tmp_path / "ran"

    def program(comp, rows):
        Path(marker).write_text("ran")
        return []
    df = spark.createDataFrame([(1,)], "n long")
    t0 = time.monotonic()
    with pytest.raises(TypeError, match=r"schema='k lng, v double' is not a DDL string Spark "
                                        r"reads \(\w+: [^)\s]"):   # Spark's cause, not empty
        naiad.spark.execute(df, program, schema="k lng, v double")
    assert not marker.exists() and time.monotonic() - t0 < 30


_IN_NEW_YORK = textwrap.dedent("""
    import datetime, naiad, naiad.spark
    spark = naiad.spark.local_session("local[1]")
    df = spark.createDataFrame([(datetime.datetime(2024, 1, 1, 12, 0), 1)], "ts timestamp, n long")
    def program(comp):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        src.rows(comp).feed(inp)
        comp.join()
        return got.records()
    with naiad.spark.source(df, epoch_column="ts") as src:
        print(repr(naiad.execute(program)[0]), repr([tuple(r) for r in df.collect()]))
    spark.stop()
""")


def test_a_source_gives_spark_timestamps_outside_utc(tmp_path):
    """Spark writes its timestamps to Parquet in UTC, read back as naive: outside UTC they came
    shifted by the offset, as pandas Timestamps, and epoch_column on them failed."""
    env = dict(os.environ, TZ="America/New_York", SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run([sys.executable, "-c", _IN_NEW_YORK], env=env, capture_output=True,
                         text=True, timeout=200, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line == f"{[(datetime.datetime(2024, 1, 1, 12, 0), 1)]!r} " \
                   f"{[(datetime.datetime(2024, 1, 1, 12, 0), 1)]!r}", line


def test_large_results_travel_in_chunks_of_bounded_size():
    """Each chunk of results is one binary cell the JVM copies whole: rows of 100 KB go a few
    dozen to a chunk, not 4,096 (hundreds of MB, which ran the driver out of heap); a frames
    result's batches likewise."""
    import pyarrow as pa
    from naiad.spark.frames import payload_batches
    from naiad.spark.results import CHUNK_BYTES, pack_results, unpack_results
    rows = [(i, "x" * 100_000) for i in range(300)]
    chunks = pack_results(rows, 0)
    assert len(chunks) > 1 and all(len(c) <= CHUNK_BYTES for c in chunks)
    assert [r for c in chunks for r in unpack_results(c)] == rows
    table = pa.table({"i": range(300), "s": ["x" * 100_000] * 300})
    cells = [b.column(1)[0].as_py() for b in payload_batches([table])]
    assert len(cells) > 2 and all(len(c) <= 2 * CHUNK_BYTES for c in cells)


def test_a_source_gives_timestamps_of_any_year_and_nested_as_collect_does(spark):
    """INT96 timestamps were read as nanoseconds (years outside 1677-2262 overflowed
    silently), and those inside arrays and structs came as pandas Timestamps in UTC."""
    from pyspark.sql import Row
    vals = [datetime.datetime(2024, 5, 1, 12, 30), datetime.datetime(1500, 6, 1),
            datetime.datetime(2300, 1, 1)]
    df = spark.createDataFrame([(i, v, [v], Row(t=v), {"k": v}) for i, v in enumerate(vals)],
                               "i long, ts timestamp, a array<timestamp>, "
                               "st struct<t:timestamp>, m map<string,timestamp>")

    def program(comp):
        return [tuple(r) for r in src.rows(comp)]
    with naiad.spark.source(df) as src:
        got = sorted(r for part in naiad.execute(program, processes=2) for r in part)
    assert got == sorted(tuple(r) for r in df.collect())
    assert all(type(r[2][0]) is datetime.datetime for r in got)


# ---- from the Spark audit ---------------------------------------------------------------------
class _SessionZone:
    """The session's time zone set for a test, then restored."""

    def __init__(self, spark, zone: str):
        self.spark, self.zone = spark, zone

    def __enter__(self):
        self.before = self.spark.conf.get("spark.sql.session.timeZone")
        self.spark.conf.set("spark.sql.session.timeZone", self.zone)

    def __exit__(self, *exc):
        self.spark.conf.set("spark.sql.session.timeZone", self.before)


def test_a_timestamp_whose_year_is_10000_in_the_sessions_zone_reads_as_collect_does(spark):
    """9999-12-31 20:00 here is in year 10000 in Tokyo: Arrow made an aware datetime there
    before making it local, and every read failed with OverflowError: date value out of
    range. Values are now made local from their integer microseconds, as pyspark does."""
    end = datetime.datetime(9999, 12, 31, 20, 0)
    with _SessionZone(spark, "Asia/Tokyo"):
        df = spark.createDataFrame([(end, [end])], "ts timestamp, xs array<timestamp>")
        want = [tuple(r) for r in df.collect()]
        got = naiad.spark.execute(df, lambda comp, rows: list(rows),
                                  schema="ts timestamp, xs array<timestamp>").collect()
        assert [tuple(r) for r in got] == want
        by_epoch = naiad.spark.execute(df, lambda comp, rows: list(rows), epoch_column="ts",
                                       schema="ts timestamp, xs array<timestamp>").collect()
        assert [tuple(r) for r in by_epoch] == want


def test_naive_timestamps_a_frames_program_returns_are_wall_times_of_the_session(spark):
    """A frames program's table with a naive timestamp, for a timestamp column: the cast read
    it as UTC, shifted by the session zone's offset from what spark.createDataFrame(table)
    (and createDataFrame of pandas) make of the same table."""
    import pyarrow as pa
    noon = datetime.datetime(2020, 1, 1, 12, 0)
    with _SessionZone(spark, "America/New_York"):
        df = spark.createDataFrame([(1,)], "i long").repartition(1)

        def program(comp, tables):
            import pyarrow as pa
            return [pa.table({"ts": [noon], "xs": [[noon]], "st": [{"t": noon}]})]
        schema = "ts timestamp, xs array<timestamp>, st struct<t:timestamp>"
        got = naiad.spark.execute(df, program, processes=1, frames=True,
                                  schema=schema).collect()
        want = spark.createDataFrame(
            pa.table({"ts": [noon], "xs": [[noon]], "st": [{"t": noon}]}), schema).collect()
        assert [tuple(r) for r in got] == [tuple(r) for r in want]
        assert got[0].ts == got[0].xs[0] == got[0].st.t


def test_a_source_gives_day_time_intervals_as_collect_does(spark):
    """Parquet keeps an interval as an int64 of microseconds: a source gave 86405000000 where
    collect() gives timedelta(days=1, seconds=5), and an epoch column of intervals failed."""
    iv = [datetime.timedelta(days=1, seconds=5), datetime.timedelta(microseconds=-7)]
    df = spark.createDataFrame([(v, [v]) for v in iv],
                               "iv interval day to second, xs array<interval day to second>")

    def program(comp):
        return [tuple(r) for r in src.rows(comp)]

    def per_epoch(comp):
        comp.activate()
        comp.join()
        return [sorted(r[0] for r in rows) for rows in src.rows(comp).by_epoch()]
    with naiad.spark.source(df) as src:
        got = sorted(r for part in naiad.execute(program, processes=2) for r in part)
    assert got == sorted(tuple(r) for r in df.collect())
    with naiad.spark.source(df, epoch_column="iv") as src:
        epochs = naiad.execute(per_epoch, processes=1)[0]
    assert epochs == [[min(iv)], [max(iv)]]


def test_two_wall_times_of_the_hour_repeated_at_the_end_of_summer_time_are_two_epochs():
    """pyspark gives the second 01:30 of a night when clocks go back with fold=1, and Python's
    equality ignores fold: both instants, two epochs for Spark, were fed in one."""
    from naiad.spark.io import EpochSpec
    first = datetime.datetime(2024, 11, 3, 1, 30)
    second = first.replace(fold=1)
    spec = EpochSpec("ts", lambda r: r[0], [first, second])
    assert len(spec.index) == 2
    from naiad.spark.io import _epoch_key
    assert spec.index[_epoch_key(second)] == 1 and spec.index[_epoch_key(first)] == 0


def test_instants_of_the_repeated_hour_sort_as_spark_orders_them(monkeypatch):
    """01:30 EDT, 01:45 EDT, 01:15 EST, 01:30 EST: sorted by wall time (fold ignored) the
    epochs came in the order 01:15 EST, 01:30 (either), 01:30, 01:45 EDT."""
    import time as _time
    from naiad.spark.io import _instant_order
    monkeypatch.setenv("TZ", "America/New_York")
    _time.tzset()
    try:
        instants = [1730611800, 1730612700, 1730614500, 1730615400]     # in Spark's order
        local = [datetime.datetime.fromtimestamp(t) for t in instants]  # as pyspark gives
        assert [v.fold for v in local] == [0, 0, 1, 1]
        assert sorted(reversed(local), key=_instant_order) == local
        assert sorted([None] + local[::2], key=_instant_order)[0] is None
    finally:
        monkeypatch.undo()
        _time.tzset()

def test_to_dataframe_refuses_an_epoch_column_named_like_a_column_but_for_case(spark):
    """Spark compares names without case: 'epoch' beside 'Epoch' made a DataFrame whose
    epoch column could not be selected (AMBIGUOUS_REFERENCE)."""
    with pytest.raises(ValueError, match="Spark compares names without case"):
        naiad.spark.to_dataframe(spark, {0: [(1,)], 1: [(2,)]}, "Epoch long",
                                 epoch_column="epoch")
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:            # where Spark tells the two names apart, so does to_dataframe
        df = naiad.spark.to_dataframe(spark, {0: [(1,)], 1: [(2,)]}, "Epoch long",
                                      epoch_column="epoch")
        assert sorted(tuple(r) for r in df.select("epoch", "Epoch").collect()) == [(0, 1),
                                                                                  (1, 2)]
    finally:
        spark.conf.set("spark.sql.caseSensitive", "false")
