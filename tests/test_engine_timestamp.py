"""The paper's order on timestamps: a partial order, of which Python's sort order is a linear extension."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naiad import Timestamp

DEPTH = 2
small = st.integers(min_value=0, max_value=3)


def timestamps(depth: int = DEPTH):
    return st.builds(Timestamp, small, st.tuples(*[small] * depth))


@settings(max_examples=300, deadline=None)
@given(timestamps(), timestamps(), timestamps())
def test_less_equal_is_a_partial_order(a, b, c):
    assert a.less_equal(a)                                           # reflexive
    if a.less_equal(b) and b.less_equal(a):                          # antisymmetric
        assert a == b
    if a.less_equal(b) and b.less_equal(c):                          # transitive
        assert a.less_equal(c)


@settings(max_examples=300, deadline=None)
@given(timestamps(), timestamps())
def test_less_equal_is_the_papers_order(a, b):
    """Epochs compared as numbers, loop counters compared lexicographically."""
    assert a.less_equal(b) == (a.epoch <= b.epoch and list(a.counters) <= list(b.counters))
    assert a.less_than(b) == (a.less_equal(b) and a != b)


@settings(max_examples=200, deadline=None)
@given(st.lists(timestamps(), max_size=12))
def test_sorting_is_a_linear_extension(times):
    ordered = sorted(times)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            assert not b.less_than(a), f"{b!r} < {a!r} but sorts after it"


@settings(max_examples=200, deadline=None)
@given(timestamps(), timestamps())
def test_join_is_the_least_upper_bound(a, b):
    j = a.join(b)
    assert a.less_equal(j) and b.less_equal(j)
    if a.less_equal(b):
        assert j == b


def test_the_order_is_partial():
    a, b = Timestamp(0, (5,)), Timestamp(1, (2,))
    assert not a.less_equal(b) and not b.less_equal(a)
    assert a < b            # Python's sort order is total and still puts one first


@given(timestamps())
def test_timestamps_are_hashable_and_picklable(t):
    assert pickle.loads(pickle.dumps(t)) == t
    assert type(pickle.loads(pickle.dumps(t))) is Timestamp
    assert {t: 1}[Timestamp(t.epoch, list(t.counters))] == 1
    assert t.depth == DEPTH


@pytest.mark.parametrize("t,text", [(Timestamp(3), "Timestamp(3)"),
                                    (Timestamp(1, (0, 2)), "Timestamp(1, (0, 2))")])
def test_repr(t, text):
    assert repr(t) == text
