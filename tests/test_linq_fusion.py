"""Fused pipelines: random chains of stateless operators, with and without the local
pre-combine of count/aggregate/min/max, give the same results fused and unfused."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given, settings, strategies as st

import linq  # noqa: F401 - installs the Stream methods
from linq import fusion
from linq.core import UserFunctionError
from naiad.testing import run


def inc(x):
    return x + 1


def neg(x):
    return -x


def mod5(x):
    return x % 5


def even(x):
    return x % 2 == 0


def positive(x):
    return x > 0


def twice(x):
    return [x, x]


def upto3(x):
    return range(x % 3)


def first_digit(x):
    return str(abs(x))[0]


STEPS = [("select", inc), ("select", neg), ("select", mod5), ("where", even),
         ("where", positive), ("select_many", twice), ("select_many", upto3)]
TERMINALS = {
    "none": lambda s: s,
    "count": lambda s: s.count(),
    "aggregate": lambda s: s.aggregate(mod5, abs, operator.add),
    "min": lambda s: s.min(first_digit),
    "max": lambda s: s.max(mod5, neg),
    "distinct": lambda s: s.distinct(),
    "join": lambda s: s.join(s.select(inc), mod5, mod5, operator.mul).count(),
}


def build_for(steps, terminal):
    def build(comp, s):
        for kind, f in steps:
            s = getattr(s, kind)(f)
        return TERMINALS[terminal](s)
    return build


def both(monkeypatch, build, epochs, **kwargs):
    results = []
    for fuse in (True, False):
        monkeypatch.setattr(fusion, "FUSE", fuse)
        monkeypatch.setenv("NAIAD_LINQ_FUSE", "1" if fuse else "0")
        results.append(run(build, epochs, **kwargs))
    return results


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), max_size=5),
       terminal=st.sampled_from(sorted(TERMINALS)),
       epochs=st.lists(st.lists(st.integers(-50, 50), max_size=30), min_size=1, max_size=3),
       workers=st.sampled_from([1, 2]))
def test_fused_equals_unfused_on_random_pipelines(steps, terminal, epochs, workers):
    with pytest.MonkeyPatch.context() as mp:
        fused, unfused = both(mp, build_for(steps, terminal), epochs, workers=workers)
    assert fused == unfused


def test_fused_equals_unfused_across_two_processes(monkeypatch):
    steps = [("select_many", twice), ("where", even), ("select", mod5), ("select_many", upto3)]
    epochs = [list(range(-40, 60)), list(range(7))]
    for terminal in ("count", "aggregate", "join"):
        fused, unfused = both(monkeypatch, build_for(steps, terminal), epochs, processes=2)
        assert fused == unfused


def test_chain_runs_in_one_stage():
    """select_many(str.split).where(...).count() is one stage before the exchange."""
    import naiad
    comp = naiad.Computation(workers=2)
    inp = comp.new_input()
    inp.stream.select_many(str.split).where(str.isalpha).count()
    stages = comp.graph.stages
    local = next(st for st in stages if st.name == "count.local")
    assert [stages[c.src].name for c in local.inputs] == ["input"]    # reads the input itself
    for st in stages:
        if st.name.startswith(("select_many", "where")):
            assert not any(st.outputs)                # left behind, read by nobody


def test_error_in_a_fused_step_names_its_operator():
    def bad(x):
        return 1 // (x - 3)

    def build(comp, s):
        return s.select(inc).select(bad).where(even).count()
    with pytest.raises(Exception) as info:
        run(build, [[1, 2, 5]])
    err = info.value
    while err is not None and not isinstance(err, UserFunctionError):
        err = err.__cause__
    assert err is not None and err.operator == "select(bad)" and err.record == "3"


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("fused", [True, False])
def test_float_sums_of_pairs_match_python(workers, fused):
    """The (key, value)-pair fast path of aggregate, straight from the input and after steps."""
    import random
    from collections import defaultdict
    from operator import itemgetter
    rng = random.Random(workers)
    pairs = [(rng.choice("abcdefg"), rng.random()) for _ in range(400)]
    pairs += [("ints", 3), ("ints", 4)]
    want = defaultdict(float)
    for k, v in pairs:
        want[k] += v

    def build(comp, s):
        if fused:
            s = s.select(lambda kv: kv).where(lambda kv: True)
        return s.aggregate(itemgetter(0), itemgetter(1), operator.add)
    got = dict(run(build, [pairs], workers=workers)[0])
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) < 1e-9 for k in want)
