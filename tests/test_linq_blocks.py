"""Partials exchanged as columns (linq.blocks) and destinations at C speed (naiad.partition),
against plain Python on seeded random inputs: every key reaches the worker its hash names,
merged blocks equal a plain fold (float sums in arrays included), and aggregations across
workers and processes equal a sequential dict fold."""

from __future__ import annotations

import operator
import random
from collections import Counter

import pytest

import linq  # noqa: F401 - installs the Stream methods
from linq.blocks import MergeBlocksVertex, Router
from naiad.partition import destinations, key_hash, partition

np = pytest.importorskip("numpy")


def random_keys(rng: random.Random, kind: str, n: int) -> list:
    if kind == "int":
        return list({rng.randrange(-(1 << 63), 1 << 63): None for _ in range(n)})
    if kind == "big":
        return [rng.randrange(1 << 70) for _ in range(n)]
    if kind == "str":
        return list(dict.fromkeys(f"w{rng.randrange(10 * n)}é" for _ in range(n)))
    if kind == "surrogate":
        return [f"s\ud800{i}" for i in rng.sample(range(10 * n), n)]
    return list(dict.fromkeys(rng.choice([rng.randrange(100), f"k{rng.randrange(100)}",
                                          (rng.randrange(9), "t"), rng.random(), None, True])
                              for _ in range(n)))


