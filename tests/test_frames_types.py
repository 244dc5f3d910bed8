"""Frames on column types Arrow treats with care: the mean of integer sums beyond 2**53 is
pandas' mean; key columns of different types, column names both sides of a plain join have,
and aggregations a column's type has no kernel for are refused with a FrameError naming the
operator and the columns, the same way on every path (entered or composed, any worker)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import naiad
from linq import frames

BIG = pa.table({"k": [1, 1, 2, 3], "v": [1_700_000_000_000_000_000, 1_700_000_000_000_000_002,
                                         7, -(2 ** 62)]})


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 2), (2, 1)])
def test_the_mean_of_large_integers_is_pandas_mean(processes, workers):
    def program(comp):
        inp = comp.new_input()
        got = frames.of(inp.stream).group_by("k", m=("v", "mean"), s=("v", "sum")).collect()
        comp.activate()
        inp.on_next([BIG] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join()
        return [r for t in got.results.get(0, []) for r in t.to_pylist()]
    rows = [r for part in naiad.execute(program, processes=processes, workers=workers)
            for r in part]
    want = BIG.to_pandas().groupby("k")["v"].agg(["mean", "sum"])
    assert {r["k"]: (r["m"], r["s"]) for r in rows} == {
        k: (want.loc[k, "mean"], want.loc[k, "sum"]) for k in want.index}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_mean_whose_integer_sum_would_wrap_is_pandas_mean(workers):
    """The sum of 2**62 + 1 and 2**62 + 3 wraps in int64: a mean sums in float64."""
    table = pa.table({"k": [1, 1, 2, 2], "v": [2 ** 62 + 1, 2 ** 62 + 3, -(2 ** 62), -(2 ** 62)]})

    def program(comp):
        inp = comp.new_input()
        got = frames.of(inp.stream).group_by("k", m=("v", "mean"), n=("v", "count")).collect()
        comp.activate()
        inp.on_next([table.slice(0, 1), table.slice(1)])
        inp.on_completed()
        comp.join()
        return [r for t in got.results.get(0, []) for r in t.to_pylist()]
    rows = naiad.execute(program, workers=workers)[0]
    want = table.to_pandas().groupby("k")["v"].mean().to_dict()
    assert {r["k"]: (r["m"], r["n"]) for r in rows} == {k: (m, 2) for k, m in want.items()}


RANKS = pa.table({"node": [0, 1, 2], "x": [1.0, 2.0, 4.0]})


def _spread(edges_table: pa.Table, entered: bool, ranks: pa.Table = RANKS):
    def program(comp):
        e_in, x_in = comp.new_input(), comp.new_input()
        edges, xs = frames.of(e_in.stream), frames.of(x_in.stream)
        if entered:
            out = xs.iterate(lambda loop, r: r.spread(loop.enter(edges), on="node",
                                                      weight="w"), 1)
        else:
            out = xs.spread(edges, on="node", weight="w")
        out.collect()
        comp.activate()
        e_in.on_next([edges_table] if comp.process_index == 0 else [])
        x_in.on_next([ranks] if comp.process_index == 0 else [])
        e_in.on_completed()
        x_in.on_completed()
        comp.join()
    return program


@pytest.mark.parametrize("entered", [False, True])
@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 2), (2, 1)])
@pytest.mark.parametrize("src,ranks", [
    (pa.array(["0", "1", "2"]), RANKS),                          # string src, int64 on
    (pa.array([0, 1, 2], pa.int32()), RANKS),                   # int32 src, int64 on
    (pa.array([0, 1, 2]), pa.table({"node": ["0", "1", "2"], "x": [1.0, 2.0, 4.0]})),
])
def test_spread_refuses_key_types_that_differ_on_every_path(entered, processes, workers,
                                                           src, ranks):
    edges = pa.table({"src": src, "dst": [1, 2, 0], "w": [1.0, 1.0, 1.0]})
    with pytest.raises(naiad.VertexError, match=r"FrameError: .*the key columns 'node' .* have "
                                               r"different types.*cast one side"):
        naiad.execute(_spread(edges, entered, ranks), processes=processes, workers=workers)


@pytest.mark.parametrize("entered", [False, True])
@pytest.mark.parametrize("processes", [1, 2])
def test_a_join_refuses_a_column_both_sides_have(entered, processes):
    left = pa.table({"k": [1, 2], "v": [1.0, 2.0]})
    right = pa.table({"k": [2, 3], "v": [10.0, 30.0]})

    def program(comp):
        a, b = comp.new_input(), comp.new_input()
        fa, fb = frames.of(a.stream), frames.of(b.stream)
        if entered:
            out = fa.iterate(lambda loop, r: r.join(loop.enter(fb), on="k"), 1)
        else:
            out = fa.join(fb, on="k")
        out.collect()
        comp.activate()
        a.on_next([left])
        b.on_next([right])
        a.on_completed()
        b.on_completed()
        comp.join()
    with pytest.raises(naiad.VertexError, match=r"FrameError: join\(k = k\): both sides have "
                                               r"the column\(s\) \['v'\]; rename one side"):
        naiad.execute(program, processes=processes)


@pytest.mark.parametrize("aggs,named", [
    ({"n": ("price", "count"), "total": ("price", "sum")}, r"total=\('price', 'sum'\).*'price' "
                                                           r"of type string"),
    ({"first": ("cat", "min")}, r"first=\('cat', 'min'\).*'cat' of type dictionary"),
])
def test_an_aggregation_a_column_type_cannot_run_is_named(aggs, named):
    table = pa.table({"k": [1, 1, 2], "price": ["1.5", "2", "3"],
                      "cat": pa.array(["a", "b", "a"]).dictionary_encode()})

    def program(comp):
        inp = comp.new_input()
        frames.of(inp.stream).group_by("k", **aggs).collect()
        comp.activate()
        inp.on_next([table])
        inp.on_completed()
        comp.join()
    with pytest.raises(naiad.VertexError, match=r"FrameError: group_by\(k\): the aggregation "
                                               + named + r".*cast it first"):
        naiad.execute(program)


@pytest.mark.parametrize("column", [pa.array(["1", "2"]), pa.array([b"1", b"2"]),
                                    pa.array(["1", "2"]).dictionary_encode()])
def test_a_mean_of_text_is_refused_not_parsed(column):
    """A mean sums in float64, but text is not cast to numbers: as sum, a FrameError."""
    table = pa.table({"k": [1, 1], "v": column})

    def program(comp):
        inp = comp.new_input()
        frames.of(inp.stream).group_by("k", m=("v", "mean")).collect()
        comp.activate()
        inp.on_next([table])
        inp.on_completed()
        comp.join()
    with pytest.raises(naiad.VertexError, match=r"FrameError: group_by\(k\): the aggregation "
                                               r"m=\('v', 'mean'\) cannot run"):
        naiad.execute(program)


def test_a_mean_beside_a_column_named_like_its_helper():
    """The float64 column a mean sums is named apart from every column of the table."""
    table = pa.table({"k": [1, 1], "x": [1.0, 3.0], "__p0f": [5, 7], "_" + "__p0f": [1, 1]})

    def program(comp):
        inp = comp.new_input()
        got = frames.of(inp.stream).group_by("k", m=("x", "mean"), s=("__p0f", "sum"),
                                             t=("___p0f", "sum")).collect()
        comp.activate()
        inp.on_next([table])
        inp.on_completed()
        comp.join()
        return [r for t in got.results[0] for r in t.to_pylist()]
    assert naiad.execute(program)[0] == [{"k": 1, "m": 2.0, "s": 12, "t": 2}]
