"""The fast paths of differential dataflow against the general ones they stand for.

* :meth:`Trace.accumulate_all` and :meth:`Trace.accumulate` with a shared ``below`` (the first
  epoch of a loop, whose times form a chain) against the plain :func:`accumulate` of a key's
  updates, over random interleavings of batches and reads.
* The keying of a reduction's input (changes summed by record in C, then keyed; additions
  only counted by record) against :func:`consolidate`, and ``operator.itemgetter`` key and
  value functions (read inline) against the same lambdas.
* Whole programs (reductions inside loops, connected components) with the ordered
  notification of :class:`ReduceVertex` on and off: the same changes at every epoch.
"""

from __future__ import annotations

import random
from operator import itemgetter
from typing import List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from naiad import Timestamp
from linq.differential.collection import _sum_changes
from linq.differential.operators import ReduceVertex
from linq.differential.testing import run_dd
from linq.differential.trace import Trace, accumulate, consolidate
from samples import dd_components
from samples.graphs import random_edges
from tests import test_differential_property as prop

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

# A step: ("add", iteration, [(key, value, diff)]) or ("read", iteration, key).
steps = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5),
              st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from([-1, 1, 2])),
                       max_size=8)),
    st.tuples(st.just("read"), st.integers(0, 5), st.integers(0, 3))), max_size=40)


@settings(max_examples=300, **SETTINGS)
@given(steps, st.integers(0, 2))
def test_chain_reads_equal_the_plain_accumulation(script, epoch):
    tr = Trace()
    history: List[Tuple[int, int, Timestamp, int]] = []
    for kind, i, what in script:
        time = Timestamp(epoch, (i,))
        if kind == "add":
            tr.add_batch(what, time)
            history.extend((k, v, time, d) for k, v, d in what)
            continue
        key = what
        want = accumulate([(v, t, d) for k, v, t, d in history if k == key], time)
        below = tr.chain_at(time)
        assert below is not None            # one epoch, one loop counter: always a chain
        if all(below.values()):
            assert tr.accumulate_all(key, time) == want
        else:
            acc, later = tr.accumulate(key, time, below)
            assert acc == want
            assert all(not below[t] for _, t, _ in later)


def test_chain_at_refuses_two_epochs_and_incomparable_times():
    tr = Trace()
    tr.add_batch([(1, 1, 1)], Timestamp(0, (0,)))
    tr.add_batch([(1, 2, 1)], Timestamp(1, (0,)))
    assert tr.chain_at(Timestamp(1, (1,))) is None          # updates of two epochs
    nested = Trace()
    nested.add_batch([(1, 1, 1)], Timestamp(0, (0, 3)))
    assert nested.chain_at(Timestamp(0, (1, 0))) is None    # (0, 3) and (1, 0): incomparable
    assert nested.chain_at(Timestamp(0, (1, 3))) == {Timestamp(0, (0, 3)): True}


@settings(max_examples=300, **SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from([-2, -1, 1, 1, 1, 3])),
                max_size=30))
def test_summed_changes_equal_consolidate(batch):
    got = {r: d for r, d in _sum_changes(batch).items() if d}
    assert got == dict(consolidate(batch))


@settings(max_examples=200, **SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 6), st.just(1)), max_size=30))
def test_summed_additions_equal_consolidate(batch):
    # A batch of +1 changes only: counted by record without the pairs.
    got = {r: d for r, d in _sum_changes(batch).items() if d}
    assert got == dict(consolidate(batch))


records = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)),
                   min_size=1, max_size=12)


@settings(max_examples=25, **SETTINGS)
@given(records, records, st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3),
                                            st.integers(0, 2)), max_size=4),
       st.sampled_from([(0, 1), (2, -1), (1, None)]), st.sampled_from([1, 2]))