KINDS = ["int", "big", "str", "surrogate", "mixed"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", KINDS)
def test_destinations_equal_key_hash(seed, kind):
    rng = random.Random(seed)
    keys = random_keys(rng, kind, rng.choice([1, 10, 63, 64, 500]))
    for parts in (1, 2, 3, 5):
        assert destinations(keys, parts) == [key_hash(k) % parts for k in keys]


@pytest.mark.parametrize("seed", range(4))
def test_destinations_of_a_repeated_key_list_are_those_of_its_keys(seed):
    """Equal lists (a loop's keys) reuse the last destinations; a list of the same length
    that differs anywhere, or the returned list changed by its caller, does not mislead."""
    rng = random.Random(seed)
    keys = random_keys(rng, rng.choice(KINDS), 3000)
    for trial in range(6):
        got = destinations(keys if trial % 2 else list(keys), 3)
        assert got == [key_hash(k) % 3 for k in keys]
        got[:] = [7] * len(got)
        i = rng.randrange(len(keys))
        keys = keys[:i] + [f"new{trial}"] + keys[i + 1:]


@pytest.mark.parametrize("seed", range(4))
def test_partition_agrees_with_key_hash_when_one_part_takes_all(seed):
    rng = random.Random(seed)
    keys = [k for k in random_keys(rng, "str", 400) if key_hash(k) % 2 == 1]
    records = [(k, i) for i, k in enumerate(keys)]
    assert partition(records, operator.itemgetter(0), 2) == [[], records]
    mixed = records + [("a", 0), ("b", 1)]
    parts = partition(mixed, operator.itemgetter(0), 2)
    assert all(key_hash(r[0]) % 2 == d for d, part in enumerate(parts) for r in part)
    assert sorted(map(repr, parts[0] + parts[1])) == sorted(map(repr, mixed))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
@pytest.mark.parametrize("as_array", [False, True])
def test_router_blocks_reach_the_worker_of_every_key(seed, workers, as_array):
    rng = random.Random(seed)
    keys = random_keys(rng, rng.choice(KINDS), rng.randint(1, 300))
    values = [rng.random() for _ in keys]
    router = Router(workers)
    router.remember(keys)                   # the same list split again: the same blocks
    for column in (keys, list(keys)):
        blocks = router.split(column, np.array(values) if as_array else values)
        pairs = []
        for route, part_keys, part in blocks:
            d = key_hash(route) % workers
            assert part_keys and all(key_hash(k) % workers == d for k in part_keys)
            assert isinstance(part, np.ndarray) == as_array
            pairs += zip(part_keys, part.tolist() if as_array else part)
        assert len({key_hash(b[0]) % workers for b in blocks}) == len(blocks)
        assert sorted(map(repr, pairs)) == sorted(map(repr, zip(keys, values)))
    assert router.split([], []) == []


def _merged(combine, blocks: list) -> dict:
    vertex = MergeBlocksVertex("test", combine, "combine")
    out = vertex._done(blocks)
    assert len(out) == len({k for k, _ in out})
    return dict(out)


@pytest.mark.parametrize("seed", range(8))
def test_merged_float_blocks_equal_a_plain_fold(seed):
    """The array sums: keys in several blocks, key lists met again (by identity and by
    equality), keys absent at some times; the same vertex over several times."""
    rng = random.Random(seed)
    universe = random_keys(rng, rng.choice(["int", "str", "mixed"]), 200)
    vertex = MergeBlocksVertex("test", operator.add, "combine")
    lists = [rng.sample(universe, rng.randint(1, min(120, len(universe)))) for _ in range(3)]
    for _ in range(6):
        blocks, want = [], {}
        for keys in rng.sample(lists, rng.randint(2, 3)):
            keys = keys if rng.random() < 0.5 else list(keys)
            values = np.array([rng.uniform(-1, 1) for _ in keys])
            blocks.append((0, keys, values))
            for k, v in zip(keys, values.tolist()):
                want[k] = want.get(k, 0.0) + v
        got = dict(vertex._done(blocks))
        assert got.keys() == want.keys()
        assert all(abs(got[k] - want[k]) <= 1e-12 for k in want)
        if rng.random() < 0.3:
            lists[rng.randrange(3)] = rng.sample(universe, rng.randint(1, min(120, len(universe))))
    big = [f"b{i}" for i in range(6000)]         # many keys, then few: numbering starts afresh
    for keys in (big, big[:10], big[5:20]):
        blocks = [(0, keys, np.ones(len(keys))), (0, keys[:3], np.ones(3))]
        want = dict.fromkeys(keys, 1.0) | dict.fromkeys(keys[:3], 2.0)
        assert dict(vertex._done(blocks)) == want


@pytest.mark.parametrize("seed", range(4))
def test_merged_blocks_of_other_values_equal_a_plain_fold(seed):
    rng = random.Random(seed)
    universe = random_keys(rng, "str", 100)
    blocks = [(0, keys, [rng.randint(-9, 9) for _ in keys])
              for keys in (rng.sample(universe, rng.randint(1, min(80, len(universe)))) for _ in range(3))]
    for combine in (operator.add, min, max, lambda a, b: a * 2 + b):
        want: dict = {}
        for _, keys, values in blocks:
            for k, v in zip(keys, values):
                want[k] = v if k not in want else combine(want[k], v)
        assert _merged(combine, blocks) == want
        assert _merged(combine, blocks[:1]) == dict(zip(blocks[0][1], blocks[0][2]))


def _fold(epochs: list, key, value, combine) -> dict:
    out = {}
    for e, records in enumerate(epochs):
        acc: dict = {}
        for r in records:
            k, v = key(r), value(r)
            acc[k] = v if k not in acc else combine(acc[k], v)
        if acc:
            out[e] = sorted(acc.items(), key=repr)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_aggregations_across_workers_equal_a_dict_fold(cluster, seed):
    rng = random.Random(seed)
    keys = random_keys(rng, rng.choice(["str", "int"]), 150)
    epochs = [[(rng.choice(keys), rng.uniform(-5, 5), rng.randint(0, 99))
               for _ in range(rng.randint(0, 700))] for _ in range(3)]
    k0 = operator.itemgetter(0)

    def build(comp, s):
        sums = s.aggregate(k0, operator.itemgetter(1), operator.add)
        return sums.concat(s.max(k0, operator.itemgetter(2)).select(lambda r: (r[0], -r[1])))
    got = cluster.run(build, epochs, sort=False)
    sums = _fold(epochs, k0, operator.itemgetter(1), operator.add)
    least = _fold(epochs, k0, lambda r: -r[2], min)
    for e in range(3):
        pairs = got.get(e, [])
        want_s, want_m = dict(sums.get(e, [])), dict(least.get(e, []))
        floats = {k: v for k, v in pairs if type(v) is float}
        ints = {k: v for k, v in pairs if type(v) is int}
        assert floats.keys() == want_s.keys() and ints == want_m
        assert all(abs(floats[k] - want_s[k]) <= 1e-9 for k in want_s)
        assert len(pairs) == len(want_s) + len(want_m)


def test_word_count_across_workers_equals_counter(cluster):
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(300)] + ["é", "a\ud800"]
    lines = [[" ".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 12)))
              for _ in range(200)] for _ in range(2)]
    got = cluster.run(lambda comp, s: s.select_many(str.split).count(), lines)
    for e, epoch in enumerate(lines):
        want = Counter(w for line in epoch for w in line.split())
        assert dict(got[e]) == want and len(got[e]) == len(want)
