"""Reductions reading a shared arrangement (``Arrangement.group_by``, ``count``, ``sum``,
``min``, ``max``): beside joins of the same arrangement they give what the reductions of a
collection give, against a from-scratch oracle on seeded random updates at 1 and 2 processes
and 1-3 workers, on the general path and the ordered one, inside a loop, and after a SIGKILL;
the reduction keeps no copy of its input; and its errors name the operator and function."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import naiad
from linq import differential as dd
from linq.differential.operators import ReduceVertex
from linq.differential.testing import arrangement_sizes
from naiad.errors import VertexError
from naiad.testing import shard
from tests.test_differential_arrange import _at, _updates, reach_in_loop


def _oracle(a: Counter) -> Counter:
    """What :func:`_build` computes, from scratch, for the collection ``a``."""
    out: Counter = Counter()
    by_key: dict = {}
    for (x, y), n in a.items():
        by_key.setdefault(x, Counter())[y] += n
    for k, ys in by_key.items():
        out[("count", k, sum(ys.values()))] += 1
        out[("sum", k, sum(y * n for y, n in ys.items()))] += 1
        out[("min", k, min(ys))] += 1
        out[("max", k, max(ys))] += 1
        out[("pairs", k, sum(ys.values()) ** 2)] += 1
    for (x, y), n in a.items():
        for (u, v), m in a.items():
            if y == u:
                out[("join", x, v)] += n * m
    return +out


def _build(a: dd.Collection, by_first) -> dd.Collection:
    """Five reductions and a join, all reading ``by_first`` (``a`` arranged by ``r[0]``)."""
    return by_first.count().map(lambda kn: ("count",) + kn).concat(
        by_first.sum(lambda r: r[1]).map(lambda kv: ("sum",) + kv),
        by_first.min(lambda r: r[1]).map(lambda kv: ("min",) + kv),
        by_first.max(lambda r: r[1]).map(lambda kv: ("max",) + kv),
        by_first.group_by(lambda k, rs: [("pairs", k, len(rs) ** 2)]),
        a.join(by_first, key=lambda r: r[1], result=lambda p, q: ("join", p[0], q[1])))


def _program(updates, lag_join: bool = False):
    def program(comp):
        a_in, b_in = dd.new_input(comp, name="a"), dd.new_input(comp, name="b")
        by_first = a_in.collection.arrange(key=lambda r: r[0])
        out = _build(a_in.collection, by_first)
        if lag_join:
            # A join whose other input comes only at the end holds the shared trace's
            # compaction back while the reductions read it epoch after epoch.
            out = out.concat(b_in.collection.join(by_first, key=lambda r: r,
                                                  result=lambda p, q: ("never", p, q)))
        got = out.collect()
        probe = out.probe()
        comp.activate()
        me, n = comp.process_index, comp.processes
        for changes in updates:
            a_in.update(shard(changes, me, n))
            if not lag_join:
                b_in.update([])
        a_in.on_completed()
        if lag_join:
            for _ in updates:
                b_in.update([])
        b_in.on_completed()
        probe.wait(len(updates) - 1)
        sizes = arrangement_sizes(comp)
        comp.join(timeout=60)
        return got.results, sizes
    return program


def _check_every_epoch(parts, updates) -> None:
    acc: Counter = Counter()
    for e in range(len(updates)):
        for results, _ in parts:
            for r, d in results.get(e, []):
                acc[r] += d
        assert +acc == _oracle(_at(updates, e)), f"epoch {e}"


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 3), (2, 1), (2, 2)])
@pytest.mark.parametrize("seed", [1, 2])
def test_reductions_of_an_arrangement_match_the_oracle_every_epoch(seed, processes, workers):
    updates = _updates(seed, 6, 60)
    parts = naiad.execute(_program(updates), processes=processes, workers=workers)
    _check_every_epoch(parts, updates)


@pytest.mark.parametrize("processes", [1, 2])
def test_reductions_beside_a_join_that_holds_compaction_back(processes):
    updates = _updates(5, 6, 40)
    parts = naiad.execute(_program(updates, lag_join=True), processes=processes, workers=2)
    _check_every_epoch(parts, updates)


def test_the_general_path_gives_what_the_ordered_one_does(monkeypatch):
    """The reductions' notifications forced onto the general path (every time compared)."""
    monkeypatch.setattr(ReduceVertex, "ordered", False)
    updates = _updates(3, 5, 50)
    _check_every_epoch(naiad.execute(_program(updates), workers=2), updates)


