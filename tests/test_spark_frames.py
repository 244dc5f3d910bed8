"""naiad.spark.execute(..., frames=True) on the real local SparkSession: partitions arrive as
Arrow tables and tables go back as the result DataFrame; PageRank from a Spark-loaded graph
against scipy's power iteration."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed: pip install 'naiad[spark]'")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Spark needs a Java runtime and none is installed", allow_module_level=True)
pytest.importorskip("scipy")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402

import naiad  # noqa: E402
import naiad.spark  # noqa: E402
from linq import frames  # noqa: E402
from samples.frames_pagerank import power_iteration, spark_pagerank  # noqa: E402
from samples.graphs import random_edges  # noqa: E402

pytestmark = pytest.mark.timeout(240)

from pyspark import cloudpickle as _spark_cloudpickle  # noqa: E402

_spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="session")
def spark():
    return naiad.spark.local_session("local[2]")      # the session test_spark uses, reused


@pytest.fixture(scope="module")
def numbers(spark):
    rows = [(i, f"g{i % 7}", float(i) / 4) for i in range(1000)]
    return spark.createDataFrame(rows, "id long, grp string, value double").repartition(2)


def _group_sums(comp, tables):
    """Sum and count of value per group, by frames; the tables each process got, counted."""
    inp = comp.new_input()
    got = frames.of(inp.stream).group_by("grp", total=("value", "sum"),
                                         n=("id", "count")).collect()
    comp.activate()
    mine = list(tables)
    assert all(isinstance(t, pa.Table) for t in mine)
    inp.on_next(mine)
    inp.on_completed()
    comp.join()
    out = got.results.get(0, [])
    return out + [pa.table({"grp": [f"read{comp.process_index}"], "total": [0.0],
                           "n": pa.array([sum(t.num_rows for t in mine)], pa.int32())})]


@pytest.mark.parametrize("processes", [1, 2])
def test_frames_round_trip_matches_spark(numbers, processes):
    out = naiad.spark.execute(numbers, _group_sums, processes=processes, frames=True,
                              schema="grp string, total double, n long")
    assert out.columns == ["grp", "total", "n"]
    got = out.toPandas()
    sums = got[~got.grp.str.startswith("read")].set_index("grp").sort_index()
    want = (numbers.toPandas().groupby("grp").agg(total=("value", "sum"), n=("id", "count"))
            .sort_index())
    pd.testing.assert_frame_equal(sums, want, check_dtype=False)
    read = got[got.grp.str.startswith("read")]
    assert len(read) == processes and read.n.sum() == 1000


def test_frames_schema_is_inferred_from_the_tables_returned(numbers):
    def program(comp, tables):
        comp.activate()
        comp.join()
        return [t.filter(pa.compute.greater(t["id"], 990)) for t in tables]
    got = naiad.spark.execute(numbers, program, frames=True).toPandas()
    assert list(got.columns) == ["id", "grp", "value"]
    assert sorted(got.id) == list(range(991, 1000))


@pytest.mark.parametrize("processes", [1, 2])
def test_frames_schema_of_other_columns_is_inferred(numbers, processes):
    """Tables with columns the input does not have (it used the input's schema and failed:
    "a table without the column 'id'"); processes returning an int32 and an int64 column, or
    a column only one of them has, unify (the other's rows null there)."""
    out = naiad.spark.execute(numbers, _group_sums, processes=processes, frames=True)
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields] == [
        ("grp", "string"), ("total", "double"), ("n", "bigint")]
    got = out.toPandas()
    sums = got[~got.grp.str.startswith("read")].set_index("grp").sort_index()
    want = (numbers.toPandas().groupby("grp").agg(total=("value", "sum"), n=("id", "count"))
            .sort_index())
    pd.testing.assert_frame_equal(sums, want, check_dtype=False)

    def uneven(comp, tables):
        list(tables)
        comp.activate()
        comp.join()
        extra = {"only1": ["x"]} if comp.process_index == 1 else {}
        return pa.table({"p": pa.array([comp.process_index], pa.int8()), **extra})
    rows = naiad.spark.execute(numbers, uneven, processes=2, frames=True).toPandas()
    assert list(rows.columns) == ["p", "only1"]
    assert sorted(rows.fillna("-").itertuples(index=False)) == [(0, "-"), (1, "x")]


