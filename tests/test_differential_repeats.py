"""A join's output repeats records (each pair of updates is one change): what arranges it for a
next join sums it first, so a join of joins pairs one update per record, not each repetition
with each other, and still gives what the joins of the accumulated collections give."""

from __future__ import annotations

from collections import Counter

import pytest

import naiad
from linq import differential as dd
from naiad.testing import shard

K = 12


def _first(r):
    return r[0]


def _chain(c: dd.Collection, depth: int, arranged: bool) -> dd.Collection:
    """``depth`` self-joins of ``c`` on the first field, each pair becoming ``(0, 0)``."""
    for _ in range(depth):
        other = c.arrange(key=_first) if arranged else c
        if arranged:
            c = c.join(other, key=_first, result=lambda a, b: (0, 0))
        else:
            c = c.join(other, key=_first, other_key=_first, result=lambda a, b: (0, 0))
    return c


@pytest.mark.parametrize("arranged", [False, True])
@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 2), (2, 1)])
def test_a_join_of_joins_pairs_summed_updates(arranged, processes, workers):
    depth = 2
    records = [(0, i) for i in range(K)]

    def program(comp):
        inp = dd.new_input(comp, name="r")
        out = _chain(inp.collection.map(lambda r: r).concat(inp.collection.filter(bool)), depth,
                     arranged)
        passed: list = []
        out = out.inspect(lambda r, t, d: passed.append(d))
        got = out.collect()
        comp.activate()
        inp.on_next(shard(records, comp.process_index, comp.processes))
        inp.update(shard([((0, 0), -1)], comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results, len(passed)
    parts = naiad.execute(program, processes=processes, workers=workers)
    n0, n1 = 2 * K, 2 * K - 2           # the input, twice (map and filter), at each epoch
    want = {0: n0 ** (2 ** depth), 1: n1 ** (2 ** depth) - n0 ** (2 ** depth)}
    acc: Counter = Counter()
    for results, _ in parts:
        for e, changes in results.items():
            for r, d in changes:
                acc[(e, r)] += d
    assert dict(acc) == {(e, (0, 0)): n for e, n in want.items()}
    # After the first join every record is (0, 0): the last join pairs the summed updates of
    # a few batches per side and time, not each of the first join's n0 ** 2 changes with each
    # other (n0 ** 4 = 331,776 changes at epoch 0 alone).
    changes = sum(n for _, n in parts)
    assert changes <= 100, changes
