"""Frames whose columns are dictionary-encoded differently from table to table (each process
or file encodes its own strings), keys named like Arrow's aggregate outputs, and float keys
with NaN and -0.0: grouped and joined like plain columns, in loops too, against Arrow's own
group_by and join of the whole input."""

from __future__ import annotations

import random
from collections import Counter

import pytest

pa = pytest.importorskip("pyarrow")

import naiad  # noqa: E402
from linq import frames  # noqa: E402

LAYOUTS = [(1, 1), (1, 2), (2, 1), (2, 2)]


def _words(seed: int, n: int, vocabulary: int = 30) -> list:
    rng = random.Random(seed)
    return [f"w{rng.randrange(vocabulary)}" for _ in range(n)]


def _encoded(words: list, values: list) -> pa.Table:
    """A table whose key column is dictionary-encoded by itself (its own dictionary)."""
    return pa.table({"k": pa.array(words).dictionary_encode(), "v": values})


@pytest.mark.parametrize("processes,workers", LAYOUTS)
def test_group_by_dictionary_keys_with_differing_dictionaries(processes, workers):
    """Every process feeds one epoch of two chunks, each encoded on its own: Arrow refused to
    group them ("Unifying differing dictionaries"), within a process or across."""
    parts = [_words(seed, 200) for seed in range(2 * processes)]

    def program(comp):
        inp = comp.new_input()
        got = frames.of(inp.stream).group_by("k", n=("v", "sum")).collect()
        comp.activate()
        inp.on_next(pa.concat_tables([_encoded(parts[seed], list(range(200)))
                                      for seed in (2 * comp.process_index,
                                                   2 * comp.process_index + 1)]))
        inp.on_completed()
        comp.join(timeout=60)
        return [r for ts in got.results.values() for t in ts
                for r in zip(map(str, t["k"].to_pylist()), t["n"].to_pylist())]

    got = sorted(r for p in naiad.execute(program, processes=processes, workers=workers)
                 for r in p)
    expected = Counter()
    for part in parts:
        for w, v in zip(part, range(200)):
            expected[w] += v
    assert got == sorted(expected.items())


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("processes,workers", LAYOUTS)
def test_join_on_dictionary_keys_encoded_per_side(how, processes, workers):
    left_words, right_words = _words(1, 100), _words(2, 40, vocabulary=45)

    def program(comp):
        left, right = comp.new_input(), comp.new_input()
        got = frames.of(left.stream).join(frames.of(right.stream), on="k", how=how).collect()
        comp.activate()
        if comp.process_index == 0:
            left.on_next(_encoded(left_words, list(range(100))).rename_columns(["k", "x"]))
            right.on_next(_encoded(right_words, list(range(40))).rename_columns(["k", "y"]))
        left.on_completed()
        right.on_completed()
        comp.join(timeout=60)
        return [(str(r["k"]), r["x"], r["y"]) for ts in got.results.values() for t in ts
                for r in t.to_pylist()]

    got = Counter(r for p in naiad.execute(program, processes=processes, workers=workers)
                  for r in p)
    oracle = pa.table({"k": left_words, "x": list(range(100))}).join(
        pa.table({"k": right_words, "y": list(range(40))}), keys="k",
        join_type={"inner": "inner", "left": "left outer", "right": "right outer",
                   "outer": "full outer"}[how], use_threads=False)
    assert got == Counter((str(r["k"]), r["x"], r["y"]) for r in oracle.to_pylist())


@pytest.mark.parametrize("keys", [["x_sum"], ["k", "x_sum"], ["__p0"]])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_key_named_like_an_aggregate_output_keeps_its_values(keys, workers):
    """A key ``x_sum`` beside a sum of ``x``: Arrow names that sum ``x_sum`` too, and the key
    column was replaced by the sums (or two columns had one name)."""
    rng = random.Random(7)
    rows = [{"x_sum": rng.randrange(4), "k": rng.randrange(3), "__p0": rng.randrange(5),
             "x": float(rng.randrange(10))} for _ in range(300)]
    table = pa.Table.from_pylist(rows)

    def program(comp):
        inp = comp.new_input()
        got = frames.of(inp.stream).group_by(keys, total=("x", "sum"), n=("x", "count")
                                              ).collect()
        comp.activate()
        inp.on_next(table)
        inp.on_completed()
        comp.join(timeout=60)
        return [r for ts in got.results.values() for t in ts for r in t.to_pylist()]

    got = sorted((tuple(r[k] for k in keys), r["total"], r["n"])
                 for p in naiad.execute(program, workers=workers) for r in p)
    sums, counts = Counter(), Counter()
    for r in rows:
        sums[tuple(r[k] for k in keys)] += r["x"]
        counts[tuple(r[k] for k in keys)] += 1
    assert got == sorted((k, sums[k], counts[k]) for k in sums)


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("workers", [1, 2])
def test_float_keys_meet_inside_a_loop_as_in_arrows_join(how, workers):
    """A join with a loop-invariant side checked equal hashes with ``pc.equal``: a NaN key lost
    its match, and 0.0 met -0.0, where Arrow's join (and the join outside a loop) does the
    opposite."""
    left = pa.table({"k": [1.0, float("nan"), 0.0, 2.5, None], "a": [1, 2, 3, 4, 5]})
    right = pa.table({"k": [1.0, float("nan"), -0.0, 2.5, 2.5], "b": [10, 20, 30, 40, 50]})

    def program(comp):
        x, w = comp.new_input(), comp.new_input()
        xs, ws = frames.of(x.stream), frames.of(w.stream)
        plain = xs.join(ws, on="k", how=how).collect()
        looped = xs.iterate(lambda loop, r: r.join(loop.enter(ws), on="k", how=how), 1).collect()
        comp.activate()
        x.on_next(left)
        w.on_next(right)
        x.on_completed()
        w.on_completed()
        comp.join(timeout=60)
        return [[repr(tuple(r.values())) for ts in got.results.values() for t in ts
                 for r in t.to_pylist()] for got in (plain, looped)]

    [(plain, looped)] = naiad.execute(program, workers=workers)
    oracle = left.join(right, keys="k", join_type={"inner": "inner", "left": "left outer",
                                                   "right": "right outer",
                                                   "outer": "full outer"}[how],
                       use_threads=False)
    expected = Counter(repr(tuple(r.values())) for r in oracle.to_pylist())
    assert Counter(plain) == expected
    assert Counter(looped) == expected


def test_processes_feeding_columns_in_another_order_are_told_so():
    """After an exchange the tables of both processes meet: in another column order they used
    to pass, and to_records() mixed (k, v) and (v, k) tuples."""
    table = pa.table({"k": [1, 2, 3], "v": [10.5, 20.5, 30.5]})

    def program(comp):
        inp = comp.new_input()
        frames.of(inp.stream).exchange("k").to_records().collect()
        comp.activate()
        inp.on_next(table if comp.process_index == 0 else table.select(["v", "k"]))
        inp.on_completed()
        comp.join(timeout=60)

    with pytest.raises(naiad.VertexError, match=r"schema changed.*same order.*table\.select"):
        naiad.execute(program, processes=2)
