"""``spread`` against the same round written as join + select_many + aggregate (the general
path of the operators it replaces), on seeded random graphs, across workers and processes:
the array paths (float sums, min/max over str and int) and the general fold; errors."""

from __future__ import annotations

import operator
import random

import pytest

import linq  # noqa: F401 - installs the Stream methods
from linq.core import UserFunctionError
from naiad.errors import GraphError, VertexError
from naiad.testing import run
from samples.components import components_spread, label_propagation, undirected_records
from samples.graphs import adjacency, random_edges
from samples.pagerank import pagerank_spread, power_iteration

first, second = operator.itemgetter(0), operator.itemgetter(1)


def tagged(s, tag):
    return s.where(lambda r: r[0] == tag).select(lambda r: r[1:])


def rounds(form: str, share, combine, own, iterations: int):
    """``(key, x)`` records iterated through ``iterations`` rounds of spread (``form``
    "spread") or of join + select_many + aggregate ("general")."""
    def general_round(loop, x):
        def offers(r):
            out = [(t, share(r[1], r[2])) for t in r[2]]
            return out + [(r[0], own(r[1]))] if own is not None else out
        return (x.join(loop.enter(edges), first, first, lambda a, b: (a[0], a[1], b[1]))
                 .select_many(offers).aggregate(first, second, combine))

    def build(comp, s):
        nonlocal edges
        edges = tagged(s, "e")
        start = tagged(s, "v")
        if form == "spread":
            return start.iterate(lambda loop, x: x.spread(loop.enter(edges), share, combine,
                                                          own=own), iterations)
        return start.iterate(general_round, iterations)
    edges = None
    return build


def graph_epoch(rng: random.Random, nodes: list, edges: int, value, coverage: float = 1.0,
                duplicate_keys: bool = False) -> list:
    """``("e", node, targets)`` for every node and ``("v", node, value(node))`` for a share
    ``coverage`` of them (and for a node without edges)."""
    adj = {u: [] for u in nodes}
    for _ in range(edges):
        adj[rng.choice(nodes)].append(rng.choice(nodes))
    recs = [("e", u, tuple(ts)) for u, ts in adj.items()]
    if duplicate_keys:
        recs += [("e", u, (rng.choice(nodes),)) for u in rng.sample(nodes, 3)]
    recs += [("v", u, value(u)) for u in nodes if rng.random() < coverage]
    recs.append(("v", "nowhere" if type(nodes[0]) is str else -1, value(nodes[0])))
    rng.shuffle(recs)
    return recs


def both(cluster, build_args, epochs) -> tuple:
    return (cluster.run(rounds("spread", *build_args), epochs),
            run(rounds("general", *build_args), epochs))


def close(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        [k for k, _ in got[e]] == [k for k, _ in want[e]]
        and all(abs(a - b) <= 1e-12 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got[e], want[e]))
        for e in got)


def _rank_share(x, ts):
    return x / len(ts) if ts else 0.0


@pytest.mark.parametrize("seed,coverage", [(1, 1.0), (2, 0.7), (3, 0.2)])
def test_float_sums_equal_the_general_path(cluster, seed, coverage):
    rng = random.Random(seed)
    nodes = list(range(rng.randint(20, 120)))
    epochs = [graph_epoch(rng, nodes, 4 * len(nodes), lambda u: rng.random(), coverage)
              for _ in range(2)]
    got, want = both(cluster, (_rank_share, operator.add, lambda x: 0.0, 3), epochs)
    assert close(got, want), (got, want)


@pytest.mark.parametrize("combine", [min, max])
@pytest.mark.parametrize("seed,coverage", [(4, 1.0), (5, 0.6)])
def test_least_and_greatest_labels_equal_the_general_path(cluster, combine, seed, coverage):
    rng = random.Random(seed)
    nodes = [f"n{i:03d}" for i in rng.sample(range(1000), rng.randint(20, 150))]
    epochs = [graph_epoch(rng, nodes, 2 * len(nodes), lambda u: u, coverage) for _ in range(2)]
    got, want = both(cluster, (lambda x, ts: x, combine, lambda x: x, 4), epochs)
    assert got == want and any(want.values())


@pytest.mark.parametrize("seed", [6, 7])
def test_int_values_without_own_equal_the_general_path(cluster, seed):
    rng = random.Random(seed)
    nodes = list(range(rng.randint(20, 100)))
    epochs = [graph_epoch(rng, nodes, 3 * len(nodes), lambda u: rng.randint(-50, 50))]
    for combine in (min, max):
        got, want = both(cluster, (lambda x, ts: x + len(ts), combine, None, 2), epochs)
        assert got == want and want[0]


