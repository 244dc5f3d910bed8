"""Every LINQ operator against a plain-Python oracle, per epoch, in every cluster configuration.

All operators run in one dataflow over the same seeded random epochs (one run per
configuration keeps the suite fast when configurations start processes); each output record is
tagged with its operator's name so that the oracle can be compared per operator and per epoch.
"""

import random
import threading
import time
from collections import Counter, defaultdict

import pytest

import linq  # noqa: F401 - installs the Stream methods
import naiad
import stages
from linq.core import PerTimeVertex


def key0(r):
    return r[0]


def add(a, b):
    return a + b


def left_of(s):
    return s.where(lambda x: x % 2 == 0).select(lambda x: (x % 7, x))


def right_of(s):
    return s.where(lambda x: x % 3 == 0).select(lambda x: (x % 7, -x))


def bump(t):
    return t.select(lambda x: x + 1).where(lambda x: x % 7 != 0)


# name -> (build(stream) -> stream, oracle(list of ints) -> list)
SUITE = {
    "select": (lambda s: s.select(lambda x: 3 * x + 1), lambda xs: [3 * x + 1 for x in xs]),
    "where": (lambda s: s.where(lambda x: x % 3 == 0), lambda xs: [x for x in xs if x % 3 == 0]),
    "select_many": (lambda s: s.select_many(lambda x: [(x, i) for i in range(x % 4)]),
                    lambda xs: [(x, i) for x in xs for i in range(x % 4)]),
    "concat": (lambda s: s.select(lambda x: -x).concat(s.where(lambda x: x < 5)),
               lambda xs: [-x for x in xs] + [x for x in xs if x < 5]),
    "concat_self": (lambda s: s.concat(s.where(lambda x: x < 5), s),
                    lambda xs: xs + xs + [x for x in xs if x < 5]),
    "distinct": (lambda s: s.distinct(), lambda xs: list(set(xs))),
    "union": (lambda s: s.where(lambda x: x < 15).union(s.where(lambda x: x > 10)),
              lambda xs: list(set(xs))),
    "intersect": (lambda s: s.where(lambda x: x % 2 == 0).intersect(s.where(lambda x: x % 3 == 0)),
                  lambda xs: list({x for x in xs if x % 6 == 0})),
    "except_": (lambda s: s.except_(s.where(lambda x: x % 5 == 0)),
                lambda xs: list({x for x in xs if x % 5 != 0})),
    "count": (lambda s: s.count(), lambda xs: list(Counter(xs).items())),
    "wordcount": (lambda s: s.select(lambda x: f"w{x % 13}").count(),
                  lambda xs: list(Counter(f"w{x % 13}" for x in xs).items())),
    "group_by": (lambda s: s.group_by(lambda x: x % 5, lambda k, rs: [(k, tuple(sorted(rs)))]),
                 lambda xs: _groups(xs, lambda x: x % 5)),
    "cogroup_by": (lambda s: left_of(s).cogroup_by(
                       right_of(s), key0, key0,
                       lambda k, m, t: [(k, tuple(sorted(m)), tuple(sorted(t)))]),
                   lambda xs: _cogroups(xs)),
    "join": (lambda s: left_of(s).join(right_of(s), key0, key0, lambda a, b: (a[0], a[1], b[1])),
             lambda xs: [(a[0], a[1], b[1]) for a in _left(xs) for b in _right(xs)
                         if a[0] == b[0]]),
    "min": (lambda s: s.min(lambda x: x % 4, lambda x: -x),
            lambda xs: _fold(xs, lambda x: x % 4, lambda x: -x, min)),
    "max": (lambda s: s.max(lambda x: x % 4), lambda xs: _fold(xs, lambda x: x % 4, None, max)),
    "aggregate": (lambda s: s.aggregate(lambda x: x % 6, lambda x: x, add),
                  lambda xs: _fold(xs, lambda x: x % 6, lambda x: x, add)),
    "partition_by": (lambda s: s.partition_by(lambda x: x % 3), lambda xs: list(xs)),
    "iterate": (lambda s: s.iterate(bump, 3), lambda xs: _bumped(xs, 3, accumulate=False)),
    "iterate_and_accumulate": (lambda s: s.iterate_and_accumulate(bump, 3),
                               lambda xs: _bumped(xs, 3, accumulate=True)),
}


def _left(xs):
    return [(x % 7, x) for x in xs if x % 2 == 0]


def _right(xs):
    return [(x % 7, -x) for x in xs if x % 3 == 0]


def _groups(xs, key):
    g = defaultdict(list)
    for x in xs:
        g[key(x)].append(x)
    return [(k, tuple(sorted(v))) for k, v in g.items()]


def _cogroups(xs):
    g = defaultdict(lambda: ([], []))
    for r in _left(xs):
        g[r[0]][0].append(r)
    for r in _right(xs):
        g[r[0]][1].append(r)
    return [(k, tuple(sorted(m)), tuple(sorted(t))) for k, (m, t) in g.items()]


