"""A frames join lays out every output table alike, whichever rows each worker got.

A left, right or outer join on a worker that got no rows of one side at a time must still give
that side's columns (as nulls), or tables of one stream differ in schema from worker to worker
and the next operator fails.  The inputs here put one side on one worker only (few keys, fed by
process 0), the other side everywhere; every table must have the columns Arrow's own join of
the whole inputs has, and the rows must be that join's.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

pa = pytest.importorskip("pyarrow")

from linq import frames  # noqa: E402

HOWS = {"inner": "inner", "left": "left outer", "right": "right outer", "outer": "full outer"}


def _sides(seed: int, rows: int):
    rng = random.Random(seed)
    left = pa.table({"k": [f"k{rng.randrange(rows)}" for _ in range(rows)],
                     "v": [rng.randrange(100) for _ in range(rows)]})
    right = pa.table({"kk": ["k0", "k1"], "name": ["zero", "one"]})
    return left, right


def _oracle(left, right, how):
    return left.join(right, keys="k", right_keys="kk", join_type=HOWS[how], use_threads=False)


def _rows(table):
    return Counter(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("how", list(HOWS))
@pytest.mark.parametrize("rows", [3, 40])
def test_every_table_has_the_joins_columns(cluster, how, rows):
    left, right = _sides(rows, rows)

    def program(comp):
        li, ri = comp.new_input(), comp.new_input()
        out = frames.of(li.stream).join(frames.of(ri.stream), on="k", right_on="kk",
                                        how=how).collect()
        comp.activate()
        first = comp.process_index == 0
        li.on_next([left.slice(comp.process_index * 2, 2), left.slice(comp.processes * 2 + 1)]
                   if first else [left.slice(comp.process_index * 2, 2)])
        ri.on_next([right] if first else [])
        li.on_completed()
        ri.on_completed()
        comp.join(timeout=60)
        return out.results.get(0, [])

    # Each process feeds its own 2-row slice; process 0 also the rows after the slices.
    parts = cluster.execute(program)
    fed = pa.concat_tables([left.slice(p * 2, 2) for p in range(cluster.processes)]
                           + [left.slice(cluster.processes * 2 + 1)])
    want = _oracle(fed, right, how)
    tables = [t for part in parts for t in part]
    assert tables or want.num_rows == 0
    for t in tables:
        assert t.schema.names == want.schema.names, (how, t.schema.names)
    got = pa.concat_tables(tables) if tables else want.slice(0, 0)
    assert _rows(got) == _rows(want)


@pytest.mark.parametrize("how", ["left", "outer"])
def test_a_loop_sees_one_layout_when_the_entered_side_sits_on_one_worker(cluster, how):
    """Inside a loop the entered side (on one worker only) joins the iterated one; the body
    selects the entered side's column, which must exist on every worker at every iteration."""
    left, right = _sides(5, 30)
    left = left.append_column("tag", pa.array([None] * left.num_rows, pa.string()))
    right = pa.table({"kk": ["k0", "k1", "gone"], "name": ["zero", "one", "none"]})

    def program(comp):
        li, ri = comp.new_input(), comp.new_input()
        names = frames.of(ri.stream)

        def body(loop, f):
            joined = f.join(loop.enter(names), on="k", right_on="kk", how=how)
            return joined.map_batches(lambda t: pa.table(
                {"k": t["k"], "v": t["v"], "tag": t["name"]}))
        out = frames.of(li.stream).iterate(body, iterations=2).collect()
        comp.activate()
        li.on_next([left] if comp.process_index == 0 else [])
        ri.on_next([right] if comp.process_index == 0 else [])
        li.on_completed()
        ri.on_completed()
        comp.join(timeout=60)
        return out.results.get(0, [])

    tables = [t for part in cluster.execute(program) for t in part]
    want = left
    for _ in range(2):
        joined = _oracle(want, right, how)
        want = pa.table({"k": joined["k"], "v": joined["v"], "tag": joined["name"]})
    got = pa.concat_tables(tables) if tables else want.slice(0, 0)
    assert _rows(got) == _rows(want)
