"""Columnar frames against pandas, on seeded random tables, over every cluster configuration."""

from __future__ import annotations

import math
import random
import re
from collections import Counter

import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")
import pyarrow.compute as pc  # noqa: E402

import linq  # noqa: E402
import naiad  # noqa: E402
from linq import frames  # noqa: E402
from linq.frames import FrameError, row_hash  # noqa: E402
from linq.frames.hashing import destinations, route_hash  # noqa: E402
from naiad.testing import Cluster  # noqa: E402


def random_tables(seed: int, batches: int, rows: int, keys: int):
    rng = random.Random(seed)
    return [pa.table({"k": [rng.randrange(keys) for _ in range(rows)],
                      "s": [f"w{rng.randrange(keys)}" for _ in range(rows)],
                      "x": [rng.randrange(-50, 50) for _ in range(rows)],
                      "y": [rng.random() for _ in range(rows)]})
            for _ in range(batches)]


def run_frames(cluster, build, epochs):
    """Each process feeds its share of every epoch's tables; rows merged over processes."""
    def program(comp):
        inp = comp.new_input()
        got = build(comp, frames.of(inp.stream)).to_records().collect()
        comp.activate()
        for tables in epochs:
            inp.on_next(tables[comp.process_index::comp.processes])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    merged = {}
    for part in cluster.execute(program):
        for epoch, rows in part.items():
            merged.setdefault(epoch, []).extend(rows)
    return {e: sorted(rows) for e, rows in merged.items()}


def frame_of(tables):
    return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame()


@pytest.mark.parametrize("size", [(1, 5, 3), (4, 200, 17), (6, 2000, 300)])
def test_group_by_matches_pandas(cluster, size):
    batches, rows, keys = size
    epochs = [random_tables(e * 10 + rows, batches, rows, keys) for e in range(2)]
    got = run_frames(cluster, lambda comp, f: f.group_by(
        ["k", "s"], n=("x", "count"), total=("x", "sum"), lo=("y", "min"), hi=("x", "max"),
        avg=("y", "mean")), epochs)
    for e, tables in enumerate(epochs):
        df = frame_of(tables)
        want = df.groupby(["k", "s"]).agg(n=("x", "count"), total=("x", "sum"), lo=("y", "min"),
                                          hi=("x", "max"), avg=("y", "mean")).reset_index()
        want_rows = sorted(map(tuple, want.itertuples(index=False)))
        assert len(got[e]) == len(want_rows)
        for g, w in zip(got[e], want_rows):
            assert g[:4] == tuple(w[:4]) and math.isclose(g[4], w[4], rel_tol=1e-12)
            assert g[5] == w[5] and math.isclose(g[6], w[6], rel_tol=1e-9)