def _fold(xs, key, value, combine):
    acc = {}
    for x in xs:
        v = x if value is None else value(x)
        k = key(x)
        acc[k] = combine(acc[k], v) if k in acc else v
    return list(acc.items())


def _bumped(xs, n, accumulate):
    out, cur = [], list(xs)
    for _ in range(n):
        cur = [x + 1 for x in cur if (x + 1) % 7 != 0]
        out.extend(cur)
    return out if accumulate else cur


def build_all(comp, s):
    tagged = [build(s).select(lambda r, name=name: (name, r)) for name, (build, _) in SUITE.items()]
    return tagged[0].concat(*tagged[1:])


def by_operator(results):
    """{epoch: [(name, r)]} -> {name: {epoch: sorted records}}."""
    out = defaultdict(dict)
    for e, recs in results.items():
        for name in SUITE:
            out[name][e] = []
        for name, r in recs:
            out[name][e].append(r)
    return {name: {e: sorted(v, key=repr) for e, v in per.items()} for name, per in out.items()}


def random_epochs(seed):
    rng = random.Random(seed)
    sizes = [0, 1, 7, 300, 1500]
    return [[rng.randrange(r) for _ in range(n)] for n, r in zip(sizes, [5, 5, 10, 40, 60])]


@pytest.mark.parametrize("seed", [1])
def test_every_operator_matches_oracle(cluster, seed):
    epochs = random_epochs(seed)
    got = by_operator(cluster.run(build_all, epochs, sort=False))
    for name, (_, oracle) in SUITE.items():
        want = {e: sorted(oracle(xs), key=repr) for e, xs in enumerate(epochs)}
        assert got[name] == want, name


def test_operators_agree_over_seeds_single_worker():
    from naiad.testing import run
    for seed in (2, 3):
        epochs = random_epochs(seed)
        got = by_operator(run(build_all, epochs, sort=False))
        for name, (_, oracle) in SUITE.items():
            want = {e: sorted(oracle(xs), key=repr) for e, xs in enumerate(epochs)}
            assert got[name] == want, (seed, name)


@pytest.mark.parametrize("workers", [1, 3])
def test_per_time_state_is_dropped_after_notification(workers):
    """After the run no PerTimeVertex holds state: each time's state went at its notification."""
    epochs = random_epochs(4)
    comp = naiad.Computation(workers=workers)
    inp = comp.new_input()
    got = build_all(comp, inp.stream).collect()
    comp.activate()
    for e in epochs:
        inp.on_next(e)
    inp.on_completed()
    comp.join(timeout=60)
    leftovers = [(v.stage.name, dict(v.state)) for w in comp.local_workers for v in w.vertices
                 if isinstance(v, PerTimeVertex) and v.state]
    assert leftovers == []
    assert sum(len(r) for r in got.results.values()) > 0


def test_keyed_operators_precombine_before_exchanging():
    """count/min/max/aggregate: a pipelined local stage, then an exchange on the key."""
    comp = naiad.Computation(workers=2)
    inp = comp.new_input()
    s = inp.stream
    s.count()
    s.min(lambda x: x)
    s.aggregate(lambda x: x, lambda x: x, add)
    graph = comp.graph
    for st in graph.stages:
        for c in st.inputs:
            exchanged = c.exchange.key is not None
            if st.name.endswith(".local"):
                assert not exchanged, st.name
            elif st.name.split("(")[0] in ("count", "min", "aggregate"):
                assert exchanged, st.name


def test_select_where_distinct_do_not_exchange_unless_keyed():
    comp = naiad.Computation(workers=2)
    s = comp.new_input().stream
    s.select(abs).where(bool).select_many(lambda x: [x])
    for st in comp.graph.stages:
        for c in st.inputs:
            assert c.exchange.key is None, st.name


# ---- streaming: emits before the time is complete ------------------------------------------
STREAMING = {
    "select": (lambda a, hold: a.concat(hold).select(lambda x: x * 2), [2, 4, 6]),
    "where": (lambda a, hold: a.concat(hold).where(lambda x: x > 1), [2, 3]),
    "concat": (lambda a, hold: a.concat(hold), [1, 2, 3]),
    "distinct": (lambda a, hold: a.concat(a, hold).distinct(), [1, 2, 3]),
    "union": (lambda a, hold: a.union(a.concat(hold)), [1, 2, 3]),
    "intersect": (lambda a, hold: a.intersect(a.concat(hold)), [1, 2, 3]),
    "join": (lambda a, hold: a.join(a.concat(hold), abs, abs, lambda x, y: x + y), [2, 4, 6]),
}
BLOCKING = {
    "count": lambda a, hold: a.concat(hold).count(),
    "group_by": lambda a, hold: a.concat(hold).group_by(abs, lambda k, rs: [k]),
    "except_": lambda a, hold: a.except_(hold),
    "aggregate": lambda a, hold: a.concat(hold).aggregate(abs, abs, add),
}


