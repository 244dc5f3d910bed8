"""``loop.enter_at``: records entering a loop at iterations of their own, against an oracle.

* A loop whose body takes the records entered by iteration ``i`` and the successors of the
  variable's records, summed as a set: every epoch's result (to the fixed point, or after
  ``max_iterations``) against a plain Python iteration of the same definition, on seeded random
  histories of additions and removals, 1-2 workers and 1-2 processes.
* Connected components with prioritized labels against union-find after every rewiring, and
  equal to the unprioritized sample's labels.
* An ``at`` returning something other than an iteration is named.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Dict, Optional

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from linq import UserFunctionError
from linq.differential.testing import run_dd
from samples import dd_components
from samples.graphs import random_edges
from tests.test_differential_property import histories

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
BOUND = 12                 # successors stop here: the loop reaches a fixed point


def _at(r: int) -> int:
    return (r * 7) % 5


def _succ(r: int) -> int:
    return r + 3 if r + 3 < BOUND else r


def _never(r: int) -> bool:
    return False


def _build(max_iterations: Optional[int]):
    def build(c):
        return c.filter(_never).iterate(
            lambda loop, x: loop.enter_at(c, _at).concat(x.map(_succ)).distinct(),
            max_iterations=max_iterations)
    return build


def _oracle(live: Counter, max_iterations: Optional[int]) -> Dict[int, int]:
    """x[0] = {}; x[i + 1] = set({r live: at(r) <= i} | {succ(y) for y in x[i]})."""
    x: set = set()
    last = max((_at(r) for r in live), default=0)
    i = 0
    while True:
        nxt = {r for r, n in live.items() if n > 0 and _at(r) <= i} | {_succ(y) for y in x}
        i += 1
        if max_iterations is not None and i == max_iterations:
            return {r: 1 for r in nxt}
        if nxt == x and i > last:
            return {r: 1 for r in x}
        x = nxt


def _check(history, max_iterations, processes=1, workers=1):
    got = run_dd(_build(max_iterations), [r for r, _ in history[0]], history[1:],
                 processes=processes, workers=workers)
    live: Counter = Counter()
    acc: Counter = Counter()
    for e, changes in enumerate(history):
        for r, d in changes:
            live[r] += d
        for r, d in got.get(e, []):
            acc[r] += d
        want = _oracle(live, max_iterations)
        assert {r: n for r, n in acc.items() if n} == want, f"epoch {e}"


@settings(max_examples=40, **SETTINGS)
@given(histories(bound=BOUND), st.sampled_from([None, 1, 2, 4, 7]), st.sampled_from([1, 2]))
def test_enter_at_equals_the_oracle(history, max_iterations, workers):
    history[0] = [(r, 1) for r, d in history[0] if d > 0]       # epoch 0: additions only
    _check(history, max_iterations, workers=workers)


@settings(max_examples=3, **SETTINGS)
@given(histories(bound=BOUND))
def test_enter_at_equals_the_oracle_over_processes(history):
    history[0] = [(r, 1) for r, d in history[0] if d > 0]
    _check(history, None, processes=2, workers=2)


@pytest.mark.parametrize("seed", range(4))
def test_prioritized_components_equal_union_find_and_the_plain_loop(seed):
    rng = random.Random(seed)
    edges = random_edges(150, rng.randrange(100, 220), seed=seed)
    updates = dd_components.rewirings(edges, 4, seed=seed)
    processes, workers = rng.choice([(1, 1), (1, 2), (2, 1)])
    prio = dd_components.run(edges, updates, processes=processes, workers=workers,
                             check=True, prioritized=True)
    plain = dd_components.run(edges, updates, check=True)

    def labels(out):
        acc: Counter = Counter()
        for o in out:
            for changes in o["results"].values():
                for r, d in changes:
                    acc[r] += d
        return {r for r, n in acc.items() if n}
    assert labels(prio) == labels(plain)


@pytest.mark.parametrize("at,problem", [(lambda r: -1, "returned -1"),
                                        (lambda r: "1", "returned '1'"),
                                        (lambda r: 1 // 0, "ZeroDivisionError")])
def test_a_bad_iteration_is_named(at, problem):
    def build(c):
        return c.iterate(lambda loop, x: loop.enter_at(c, at).concat(x).distinct())
    with pytest.raises(Exception) as err:
        run_dd(build, [1, 2])
    text = str(err.value)
    assert "enter_at" in text and problem in text, text
    assert isinstance(err.value, UserFunctionError) or "UserFunctionError" in text