def test_a_reduction_keeps_no_copy_of_the_arrangement():
    """Per worker: the arrangement's trace, each reduction's output trace and nothing else
    of the input (a reduction of the collection itself keeps its input too)."""
    updates = _updates(4, 3, 50)
    [(_, sizes)] = naiad.execute(_program(updates), workers=2)
    names = Counter(stage for stage, _, _ in sizes)
    assert sum(n for s, n in names.items() if s.startswith("arrange")) == 2
    reductions = [(s, u) for s, _, u in sizes if s.split("(")[0] in
                  ("count", "sum", "min", "max", "group_by")]
    assert len(reductions) == 5 * 2                  # one output trace per worker
    live_keys = len({x for x, _ in _at(updates, 2)})
    assert all(u <= 3 * live_keys for _, u in reductions)


class _Hubs:
    """A step along the edges, and the nodes of out-degree 3 or more (a count of the same
    arrangement)."""

    @staticmethod
    def body(arr, x):
        fwd = x.join(arr, key=lambda n: n, result=lambda n, e: e[1])
        return [fwd, arr.count().filter(lambda kn: kn[1] >= 3).map(lambda kn: kn[0])]

    @staticmethod
    def extra(edges):
        return {s for s, d in Counter(s for s, _ in edges).items() if d >= 3}


def test_reductions_of_an_arrangement_inside_a_loop():
    """Reachability where a node with out-degree 3 or more is reached from the start: the
    entered edges are arranged once inside the loop, read by a join and a count."""
    rng = random.Random(9)
    edges = sorted({(rng.randrange(40), rng.randrange(40)) for _ in range(70)})
    reach_in_loop(edges, [0], _Hubs)


@pytest.mark.timeout(180)
def test_reductions_of_an_arrangement_survive_sigkill(tmp_path):
    """Process 1 killed at epoch 5 of 9 (checkpoints every 2 epochs): the reductions restore
    their outputs and read the restored shared trace."""
    from tests.test_recovery import kill_stage
    updates = _updates(11, 9, 50)
    marker = tmp_path / "killed"

    def program(comp):
        a_in = dd.new_input(comp, name="a")
        a = dd.Collection(kill_stage(a_in.collection.stream, marker, 5, 1))
        got = _build(a, a.arrange(key=lambda r: r[0])).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        for changes in updates:
            a_in.update(shard(changes, me, n))
        a_in.on_completed()
        comp.join(timeout=120)
        return got.results, None
    parts = naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=2)
    assert marker.exists(), "no process was killed"
    _check_every_epoch(parts, updates)


def test_errors_of_reductions_of_an_arrangement_name_the_operator_and_function():
    def run(build, changes):
        def program(comp):
            inp = dd.new_input(comp, name="a")
            got = build(inp.collection.arrange(key=_first)).collect()
            comp.activate()
            for c in changes:
                inp.update(c)
            inp.on_completed()
            comp.join(timeout=30)
            return got.results
        return naiad.execute(program)

    def bad_value(r):
        return r[5]
    with pytest.raises(VertexError, match=r"stage 'sum\(_first, bad_value\)'.* at Timestamp"
                       r"\(0\).*the value bad_value raised IndexError.*called with \(1, 2\)"):
        run(lambda arr: arr.sum(bad_value), [[((1, 2), 1)]])
    with pytest.raises(VertexError, match=r"min\(_first, <lambda>\).*key 1 has a negative "
                                          r"count -1 for \(1, 2\)"):
        run(lambda arr: arr.min(lambda r: r[1]), [[((1, 2), -1)]])
    with pytest.raises(VertexError, match=r"group_by\(_first, lists\).*the reducer lists "
                                          r"returned unhashable records"):
        run(lambda arr: arr.group_by(lists), [[((1, 2), 1)]])
    with pytest.raises(TypeError, match=r"group_by needs a callable reducer.*got int 3"):
        run(lambda arr: arr.group_by(3), [])


def _first(r):
    return r[0]


def lists(k, rs):
    return [[k, len(rs)]]