class _Probe(naiad.Vertex):
    def __init__(self, seen, lock):
        super().__init__()
        self.seen, self.lock = seen, lock

    def on_recv_batch(self, edge, records, time):
        with self.lock:
            self.seen.extend(records)


def _arrivals_before_completion(build, want_n, wait, workers):
    seen, lock = [], threading.Lock()
    comp = naiad.Computation(workers=workers)
    a, hold = comp.new_input(name="a"), comp.new_input(name="hold")
    stages.sink(build(a.stream, hold.stream), lambda: _Probe(seen, lock))
    comp.activate()
    a.on_next([1, 2, 3])            # epoch 0 of `hold` stays open: no notification at 0
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with lock:
            if len(seen) >= want_n:
                break
        time.sleep(0.005)
    with lock:
        early = sorted(seen)
    a.on_completed()
    hold.on_completed()
    comp.join(timeout=30)
    return early, sorted(seen)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", sorted(STREAMING))
def test_streaming_operators_emit_before_notification(name, workers):
    build, want = STREAMING[name]
    early, final = _arrivals_before_completion(build, len(want), 10.0, workers)
    assert early == sorted(want)
    assert final == sorted(want)


@pytest.mark.parametrize("name", sorted(BLOCKING))
def test_blocking_operators_wait_for_notification(name):
    early, final = _arrivals_before_completion(BLOCKING[name], 1, 0.2, 2)
    assert early == []
    assert final != []


def test_methods_are_installed_and_functions_usable_directly():
    for name in linq.OPERATORS:
        assert getattr(naiad.Stream, name) is linq.OPERATORS[name]
    from naiad.testing import run
    assert run(lambda comp, s: linq.select(s, str.upper), [["a"]]) == {0: ["A"]}


# ---- recovery: operators' per-time state survives a rollback ---------------------------------
def _flaky(marker):
    def flaky(r):
        import os
        if r[0] == 3 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure")
        return r
    return flaky


@pytest.mark.parametrize("processes", [1, 2])
def test_queries_recover_from_a_failure_exactly_once(processes, tmp_path):
    import os
    marker = str(tmp_path / "failed-once")
    epochs = [[(e, f"w{i % 7}") for i in range(e, e + 40)] for e in range(6)]
    flaky = _flaky(marker)

    def program(comp):
        inp = comp.new_input()
        s = inp.stream.select(flaky).select(lambda r: r[1])
        got = s.count().join(s.distinct(), key0, lambda w: w, lambda kn, w: kn).collect()
        comp.activate()
        for e in epochs:
            inp.on_next(e if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join()
        return got.results

    parts = naiad.execute(program, processes=processes, workers=2,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=1,
                          max_restarts=2)
    assert os.path.exists(marker)
    merged = defaultdict(list)
    for part in parts:
        for e, recs in part.items():
            merged[e].extend(recs)
    want = {e: sorted(Counter(w for _, w in recs).items()) for e, recs in enumerate(epochs)}
    assert {e: sorted(v) for e, v in merged.items()} == want


@pytest.mark.parametrize("workers", [1, 2])
def test_aggregate_with_operator_add_folds_each_key_as_plain_python_does(workers):
    """operator.add is inlined: each key's sum starts from its own first value (a float of one
    key must not turn another key's ints into floats, lose a big int's digits, or break the
    sum of strings), and itemgetter(0)/itemgetter(1) read records as the getters would (a
    dict's values at 0 and 1, not its keys)."""
    import operator
    from decimal import Decimal
    from naiad.testing import run
    key, value = operator.itemgetter(0), operator.itemgetter(1)
    records = [("f", 0.5), ("i", 7), ("big", 10**20), ("big", 1), ("s", "x"), ("f", -0.25),
               ("d", Decimal("0.1")), ("d", Decimal("0.2")), ("t", (1,)), ("z", -0.0)]
    got = run(lambda comp, s: s.aggregate(key, value, operator.add), [records], workers=workers)
    want = {}
    for k, v in records:
        want[k] = v if k not in want else want[k] + v
    assert sorted(got[0], key=repr) == sorted(want.items(), key=repr)
    assert all(type(v) is type(want[k]) for k, v in got[0])
    assert repr(dict(got[0])["z"]) == "-0.0"
    dicts = [{0: "tea", 1: 2}, {0: "tea", 1: 3}, {0: "jam", 1: 1}]
    got = run(lambda comp, s: s.aggregate(key, value, operator.add), [dicts], workers=workers)
    assert sorted(got[0]) == [("jam", 1), ("tea", 5)]
    got = run(lambda comp, s: s.max(key, value), [dicts], workers=workers)
    assert sorted(got[0]) == [("jam", 1), ("tea", 3)]


def test_union_names_itself_in_its_errors():
    from naiad.testing import run
    with pytest.raises(naiad.VertexError, match=r"stage 'union'.*union: a record of type list"):
        run(lambda comp, s: s.union(s), [[[1], [2]]])
