"""naiad.spark on a real local SparkSession (local[2]): DataFrame and RDD round trips, epochs per
column, PageRank on a Spark-loaded graph against the oracle, the barrier runner against
naiad.execute, and the errors a Spark user meets.  One session serves the whole module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed: pip install 'naiad[spark]'")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Spark needs a Java runtime and none is installed", allow_module_level=True)

import linq  # noqa: E402,F401 - the fluent methods, in this process too
import naiad  # noqa: E402
import naiad.spark  # noqa: E402
import stages  # noqa: E402
from samples.graphs import adjacency, rmat_edges, stdlib_import_graph  # noqa: E402
from samples.main import PageRankProgram, write_edges_csv  # noqa: E402
from samples.pagerank import power_iteration  # noqa: E402

pytestmark = pytest.mark.timeout(240)

# Spark's executors may not find this test module on their path: send its functions by value.
from pyspark import cloudpickle as _spark_cloudpickle  # noqa: E402

_spark_cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="session")
def spark():
    session = naiad.spark.local_session("local[2]")
    yield session


@pytest.fixture(scope="module")
def numbers(spark):
    """100 rows (id, group, value) in 2 partitions."""
    rows = [(i, f"g{i % 3}", float(i) / 4) for i in range(100)]
    return spark.createDataFrame(rows, "id long, grp string, value double").repartition(2)


def _sums(comp, rows):
    """Sum of value per group, plus which process read how many rows."""
    inp = comp.new_input()
    got = inp.stream.aggregate(lambda r: r[1], lambda r: r[2], lambda a, b: a + b).collect()
    comp.activate()
    mine = list(rows)
    inp.on_next(mine)
    inp.on_completed()
    comp.join()
    return [("sum", g, v) for g, v in got.records()] + [("read", str(comp.process_index),
                                                         float(len(mine)))]


@pytest.mark.parametrize("processes", [1, 2])
def test_dataframe_round_trip(spark, numbers, processes):
    out = naiad.spark.execute(numbers, _sums, processes=processes,
                              schema="kind string, key string, value double")
    assert out.columns == ["kind", "key", "value"]
    got = {(r.kind, r.key): r.value for r in out.collect()}
    want = {r.grp: r.total for r in numbers.groupBy("grp").agg({"value": "sum"})
            .withColumnRenamed("sum(value)", "total").collect()}
    assert {k: v for (kind, k), v in got.items() if kind == "sum"} == pytest.approx(want)
    read = {int(k): int(v) for (kind, k), v in got.items() if kind == "read"}
    assert sorted(read) == list(range(processes))
    assert sum(read.values()) == 100
    if processes == 2:   # each task read exactly its own partition
        assert sorted(read.values()) == sorted(numbers.rdd.glom().map(len).collect())


def test_rdd_round_trip_with_inferred_schema(spark):
    rdd = spark.sparkContext.parallelize([(i, i * i) for i in range(40)], 2)

    def program(comp, rows):
        inp = comp.new_input()
        got = inp.stream.where(lambda r: r[0] % 2 == 0).select(lambda r: (r[0], r[1] + 1)).collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return got.records()

    out = naiad.spark.execute(rdd, program)          # processes = partitions = 2
    assert out.count() == 20
    assert sorted(tuple(r) for r in out.collect()) == [(i, i * i + 1) for i in range(0, 40, 2)]
    assert out.orderBy("_1").first()[1] == 1         # later actions reuse the stage's output


def test_one_epoch_per_column_value(spark, numbers):
    def program(comp, rows):
        inp = comp.new_input()
        got = inp.stream.select(lambda r: 1).aggregate(lambda r: 0, lambda r: r,
                                                       lambda a, b: a + b).collect()
        comp.activate()
        epochs = rows.feed(inp)
        comp.join()
        assert epochs == 3
        return [(e, n) for e, recs in got.results.items() for _, n in recs]

    out = naiad.spark.execute(numbers, program, processes=2, epoch_column="grp",
                              schema="epoch long, n long")
    # grp values g0 < g1 < g2 become epochs 0, 1, 2; records of each epoch are counted there.
    assert sorted(tuple(r) for r in out.collect()) == [(0, 34), (1, 33), (2, 33)]


def test_missing_column_lists_the_columns(numbers):
    with pytest.raises(ValueError) as err:
        naiad.spark.execute(numbers, _sums, processes=2, epoch_column="group")
    assert "'group' does not exist" in str(err.value)
    assert "id, grp, value" in str(err.value)
    with pytest.raises(ValueError, match="did you mean 'grp'"):
        naiad.spark.source(numbers, epoch_column="GRP")


def test_pagerank_on_a_spark_loaded_graph(spark, tmp_path):
    edges = stdlib_import_graph()
    path = write_edges_csv(edges, str(tmp_path / "edges.csv"))
    df = spark.read.csv(path, header=True, schema="src string, dst string")
    ranks = naiad.spark.execute(df, PageRankProgram(20, progress=False), processes=2,
                                schema="node string, rank double")
    got = dict(ranks.collect())
    want = power_iteration(adjacency(edges)[1], 20)
    assert set(got) == set(want)
    assert max(abs(got[u] - want[u]) for u in want) < 1e-9


class _FromSource:
    """The same PageRank for naiad.execute, reading a naiad.spark.source."""

    def __init__(self, src, iterations):
        self.src = src
        self.iterations = iterations

    def __call__(self, comp):
        return PageRankProgram(self.iterations, progress=False)(comp, self.src.rows(comp))


def test_barrier_runner_matches_naiad_execute(spark):
    edges = rmat_edges(10, edge_factor=8, seed=3)
    df = spark.createDataFrame(edges, "src long, dst long").repartition(2)
    in_spark = dict(naiad.spark.execute(df, PageRankProgram(10, progress=False), processes=2,
                                        schema="node long, rank double").collect())
    with naiad.spark.source(df) as src:
        assert len(src.files()) == 2
        parts = naiad.execute(_FromSource(src, 10), processes=2)
    assert all(parts), "each process of naiad.execute read a share and owns nodes"
    outside = dict(r for part in parts for r in part)
    assert set(in_spark) == set(outside)
    assert max(abs(in_spark[u] - outside[u]) for u in outside) < 1e-12
    want = power_iteration(adjacency(edges)[1], 10)
    assert max(abs(outside[u] - want[u]) for u in want) < 1e-9


def _fed(src):
    """A program feeding this process's share of ``src``; returns what it collected, by epoch."""
    def program(comp):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        src.rows(comp).feed(inp)
        comp.join()
        return got.results
    return program


