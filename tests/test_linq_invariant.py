"""Loop-invariant inputs: body(loop, s) with loop.enter(other), against oracles that re-send the
invariant data at every iteration, across workers and processes; errors for mixing."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

import linq  # noqa: F401 - installs the Stream methods
from naiad.errors import GraphError
from naiad.testing import run
from samples.components import (components_invariant, label_propagation, oracle, rounds_needed,
                                undirected_records)
from samples.graphs import adjacency, random_edges
from samples.pagerank import pagerank, pagerank_invariant, power_iteration


def tagged(s, tag):
    return s.where(lambda r: r[0] == tag).select(lambda r: r[1:])


def scale_loop(left_invariant: bool, iterations: int):
    """x (key, value) multiplied at each iteration by every factor (key, f) of the epoch."""
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            f = loop.enter(fs)
            if left_invariant:
                return f.join(x, lambda r: r[0], lambda r: r[0], lambda a, b: (b[0], b[1] * a[1]))
            return x.join(f, lambda r: r[0], lambda r: r[0], lambda a, b: (a[0], a[1] * b[1]))
        return xs.iterate(body, iterations)
    return build


def scale_oracle(epoch: list, iterations: int) -> list:
    xs = [r[1:] for r in epoch if r[0] == "x"]
    fs = defaultdict(list)
    for _, k, f in (r for r in epoch if r[0] == "f"):
        fs[k].append(f)
    for _ in range(iterations):
        xs = [(k, v * f) for k, v in xs for f in fs[k]]
    return sorted(xs)


def random_epochs(seed: int, epochs: int, size: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(epochs):
        keys = rng.randint(1, 8)
        recs = [("x", rng.randrange(keys), rng.randint(1, 5)) for _ in range(size)]
        recs += [("f", rng.randrange(keys), rng.randint(1, 3)) for _ in range(rng.randint(0, 12))]
        rng.shuffle(recs)
        out.append(recs)
    return out


@pytest.mark.parametrize("left_invariant", [False, True])
@pytest.mark.parametrize("seed,iterations", [(1, 1), (2, 3), (3, 4)])
def test_join_with_invariant_side_matches_resending(cluster, left_invariant, seed, iterations):
    epochs = random_epochs(seed, 3, 20)
    got = cluster.run(scale_loop(left_invariant, iterations), epochs)
    assert got == {e: scale_oracle(recs, iterations) for e, recs in enumerate(epochs)}


def test_cogroup_with_invariant_side_reduces_every_key_at_every_iteration(cluster):
    """A key present only on the invariant side still reaches the reducer at each iteration."""
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            return x.cogroup_by(loop.enter(fs), lambda r: r[0], lambda r: r[0],
                                lambda k, mine, fixed: [(k, sum(v for _, v in mine)
                                                         + sum(f for _, f in fixed))])
        return xs.iterate(body, 3)
    epochs = [[("x", 1, 1), ("f", 1, 10), ("f", 2, 5), ("f", 2, 1)], [("x", 3, 7)]]
    # key 1: 1 -> 11 -> 21 -> 31; key 2 (invariant only): 6 -> 12 -> 18; key 3: 7 throughout
    assert cluster.run(build, epochs) == {0: [(1, 31), (2, 18)], 1: [(3, 7)]}


def _wear(k, mine, fixed):
    """Each value at key ``k`` worn down by the key's invariant weights (at least 1), moved to
    the next key; keys with no values give nothing, so every epoch's loop dies out."""
    wear = max(1, sum(f for _, f in fixed))
    return [((k + 1) % 7, v - wear) for _, v in mine if v > wear]


def _wear_oracle(epoch: list) -> list:
    xs = [r[1:] for r in epoch if r[0] == "x"]
    fixed = defaultdict(list)
    for r in epoch:
        if r[0] == "f":
            fixed[r[1]].append(r[1:])
    out: list = []
    while xs:
        mine = defaultdict(list)
        for r in xs:
            mine[r[0]].append(r)
        xs = [r for k in set(mine) | set(fixed) for r in _wear(k, mine[k], fixed[k])]
        out += xs
    return sorted(out)