@pytest.mark.parametrize("workers", [1, 2])
def test_group_by_with_arrow_threads_matches_pandas(workers):
    """One worker per process lets Arrow's threads group exact aggregations (count, min, max,
    integer sums) of many chunks; float sums stay single-threaded.  Same rows either way."""
    epochs = [random_tables(99, 40, 5000, 3000)]
    got = run_frames(Cluster(1, workers), lambda comp, f: f.group_by(
        "s", n=("x", "count"), total=("x", "sum"), lo=("x", "min"), hi=("k", "max"),
        fsum=("y", "sum")), epochs)
    df = frame_of(epochs[0])
    want = df.groupby("s").agg(n=("x", "count"), total=("x", "sum"), lo=("x", "min"),
                               hi=("k", "max"), fsum=("y", "sum")).reset_index()
    want_rows = sorted(map(tuple, want.itertuples(index=False)))
    assert [g[:5] for g in got[0]] == [w[:5] for w in want_rows]
    assert all(math.isclose(g[5], w[5], rel_tol=1e-9) for g, w in zip(got[0], want_rows))


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_join_matches_pandas(cluster, how):
    rng = random.Random(7)
    left = [pa.table({"k": [rng.randrange(30) for _ in range(60)], "a": list(range(60))})
            for _ in range(3)]
    right = [pa.table({"key": [rng.randrange(40) for _ in range(40)], "b": list(range(40))})
             for _ in range(2)]

    def program(comp):
        li, ri = comp.new_input(), comp.new_input()
        joined = frames.of(li.stream).join(frames.of(ri.stream), on="k", right_on="key", how=how)
        got = joined.to_records().collect()
        comp.activate()
        li.on_next(left[comp.process_index::comp.processes])
        ri.on_next(right[comp.process_index::comp.processes])
        li.on_completed()
        ri.on_completed()
        comp.join(timeout=60)
        return got.results.get(0, [])

    rows = sorted((r for part in cluster.execute(program) for r in part), key=repr)
    l_df, r_df = frame_of(left), frame_of(right)
    pd_how = {"inner": "inner", "left": "left", "outer": "outer"}[how]
    want = l_df.merge(r_df, left_on="k", right_on="key", how=pd_how)
    want["k"] = want["k"].fillna(want["key"])
    want = want.drop(columns=["key"])
    want_rows = sorted((tuple(None if (isinstance(v, float) and math.isnan(v)) else
                              (int(v) if isinstance(v, float) else v) for v in r)
                        for r in want[["k", "a", "b"]].itertuples(index=False)), key=repr)
    assert Counter(map(repr, rows)) == Counter(map(repr, want_rows))


def test_map_filter_exchange_concat(cluster):
    epochs = [random_tables(e, 3, 50, 9) for e in range(3)]

    def build(comp, f):
        doubled = f.map_batches(lambda t: t.set_column(2, "x", pc.multiply(t["x"], 2)))
        positive = doubled.filter(lambda t: pc.greater(t["x"], 0))
        return positive.exchange("k").concat(f.filter(lambda t: pc.equal(t["k"], 0)))

    got = run_frames(cluster, build, epochs)
    for e, tables in enumerate(epochs):
        df = frame_of(tables)
        d = df.assign(x=df.x * 2)
        want = list(map(tuple, d[d.x > 0].itertuples(index=False)))
        want += list(map(tuple, df[df.k == 0].itertuples(index=False)))
        assert got.get(e, []) == sorted(want)


class _Owner(naiad.Vertex):
    """Emits ``(key, stream, worker)`` for every row it receives."""

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [(k, t["src"][0].as_py(), self.stage.name, self.index)
                               for t in messages for k in t["k"].to_pylist()], time)


def test_exchange_puts_equal_keys_together_whatever_their_width(cluster):
    """Equal keys stored as int8, int32, uint16, int64 and (integral) float64 in five streams,
    fed by different processes, meet on one worker: the route depends on values, not on types
    or processes."""
    import stages
    types = [pa.int8(), pa.int32(), pa.uint16(), pa.int64(), pa.float64()]

    def program(comp):
        inputs = [comp.new_input() for _ in types]
        exchanged = [frames.of(i.stream).exchange("k").stream for i in inputs]
        got = stages.unary(exchanged[0].concat(*exchanged[1:]), _Owner, name="owner").collect()
        comp.activate()
        for n, (inp, t) in enumerate(zip(inputs, types)):
            mine = n % comp.processes == comp.process_index
            inp.on_next([pa.table({"k": pa.array(list(range(40)), t), "src": [n] * 40})]
                        if mine else [])
            inp.on_completed()
        comp.join(timeout=60)
        return [(k, src, comp.process_index, w) for k, src, _, w in got.results.get(0, [])]

    owners, sources = {}, {}
    for part in cluster.execute(program):
        for k, src, proc, worker in part:
            owners.setdefault(k, set()).add((proc, worker))
            sources.setdefault(k, set()).add(src)
    assert sorted(owners) == list(range(40))
    assert all(sources[k] == {0, 1, 2, 3, 4} for k in owners)
    assert all(len(where) == 1 for where in owners.values()), owners


