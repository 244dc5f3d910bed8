"""iterate and iterate_and_accumulate: fixed counts, per-iteration times, nesting, early exit."""

import random
import time
from collections import Counter, defaultdict

import linq  # noqa: F401 - installs the Stream methods
import naiad
from naiad.testing import run


def double(x):
    return x.select(lambda v: 2 * v)


def collatz(x):
    return x.select(lambda v: v // 2 if v % 2 == 0 else 3 * v + 1)


def spread_and_merge(x):
    """Each value splits into itself and itself + 1, then duplicates merge: a set that grows."""
    return x.select_many(lambda v: [v, v + 1]).distinct()


def count_step(x):
    """(key, n) -> the counts of key // 2: keyed operators at every iteration."""
    return (x.select_many(lambda kn: [kn[0] // 2] * kn[1]).count())


def inner(y):
    return y.select(lambda v: v + 1).distinct()


def outer(x):
    return x.iterate(inner, 2).select(lambda v: v * 10)


def outer_accumulating(x):
    return x.iterate_and_accumulate(inner, 2).where(lambda v: v < 10 ** 6)


def inner_count(y):
    return y.select(lambda kv: kv[0]).count().select(lambda kv: (kv[0] + 1, kv[1]))


def outer_count(x):
    return x.iterate(inner_count, 3).select(lambda kv: (kv[0] * 2, kv[1]))


LOOPS = {
    "double": (lambda s: s.iterate(double, 4), lambda xs: [16 * v for v in xs]),
    "collatz_acc": (lambda s: s.iterate_and_accumulate(collatz, 3),
                    lambda xs: _acc(xs, lambda v: v // 2 if v % 2 == 0 else 3 * v + 1, 3)),
    "spread": (lambda s: s.iterate(spread_and_merge, 3),
               lambda xs: list({v + d for v in xs for d in range(4)})),
    "count": (lambda s: s.select(lambda v: (v, 1)).iterate(count_step, 3),
              lambda xs: list(Counter(v // 8 for v in xs).items())),
    "nested": (lambda s: s.distinct().iterate(outer, 3), lambda xs: _nested(set(xs))),
    "nested_acc": (lambda s: s.distinct().iterate(outer_accumulating, 2),
                   lambda xs: _nested_acc(set(xs))),
    "nested_count": (lambda s: s.select(lambda v: (v % 5, 0)).iterate(outer_count, 2),
                     lambda xs: _nested_count([(v % 5, 0) for v in xs])),
}


def _acc(xs, f, n):
    out, cur = [], list(xs)
    for _ in range(n):
        cur = [f(v) for v in cur]
        out.extend(cur)
    return out


def _nested(xs):
    for _ in range(3):
        xs = {(v + 2) * 10 for v in xs}
    return list(xs)


def _nested_acc(xs):
    cur = list(xs)
    for _ in range(2):   # outer body: inner iterations 0 and 1 emit {v+1} and {v+2}, each distinct
        cur = list({v + 1 for v in cur}) + list({v + 2 for v in cur})
    return cur


def _nested_count(recs):
    for _ in range(2):
        cur = recs
        for _ in range(3):
            counts = Counter(k for k, _ in cur)
            cur = [(k + 1, n) for k, n in counts.items()]
        recs = [(k * 2, n) for k, n in cur]
    return recs


def build_loops(comp, s):
    tagged = [b(s).select(lambda r, name=name: (name, r)) for name, (b, _) in LOOPS.items()]
    return tagged[0].concat(*tagged[1:])


def test_loops_match_oracle(cluster):
    rng = random.Random(7)
    epochs = [[rng.randrange(50) for _ in range(n)] for n in (0, 5, 60)]
    results = cluster.run(build_loops, epochs, sort=False)
    for name, (_, oracle) in LOOPS.items():
        for e, xs in enumerate(epochs):
            got = sorted((r for tag, r in results[e] if tag == name), key=repr)
            assert got == sorted(oracle(xs), key=repr), (name, e)


def test_loop_times_carry_counters_and_leave_without_them():
    seen = defaultdict(list)

    class Record(naiad.Vertex):
        def on_recv_batch(self, edge, records, t):
            seen["inside"].append(t)
            self.send_batch_by(0, records, t)

    import stages
    got = run(lambda comp, s: s.iterate(lambda x: stages.unary(x, Record), 3), [[1], [2]])
    assert got == {0: [1], 1: [2]}
    assert sorted(set(seen["inside"])) == [naiad.Timestamp(e, (c,)) for e in (0, 1)
                                           for c in range(3)]


def test_loop_ends_early_when_the_body_produces_nothing():
    t0 = time.monotonic()
    got = run(lambda comp, s: s.iterate_and_accumulate(
        lambda x: x.select(lambda v: v - 1).where(lambda v: v > 0), 10 ** 9), [[3, 5]])
    assert got == {0: [1, 1, 2, 2, 3, 4]}
    assert time.monotonic() - t0 < 10
    assert run(lambda comp, s: s.iterate(lambda x: x.where(lambda v: v > 9), 5), [[1]]) == {0: []}


def test_iterate_partition_by_routes_feedback():
    got = run(lambda comp, s: s.iterate(lambda x: x.select(lambda v: v + 1), 5,
                                        partition_by=lambda v: v % 3, name="walk"),
              [list(range(20))], workers=3)
    assert got == {0: [v + 5 for v in range(20)]}


def test_single_iteration_is_one_application():
    assert run(lambda comp, s: s.iterate(double, 1), [[3]]) == {0: [6]}
    assert run(lambda comp, s: s.iterate_and_accumulate(double, 1), [[3]]) == {0: [6]}
