"""The columnar split of naiad.partition: same destinations as key_hash, on every process."""

from __future__ import annotations

import random

import pytest

import naiad
import stages
from naiad.partition import key_hash, partition


def random_keys(seed: int, n: int) -> list:
    rng = random.Random(seed)
    pool = [rng.randrange(-10 ** 12, 10 ** 12) for _ in range(20)]
    pool += ["".join(rng.choice("abcé€") for _ in range(rng.randint(0, 6))) for _ in range(20)]
    pool += [(rng.randrange(5), "x" * rng.randrange(3)) for _ in range(10)]
    pool += [rng.random(), 2.0, True, None, b"bytes", "lone \ud800 surrogate"]
    return [rng.choice(pool) for _ in range(n)]


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_matches_key_hash(parts, seed):
    records = [(k, i) for i, k in enumerate(random_keys(seed, 500))]
    out = partition(records, lambda r: r[0], parts)
    want = [[r for r in records if key_hash(r[0]) % parts == d] for d in range(parts)]
    assert out == want                        # same parts, same order within each part
    again = partition(records, lambda r: r[0], parts)    # now every key is cached
    assert again == want


def test_unhashable_keys_fall_back_and_unordered_ones_are_refused():
    records = [[i % 3, i] for i in range(30)]
    out = partition(records, lambda r: [r[0]], 2)
    assert out == [[r for r in records if key_hash([r[0]]) % 2 == d] for d in range(2)]
    with pytest.raises(TypeError, match="is a set, whose order"):
        partition(records, lambda r: {r[0]}, 2)


class Where(naiad.Vertex):
    def on_recv_batch(self, edge, records, time):
        self.send_batch_by(0, [(r, self.index) for r in records], time)


def test_destinations_agree_across_processes():
    """String keys (whose built-in hash is salted per process) meet on the worker key_hash
    names, whichever process sent them."""
    keys = [k for k in random_keys(7, 400) if k is not None]

    def program(comp):
        inp = comp.new_input()
        got = stages.unary(inp.stream, Where, partition_by=lambda r: r).collect()
        comp.activate()
        inp.on_next(keys[comp.process_index::comp.processes])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results.get(0, [])
    parts = naiad.execute(program, processes=2, workers=2)
    placed = [p for part in parts for p in part]
    assert len(placed) == len(keys)
    assert all(w == key_hash(k) % 4 for k, w in placed)


@pytest.mark.parametrize("parts", [2, 3])
def test_string_keys_split_in_c_match_key_hash(parts):
    rng = random.Random(parts)
    words = ["".join(rng.choice("abcdeé€") for _ in range(rng.randint(0, 8))) for _ in range(300)]
    for batch in (words, words + ["lone \ud800"]):     # the second falls back per key
        out = partition(batch, lambda w: w, parts)
        assert out == [[w for w in batch if key_hash(w) % parts == d] for d in range(parts)]


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_string_first_key_then_others_still_matches_key_hash(seed):
    """The all-strings path is taken by the first key's type; any other key later (an int, a
    tuple, a lone surrogate, an unhashable list) must fall back, not misplace records."""
    rng = random.Random(seed)
    keys = ["first"] + random_keys(seed, 400)
    keys.insert(rng.randrange(1, len(keys)), rng.choice([7, ("t", 1), "lone \udc80", 2.5]))
    for parts in (2, 3):
        records = [(k, i) for i, k in enumerate(keys)]
        out = partition(records, lambda r: r[0], parts)
        assert out == [[r for r in records if key_hash(r[0]) % parts == d] for d in range(parts)]
