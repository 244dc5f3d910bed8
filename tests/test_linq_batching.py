"""Operators work on batches: the Python calls they make do not grow with the number of records,
apart from the user's own functions."""

import threading
from collections import Counter

import pytest

import linq  # noqa: F401 - installs the Stream methods
import naiad


def plus_one(x):
    return x + 1


def is_even(x):
    return x % 2 == 0


def pair(x):
    return (x, x)


def mod7(x):
    return x % 7


def same(x):
    return x


def add(a, b):
    return a + b


def ones(k, rs):
    return [k]


USER = {f.__code__ for f in (plus_one, is_even, pair, mod7, same, add, ones)}

QUERIES = {
    "select": lambda s: s.select(plus_one),
    "where": lambda s: s.where(is_even),
    "select_many": lambda s: s.select_many(pair),
    "count": lambda s: s.count(),
    "distinct": lambda s: s.distinct(),
    "group_by": lambda s: s.group_by(mod7, ones),
    "aggregate": lambda s: s.aggregate(mod7, mod7, add),
    "join": lambda s: s.join(s.where(is_even), same, same, add),
}


def framework_calls(query, n, workers, distinct):
    """Python-level calls made by the worker threads, other than to the user's functions."""
    calls = Counter()

    def profile(frame, event, arg):
        if event == "call":
            calls["user" if frame.f_code in USER else "framework"] += 1

    comp = naiad.Computation(workers=workers)
    inp = comp.new_input()
    query(inp.stream).collect()
    # Worker threads pick the hook up when they start running, which under load can be well
    # after activate() returns: it is cleared only once they have all finished.
    threading.setprofile(profile)
    try:
        comp.activate()
        inp.on_next([i % distinct for i in range(n)])
        inp.on_completed()
        comp.join(timeout=120)
    finally:
        threading.setprofile(None)
    return calls["framework"], calls["user"]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_framework_calls_do_not_grow_with_records(name):
    # The exchange hashes each distinct key once (naiad.partition), so keys repeat here; a join
    # of repeated keys would grow quadratically, so it runs on one worker over distinct keys.
    # distinct exchanges by the record itself, through a Python identity function called per
    # record by the exchange; on one worker there is no exchange.
    workers, distinct = (1, 10 ** 9) if name in ("join", "distinct") else (2, 1000)
    small, _ = framework_calls(QUERIES[name], 2_000, workers, distinct)
    big, user = framework_calls(QUERIES[name], 40_000, workers, distinct)
    assert user >= 40_000 or name in ("count", "distinct")
    assert big - small < 400, (small, big)
