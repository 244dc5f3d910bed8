"""FrameStream.spread: the dense path (loop-invariant edges prepared into integer positions)
against the general composition (join, map_batches, group_by) and a plain Python loop, on
seeded random graphs at 1 and 2 processes; the Arrow fallback for other types; routing reuse."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")
import pyarrow.compute as pc  # noqa: E402

import naiad  # noqa: E402
from linq import frames  # noqa: E402
from linq.frames.spread import SpreadPlan  # noqa: E402
from linq.frames.vertices import FrameError, Split, split_table  # noqa: E402
from naiad.errors import GraphError  # noqa: E402
from naiad.partition import route_keys  # noqa: E402

ITERATIONS = 3


def _graph(seed: int, nodes: int, edges: int, strings: bool = False, wide: bool = False):
    """Edges (src, dst, w) and starting values (node, x, y) over ``nodes`` ids; some nodes have
    no edges and some no starting row; ``wide`` spreads the ids far apart (the sorted path)."""
    rng = random.Random(seed)
    scale = 1_000_003 if wide else 1

    def label(i: int):
        return f"n{i}" if strings else i * scale
    src = [rng.randrange(nodes) for _ in range(edges)]
    dst = [rng.randrange(nodes) for _ in range(edges)]
    e = pa.table({"src": [label(i) for i in src], "dst": [label(i) for i in dst],
                  "w": [rng.uniform(0.1, 1.0) for _ in range(edges)]})
    start = [i for i in range(nodes) if rng.random() < 0.8]
    v = pa.table({"node": [label(i) for i in start], "x": [rng.uniform(0, 1) for _ in start],
                  "y": [rng.uniform(-1, 1) for _ in start]})
    return e, v


def _oracle(edges: pa.Table, start: pa.Table, iterations: int, weighted: bool) -> dict:
    """``{node: (x, y)}`` after ``iterations`` rounds, by dicts."""
    values = defaultdict(lambda: [0.0, 0.0])
    for n, x, y in zip(*(start.column(c).to_pylist() for c in ("node", "x", "y"))):
        values[n][0] += x
        values[n][1] += y
    out_edges = defaultdict(list)
    for s, d, w in zip(*(edges.column(c).to_pylist() for c in ("src", "dst", "w"))):
        out_edges[s].append((d, w if weighted else 1.0))
    for _ in range(iterations):
        nxt: dict = {}
        for n, (x, y) in values.items():
            for d, w in out_edges.get(n, ()):
                acc = nxt.setdefault(d, [0.0, 0.0])
                acc[0] += x * w
                acc[1] += y * w
        values = nxt
    return {n: tuple(v) for n, v in values.items()}


def _run(edges: pa.Table, start: pa.Table, body, processes: int, workers: int,
         owned: bool = False, pieces: int = 1) -> dict:
    """``start.iterate(body(loop, values, edges))``: ``{node: (x, y)}`` over every process.
    Each process feeds a contiguous part of the tables, or with ``owned`` the rows its own
    workers own (``frames.share``: no edge crosses processes), in ``pieces`` tables."""
    def program(comp):
        e_in, v_in = comp.new_input(), comp.new_input()
        es, vs = frames.of(e_in.stream), frames.of(v_in.stream)
        got = vs.iterate(lambda loop, r: body(loop, r, es), ITERATIONS).collect()
        comp.activate()
        p, n = comp.process_index, comp.processes
        for inp, t, key in ((e_in, edges, "src"), (v_in, start, "node")):
            if owned:
                t = frames.share(t, key, comp)
            else:
                lo, hi = p * t.num_rows // n, (p + 1) * t.num_rows // n
                t = t.slice(lo, hi - lo)
            cuts = [i * t.num_rows // pieces for i in range(pieces + 1)]
            inp.on_next([t.slice(a, b - a) for a, b in zip(cuts, cuts[1:])])
            inp.on_completed()
        comp.join(timeout=60)
        return [t for ts in got.results.values() for t in ts]
    tables = [t for part in naiad.execute(program, processes=processes, workers=workers)
              for t in part]
    out: dict = {}
    for t in tables:
        assert t.column_names == ["node", "x", "y"]
        for n, x, y in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            assert n not in out, f"node {n!r} twice in the result"
            out[n] = (x, y)
    return out


def _dense(loop, r, es, weight="w"):
    return r.spread(loop.enter(es), on="node", weight=weight)


def _composed(loop, r, es, weight="w"):
    joined = r.join(loop.enter(es), on="node", right_on="src")
    return joined.map_batches(lambda t: pa.table({
        "node": t["dst"],
        "x": pc.multiply(t["x"], t["w"]) if weight else t["x"],
        "y": pc.multiply(t["y"], t["w"]) if weight else t["y"]})).group_by(
        "node", x=("x", "sum"), y=("y", "sum"))


def _close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for n, v in want.items():
        assert got[n] == pytest.approx(v, rel=1e-12, abs=1e-12), n


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 3), (2, 1), (2, 2)])
@pytest.mark.parametrize("seed", [1, 2])
def test_spread_matches_the_composition_and_dicts(processes, workers, seed):
    edges, start = _graph(seed, nodes=50 * seed, edges=60 * seed)   # sparse: some targets unreached
    want = _oracle(edges, start, ITERATIONS, weighted=True)
    assert want
    _close(_run(edges, start, _dense, processes, workers), want)
    _close(_run(edges, start, _composed, processes, workers), want)
    # Each process feeding what its workers own, in one table (the plan made from the first
    # edge table is kept) or in three (it is remade when more edges come).
    for pieces in (1, 3):
        _close(_run(edges, start, _dense, processes, workers, owned=True, pieces=pieces), want)


@pytest.mark.parametrize("case", ["unweighted", "strings", "wide", "ints", "int32", "uint64"])
def test_spread_takes_the_arrow_path_for_other_tables(case):
    """String keys, a key range too wide for direct addressing, integer values, other key
    types and no weight column give what the composition gives."""
    edges, start = _graph(5, nodes=60, edges=300, strings=case == "strings",
                          wide=case == "wide")
    weight = None if case == "unweighted" else "w"
    if case == "ints":                      # integer values: summed as integers, unweighted
        start = start.set_column(1, "x", pa.array(range(start.num_rows), pa.int64()))
        start = start.set_column(2, "y", pa.array([i % 7 for i in range(start.num_rows)]))
        weight = None
    if case in ("int32", "uint64"):
        key = pa.int32() if case == "int32" else pa.uint64()
        edges = edges.cast(pa.schema([("src", key), ("dst", key), ("w", pa.float64())]))
        start = start.cast(pa.schema([("node", key), ("x", pa.float64()), ("y", pa.float64())]))

    def dense(loop, r, es):
        return _dense(loop, r, es, weight)

    def composed(loop, r, es):
        return _composed(loop, r, es, weight)
    want = _oracle(edges, start, ITERATIONS, weighted=weight is not None)
    for processes, workers in ((1, 2), (2, 1)):
        got = _run(edges, start, dense, processes, workers)
        _close(got, want)
        _close(_run(edges, start, composed, processes, workers), want)
        if case == "ints":
            assert all(isinstance(v[0], int) for v in got.values())


def test_spread_outside_a_loop_and_with_repeated_keys():
    """Without loop.enter spread is the composition; repeated keys on either side add up."""
    edges = pa.table({"src": [1, 1, 2, 2, 2], "dst": [2, 2, 3, 1, 3], "w": [1.0] * 5})
    values = pa.table({"node": [1, 1, 2], "x": [1.0, 2.0, 10.0]})

    def program(comp):
        e_in, v_in = comp.new_input(), comp.new_input()
        got = frames.of(v_in.stream).spread(frames.of(e_in.stream), on="node",
                                            weight="w").collect()
        comp.activate()
        first = comp.process_index == 0
        e_in.on_next([edges] if first else [])
        v_in.on_next([values] if first else [])
        e_in.on_completed()
        v_in.on_completed()
        comp.join(timeout=60)
        return [r for ts in got.results.values() for t in ts for r in t.to_pylist()]
    rows = sorted((r["node"], r["x"]) for part in naiad.execute(program, processes=2)
                  for r in part)
    assert rows == [(1, 10.0), (2, 6.0), (3, 20.0)]


def test_final_sums_of_each_worker_are_a_stage_of_their_own(tmp_path):
    """Each worker's final sums run in their own stage, ``.sum[d]`` on worker ``d`` only (one
    stage for all would make every iteration wait for a progress round trip)."""
    edges, start = _graph(4, nodes=80, edges=300)
    want = _oracle(edges, start, ITERATIONS, weighted=True)

    def program(comp):
        e_in, v_in = comp.new_input(), comp.new_input()
        es, vs = frames.of(e_in.stream), frames.of(v_in.stream)
        got = vs.iterate(lambda loop, r: _dense(loop, r, es), ITERATIONS).collect()
        comp.activate()
        for inp, t, key in ((e_in, edges, "src"), (v_in, start, "node")):
            inp.on_next([frames.share(t, key, comp)])
            inp.on_completed()
        comp.join(timeout=60)
        return [r for ts in got.results.values() for t in ts for r in t.to_pylist()]
    rows = [r for part in naiad.execute(program, processes=2, workers=2, trace=str(tmp_path))
            for r in part]
    _close({r["node"]: (r["x"], r["y"]) for r in rows}, want)
    from naiad.tracing import read_trace
    trace = read_trace(str(tmp_path))
    names = {i: s["name"] for i, s in enumerate(trace.graph["stages"])}
    sums = {i: n for i, n in names.items() if n.startswith("spread(node -> dst).sum")}
    assert sorted(sums.values()) == [f"spread(node -> dst).sum[{d}]" for d in range(4)]
    ran = {(sums[e["stage"]], e["w"]) for e in trace.of("run") if e["stage"] in sums}
    assert {w for _, w in ran} == {0, 1, 2, 3}
    assert all(name.endswith(f"[{w}]") for name, w in ran)


@pytest.mark.parametrize("workers", [1, 2, 3, 9, 12])
def test_spread_plan_numbers_targets_by_owner(workers):
    """The dense numbering puts each worker's targets together, hashed as the exchange hashes
    them, and a probe by the same keys again gives the same partial sums (few workers group
    the targets by comparisons, more by a sort)."""
    edges, start = _graph(3, nodes=200, edges=1000)
    routes = route_keys(workers)
    plan = SpreadPlan(edges, "src", "dst", "w", routes)
    values = start.select(["node", "x"])
    parts = plan.spread(values, "node")
    assert parts == plan.spread(values, "node")
    owners = {r: t for r, t in split_table(pa.table({"dst": pa.concat_arrays(plan.keys)}),
                                          ["dst"], routes)}
    for d, route in enumerate(routes):
        assert plan.keys[d].to_pylist() == owners[route]["dst"].to_pylist()
    sums = defaultdict(float)
    x = dict(zip(values["node"].to_pylist(), values["x"].to_pylist()))
    for s, t, w in zip(*(edges.column(c).to_pylist() for c in ("src", "dst", "w"))):
        if s in x:
            sums[t] += x[s] * w
    got = {n: v for _, t in parts for n, v in zip(t["node"].to_pylist(), t["x"].to_pylist())}
    assert got.keys() == sums.keys()
    assert all(got[n] == pytest.approx(v, rel=1e-12) for n, v in sums.items())


def test_split_reuses_routing_only_for_the_same_key_array():
    routes = route_keys(2)
    split = Split("exchange(k)", ["k"], routes)
    sent = []
    split.send_batch_by = lambda port, parts, time: sent.append(parts)
    keys = pa.array(np.arange(1000))
    split.on_recv_batch(0, [pa.table({"k": keys, "v": np.ones(1000)})], None)
    split.on_recv_batch(0, [pa.table({"k": keys, "v": np.zeros(1000)})], None)
    other = pa.array(np.arange(1000)[::-1].copy())            # new memory, other order
    split.on_recv_batch(0, [pa.table({"k": other, "v": np.zeros(1000)})], None)
    for parts in sent:
        for route, t in parts:
            assert dict(split_table(t, ["k"], routes)).keys() == {route}
    assert [len(t) for _, t in sent[0]] == [len(t) for _, t in sent[1]]
    assert sorted(sent[2][0][1]["k"].to_pylist()) == sorted(sent[0][0][1]["k"].to_pylist())


def test_spread_errors_name_the_operator_and_columns():
    edges = pa.table({"src": [0, 1], "to": [1, 0]})
    start = pa.table({"node": [0, 1], "label": ["a", "b"]})

    def run(body, e=edges, s=start):
        def program(comp):
            e_in, v_in = comp.new_input(), comp.new_input()
            es = frames.of(e_in.stream)
            frames.of(v_in.stream).iterate(lambda loop, r: body(loop, r, es), 2).collect()
            comp.activate()
            e_in.on_next([e])
            v_in.on_next([s])
            e_in.on_completed()
            v_in.on_completed()
            comp.join(timeout=30)
        naiad.execute(program)
    with pytest.raises(Exception, match=r"spread\(node -> dst\).*'dst'.*\['src', 'to'\]"):
        run(lambda loop, r, es: r.spread(loop.enter(es), on="node"))
    with pytest.raises(Exception, match=r"spread\(node -> to\).*label: string"):
        run(lambda loop, r, es: r.spread(loop.enter(es), on="node", dst="to"))
    with pytest.raises(TypeError, match="weight must be a column name"):
        run(lambda loop, r, es: r.spread(loop.enter(es), on="node", dst="to", weight=1))

    def other_loop(comp):
        e_in, v_in = comp.new_input(), comp.new_input()
        es, vs = frames.of(e_in.stream), frames.of(v_in.stream)

        def outer(loop, r):
            entered = loop.enter(es)
            return r.iterate(lambda inner, q: q.spread(entered, on="node", dst="to"), 2)
        vs.iterate(outer, 2)
    with pytest.raises(GraphError, match="enter the stream in the loop that uses it"):
        naiad.execute(other_loop)



@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sums_dense_path_matches_arrow_group_by_whatever_the_arrival_order(seed):
    """Sums' dense path (the kept grouping, the partial tables put in a canonical order) gives
    Arrow's group_by sums, call after call, whatever order the partials of a time come in;
    the key column is handed on (the same memory) while the same keys come again."""
    from linq.frames.spread import Sums
    rng = random.Random(seed)
    sums = Sums("node", "spread")
    key_types = [pa.int64(), pa.int32(), pa.int16()]

    def partials(keys):
        return [pa.table({"node": pa.array(k, key_type),
                          "x": [rng.uniform(-1, 1) for _ in k], "y": [rng.random() for _ in k]})
                for k in keys]
    key_type = rng.choice(key_types)
    keys = [sorted(rng.sample(range(-20, 200), rng.randrange(1, 60))) for _ in range(3)]
    last_keys = None
    for call in range(8):
        if call == 5:                                   # other targets reached: regrouped
            keys = [sorted(rng.sample(range(0, 90), rng.randrange(1, 40))) for _ in range(2)]
        tables = partials(keys)
        rng.shuffle(tables)
        table = pa.concat_tables(tables)
        got = sums([table])
        want = table.group_by("node").aggregate([("x", "sum"), ("y", "sum")]).sort_by("node")
        assert got.column_names == ["node", "x", "y"]
        assert got["node"].type == key_type
        assert got["node"].to_pylist() == want["node"].to_pylist()
        for c in ("x", "y"):
            assert np.allclose(got[c].to_numpy(), want[f"{c}_sum"].to_numpy(), rtol=0, atol=1e-12)
        key_chunk = got["node"].chunk(0)
        if call not in (0, 5):
            assert key_chunk.buffers()[1].address == last_keys.buffers()[1].address
        last_keys = key_chunk
    # Nulls, other value types and keys too far apart take Arrow's group_by, with its result.
    for table in (pa.table({"node": [1, None, 1], "x": [1.0, 2.0, 3.0]}),
                  pa.table({"node": [1, 2, 1], "x": [1, 2, 3]}),
                  pa.table({"node": [0, 10 ** 9, 0], "x": [1.0, 2.0, 3.0]})):
        got = Sums("node", "spread")([table]).sort_by("node")
        want = table.group_by("node").aggregate([("x", "sum")]).sort_by("node")
        assert got["node"].to_pylist() == want["node"].to_pylist()
        assert got["x"].to_pylist() == want["x_sum"].to_pylist()


def _drive_spread(seed: int, workers: int, iterations: int, scramble: bool = False):
    """Two interleaved epochs of ``iterations`` rounds through ``workers`` SpreadVertex and
    PartialSums vertices driven by hand (their sends captured): ``(messages by sender,
    sums by (receiver, time), varying by time, edges by (sender, epoch), the vertices)``.
    With ``scramble`` the senders get the iterations after the first in a random order and
    the receivers get every message in a random order (as timely dataflow allows for
    messages of different times), each time's notification after all its messages."""
    from linq.frames.spread import PartialSums, SpreadVertex
    rng = random.Random(seed)
    routes = route_keys(workers)
    last = iterations - 1
    senders, receivers, sent, out, notes = [], [], [], {}, []
    for w in range(workers):
        sv = SpreadVertex("spread", last, "node", "src", "dst", "w", routes)
        sv.index = w
        sv.send_by = lambda port, msg, time, w=w: sent.append((w, port, msg, time))
        sv.notify_at = lambda time, v=sv: notes.append((v, time))
        senders.append(sv)
        ps = PartialSums("spread", "node", last)
        ps.send_by = lambda port, table, time, d=w: out.__setitem__((d, time), table)
        ps.notify_at = lambda time, v=ps: notes.append((v, time))
        receivers.append(ps)
    edges, varying = {}, {}
    for epoch in range(2):
        e, _ = _graph(seed * 10 + epoch, nodes=60, edges=240)
        for w, sv in enumerate(senders):
            part = e.filter(pa.array([s % workers == w for s in e["src"].to_pylist()]))
            edges[(w, epoch)] = part
            sv.on_recv_batch(1, [(routes[w], part)], naiad.Timestamp(epoch, (0,)))
    nodes = list(range(60))
    order = list(range(1, iterations))
    if scramble:
        rng.shuffle(order)
    undelivered = []
    for c in [0] + order:
        for epoch in range(2):
            time = naiad.Timestamp(epoch, (c,))
            # Every node (the same targets reached: the keys travel once), or some of them.
            chosen = nodes if c % 3 != 2 else sorted(rng.sample(nodes, 30))
            for w, sv in enumerate(senders):
                mine = [n for n in chosen if n % workers == w]
                table = pa.table({"node": mine, "x": [rng.uniform(0, 1) for _ in mine]})
                varying[(w, time)] = table
                first = len(sent)
                sv.on_recv_batch(0, [(routes[w], table)], time)
                if c == 0:
                    sv.on_notify(time)       # the edges are complete from here on
                undelivered.extend(sent[first:])
            if scramble and c != 0:
                continue
            for _, port, msg, t in undelivered:
                receivers[port].on_recv_batch(0, [msg], t)
            undelivered = []
            for ps in receivers:
                if (ps, time) in notes:
                    ps.on_notify(time)
    rng.shuffle(undelivered)
    for _, port, msg, t in undelivered:
        receivers[port].on_recv_batch(0, [msg], t)
    for c in order if scramble else ():
        for epoch in range(2):
            for ps in receivers:
                if (ps, naiad.Timestamp(epoch, (c,))) in notes:
                    ps.on_notify(naiad.Timestamp(epoch, (c,)))
    for epoch in range(2):
        time = naiad.Timestamp(epoch, (last,))
        for v in senders:
            v.on_notify(time)
    return sent, out, varying, edges, senders, receivers