@pytest.mark.parametrize("seed", [5, 6])
def test_cogroup_with_invariant_side_in_a_loop_that_dies_out(cluster, seed):
    """iterate_and_accumulate runs until the iterated records die out (up to 10**9
    iterations): a cogroup with an invariant side asked for a notification at every one of
    them, up front, and never finished."""
    rng = random.Random(seed)
    epochs = [[("x", rng.randrange(7), rng.randint(1, 40)) for _ in range(rng.randint(0, 15))]
              + [("f", rng.randrange(7), rng.randint(0, 3)) for _ in range(rng.randint(0, 6))]
              for _ in range(3)]

    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")
        return xs.iterate_and_accumulate(
            lambda loop, x: x.cogroup_by(loop.enter(fs), lambda r: r[0], lambda r: r[0], _wear),
            10 ** 9)
    want = {e: _wear_oracle(recs) for e, recs in enumerate(epochs)}
    assert cluster.run(build, epochs) == {e: w for e, w in want.items() if w}


@pytest.mark.parametrize("nodes,edges,seed", [(30, 60, 1), (200, 700, 2)])
def test_pagerank_invariant_equals_power_iteration(cluster, nodes, edges, seed):
    graph = random_edges(nodes, edges, seed=seed)
    names, adj = adjacency(graph)
    records = [(u, adj[u]) for u in names]
    want = power_iteration(adj, 10)
    got = cluster.run(lambda comp, s: pagerank_invariant(s, len(names), 10), [records])[0]
    assert len(got) == len(want)
    assert max(abs(r - want[u]) for u, r in got) < 1e-9
    hadoop = run(lambda comp, s: pagerank(s, len(names), 10), [records])[0]
    assert max(abs(r - dict(hadoop)[u]) for u, r in got) < 1e-9


@pytest.mark.parametrize("nodes,edges,seed", [(40, 30, 3), (300, 280, 4)])
def test_components_invariant_equals_networkx(cluster, nodes, edges, seed):
    records = undirected_records(random_edges(nodes, edges, seed=seed))
    rounds = rounds_needed(records)
    got = dict(cluster.run(lambda comp, s: components_invariant(s, rounds), [records])[0])
    assert got == oracle(records) == label_propagation(records, rounds)


def test_invariant_side_is_keyed_once_per_epoch():
    """The invariant side's key function runs once per record and epoch, not per iteration."""
    calls = []

    def fkey(r):
        calls.append(r)
        return r[0]

    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")
        return xs.iterate(lambda loop, x: x.join(loop.enter(fs), lambda r: r[0], fkey,
                                                 lambda a, b: (a[0], a[1] + b[1])), 5)
    epochs = [[("x", 1, 0), ("f", 1, 1), ("f", 2, 1)], [("x", 2, 0), ("f", 2, 3)]]
    assert run(build, epochs, workers=2) == {0: [(1, 5)], 1: [(2, 15)]}
    assert len(calls) == 3


def test_invariant_streams_stay_invariant_through_stateless_operators():
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            f = loop.enter(fs).select(lambda r: (r[0], r[1] * 2)).where(lambda r: r[1] > 2)
            return x.join(f, lambda r: r[0], lambda r: r[0], lambda a, b: (a[0], a[1] + b[1]))
        return xs.iterate(body, 3)
    assert run(build, [[("x", 1, 0), ("f", 1, 1), ("x", 2, 0), ("f", 2, 2)]]) == {0: [(2, 12)]}


def mixed(kind):
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            f = loop.enter(fs)
            if kind == "concat":
                return x.concat(f)
            if kind == "union":
                return x.union(f)
            if kind == "only_invariant":
                return f.select(lambda r: r)
            return x
        return xs.iterate(body, 2)
    return build


@pytest.mark.parametrize("kind", ["concat", "union", "only_invariant"])
def test_mixing_invariant_and_varying_is_a_graph_error(kind):
    with pytest.raises(GraphError, match="invariant"):
        run(mixed(kind), [[("x", 1, 0)]])


def test_enter_needs_an_outer_stream():
    def build(comp, s):
        return s.iterate(lambda loop, x: x.join(loop.enter(x), lambda r: r, lambda r: r,
                                                lambda a, b: a), 2)
    with pytest.raises(GraphError, match="enter"):
        run(build, [[1]])
    with pytest.raises(TypeError, match="Stream"):
        run(lambda comp, s: s.iterate(lambda loop, x: loop.enter(42), 2), [[1]])


# ---- nested loops -------------------------------------------------------------------------------
def _nested_oracle(epoch: list, outer: int, inner: int) -> list:
    """x (key, value) after ``outer`` rounds, each ``inner`` multiplications by every factor
    of its key, each factor first raised by one per inner round of an invariant inner loop."""
    fs = defaultdict(list)
    for _, k, f in (r for r in epoch if r[0] == "f"):
        fs[k].append(f + inner)
    xs = [r[1:] for r in epoch if r[0] == "x"]
    for _ in range(outer):
        xs = [(k, v * f) for k, v in xs for f in fs[k]]
    return sorted(xs)


