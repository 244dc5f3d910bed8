"""Pair lists as columns: whatever the list, what arrives equals what was sent, types included.

The oracle is the list itself: after a pickle round trip through :func:`pack` (or through the
ZeroMQ fabric, or a child's result) each pair must be equal and of the same key and value types
as the original's, whether the list was packed or left alone.
"""

from __future__ import annotations

import math
import pickle
import random

import pytest

import naiad
from naiad.progress.timestamp import Timestamp
from naiad.messages import DATA
from naiad.transport.columns import MIN_PAIRS, PairColumns, pack, pack_result
from tests.test_transport import close_all, drain, zmq_fabrics


class Word(str):
    """A str subclass: not a column of str."""


def _same(got, want) -> None:
    assert got == want
    assert [tuple(map(type, p)) if type(p) is tuple else type(p) for p in got] == \
        [tuple(map(type, p)) if type(p) is tuple else type(p) for p in want]


def _key(rng: random.Random, kind: str):
    if kind == "str":
        return "".join(rng.choice("ab\u00e9\u4e2d ") for _ in range(rng.randrange(0, 6)))
    return rng.randrange(-2 ** 63, 2 ** 63)


def _value(rng: random.Random, kind: str):
    if kind == "int":
        return rng.randrange(-2 ** 63, 2 ** 63)
    return rng.choice([rng.uniform(-1e300, 1e300), -0.0, math.inf, 1e-310])


def pair_lists(rng: random.Random):
    """Lists that pack and lists that must not, each with what it is."""
    n = rng.randrange(MIN_PAIRS, 3 * MIN_PAIRS)
    for kk in ("str", "int"):
        for vk in ("int", "float"):
            yield f"{kk}/{vk}", True, [(_key(rng, kk), _value(rng, vk)) for _ in range(n)]
    base = [(_key(rng, "str"), _value(rng, "int")) for _ in range(n)]
    spoilers = {
        "newline in a key": ("x\ny", 1), "bool value": ("x", True), "big int": ("x", 2 ** 64),
        "mixed values": ("x", 1.5), "int key among str": (7, 1), "triple": ("x", 1, 2),
        "list pair": ["x", 1], "None value": ("x", None), "str subclass": (Word("x"), 1),
    }
    for name, bad in spoilers.items():
        spoilt = list(base)
        spoilt[rng.randrange(n)] = bad
        yield name, False, spoilt
    yield "short", False, base[:MIN_PAIRS - 1]
    yield "empty keys", True, [("", 0)] * n


@pytest.mark.parametrize("seed", range(4))
def test_pack_round_trips_exactly_or_leaves_the_list_alone(seed):
    rng = random.Random(seed)
    for name, packs, pairs in pair_lists(rng):
        packed = pack(pairs)
        assert (packed is not None) == packs, name
        _same(pickle.loads(pickle.dumps(packed if packed is not None else pairs, protocol=5)),
              pairs)


def test_a_result_packs_its_lists_and_keeps_sharing():
    rng = random.Random(9)
    pairs = [(_key(rng, "str"), _value(rng, "int")) for _ in range(MIN_PAIRS)]
    for value in (pairs, (1.5, pairs), [pairs, pairs, "x"], {"k": pairs}, 3):
        packed = pack_result(value)
        got = pickle.loads(pickle.dumps(packed, protocol=5))
        assert got == value
        assert type(got) is type(value)
    assert isinstance(pack_result((0, pairs))[1], PairColumns)
    got = pickle.loads(pickle.dumps(pack_result([pairs, pairs]), protocol=5))
    assert got[0] is got[1]


@pytest.mark.timeout(90)
def test_pair_batches_cross_the_fabric_unchanged():
    rng = random.Random(5)
    sent = [pairs for _, _, pairs in pair_lists(rng)]
    fabrics = zmq_fabrics(2, 1, secret="columns test")
    try:
        for b in sent:
            fabrics[0].send(0, 1, 4, Timestamp(0), b)
        fabrics[0].flush(0)
        got = [m[3] for m in drain(fabrics[1], 0, len(sent)) if m[0] == DATA]
        assert len(got) == len(sent)
        for g, want in zip(got, sent):
            _same(g, want)
    finally:
        close_all(fabrics)


def _counts(comp):
    import linq  # noqa: F401
    rng = random.Random(comp.process_index)
    inp = comp.new_input()
    got = inp.stream.count().collect()
    comp.activate()
    inp.on_next([f"w{rng.randrange(5000)}" for _ in range(20_000)])
    inp.on_completed()
    comp.join(timeout=60)
    return "seconds", got.results.get(0, [])


def test_an_executed_count_returns_the_oracle_counts():
    from collections import Counter
    parts = naiad.execute(_counts, processes=2)
    want = Counter()
    for p in range(2):
        rng = random.Random(p)
        want.update(f"w{rng.randrange(5000)}" for _ in range(20_000))
    assert all(tag == "seconds" and type(pairs) is list for tag, pairs in parts)
    got = [pair for _, pairs in parts for pair in pairs]
    assert len(got) > MIN_PAIRS and dict(got) == want and len(got) == len(want)
