"""FrameStream.iterate with loop-invariant inputs, against scipy's power iteration and pandas,
on seeded random inputs over the cluster configurations; and tables on the wire."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")
pytest.importorskip("scipy")
import pyarrow.compute as pc  # noqa: E402

import naiad  # noqa: E402
from linq import frames  # noqa: E402
from linq.frames.held import KeyIndex, join_tables  # noqa: E402
from naiad.transport.wire import decode, encode  # noqa: E402
from samples.frames_pagerank import power_iteration, run_frames_pagerank  # noqa: E402
from samples.graphs import random_edges, rmat_edges  # noqa: E402


@pytest.mark.parametrize("nodes,edges", [(30, 60), (500, 3000)])
def test_pagerank_matches_scipy_power_iteration(cluster, nodes, edges):
    graph = random_edges(nodes, edges, seed=nodes)
    got = run_frames_pagerank(graph, nodes, iterations=6, processes=cluster.processes,
                              workers=cluster.workers)
    want = power_iteration(graph, nodes, 6)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_pagerank_on_rmat_with_duplicate_edges_and_self_loops():
    graph = rmat_edges(9, seed=3)                  # duplicates and self loops kept
    got = run_frames_pagerank(graph, 1 << 9, iterations=10, processes=2, workers=2)
    np.testing.assert_allclose(got, power_iteration(graph, 1 << 9, 10), rtol=0, atol=1e-12)


def _run(build, inputs, processes=1, workers=1):
    """``build(comp, *frame streams)`` over ``inputs`` (one table per input, fed by process 0
    in row shares of every process); the result's rows merged over processes, as a DataFrame."""
    def program(comp):
        ins = [comp.new_input() for _ in inputs]
        got = build(comp, *(frames.of(i.stream) for i in ins)).collect()
        comp.activate()
        p, n = comp.process_index, comp.processes
        for i, table in zip(ins, inputs):
            i.on_next([table.slice(p * table.num_rows // n,
                                   (p + 1) * table.num_rows // n - p * table.num_rows // n)])
            i.on_completed()
        comp.join(timeout=60)
        return [t for ts in got.results.values() for t in ts]
    tables = [t for part in naiad.execute(program, processes=processes, workers=workers)
              for t in part]
    return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame()


def _scaling(rows: int, keys: int, seed: int):
    rng = random.Random(seed)
    x = pa.table({"k": [rng.randrange(keys) for _ in range(rows)],
                  "v": [rng.uniform(-1, 1) for _ in range(rows)]})
    w = pa.table({"k": list(range(keys)), "f": [rng.uniform(0.5, 1.5) for _ in range(keys)]})
    return x, w


@pytest.mark.parametrize("rows,keys", [(10, 4), (3000, 250)])
def test_iterated_join_with_an_entered_side_matches_pandas(cluster, rows, keys):
    x, w = _scaling(rows, keys, seed=rows)
    iterations = 4

    def build(comp, xs, ws):
        def body(loop, s):
            return s.join(loop.enter(ws), on="k").map_batches(
                lambda t: pa.table({"k": t["k"], "v": pc.multiply(t["v"], t["f"])}))
        return xs.iterate(body, iterations)
    got = _run(build, [x, w], cluster.processes, cluster.workers)
    df, factors = x.to_pandas(), w.to_pandas()
    for _ in range(iterations):
        df = df.merge(factors, on="k").assign(v=lambda d: d.v * d.f)[["k", "v"]]
    key = ["k", "v"]
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  df.sort_values(key).reset_index(drop=True), rtol=1e-12)


def _keyed(seed: int, rows: int, strings: bool):
    rng = random.Random(seed)

    def key():
        if rng.random() < 0.1:
            return None
        k = rng.randrange(rows // 2 + 1)
        return f"s{k}" if strings else k
    left = pa.table({"a": [key() for _ in range(rows)], "x": list(range(rows))})
    right = pa.table({"b": [key() for _ in range(rows)], "y": [float(i) for i in range(rows)]})
    return left, right


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("held_left", [False, True])
def test_held_join_is_arrows_join(how, strings, held_left):
    """A join with an entered side gives what the per-time join gives (pandas-checked in
    test_frames), whichever side is held, for every how, with null keys, both key paths."""
    left, right = _keyed(7, 400, strings)

    def in_loop(comp, ls, rs):
        def body(loop, s):
            if held_left:
                return loop.enter(ls).join(s, on="a", right_on="b", how=how)
            return s.join(loop.enter(rs), on="a", right_on="b", how=how)
        return (rs if held_left else ls).iterate(body, 1)

    def plain(comp, ls, rs):
        return ls.join(rs, on="a", right_on="b", how=how)
    for workers in (1, 3):
        got = _run(in_loop, [left, right], workers=workers)
        want = _run(plain, [left, right], workers=workers)
        assert list(got.columns) == list(want.columns)
        cols = list(want.columns)
        norm = lambda d: d.sort_values(cols, na_position="first").reset_index(drop=True)  # noqa: E731
        pd.testing.assert_frame_equal(norm(got), norm(want))
        assert len(want) > 0


def test_entered_side_is_shipped_and_indexed_once_per_epoch():
    """The entered side's operators run once per epoch (at iteration 0), the varying side's
    once per iteration; the index of the static side is sorted once."""
    calls = {"static": 0, "varying": 0}

    def counting(name):
        def fn(t):
            calls[name] += 1
            return t
        fn.__name__ = name
        return fn
    x, w = _scaling(50, 10, seed=1)

    def build(comp, xs, ws):
        def body(loop, s):
            return (s.map_batches(counting("varying"))
                    .join(loop.enter(ws).map_batches(counting("static")), on="k")
                    .map_batches(lambda t: t.select(["k", "v"])))
        return xs.iterate(body, 7)
    got = _run(build, [x, w])
    assert len(got) == 50
    assert calls == {"static": 1, "varying": 7}


def test_held_index_probes_with_hash_and_checks_values():
    t = pa.table({"s": ["a", "b", None, "a"], "n": [1, 2, 3, 4]})
    index = KeyIndex(t, ["s"])
    assert not index.exact
    probe = pa.table({"q": ["a", "zz", None]})
    left, right = index.probe(probe, ["q"])
    assert sorted(zip(left.tolist(), t["n"].take(right).to_pylist())) == [(0, 1), (0, 4)]
    out = join_tables(probe, t, ["q"], ["s"], (left, right), "left")
    assert sorted(out.to_pylist(), key=repr) == sorted(
        [{"q": "a", "n": 1}, {"q": "a", "n": 4}, {"q": "zz", "n": None},
         {"q": None, "n": None}], key=repr)


def test_iterate_errors_name_the_body():
    def program(comp):
        inp = comp.new_input()
        f = frames.of(inp.stream)
        with pytest.raises(TypeError, match="must return a FrameStream.*got int"):
            f.iterate(lambda s: 3, 2)
        with pytest.raises(naiad.GraphError, match="loop-invariant"):
            f.iterate(lambda loop, s: s.concat(loop.enter(f)), 2)
        with pytest.raises(TypeError, match="body"):
            f.iterate("not callable", 2)
        return True
    assert naiad.execute(program) == [True]


def test_sliced_tables_travel_without_their_parent_buffers():
    big = pa.table({"k": np.arange(200_000), "x": np.random.default_rng(0).random(200_000)})
    part = big.slice(1000, 50_000)
    payload, buffers = encode([("D", 1, (0, ()), [(3, part)])])
    assert len(buffers) == 1
    assert buffers[0].raw().nbytes < 50_000 * 16 + 4096         # the slice only, not 3.2 MB
    back = decode(payload, buffers)[0][3][0][1]
    assert back.equals(part)
    # no copy on decode: the table's values live in the received buffer
    address = np.frombuffer(buffers[0], np.uint8).ctypes.data
    column_address = back.column("x").chunk(0).buffers()[1].address
    assert address <= column_address < address + buffers[0].raw().nbytes


def test_tables_stay_the_same_objects_on_the_local_path():
    """Between workers of one process a table is passed by reference, not copied: a table whose
    rows all belong to one worker reaches it with the very buffers it was sent with."""
    seen = {"sent": set(), "got": []}

    def program(comp):
        inp = comp.new_input()
        tables = [pa.table({"k": [i] * 1000, "x": np.arange(1000.0)}) for i in range(8)]

        def remember(t):
            seen["sent"].add(t.column("x").chunk(0).buffers()[1].address)
            return t

        def arrived(t):
            seen["got"].extend(c.buffers()[1].address for c in t.column("x").chunks)
            return t
        got = frames.of(inp.stream).map_batches(remember).exchange("k").map_batches(
            arrived).collect()
        comp.activate()
        inp.on_next(tables)
        inp.on_completed()
        comp.join(timeout=30)
        return sum(t.num_rows for ts in got.results.values() for t in ts)
    assert naiad.execute(program, workers=2) == [8000]
    assert len(seen["got"]) == 8 and set(seen["got"]) == seen["sent"]


@pytest.mark.parametrize("rows,spread", [(1, 1), (50, 10), (5000, 3000), (300, 10**9)])
def test_dense_group_by_matches_pandas_or_declines(rows, spread):
    """group_by over one integer key: the bincount path (dense keys) or Arrow's (sparse keys,
    nulls, min/max) gives what pandas gives, through the dataflow at 1 and 3 workers."""
    from linq.frames.dense import dense_group_by
    rng = np.random.default_rng(rows)
    keys = rng.integers(-spread // 2, spread // 2 + 1, rows)
    t = pa.table({"k": pa.array(keys, pa.int32()), "x": rng.random(rows),
                  "i": rng.integers(-1000, 1000, rows)})
    direct = dense_group_by(t, ["k"], [("x", "sum"), ("i", "sum"), ("x", "count")])
    assert (direct is None) == (spread > 4 * rows + 1024)
    df = t.to_pandas()
    want = df.groupby("k").agg(sx=("x", "sum"), si=("i", "sum"), n=("x", "count"),
                               hi=("x", "max")).reset_index()
    for workers in (1, 3):
        for aggs in ({"sx": ("x", "sum"), "si": ("i", "sum"), "n": ("x", "count")},  # dense
                     {"hi": ("x", "max"), "n": ("x", "count")}):                      # Arrow's
            got = _run(lambda comp, f: f.group_by("k", **aggs), [t], workers=workers)
            got = got.sort_values("k").reset_index(drop=True)
            pd.testing.assert_frame_equal(got, want[["k", *aggs]], check_dtype=False,
                                          rtol=1e-12)
            assert got["n"].dtype == np.int64
    with_null = pa.table({"k": pa.array([1, None, 1], pa.int64()), "x": [1.0, 2.0, 3.0]})
    assert dense_group_by(with_null, ["k"], [("x", "sum")]) is None     # nulls: Arrow's path


def test_pagerank_on_the_real_graph():
    """The Debian package graph (the standard library's import graph without apt-cache)."""
    from samples.debian import real_graph
    from samples.frames_pagerank import numbered
    labelled, _ = real_graph()
    edges, labels = numbered(labelled)
    got = run_frames_pagerank(edges, len(labels), iterations=10, processes=2, workers=1)
    np.testing.assert_allclose(got, power_iteration(edges, len(labels), 10), rtol=0, atol=1e-12)


def test_the_sample_names_the_top_nodes_of_the_real_graph(capsys):
    """The sample prints the packages (or modules) of highest rank by name, not by number."""
    from samples.debian import real_graph
    from samples.frames_pagerank import main, numbered
    labelled, _ = real_graph()
    edges, labels = numbered(labelled)
    assert main(["--iterations", "10"]) == 0
    top = capsys.readouterr().out.split("top: ")[1].strip().split(", ")
    rank = power_iteration(edges, len(labels), 10)
    expected = [f"{labels[u]} {rank[u]:.5f}" for u in np.argsort(-rank)[:5]]
    assert top == expected


@pytest.mark.parametrize("processes,workers", [(1, 2), (2, 2)])
def test_each_epoch_iterates_with_its_own_entered_side(processes, workers):
    """Epochs with different static sides: each keeps its own index, none leaks into another."""
    epochs = [_scaling(200, 20, seed=e) for e in range(3)]

    def program(comp):
        xs, ws = comp.new_input(), comp.new_input()

        def body(loop, s):
            return s.join(loop.enter(frames.of(ws.stream)), on="k").map_batches(
                lambda t: pa.table({"k": t["k"], "v": pc.multiply(t["v"], t["f"])}))
        got = frames.of(xs.stream).iterate(body, 3).collect()
        comp.activate()
        p, n = comp.process_index, comp.processes
        for x, w in epochs:
            xs.on_next([x.slice(p * 100, 100)] if n == 2 else [x])
            ws.on_next([w] if p == 0 else [])
        xs.on_completed()
        ws.on_completed()
        comp.join(timeout=60)
        return {e: pa.concat_tables(ts).to_pandas() for e, ts in got.results.items() if ts}
    parts = naiad.execute(program, processes=processes, workers=workers)
    for e, (x, w) in enumerate(epochs):
        got = pd.concat([part[e] for part in parts if e in part]).sort_values(["k", "v"])
        df, factors = x.to_pandas(), w.to_pandas()
        for _ in range(3):
            df = df.merge(factors, on="k").assign(v=lambda d: d.v * d.f)[["k", "v"]]
        pd.testing.assert_frame_equal(got.reset_index(drop=True),
                                      df.sort_values(["k", "v"]).reset_index(drop=True),
                                      rtol=1e-12)


def _pairs(answer, n_static):
    """``(probe row, static row)`` pairs of a probe's answer, sorted."""
    left, right = answer
    right = np.arange(n_static) if right is None else right
    return sorted(zip(np.asarray(left).tolist(), np.asarray(right).tolist()))


def test_held_index_reuses_a_probe_only_for_the_same_keys():
    """A kept index answers repeated probes (the last answer reused when the keys are equal)
    exactly as a fresh index does, and as a Python oracle does, through changes of keys, keys
    outside the static range, repeated keys, null keys and empty tables."""
    rng = np.random.default_rng(5)
    static = pa.table({"src": rng.integers(0, 40, 200), "w": rng.random(200)})
    kept = KeyIndex(static, ["src"])
    ids = np.arange(40)
    probes = [ids, ids, rng.permutation(ids), ids[::2], np.arange(-5, 60), np.arange(-5, 60),
              np.array([3, 3, 7]), np.array([], np.int64), ids, ids.astype(np.int32)]
    for keys in probes:
        probe = pa.table({"node": keys})
        want = sorted((i, j) for i, k in enumerate(keys.tolist())
                      for j, s in enumerate(static["src"].to_pylist()) if k == s)
        assert _pairs(kept.probe(probe, ["node"]), 200) == want
        assert _pairs(KeyIndex(static, ["src"]).probe(probe, ["node"]), 200) == want
    with_nulls = pa.table({"node": pa.array([1, None, 2])})
    for _ in range(2):
        want = sorted((i, j) for i, k in enumerate([1, None, 2])
                      for j, s in enumerate(static["src"].to_pylist()) if k == s)
        assert _pairs(kept.probe(with_nulls, ["node"]), 200) == want


def test_iterated_join_whose_varying_keys_change_every_iteration():
    """The varying side loses rows at every iteration (its keys change): the held join must not
    reuse the previous iteration's match; checked against pandas at 1 and 2 processes."""
    x, w = _scaling(400, 50, seed=11)
    x = pa.table({"k": x["k"], "v": pc.add(pc.abs(x["v"]), 0.01)})
    iterations = 4

    def build(comp, xs, ws):
        def body(loop, s):
            return (s.filter(lambda t: pc.greater(t["v"], 0.3))
                    .join(loop.enter(ws), on="k")
                    .map_batches(lambda t: pa.table({"k": t["k"],
                                                     "v": pc.multiply(t["v"], t["f"])})))
        return xs.iterate(body, iterations)
    df, factors = x.to_pandas(), w.to_pandas()
    for _ in range(iterations):
        df = df[df.v > 0.3].merge(factors, on="k").assign(v=lambda d: d.v * d.f)[["k", "v"]]
    assert 0 < len(df) < 400
    for processes, workers in ((1, 2), (2, 1)):
        got = _run(build, [x, w], processes, workers)
        pd.testing.assert_frame_equal(got.sort_values(["k", "v"]).reset_index(drop=True),
                                      df.sort_values(["k", "v"]).reset_index(drop=True),
                                      rtol=1e-12)


@pytest.mark.parametrize("processes,workers", [(1, 2), (2, 1)])
def test_outer_join_with_an_invariant_side_fed_late(processes, workers):
    """An outer join whose right side is loop-invariant gives that side's unmatched rows at
    every iteration, also when the invariant input is fed after a later iteration's table
    reached the join (the varying side is another join's result, empty at iteration 0; the
    next iteration's records pass two group_bys that do not wait for the late input)."""
    import time
    from linq.frames.loop import FrameLoop
    x0 = pa.table({"kind": ["x"], "k": [0]})
    e1 = pa.table({"k": [1], "w1": [10]})
    e2 = pa.table({"k": [1, 5], "w2": [100, 500]})

    def label(t):
        none = [None] * t.num_rows
        w1 = t["w1"].to_pylist() if "w1" in t.column_names else none
        w2 = t["w2"].to_pylist() if "w2" in t.column_names else none
        kinds = [f"r:{'y' if a is not None else '-'}{'e' if b is not None else '-'}"
                 for a, b in zip(w1, w2)]
        return pa.table({"kind": pa.array(kinds, pa.string()), "k": t["k"].cast(pa.int64())})

    def shift(t):
        return pa.table({"kind": t["kind"], "k": pc.add(t["k"], 1).cast(pa.int64())})

    def program(comp):
        x_in, e1_in, e2_in = comp.new_input(), comp.new_input(), comp.new_input()
        ins = [frames.of(e1_in.stream), frames.of(e2_in.stream)]

        def body(loop, x):
            xs = x.filter(lambda t: pc.equal(t["kind"], "x"))
            y = xs.join(loop.enter(ins[0]), on="k")                 # empty at iteration 0
            z = y.join(loop.enter(ins[1]), on="k", how="outer")      # the invariant side outer
            nxt = (xs.group_by(["kind", "k"], n=("k", "count"))
                   .group_by(["kind", "k"], m=("n", "sum"))
                   .map_batches(lambda t: pa.table({"kind": t["kind"], "k": t["k"]})))
            return z.map_batches(label).concat(nxt.map_batches(shift))
        got = x_in.stream.iterate_and_accumulate(
            lambda loop, s: body(FrameLoop(loop, frames.of), frames.of(s)).stream, 3).collect()
        comp.activate()
        first = comp.process_index == 0
        x_in.on_next([x0] if first else [])
        e1_in.on_next([e1] if first else [])
        time.sleep(0.5)
        e2_in.on_next([e2] if first else [])
        for i in (x_in, e1_in, e2_in):
            i.on_completed()
        comp.join(timeout=60)
        return [r for t in got.results.get(0, []) for r in zip(*(c.to_pylist() for c in t.columns))
                if r[0].startswith("r")]
    got = sorted(r for part in naiad.execute(program, processes=processes, workers=workers)
                 for r in part)
    assert got == sorted([("r:-e", 1), ("r:-e", 5),      # iteration 0: nothing matched yet
                          ("r:ye", 1), ("r:-e", 5),      # iteration 1
                          ("r:-e", 1), ("r:-e", 5)])     # iteration 2