def test_frames_with_no_table_returned_and_no_schema_says_so(numbers):
    def nothing(comp, tables):
        list(tables)
        comp.activate()
        comp.join()
    with pytest.raises(ValueError, match=r"returned no table, so the result schema cannot be "
                                         r"inferred; give schema="):
        naiad.spark.execute(numbers, nothing, frames=True)


@pytest.mark.parametrize("processes", [1, 2])
def test_pagerank_from_a_spark_dataframe(spark, processes):
    nodes = 300
    graph = random_edges(nodes, 1500, seed=processes)
    df = spark.createDataFrame(pd.DataFrame(graph, columns=["src", "dst"])).repartition(2)
    got = spark_pagerank(df, nodes, iterations=8, processes=processes).toPandas()
    ranks = np.full(nodes, np.nan)
    ranks[got.node.to_numpy()] = got["rank"].to_numpy()
    np.testing.assert_allclose(ranks, power_iteration(graph, nodes, 8), rtol=0, atol=1e-12)


def test_frames_errors(spark, numbers):
    def wrong_column(comp, tables):
        list(tables)
        comp.activate()
        comp.join()
        return pa.table({"nope": [1]})
    with pytest.raises(naiad.spark.StageFailed, match="without the column 'id'.*'nope'"):
        naiad.spark.execute(numbers, wrong_column, frames=True, processes=2,
                            schema=numbers.schema)
    rdd = spark.sparkContext.parallelize([(1, 2)], 1)
    with pytest.raises(TypeError, match="frames=True.*needs a DataFrame"):
        naiad.spark.execute(rdd, wrong_column, frames=True)
    with pytest.raises(TypeError, match="epoch_column"):
        naiad.spark.execute(numbers, wrong_column, frames=True, epoch_column="id")
    with pytest.raises(TypeError, match=r"frames=True\) takes schema= as a DDL string or a "
                                        r"StructType.*a list of column names is for rows"):
        naiad.spark.execute(numbers, wrong_column, frames=True, schema=["id"])


@pytest.mark.parametrize("setting", [None, "true"])
def test_frames_stage_is_planned_without_adaptive_execution(spark, numbers, setting):
    """The barrier stage and its checkpoint are planned as one job (adaptive execution would
    run the shuffle as a job of its own); the session's own setting is left as it was."""
    from naiad.spark.barrier import _plan_without_adaptive
    key = "spark.sql.adaptive.enabled"
    if setting is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, setting)
    try:
        df = numbers.repartition(3)
        _plan_without_adaptive(spark, df)
        assert "AdaptiveSparkPlan" not in df._jdf.queryExecution().executedPlan().toString()
        assert spark.conf.get(key, None) == setting
        assert "AdaptiveSparkPlan" in numbers.repartition(3)._jdf.queryExecution() \
            .executedPlan().toString()
        got = naiad.spark.execute(numbers, _group_sums, processes=2, frames=True,
                                  schema="grp string, total double, n long")
        assert spark.conf.get(key, None) == setting
        assert got.filter("grp like 'read%'").toPandas().n.sum() == 1000
    finally:
        spark.conf.unset(key)


@pytest.mark.parametrize("read", ["all", "some", "none"])
def test_partition_tables_read_ahead(read):
    """Read ahead (as execute does), the tables are the batches in order; close() leaves the
    source at its end whatever the program read, and a source's error reaches the reader."""
    from naiad.spark.frames import PartitionTables
    rng = np.random.default_rng(7)
    batches = [pa.record_batch({"x": rng.integers(0, 100, int(n))}) for n in
               rng.integers(0, 50, 40)]
    pulled = []

    def source():
        for b in batches:
            pulled.append(b)
            yield b
    tables = PartitionTables(source(), ["x"], 0, ahead=4)
    want = [b for b in batches if b.num_rows]
    if read == "all":
        got = [t for t in tables]
        assert [t.to_batches()[0] for t in got] == want
    elif read == "some":
        it = iter(tables)
        assert [next(it).to_batches()[0] for _ in range(3)] == want[:3]
    tables.close()
    assert len(pulled) == len(batches)

    def broken():
        yield batches[1]
        raise OSError("the stream from Spark broke")
    failing = PartitionTables(broken(), ["x"], 1, ahead=2)
    with pytest.raises(OSError, match="stream from Spark broke"):
        list(failing)
    failing.close()