@pytest.mark.parametrize("scramble", [False, True])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_partial_sums_carry_their_keys_once_per_epoch_and_destination(seed, workers, scramble):
    """The partial tables for other workers carry their key column the first time in an
    epoch and whenever the targets reached change, and otherwise the values alone, naming
    the keys they go with, sent at the same or an earlier iteration (those for the sender
    itself go whole); the receiving sums complete them with the keys they kept, also when
    the values arrive first (the sums equal a dict oracle's), and drop those keys at the
    epoch's last iteration, as the senders do."""
    iterations = 6
    sent, out, varying, edges, senders, receivers = _drive_spread(seed, workers, iterations,
                                                                  scramble)
    assert all(with_keys for w, port, (_, _, _, _, with_keys), _ in sent if port == w)
    if workers > 1:
        others = [(with_keys, t) for w, port, (_, _, _, _, with_keys), t in sent if port != w]
        assert any(not with_keys for with_keys, _ in others)
        assert any(with_keys for with_keys, t in others if t.counters[0] > 0)
    keys_at: dict = {}
    for w, port, (route, table, sender, number, with_keys), time in sent:
        assert sender == w and route == route_keys(workers)[port]
        key = (w, port, time.epoch, number)
        if with_keys:
            assert table.column_names[0] == "node"
            if number >= 0:
                assert keys_at.get(key, (None,))[0] in (None, table["node"].to_pylist())
                keys_at[key] = (table["node"].to_pylist(),
                                min(keys_at.get(key, (0, time.counters[0]))[1],
                                    time.counters[0]))
        else:
            assert "node" not in table.column_names and key in keys_at
            assert len(table) == len(keys_at[key][0])
            assert keys_at[key][1] <= time.counters[0]
    for (d, time), table in out.items():
        want: dict = defaultdict(float)
        for w in range(workers):
            x = dict(zip(*(varying[(w, time)].column(c).to_pylist() for c in ("node", "x"))))
            e = edges[(w, time.epoch)]
            for s, t, wt in zip(*(e.column(c).to_pylist() for c in ("src", "dst", "w"))):
                if s in x:
                    want[t] += x[s] * wt
        owners = dict(split_table(pa.table({"dst": list(want)}), ["dst"], route_keys(workers)))
        mine = set(owners.get(route_keys(workers)[d], pa.table({"dst": []}))["dst"].to_pylist())
        got = dict(zip(table["node"].to_pylist(), table["x"].to_pylist()))
        assert got.keys() == mine
        assert all(got[n] == pytest.approx(want[n], rel=1e-12) for n in mine)
    assert {t for (_, t) in out} == {naiad.Timestamp(e, (c,)) for e in range(2)
                                     for c in range(iterations)}
    for ps in receivers:
        for epoch in range(2):
            ps.on_notify(naiad.Timestamp(epoch, (iterations - 1,)))
        assert ps.keys == {}
    assert all(sv.sent == {} and sv.plans == {} for sv in senders)


