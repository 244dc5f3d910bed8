"""Differential dataflow against a from-scratch oracle, on random programs and random updates.

Every epoch, the accumulated output of the differential computation must equal the program
evaluated from scratch (on plain Counters) over the accumulated inputs.  Programs are random
pipelines of every operator, including joins with a second input, semijoin/antijoin, and
iterate with an entered collection; updates insert and remove random records.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import naiad
from linq import differential as dd
from naiad.testing import shard

M = 23          # records are ints below M: small enough for keys to collide and loops to close

# ---- the operators, each as (differential builder, oracle on Counters) ------------------------


def _mul(x: Counter, f: Callable[[Any], List[Any]]) -> Counter:
    out: Counter = Counter()
    for r, n in x.items():
        for y in f(r):
            out[y] += n
    return out


def _pos(x: Counter) -> Counter:
    return Counter({r: n for r, n in x.items() if n})


def _iterate_body(b_entered_key=6):
    def body(loop, y):
        b = loop.enter(_B[0])
        step = y.join(b, key=lambda r: r % b_entered_key, other_key=lambda s: s % b_entered_key,
                      result=lambda r, s: (r + s) % M)
        return y.concat(step).distinct()
    return body


def _iterate_o(x: Counter, b: Counter) -> Counter:
    cur = Counter({r: 1 for r, n in x.items() if n > 0})
    while True:
        step = Counter()
        for r in cur:
            for s, m in b.items():
                if m > 0 and r % 6 == s % 6:
                    step[(r + s) % M] += 1
        nxt = Counter({r: 1 for r in set(cur) | set(step)})
        if nxt == cur:
            return cur
        cur = nxt


_B: List[Any] = [None]      # the second input's collection while a program is built

OPS: Dict[str, Tuple[Callable, Callable]] = {
    "map": (lambda c: c.map(lambda r: (3 * r + 1) % M),
            lambda x, b: _pos(_mul(x, lambda r: [(3 * r + 1) % M]))),
    "filter": (lambda c: c.filter(lambda r: r % 3 != 0),
               lambda x, b: Counter({r: n for r, n in x.items() if r % 3 != 0})),
    "flat_map": (lambda c: c.flat_map(lambda r: [r, (r + 1) % M]),
                 lambda x, b: _pos(_mul(x, lambda r: [r, (r + 1) % M]))),
    "distinct": (lambda c: c.distinct(), lambda x, b: Counter({r: 1 for r, n in x.items() if n > 0})),
    "count": (lambda c: c.count(lambda r: r % 7).map(lambda kn: (kn[0] * 5 + kn[1]) % M),
              lambda x, b: _pos(Counter(
                  (k * 5 + n) % M for k, n in _groups(x, lambda r: r % 7, lambda r, n: n).items()))),
    "min": (lambda c: c.min(lambda r: r % 5, lambda r: r).map(lambda kv: kv[1]),
            lambda x, b: Counter(min(rs) for rs in _members(x, lambda r: r % 5).values())),
    "max": (lambda c: c.max(lambda r: r % 5, lambda r: r).map(lambda kv: kv[1]),
            lambda x, b: Counter(max(rs) for rs in _members(x, lambda r: r % 5).values())),
    "sum": (lambda c: c.sum(lambda r: r % 4, lambda r: r).map(lambda kv: (kv[0] + kv[1]) % M),
            lambda x, b: _pos(Counter((k + s) % M for k, s in
                                      _groups(x, lambda r: r % 4, lambda r, n: r * n).items()))),
    "group_by": (lambda c: c.group_by(lambda r: r % 4, lambda k, rs: [(k * 7 + len(rs)) % M]),
                 lambda x, b: _pos(Counter((k * 7 + n) % M for k, n in
                                           _groups(x, lambda r: r % 4, lambda r, n: n).items()))),
    "join": (lambda c: c.join(_B[0], key=lambda r: r % 6, other_key=lambda s: s % 6,
                              result=lambda r, s: (r * s + 1) % M),
             lambda x, b: _pos(Counter({})) + _join_o(x, b)),
    "semijoin": (lambda c: c.semijoin(_B[0], key=lambda r: r % M),
                 lambda x, b: Counter({r: n for r, n in x.items() if b.get(r, 0) > 0})),
    "antijoin": (lambda c: c.antijoin(_B[0], key=lambda r: r % M),
                 lambda x, b: Counter({r: n for r, n in x.items() if b.get(r, 0) <= 0})),
    "concat_self": (lambda c: c.concat(c.filter(lambda r: r % 2 == 0)),
                    lambda x, b: x + Counter({r: n for r, n in x.items() if r % 2 == 0})),
    "iterate": (lambda c: c.iterate(_iterate_body()), _iterate_o),
}


def _groups(x: Counter, key, weight) -> Dict[Any, int]:
    out: Dict[Any, int] = {}
    for r, n in x.items():
        if n:
            out[key(r)] = out.get(key(r), 0) + weight(r, n)
    return out


def _members(x: Counter, key) -> Dict[Any, List[Any]]:
    out: Dict[Any, List[Any]] = {}
    for r, n in x.items():
        if n > 0:
            out.setdefault(key(r), []).append(r)
    return out


def _join_o(x: Counter, b: Counter) -> Counter:
    out: Counter = Counter()
    for r, n in x.items():
        for s, m in b.items():
            if r % 6 == s % 6:
                out[(r * s + 1) % M] += n * m
    return _pos(out)


def oracle(program: List[str], x: Counter, b: Counter) -> Counter:
    for op in program:
        x = _pos(OPS[op][1](x, b))
    return x


# ---- running ----------------------------------------------------------------------------------

def run(program: List[str], epochs_a: List[List[Tuple[int, int]]],
        epochs_b: List[List[Tuple[int, int]]], processes: int, workers: int) -> List[Counter]:
    def prog(comp):
        a = dd.new_input(comp, name="a")
        b = dd.new_input(comp, name="b")
        _B[0] = b.collection
        c = a.collection
        for op in program:
            c = OPS[op][0](c)
        got = c.collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        for ea, eb in zip(epochs_a, epochs_b):
            a.update(shard(ea, me, n))
            b.update(shard(eb, me, n))
        a.on_completed()
        b.on_completed()
        comp.join(timeout=120)
        return got.results

    _B[0] = None            # the program travels by value: leave no built graph in it
    try:
        results = naiad.execute(prog, processes=processes, workers=workers)
    finally:
        _B[0] = None
    out = []
    acc: Counter = Counter()
    for e in range(len(epochs_a)):
        seen = set()
        for res in results:
            for r, d in res.get(e, []):
                assert d != 0, f"a zero change for {r!r} at epoch {e}"
                assert r not in seen, f"{r!r} twice in epoch {e}'s changes"
                seen.add(r)
                acc[r] += d
        out.append(_pos(acc))
    return out


@st.composite
def histories(draw, epochs=st.integers(1, 4), bound=M):
    """Per epoch, additions and removals of ints below ``bound`` (no count goes negative)."""
    n = draw(epochs)
    out = []
    live: Counter = Counter()
    for _ in range(n):
        changes = []
        for _ in range(draw(st.integers(0, 6))):
            r = draw(st.integers(0, bound - 1))
            if live[r] > 0 and draw(st.booleans()):
                changes.append((r, -1))
                live[r] -= 1
            else:
                changes.append((r, 1))
                live[r] += 1
        out.append(changes)
    return out


def check(program, ha, hb, processes=1, workers=1):
    n = max(len(ha), len(hb))
    ha = ha + [[]] * (n - len(ha))
    hb = hb + [[]] * (n - len(hb))
    got = run(program, ha, hb, processes, workers)
    a: Counter = Counter()
    b: Counter = Counter()
    for e in range(n):
        for r, d in ha[e]:
            a[r] += d
        for r, d in hb[e]:
            b[r] += d
        want = oracle(program, _pos(a), _pos(b))
        assert got[e] == want, f"epoch {e} of {program}: got {dict(got[e])}, want {dict(want)}"


programs = st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=4)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)


@settings(max_examples=60, **SETTINGS)
@given(programs, histories(), histories())
def test_random_programs_one_worker(program, ha, hb):
    check(program, ha, hb)


@settings(max_examples=25, **SETTINGS)
@given(programs, histories(), histories())
def test_random_programs_two_workers(program, ha, hb):
    check(program, ha, hb, workers=2)


@pytest.mark.parametrize("processes,workers", [(2, 1), (2, 2)])
@settings(max_examples=4, **SETTINGS)
@given(program=programs, ha=histories(), hb=histories())
def test_random_programs_two_processes(processes, workers, program, ha, hb):
    check(program, ha, hb, processes=processes, workers=workers)


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_operator_on_a_fixed_history(op):
    ha = [[(r, 1) for r in range(M)], [(r, -1) for r in range(0, M, 3)] + [(5, 1)],
          [(r, 1) for r in range(0, M, 6)]]
    hb = [[(r, 1) for r in range(0, M, 2)], [(4, -1), (7, 1)], [(0, -1)]]
    check([op], ha, hb, workers=2)
    check([op, "iterate"], ha, hb)