def test_itemgetter_keys_give_what_the_same_lambdas_give(first, second, removed, kv, workers):
    # operator.itemgetter key and value functions are read inline (r[i]); lambdas are called.
    i, j = kv
    updates = [[(r, 1) for r in second] + [(r, -1) for r in removed if r in first]]

    def build(key, value, other_key):
        def program(c):
            mins = c.min(key=key, value=value) if value is not False else c.distinct()
            return c.join(mins, key=key, other_key=other_key, result=lambda a, b: (a, b))
        return program
    ig = build(itemgetter(i), itemgetter(j) if j is not None else False, itemgetter(0))
    lam = build(lambda r: r[i], (lambda r: r[j]) if j is not None else False, lambda r: r[0])
    assert (run_dd(ig, first, updates, workers=workers)
            == run_dd(lam, first, updates, workers=workers))


def test_a_reduction_of_unhashable_records_keys_by_its_functions():
    got = run_dd(lambda c: c.min(key=lambda r: r[0], value=lambda r: r[1]),
                 [[1, 5], [1, 3], [2, 7]], [[([1, 3], -1)]])
    assert got == {0: [((1, 3), 1), ((2, 7), 1)], 1: [((1, 3), -1), ((1, 5), 1)]}


def _both(fn):
    """``fn()`` with the ordered notification on, then off."""
    try:
        ReduceVertex.ordered = True
        on = fn()
        ReduceVertex.ordered = False
        off = fn()
    finally:
        ReduceVertex.ordered = True
    return on, off


loop_programs = st.lists(st.sampled_from(sorted(prop.OPS)), min_size=0, max_size=2).map(
    lambda p: p + ["iterate"])


@pytest.mark.parametrize("workers", [1, 2])
@settings(max_examples=15, **SETTINGS)
@given(program=loop_programs, ha=prop.histories(), hb=prop.histories())
def test_loops_give_the_same_changes_with_and_without_the_ordered_path(workers, program, ha, hb):
    n = max(len(ha), len(hb))
    ha = ha + [[]] * (n - len(ha))
    hb = hb + [[]] * (n - len(hb))
    on, off = _both(lambda: prop.run(program, ha, hb, 1, workers))
    assert on == off
    prop.check(program, ha, hb, workers=workers)


@pytest.mark.parametrize("seed", range(3))
def test_components_with_and_without_the_ordered_path(seed):
    edges = random_edges(120, 150, seed=seed)
    updates = dd_components.rewirings(edges, 4, seed=seed)
    rng = random.Random(seed)
    workers = rng.choice([1, 2])
    on, off = _both(lambda: dd_components.run(edges, updates, workers=workers, check=True))
    assert ({e: sorted(c) for e, c in on[0]["results"].items()}
            == {e: sorted(c) for e, c in off[0]["results"].items()})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(0, 4)),
                min_size=1, max_size=40),
       st.tuples(st.integers(0, 6), st.integers(0, 4), st.integers(0, 4)))
def test_all_at_or_before_asks_the_maximal_times_as_a_scan_of_every_time_would(times, probe):
    tr = Trace()
    for k, (e, i, j) in enumerate(times):
        tr.add_batch([(k % 5, k, 1)], Timestamp(e, (i, j)))
    held = {Timestamp(e, (i, j)) for e, i, j in times}
    t = Timestamp(probe[0], (probe[1], probe[2]))
    from linq.differential.lattice import le
    assert tr.all_at_or_before(t) == all(le(x, t) for x in held)
    assert set(tr.tops) <= held
    assert all(not le(a, b) for a in tr.tops for b in tr.tops if a is not b)


def test_the_maximal_times_stay_few_over_many_epochs():
    # A loop's times over 2,000 epochs: every epoch adds iterations 0..3, the set of times
    # grows with the epochs, the maximal ones do not (one per iteration depth at most).
    tr = Trace()
    for e in range(2000):
        for i in range(4):
            tr.add_batch([(e % 7, i, 1)], Timestamp(e, (i,)))
    assert len(tr.times) == 8000
    assert len(tr.tops) <= 4
    assert tr.all_at_or_before(Timestamp(1999, (3,)))
    assert not tr.all_at_or_before(Timestamp(1999, (2,)))