@pytest.mark.parametrize("processes,workers", [(1, 2), (2, 1), (2, 2)])
def test_spread_over_overlapping_epochs_with_other_edges(processes, workers):
    """Two epochs fed at once, each with its own edges and values (the key columns kept by the
    final sums are per epoch), at 1 and 2 processes, against the dict oracle."""
    graphs = [_graph(5 + epoch, nodes=70, edges=300) for epoch in range(2)]

    def program(comp):
        e_in, v_in = comp.new_input(), comp.new_input()
        es, vs = frames.of(e_in.stream), frames.of(v_in.stream)
        got = vs.iterate(lambda loop, r: _dense(loop, r, es), 5).collect()
        comp.activate()
        for edges, start in graphs:
            e_in.on_next([frames.share(edges, "src", comp)])
            v_in.on_next([frames.share(start, "node", comp)])
        e_in.on_completed()
        v_in.on_completed()
        comp.join(timeout=60)
        return {e: [r for t in ts for r in t.to_pylist()] for e, ts in got.results.items()}
    parts = naiad.execute(program, processes=processes, workers=workers)
    for epoch, (edges, start) in enumerate(graphs):
        rows = [r for part in parts for r in part.get(epoch, [])]
        assert len({r["node"] for r in rows}) == len(rows)
        _close({r["node"]: (r["x"], r["y"]) for r in rows},
               _oracle(edges, start, 5, weighted=True))