def test_row_hash_is_the_same_in_every_process():
    table = pa.table({"i": pa.array([1, -2, 3, None], pa.int16()), "f": [1.0, 2.5, -0.0, 4.0],
                      "s": ["a", "b", None, "dé"], "b": [True, False, True, None],
                      "d": pa.array([0, 1, 2, 3], pa.date32())})

    def program(comp):
        return row_hash(table, ["i", "f", "s", "b", "d"]).tolist()

    first, second = naiad.execute(program, processes=2)
    assert first == second == row_hash(table, ["i", "f", "s", "b", "d"]).tolist()
    ints = pa.table({"x": pa.array([1, 2], pa.int64())})
    floats = pa.table({"x": pa.array([1.0, 2.0])})
    assert row_hash(ints, ["x"]).tolist() == row_hash(floats, ["x"]).tolist()


@pytest.mark.parametrize("seed", [1, 2])
def test_route_destinations_equal_destinations_of_route_hash(seed):
    """The blockwise integer path gives every row the worker that hashing the whole column
    gives, for every integer width, at the block boundaries, and beyond 65,536 workers; other
    keys (floats, strings, nulls, several columns) take the general path."""
    from linq.frames.hashing import _BLOCK, route_destinations
    rng = np.random.default_rng(seed)
    types = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
             pa.uint32(), pa.uint64())
    for rows in (0, 1, _BLOCK - 1, _BLOCK, _BLOCK + 1, 3 * _BLOCK + 5):
        wide = rng.integers(-(2**62), 2**62, rows)
        for t in types:
            info = np.iinfo(t.to_pandas_dtype())
            values = pa.array(np.clip(wide, info.min, info.max).astype(t.to_pandas_dtype()), t)
            table = pa.table({"k": values, "f": rng.random(rows)})
            for workers in (1, 2, 3, 7, 70_000):
                got = route_destinations(table, ["k"], workers)
                want = destinations(route_hash(table, ["k"]), workers)
                assert got.dtype == want.dtype and (got == want).all(), (rows, t, workers)
    general = pa.table({"k": pa.array([1, None, 3] * 50, pa.int32()), "f": [0.5, 1.0, 2.5] * 50,
                        "s": ["a", "b", "c"] * 50})
    for keys in (["k"], ["f"], ["s"], ["k", "s"]):
        assert (route_destinations(general, keys, 5)
                == destinations(route_hash(general, keys), 5)).all(), keys
    import tracemalloc
    million = pa.table({"k": np.arange(1_000_000)})
    tracemalloc.start()
    try:
        route_destinations(million, ["k"], 4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 << 20      # the workers (2 MB of uint16) and one block, not 8 MB of hashes


def test_route_hash_of_one_numeric_column_depends_on_values_only():
    """One integer, boolean or float key column is routed by its value (whatever the width,
    an integral float as its integer, nulls together), other keys by the row hash; consecutive
    and strided keys spread evenly over the workers; the routes are the same in every process."""
    values = [0, 1, -1, 7, 2**40, -(2**40), None]
    widths = [pa.table({"k": pa.array(values, t)}) for t in (pa.int64(), pa.float64())]
    small = pa.table({"k": pa.array([0, 1, -1, 7, None], pa.int8())})
    assert route_hash(widths[0], ["k"]).tolist() == route_hash(widths[1], ["k"]).tolist()
    assert route_hash(small, ["k"]).tolist() == [route_hash(widths[0], ["k"]).tolist()[i]
                                                 for i in (0, 1, 2, 3, 6)]
    halves = pa.table({"k": [0.5, 1.5, float("nan")]})
    assert len(set(route_hash(halves, ["k"]).tolist())) == 3
    assert (route_hash(pa.table({"k": [True, False, None]}), ["k"]).tolist()
            == route_hash(pa.table({"k": [1, 0, None]}), ["k"]).tolist())
    chunked = pa.table({"k": pa.chunked_array([[1], [2, None]], pa.int16())})
    coded = pa.table({"k": pa.array([1, 2, None]).dictionary_encode()})
    assert (route_hash(chunked, ["k"]).tolist() == route_hash(coded, ["k"]).tolist()
            == route_hash(pa.table({"k": pa.array([1, 2, None], pa.uint64())}), ["k"]).tolist())
    assert len(route_hash(pa.table({"k": pa.array([], pa.int64())}), ["k"])) == 0
    two = pa.table({"a": [1, 2], "b": ["x", "y"]})
    assert route_hash(two, ["a", "b"]).tolist() == row_hash(two, ["a", "b"]).tolist()
    strings = pa.table({"s": ["a", "b"]})
    assert route_hash(strings, ["s"]).tolist() == row_hash(strings, ["s"]).tolist()
    for keys in (np.arange(10_000), np.arange(0, 2_000_000, 200), np.arange(0, 10_240_000, 1024)):
        for workers in (2, 3, 4):
            dest = destinations(route_hash(pa.table({"k": keys}), ["k"]), workers)
            counts = np.bincount(dest, minlength=workers)
            assert counts.min() > 0.9 * len(keys) / workers, (workers, counts)

    def program(comp):
        return route_hash(widths[0], ["k"]).tolist()
    first, second = naiad.execute(program, processes=2)
    assert first == second == route_hash(widths[0], ["k"]).tolist()


def test_clear_errors():
    def run(build, tables):
        def program(comp):
            inp = comp.new_input()
            build(frames.of(inp.stream)).collect()
            comp.activate()
            inp.on_next(tables)
            inp.on_completed()
            comp.join(timeout=30)
        return naiad.execute(program)

    t = pa.table({"word": ["a"], "n": [1]})
    with pytest.raises(naiad.VertexError, match=r"no column 'wrd' in the table; its columns are "
                                                r"\['word', 'n'\]"):
        run(lambda f: f.group_by("wrd", c=("n", "sum")), [t])
    other = pa.table({"word": ["a"], "n": [1.5]})
    with pytest.raises(naiad.VertexError, match=r"schema changed.*n: int64.*n: double"):
        run(lambda f: f.exchange("word"), [t, other])
    with pytest.raises(naiad.VertexError, match="must be a pyarrow.Table; got tuple"):
        run(lambda f: f.exchange("word"), [("a", 1)])
    with pytest.raises(TypeError, match="how one of sum, count, min, max, mean"):
        run(lambda f: f.group_by("word", c=("n", "median")), [t])
    with pytest.raises(ValueError, match="how='cross'"):
        run(lambda f: f.join(f, on="word", how="cross"), [t])
    with pytest.raises(ValueError, match="aggregation word= would replace the key column"):
        run(lambda f: f.group_by("word", word=("n", "sum")), [t])
    # Keys that are not column names, a filter that returns no mask, a key column of a type
    # that cannot be grouped: each named, not Arrow's or Python's own message.
    with pytest.raises(TypeError, match=r"group_by: the key columns must be a column name.*int 3"):
        run(lambda f: f.group_by(3, c=("n", "sum")), [t])
    with pytest.raises(TypeError, match=r"join: the key columns must be .*NoneType None"):
        run(lambda f: f.join(f, on=None), [t])
    with pytest.raises(naiad.VertexError, match=r"filter\(<lambda>\): the function must return "
                                                r"a boolean array"):
        run(lambda f: f.filter(lambda tb: tb["n"]), [t])
    listed = pa.table({"word": [["a"], ["b"]], "n": [1, 2]})
    with pytest.raises(naiad.VertexError, match=r"group_by\(word\): column 'word' of Arrow type "
                                                r"list<item: string> cannot be a key here; .*"
                                                r"exchange\(\) can route by them"):
        run(lambda f: f.group_by("word", c=("n", "sum")), [listed])
    assert isinstance(FrameError("x"), ValueError)


@pytest.mark.parametrize("operator", ["map_batches", "filter"])
def test_a_raising_function_is_named_with_the_table_it_was_given(cluster, operator):
    """The user function of map_batches or filter raising, in the last process: a
    UserFunctionError naming the operator, the function and the table's rows and schema."""
    def no_column(table):
        return table["y"]

    def program(comp):
        inp = comp.new_input()
        getattr(frames.of(inp.stream), operator)(no_column).collect()
        comp.activate()
        if comp.process_index == comp.processes - 1:
            inp.on_next([pa.table({"x": [1, 2, 3]})])
        inp.on_completed()
        comp.join(timeout=30)
    with pytest.raises(naiad.VertexError) as info:
        cluster.execute(program)
    # The cause travels between processes as its text (VertexError.cause_repr).
    assert re.fullmatch(rf"UserFunctionError: {operator}\(no_column\): the function no_column "
                        r"raised KeyError: .*y.* \(called with a table of 3 rows \(x: int64\)\)",
                        info.value.cause_repr), info.value.cause_repr
    cause = info.value.__cause__
    if cause is not None:                 # raised in this process
        assert isinstance(cause, linq.UserFunctionError)
        assert (cause.operator, cause.role, cause.function) == (f"{operator}(no_column)",
                                                                "function", "no_column")


@pytest.mark.parametrize("held_side", [False, True])
def test_a_join_of_keys_of_different_types_fails_in_every_configuration(cluster, held_side):
    """int64 keys joined with string keys hash to different workers: whichever rows each
    worker gets, the join fails naming both columns and types (never an empty result)."""
    def program(comp):
        a, b = comp.new_input(), comp.new_input()
        fa, fb = frames.of(a.stream), frames.of(b.stream)
        if held_side:
            out = fa.iterate(lambda loop, f: f.join(loop.enter(fb), on="k").map_batches(
                lambda t: t.select(["k"])), iterations=1).collect()
        else:
            out = fa.join(fb, on="k").collect()
        comp.activate()
        first = comp.process_index == 0
        a.on_next([pa.table({"k": pa.array(range(8), pa.int64())})] if first else [])
        b.on_next([pa.table({"k": [str(i) for i in range(8)], "x": list(range(8))})]
                  if first else [])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=30)
        return out.results
    with pytest.raises(naiad.VertexError, match=r"key columns 'k' \(int64\) and 'k' \(string\)"):
        cluster.execute(program)