def test_source_of_an_rdd_with_epochs(spark):
    rdd = spark.sparkContext.parallelize([(i % 2, i) for i in range(10)], 3)
    with naiad.spark.source(rdd, epoch_column=0) as src:
        parts = naiad.execute(_fed(src), processes=2)
    merged = {e: sorted(v for p in parts for _, v in p.get(e, [])) for e in (0, 1)}
    assert merged == {0: [0, 2, 4, 6, 8], 1: [1, 3, 5, 7, 9]}


class _Planted:
    """A record whose unpickling would create the file named (what an attacker plants)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_source_reads_only_its_own_authenticated_partitions(spark, tmp_path):
    """An RDD's partition files are unpickled only with the source's HMAC: a pickle planted
    beside them is never read, and a partition changed after Spark wrote it is refused by
    name, before anything in it is unpickled.  A given path that others could write is
    refused at the call."""
    import pickle
    rdd = spark.sparkContext.parallelize(list(range(10)), 3)
    pwned = tmp_path / "pwned"
    where = tmp_path / "src"
    with naiad.spark.source(rdd, path=str(where)) as src:
        program = _fed(src)
        mine = Path(src.path)                 # the source's own directory, inside ``where``
        assert mine.parent == where
        (mine / "part-99999.pkl").write_bytes(pickle.dumps([_Planted(str(pwned))]))
        parts = naiad.execute(program, processes=2)
        assert sorted(r for p in parts for rs in p.values() for r in rs) == list(range(10))
        victim = mine / "part-00001.pkl"
        victim.write_bytes(victim.read_bytes()[:40] + pickle.dumps([_Planted(str(pwned))]))
        with pytest.raises(naiad.NaiadError, match=r"part-00001.pkl: chunk 0 does not carry "
                                                   r"this source's HMAC"):
            naiad.execute(program, processes=2)
    assert not pwned.exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="Spark source directory .* mode 0o777"):
        naiad.spark.source(rdd, path=str(shared))


@pytest.mark.parametrize("kind", ["dataframe", "rdd"])
def test_a_source_given_a_directory_leaves_what_it_held(spark, tmp_path, kind):
    """``path=`` names a directory of the user's: the source writes in a new directory inside
    it and removes only that (a DataFrame was written with mode overwrite, which deleted
    everything the directory held)."""
    where = tmp_path / "mine"
    where.mkdir(mode=0o700)
    (where / "notes.txt").write_text("precious\n")
    (where / "part-00000.pkl").write_bytes(b"the user's own file")
    data = (spark.createDataFrame([(i, str(i)) for i in range(6)], "x long, y string")
            if kind == "dataframe" else spark.sparkContext.parallelize(list(range(6)), 2))
    with naiad.spark.source(data, path=str(where)) as src:
        parts = naiad.execute(_fed(src), processes=2)
    got = sorted(r for p in parts for rs in p.values() for r in rs)
    assert got == ([(i, str(i)) for i in range(6)] if kind == "dataframe" else list(range(6)))
    assert sorted(os.listdir(where)) == ["notes.txt", "part-00000.pkl"]
    assert (where / "part-00000.pkl").read_bytes() == b"the user's own file"


class Explode(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if message[0] == 42:
            raise ValueError("no answers here")


def test_failing_vertex_fails_the_spark_job_with_its_error(numbers):
    def program(comp, rows):
        inp = comp.new_input()
        stages.sink(inp.stream, Explode, partition_by=lambda r: r[0], name="explode")
        comp.activate()
        rows.feed(inp)
        comp.join()

    with pytest.raises(naiad.spark.StageFailed) as err:
        naiad.spark.execute(numbers, program, processes=2, schema="x long")
    text = str(err.value)
    assert "stage 'explode'" in text and "on_recv" in text and "Timestamp(0)" in text
    assert "ValueError: no answers here" in text
    assert "Py4JJavaError" in type(err.value.__cause__).__name__ or "Exception" in \
        type(err.value.__cause__).__name__


def test_unpicklable_result_is_named(numbers):
    def program(comp, rows):
        list(rows)
        return [(1, threading.Lock())]

    with pytest.raises(naiad.spark.StageFailed, match="cannot be pickled to reach Spark"):
        naiad.spark.execute(numbers, program, processes=2)


def test_program_error_names_the_process(numbers):
    def program(comp, rows):
        if comp.process_index == 1:
            raise KeyError("missing")
        comp.activate()
        comp.join()

    with pytest.raises(naiad.spark.StageFailed, match=r"process 1: KeyError: 'missing'"):
        naiad.spark.execute(numbers, program, processes=2)


@pytest.mark.parametrize("frames", [False, True])
def test_a_task_process_that_exits_without_an_error_is_a_stage_failure(numbers, frames):
    """``os._exit`` in one task (or a kill) is a StageFailed saying so, not Spark's raw error;
    the session runs the next call."""
    def program(comp, rows):
        if comp.process_index == 1:
            os._exit(3)
        return []

    with pytest.raises(naiad.spark.StageFailed, match="a task's Python process ended without "
                       "an error .*os._exit"):
        naiad.spark.execute(numbers, program, processes=2, schema="x long", frames=frames)
    sums = {r[1]: r[2] for r in naiad.spark.execute(numbers, _sums, processes=2).collect()
            if r[0] == "sum"}
    assert sums == {f"g{g}": sum(i / 4 for i in range(g, 100, 3)) for g in range(3)}


def test_columns_a_barrier_stage_cannot_read_are_named_with_the_rename(spark):
    """A dotted name and a join's repeated names failed inside Spark as an AnalysisException
    about unresolved or ambiguous columns; they are refused up front, with a rename that
    works (rows for one, frames=True for the other)."""
    def program(comp, rows):
        if frames:
            return list(rows)
        return [tuple(r) for r in rows]
    dotted = spark.createDataFrame([(1, 2.0), (2, 3.0)], "`a.b` long, c double")
    pairs = spark.createDataFrame([(1, 2), (2, 5)], "k long, v long")
    joined = pairs.join(pairs, "k")
    cased = spark.createDataFrame([(1, 2, 3)], "v long, c long, k long").toDF("v", "V", "k")
    for data, named, frames in ((dotted, "Spark cannot read column 'a.b'", False),
                                (joined, "column 'v' appears 2 times", True),
                                (cased, "column 'v' appears 2 times", False)):
        with pytest.raises(ValueError, match=named) as err:
            naiad.spark.execute(data, program, processes=2, frames=frames)
        rename = str(err.value).split("e.g. data.toDF(")[1].rstrip(")")
        names = [n.strip(" '") for n in rename.split(",")]
        fixed = data.toDF(*names)
        got = naiad.spark.execute(fixed, program, processes=2, frames=frames,
                                  schema=fixed.schema).collect()
        assert sorted(tuple(r) for r in got) == sorted(tuple(r) for r in data.collect())


def test_too_many_processes_for_the_slots(numbers):
    with pytest.raises(ValueError, match="needs 3 task slots at once"):
        naiad.spark.execute(numbers, _sums, processes=3)


def test_options_are_checked(numbers):
    with pytest.raises(TypeError, match="known options"):
        naiad.spark.execute(numbers, _sums, bogus=1)
    with pytest.raises(TypeError, match="Spark reruns the whole barrier stage"):
        naiad.spark.execute(numbers, _sums, checkpoint_dir="x")


def test_to_dataframe_per_epoch_and_inferred(spark):
    results = {0: [("a", 1), ("b", 2)], 1: [("a", 3)]}
    both = naiad.spark.to_dataframe(spark, results, "key string, n long", epoch_column="epoch")
    assert both.columns == ["epoch", "key", "n"]
    assert sorted(tuple(r) for r in both.collect()) == [(0, "a", 1), (0, "b", 2), (1, "a", 3)]
    one = naiad.spark.to_dataframe(spark, results[1])
    assert [tuple(r) for r in one.collect()] == [("a", 3)]
    plain = naiad.spark.to_dataframe(spark, [1.5, 2.5], "x double")
    assert [r.x for r in plain.collect()] == [1.5, 2.5]
    with pytest.raises(ValueError, match="no rows to infer a schema"):
        naiad.spark.to_dataframe(spark, [])


def test_missing_java_is_explained(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/java")
    with pytest.raises(naiad.spark.SparkUnavailable, match="Java 17 or 21"):
        naiad.spark.check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(naiad.spark.SparkUnavailable, match="apt-get install openjdk"):
        naiad.spark.check_java()


def test_pyspark_is_optional():
    code = ("import sys; import naiad; assert 'pyspark' not in sys.modules\n"
            "sys.modules['pyspark'] = None\n"
            "try:\n    import naiad.spark\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'naiad[spark]'" in out.stdout


def test_monitor_page_served_by_the_driver(spark, numbers):
    import json
    import urllib.request
    from naiad.testing import free_ports
    port = free_ports(1)[0]
    naiad.spark.execute(numbers, _sums, processes=2, monitor=port)
    state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=10))
    assert state["reported"] == 2 and state["finished"] and state["failure"] is None
    names = [s["name"] for s in state["graph"]["stages"]]
    assert names[0] == "input" and any(n.startswith("aggregate") for n in names)
    fed = sum(w["stage_out"].get("0", 0) for w in state["workers"])
    assert fed == 100                      # every row entered the dataflow once
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
    assert b"Naiad monitor" in page


@pytest.mark.parametrize("narrow", ["df", "rdd"])
def test_data_ending_in_a_coalesce_runs(spark, numbers, narrow):
    """A barrier stage cannot read a coalesced (or unioned) chain: a shuffle is put in front
    and the run gives what it gives on the data as it is."""
    want = sorted(r for r in naiad.spark.execute(numbers, _sums, processes=2).collect()
                  if r[0] == "sum")
    wide = numbers.repartition(4)            # e.g. four input files, two slots
    data = wide.coalesce(2) if narrow == "df" else wide.rdd.map(tuple).coalesce(2)
    got = naiad.spark.execute(data, _sums, processes=2, schema="kind string, g string, v double")
    assert sorted(r for r in got.collect() if r[0] == "sum") == want


def test_result_rows_are_checked_against_the_schema_in_the_stage(numbers):
    """numpy scalars become Python's; a row the schema cannot hold fails execute itself,
    naming the process, the row and the schema, not the first action on the result."""
    import numpy as np

    def numpy_rows(comp, rows):
        n = len(list(rows))
        return [(np.int64(comp.process_index), np.float32(n))]
    got = naiad.spark.execute(numbers, numpy_rows, processes=2, schema="p long, n double")
    assert sorted(tuple(r) for r in got.collect()) == [(0, 50.0), (1, 50.0)]

    def wrong_rows(comp, rows):
        list(rows)
        return [("not a number", 1.0)]
    with pytest.raises(naiad.spark.StageFailed, match=r"process \d: the program returned a row "
                       r"that does not fit schema struct<p:bigint,n:double>: \('not a number'"):
        naiad.spark.execute(numbers, wrong_rows, processes=2, schema="p long, n double")


def test_numpy_values_inside_arrays_maps_and_structs_become_pythons(spark):
    """Nested numpy values were refused (Spark's pickler takes none), as createDataFrame
    refuses them; they are made Python's at every depth, numpy arrays become lists."""
    import numpy as np

    def program(comp, rows):
        return [(int(r[0]), [np.int64(r[0]), np.int64(2)], {"a": np.float64(r[0] / 2)},
                 (np.str_("x"), [np.float32(0.5)]), np.arange(r[0])) for r in rows]
    got = naiad.spark.execute(spark.range(5), program, processes=2,
                              schema="i long, a array<long>, m map<string,double>, "
                                     "s struct<t:string,u:array<float>>, z array<long>")
    rows = sorted((r.i, r.a, r.m, (r.s.t, r.s.u), r.z) for r in got.collect())
    assert rows == [(i, [i, 2], {"a": i / 2}, ("x", [0.5]), list(range(i))) for i in range(5)]


def test_a_row_that_does_not_fit_is_named_by_the_value_that_does_not(spark):
    """After numpy values were made Python's, the error quoted the check of the row before,
    blaming np.float64(0.5), which fits a double, instead of the bool that does not."""
    import numpy as np

    def program(comp, rows):
        list(rows)
        return [([np.float64(0.5), np.bool_(True)],)]
    with pytest.raises(naiad.spark.StageFailed, match=r"DoubleType\(\) can not accept object "
                       r"True") as err:
        naiad.spark.execute(spark.range(2), program, processes=1, schema="a array<double>")
    assert "can not accept object np.float64" not in str(err.value)


def test_a_program_error_naming_spark_refusals_is_not_retried(numbers, tmp_path):
    """Only Spark's refusal of the barrier chain (before any task ran) is retried: a program
    error, whatever its message says, is raised after one run of each process."""
    ran = tmp_path / "ran"
    ran.write_text("")

    def program(comp, rows):
        list(rows)
        with open(ran, "a") as f:
            f.write(f"{comp.process_index}\n")
        raise RuntimeError("plugin failed: BarrierJobUnsupportedRDDChainException")
    with pytest.raises(naiad.spark.StageFailed, match="plugin failed"):
        naiad.spark.execute(numbers, program, processes=2)
    runs = ran.read_text().split()           # a process the other's failure stopped first
    assert runs and len(runs) == len(set(runs)) <= 2, runs     # wrote nothing: never twice


def test_one_type_schemas_and_numpy_text_give_rows(spark, numbers):
    """schema="long" or LongType() is one column named value; numpy values that subclass
    Python's (np.str_) are made Python's too, not left for Spark's pickler to refuse."""
    import numpy as np
    from pyspark.sql.types import LongType

    def ids(comp, rows):
        return [r[0] for r in rows if r[0] < 3]
    for schema in ("long", LongType()):
        got = naiad.spark.execute(numbers, ids, processes=2, schema=schema)
        assert got.columns == ["value"] and sorted(r.value for r in got.collect()) == [0, 1, 2]
    names = np.array(["a", "b", "c"])

    def texts(comp, rows):
        return [(names[r[0]],) for r in rows if r[0] < 3]
    got = naiad.spark.execute(numbers, texts, processes=2, schema="s string")
    assert sorted(r.s for r in got.collect()) == ["a", "b", "c"]