def test_an_inner_loop_over_an_invariant_stream_stays_invariant(cluster):
    """The inner loop iterates the factors, invariant in the outer loop: its result is made once
    per epoch and holds at every outer iteration (it used to exist at the first one only, so
    the outer join matched nothing from the second outer iteration on)."""
    outer, inner = 3, 2

    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            raised = loop.enter(fs).iterate(lambda f: f.select(lambda r: (r[0], r[1] + 1)),
                                            inner)
            return x.join(raised, lambda r: r[0], lambda r: r[0],
                          lambda a, b: (a[0], a[1] * b[1]))
        return xs.iterate(body, outer)
    epochs = random_epochs(seed=3, epochs=3, size=12)
    got = run(build, epochs, processes=cluster.processes, workers=cluster.workers)
    assert got == {e: _nested_oracle(recs, outer, inner) for e, recs in enumerate(epochs)}


def _scaled_in_nested_loops(accumulate: bool):
    """Outer rounds, each an inner loop joining x with the factors entered into the outer loop
    and then into the inner one (invariant in both)."""
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            f = loop.enter(fs)
            inner = x.iterate(lambda i, y: y.join(i.enter(f), lambda r: r[0], lambda r: r[0],
                                                  lambda a, b: (a[0], a[1] * b[1])), 2)
            return inner.where(lambda r: r[1] < 10 ** 4) if accumulate else inner
        if accumulate:
            return xs.iterate_and_accumulate(body, 10 ** 9)
        return xs.iterate(body, 3)
    return build


def _scaled_oracle(epoch: list, accumulate: bool) -> list:
    fs = defaultdict(list)
    for _, k, f in (r for r in epoch if r[0] == "f"):
        fs[k].append(f)
    xs, out = [r[1:] for r in epoch if r[0] == "x"], []
    for _ in range(10 ** 9 if accumulate else 3):
        for _ in range(2):
            xs = [(k, v * f) for k, v in xs for f in fs[k]]
        if accumulate:
            xs = [r for r in xs if r[1] < 10 ** 4]
            out += xs
        if not xs:
            break
    return sorted(out if accumulate else xs)


@pytest.mark.parametrize("accumulate", [False, True])
def test_an_outer_invariant_stream_entered_into_an_inner_loop(cluster, accumulate):
    """Its records, at the outer loop's first iteration, hold at every iteration of both loops
    (it was refused: the inner loops of later outer iterations would have missed them)."""
    epochs = [[("x", k, v) for k, v in recs] + [("f", k, f) for k, f in factors]
              for recs, factors in (([(1, 1), (2, 3), (3, 1)], [(1, 2), (1, 3), (2, 2), (3, 5)]),
                                    ([], [(1, 2)]), ([(4, 5)], []),
                                    ([(5, 1), (6, 2)], [(5, 2), (6, 3), (6, 2)]))]
    want = {e: _scaled_oracle(recs, accumulate) for e, recs in enumerate(epochs)}
    got = cluster.run(_scaled_in_nested_loops(accumulate), epochs)
    assert {e: g for e, g in got.items() if g} == {e: w for e, w in want.items() if w}
    assert want[0] and want[3]


def test_an_outer_invariant_stream_in_an_inner_cogroup_is_refused():
    """cogroup_by would owe a result at every inner iteration of every outer one, even those
    no record reaches: refused, naming the way out."""
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            f = loop.enter(fs)
            return x.iterate(lambda i, y: y.cogroup_by(i.enter(f), lambda r: r[0],
                                                       lambda r: r[0], lambda k, a, b: a), 2)
        return xs.iterate(body, 3)
    with pytest.raises(GraphError, match="invariant in the enclosing loop as well.*join"):
        run(build, [[("x", 1, 1), ("f", 1, 2)]])


@pytest.mark.parametrize("combine", ["join", "join_swapped", "concat"])
def test_invariant_streams_of_different_loops_are_not_combined(combine):
    """One entered into both loops (records at the outer loop's first iteration only), one
    entered from the outer body (records anew at each outer iteration): combined, they were
    taken for invariant in both, and the inner join matched stale or no records."""
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def outer(la, x):
            f_outer = la.enter(fs)

            def inner(lb, y):
                both, inner_only = lb.enter(f_outer), lb.enter(x)
                if combine == "concat":
                    h = both.concat(inner_only)
                else:
                    a, b = (both, inner_only) if combine == "join" else (inner_only, both)
                    h = a.join(b, lambda r: r[0], lambda r: r[0], lambda p, q: (p[0], p[1] + q[1]))
                return y.join(h, lambda r: r[0], lambda r: r[0], lambda p, q: (p[0], p[1] + q[1]))
            return x.iterate(inner, 1)
        return xs.iterate(outer, 2)
    with pytest.raises(GraphError, match="invariant inputs hold in different loops"):
        run(build, [[("x", 0, 1), ("f", 0, 10)]])