@pytest.mark.parametrize("seed,coverage", [(10, 1.0), (11, 0.5)])
def test_int_labels_of_any_size_equal_the_general_path(cluster, seed, coverage):
    """Integers take the array path as they are, and by their ranks when one does not fit in
    64 bits; the bounds of 64 bits themselves are values like any other."""
    rng = random.Random(seed)
    nodes = list(range(rng.randint(20, 100)))
    for big in (2 ** 63 - 1, -2 ** 63, 2 ** 63, -2 ** 63 - 5, 10 ** 30):
        epochs = [graph_epoch(rng, nodes, 3 * len(nodes),
                              lambda u: rng.choice([u, big, big - u if big > 0 else big + u]),
                              coverage)]
        for combine in (min, max):
            got, want = both(cluster, (lambda x, ts: x, combine, lambda x: x, 3), epochs)
            assert got == want and want[0]


@pytest.mark.parametrize("seed", [8, 9])
def test_general_fold_equals_the_general_path(cluster, seed):
    """Other combines, mixed value types and several invariant records per key take the
    general fold: the same results."""
    rng = random.Random(seed)
    nodes = list(range(rng.randint(20, 80)))
    mixed = [graph_epoch(rng, nodes, 3 * len(nodes),
                         lambda u: rng.choice([rng.randint(0, 9), rng.random()]))]
    got, want = both(cluster, (lambda x, ts: x, operator.add, lambda x: x, 2), mixed)
    assert close(got, want)         # sums in another order: equal to the last bits
    repeated = [graph_epoch(rng, nodes, 3 * len(nodes), lambda u: u, duplicate_keys=True)]
    got, want = both(cluster, (lambda x, ts: x * 2, lambda a, b: a + b, None, 2), repeated)
    assert got == want and want[0]


@pytest.mark.parametrize("nodes,edges,seed", [(40, 120, 1), (300, 1200, 2)])
def test_pagerank_spread_equals_power_iteration(cluster, nodes, edges, seed):
    names, adj = adjacency(random_edges(nodes, edges, seed=seed))
    records = [(u, adj[u]) for u in names]
    want = power_iteration(adj, 10)
    got = cluster.run(lambda comp, s: pagerank_spread(s, len(names), 10), [records])[0]
    assert len(got) == len(want)
    assert max(abs(r - want[u]) for u, r in got) < 1e-12


@pytest.mark.parametrize("nodes,edges,seed", [(60, 50, 3), (400, 380, 4)])
def test_components_spread_equals_label_propagation(cluster, nodes, edges, seed):
    records = undirected_records((f"p{u}", f"p{v}") for u, v in random_edges(nodes, edges,
                                                                              seed=seed))
    got = dict(cluster.run(lambda comp, s: components_spread(s, 6), [records])[0])
    assert got == label_propagation(records, 6)


def test_edges_must_be_loop_invariant():
    def build(comp, s):
        return s.iterate(lambda loop, x: x.spread(x, lambda v, ts: v, min), 2)
    with pytest.raises(GraphError, match="loop-invariant"):
        run(build, [[(1, 1)]])


def test_a_failing_share_is_named():
    def build(comp, s):
        edges = tagged(s, "e")
        return tagged(s, "v").iterate(
            lambda loop, x: x.spread(loop.enter(edges), lambda v, ts: 1 / v, operator.add), 2)
    with pytest.raises(VertexError) as info:
        run(build, [[("e", i, (i + 1,)) for i in range(100)]
                    + [("v", i, 0 if i == 50 else 1.0) for i in range(100)]])
    cause = info.value.__cause__
    assert isinstance(cause, UserFunctionError), repr(cause)
    assert "the share" in str(cause) and "ZeroDivisionError" in str(cause), str(cause)
    assert "called with 0, (51,)" in str(cause), str(cause)


@pytest.mark.parametrize("combine,value", [(operator.add, float), (min, str), (max, int)])
def test_the_array_path_serves_whole_batches(monkeypatch, combine, value):
    """With every key's record present, float sums and min/max over str or int never reach
    the general fold (in-process workers, so the fold can be replaced)."""
    from linq.spread import SpreadVertex

    def no_fold(self, table, records):
        raise AssertionError(f"general fold for {len(records)} records")
    monkeypatch.setattr(SpreadVertex, "_fold", no_fold)
    rng = random.Random(10)
    nodes = list(range(200))
    epoch = graph_epoch(rng, nodes, 600, lambda u: value(u))
    epoch = [r for r in epoch if r[1] != -1]              # no record without edges
    got = run(rounds("spread", lambda x, ts: x, combine, lambda x: x, 3), [epoch], workers=2)
    assert len(got[0]) == len(nodes)