def test_group_by_takes_uint64_keys_beyond_int64(cluster):
    """Key values of 2**63 and more (uint64) group exactly."""
    big = [2**64 - 1, 2**63, 5, 2**63, 2**64 - 1, 2**64 - 1]

    def program(comp):
        inp = comp.new_input()
        f = frames.of(inp.stream)
        by_int = f.group_by("k", n=("k", "count"), s=("x", "sum")).to_records().collect()
        comp.activate()
        mine = big[comp.process_index::comp.processes]
        inp.on_next([pa.table({"k": pa.array(mine, pa.uint64()), "x": [1] * len(mine)})])
        inp.on_completed()
        comp.join(timeout=30)
        return by_int.results.get(0, [])

    got = [r for part in cluster.execute(program) for r in part]
    assert sorted(got) == sorted((k, n, n) for k, n in Counter(big).items())


def _nested_columns(rng: random.Random, rows: int) -> dict:
    """Key columns of nested and other types, drawn from few distinct values (with nulls)."""
    small = [[1], [2, 3], [], [3, 2], [1, 1], None]
    return {
        "list": pa.array([rng.choice(small) for _ in range(rows)], pa.list_(pa.int32())),
        "large_list": pa.array([rng.choice(small) for _ in range(rows)], pa.large_list(pa.int64())),
        "fixed": pa.array([rng.choice([[1, 2], [2, 1], None]) for _ in range(rows)],
                          pa.list_(pa.int16(), 2)),
        "struct": pa.array([rng.choice([{"x": 1, "y": "a"}, {"x": 1, "y": None}, None,
                                        {"x": 2, "y": "a"}]) for _ in range(rows)],
                           pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "map": pa.array([rng.choice([[("a", 1)], [("a", 1), ("b", 2)], [], None])
                         for _ in range(rows)], pa.map_(pa.string(), pa.int64())),
        "nested": pa.array([rng.choice([[["x"], []], [["x", "y"]], [], None, [None]])
                            for _ in range(rows)], pa.list_(pa.list_(pa.string()))),
        "interval": pa.array([rng.choice([pa.MonthDayNano([1, 2, 3]), pa.MonthDayNano([0, 0, 5]),
                                          None]) for _ in range(rows)],
                             pa.month_day_nano_interval()),
    }


def _python_key(value):
    """A Python value as a hashable key (lists as tuples, dicts as sorted item tuples)."""
    if isinstance(value, (list, tuple)):          # a MonthDayNano too (it does not unpickle)
        return tuple(_python_key(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _python_key(v)) for k, v in value.items())
    return value


@pytest.mark.parametrize("seed", [1, 2])
def test_a_nested_key_column_hashes_by_value(seed):
    """Lists, structs, maps, nested lists and intervals hash as their values: equal values
    equal, whatever the integer width, slicing and chunking; unequal ones (an order, an
    empty list against null) apart."""
    from linq.frames.hashing import column_hash
    rng = random.Random(seed)
    for name, column in _nested_columns(rng, 300).items():
        hashes = column_hash(column)
        by_value: dict = {}
        for value, h in zip(column.to_pylist(), hashes.tolist()):
            by_value.setdefault(_python_key(value), set()).add(h)
        assert all(len(hs) == 1 for hs in by_value.values()), name
        distinct = {next(iter(hs)) for hs in by_value.values()}
        assert len(distinct) == len(by_value), (name, by_value)
        chunked = pa.chunked_array([column.slice(0, 100), column.slice(100)])
        assert column_hash(chunked).tolist() == hashes.tolist(), name
        assert column_hash(column.slice(7, 50)).tolist() == hashes[7:57].tolist(), name
    narrow = pa.array([[1, 2], [3]], pa.list_(pa.int8()))
    wide = pa.array([[1, 2], [3]], pa.large_list(pa.int64()))
    assert column_hash(narrow).tolist() == column_hash(wide).tolist()


@pytest.mark.parametrize("processes", [2, 3])
def test_exchange_routes_rows_by_a_nested_key_to_one_process(processes):
    """exchange() by a list, struct, map, nested list or interval column: every row of a key
    value reaches the same process, and every row arrives once (they were refused)."""
    columns = _nested_columns(random.Random(processes), 120)

    def program(comp):
        inp = comp.new_input()
        outs = {name: frames.of(inp.stream).exchange(name).collect() for name in columns}
        comp.activate()
        mine = pa.table({**columns, "row": list(range(120))})
        share = mine.slice(comp.process_index * 40, 40)
        inp.on_next(share)
        inp.on_completed()
        comp.join(timeout=60)
        return {name: [(r, _python_key(v)) for t in got.results.get(0, []) for r, v in
                       zip(t.column("row").to_pylist(), t.column(name).to_pylist())]
                for name, got in outs.items()}

    parts = naiad.execute(program, processes=processes)
    fed = min(processes, 3) * 40
    for name in columns:
        rows = sorted(r for part in parts for r, _ in part[name])
        assert rows == list(range(fed)), name
        owner: dict = {}
        for p, part in enumerate(parts):
            for _, value in part[name]:
                owner.setdefault(_python_key(value), set()).add(p)
        assert all(len(ps) == 1 for ps in owner.values()), (name, owner)