def test_an_invariant_inner_loop_that_enters_a_varying_stream_is_refused():
    def build(comp, s):
        xs, fs = tagged(s, "x"), tagged(s, "f")

        def body(loop, x):
            mixed = loop.enter(fs).iterate(
                lambda inner, f: f.join(inner.enter(x), lambda r: r[0], lambda r: r[0],
                                        lambda a, b: a), 2)
            return x.join(mixed, lambda r: r[0], lambda r: r[0], lambda a, b: a)
        return xs.iterate(body, 3)
    with pytest.raises(GraphError, match="enters a stream that varies"):
        run(build, [[("x", 1, 1), ("f", 1, 2)]])


def _drive_in_order_of(vertex, deliveries):
    """``deliveries`` ``(edge, records, time)`` into ``vertex`` in the order given, then every
    notification it asked for, in time order: ``{iteration: records sent}``."""
    out: dict = defaultdict(list)
    notes: set = set()
    vertex.index = 0
    vertex.send_batch_by = lambda port, recs, time: out[time.counters[-1]].extend(recs)
    vertex.send_by = lambda port, rec, time: out[time.counters[-1]].append(rec)
    vertex.notify_at = notes.add
    for edge, records, time in deliveries:
        vertex.on_recv_batch(edge, records, time)
    done: set = set()
    while notes - done:
        t = min(notes - done, key=lambda t: t.counters)
        done.add(t)
        vertex.on_notify(t)
    return {c: sorted(map(repr, r)) for c, r in out.items()}


def test_cogroup_with_an_invariant_side_arriving_after_a_later_iteration():
    """A worker whose first message of the epoch is an iteration-1 record, and whose
    invariant record (iteration 0) comes after it, still gives reducer(key, [], held) at
    iteration 0, as when the messages come in time order."""
    import naiad
    from linq.invariant import HeldVertex

    def reducer(k, mine, theirs):
        return [(k, sorted(mine), sorted(theirs))]
    held = (1, [("a", "h")], naiad.Timestamp(0, (0,)))
    later = (0, [("b", "x1")], naiad.Timestamp(0, (1,)))
    in_order = _drive_in_order_of(HeldVertex("cogroup_by", 1, 2, reducer=reducer),
                                  [held, later])
    permuted = _drive_in_order_of(HeldVertex("cogroup_by", 1, 2, reducer=reducer),
                                  [later, held])
    assert permuted == in_order
    assert sorted(permuted) == [0, 1, 2] and "('a', [], ['h'])" in permuted[0]


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_cogroup_with_an_invariant_input_fed_after_the_iterated_one(delay):
    """The iterated record moves to the other worker's key at every iteration; the invariant
    input is fed after it (inputs are independent), so the worker owning the invariant key
    sees iteration 1 first.  cogroup_by calls the reducer for every key at every iteration."""
    import time
    import naiad
    from naiad.partition import destinations
    k0 = next(k for k in range(1000) if destinations([k, k + 1], 2) == [0, 1])
    kh, iterations = k0 + 1, 3
    entered = []

    def body(loop, x):
        xs = x.where(lambda r: r[0] == "x")
        cg = xs.cogroup_by(loop.enter(entered[0]), lambda r: r[1], lambda r: r[1],
                           lambda k, a, b: [("r", k, len(a), len(b))])
        return cg.concat(xs.select(lambda r: ("x", r[1] + 1)))

    def program(comp):
        h_in, x_in = comp.new_input(), comp.new_input()
        entered.append(h_in.stream)
        got = x_in.stream.iterate_and_accumulate(body, iterations).collect()
        comp.activate()
        x_in.on_next([("x", k0)])
        time.sleep(delay)
        h_in.on_next([("h", kh)])
        x_in.on_completed()
        h_in.on_completed()
        comp.join(timeout=60)
        return sorted(r for r in got.results.get(0, []) if r[0] == "r")
    want = sorted(("r", k, int(k == k0 + c), int(k == kh))
                  for c in range(iterations) for k in {k0 + c, kh})
    assert naiad.execute(program, workers=2) == [want]
