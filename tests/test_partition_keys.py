"""Equal keys meet, whatever their Python type; keys that cannot be partitioned are refused.

numpy scalars, Decimal, Fraction and float subclasses used to fall through to hashing their
pickle, so a join of int keys against numpy.int64 keys across two processes found 19 of 40
matches.
"""

from __future__ import annotations

import decimal
import fractions

import pytest

import linq  # noqa: F401 - join
import naiad
import stages
from naiad.partition import key_hash, partition, release_caches

np = pytest.importorskip("numpy")


class MyFloat(float):
    pass


@pytest.mark.parametrize("plain, other", [
    (5, np.int64(5)), (5, np.int8(5)), (5, np.uint16(5)), (5, decimal.Decimal(5)),
    (5, fractions.Fraction(10, 2)), (5, 5.0), (5, True * 5), (2.5, np.float64(2.5)),
    (2.5, np.float32(2.5)), (2.5, MyFloat(2.5)), (2.5, decimal.Decimal("2.5")),
    (2.5, fractions.Fraction(5, 2)), ((1, "a"), (np.int32(1), "a")),
])
def test_equal_keys_hash_equal_whatever_their_type(plain, other):
    assert plain == other
    assert key_hash(plain) == key_hash(other)


@pytest.mark.parametrize("key", [{1, 2}, {"a": 1}, {3: "x", 1: "y"}])
def test_unordered_keys_are_refused(key):
    with pytest.raises(TypeError, match="return a tuple, frozenset, str, bytes or number"):
        key_hash(key)


def test_a_set_key_is_refused_naming_partition_by_and_the_stage():
    with pytest.raises(naiad.VertexError, match=r"stage 'exchange'.*partition_by.*is a set"):
        naiad.testing.run(lambda comp, s: stages.unary(s, Echo, partition_by=lambda r: {r},
                                                       name="exchange"), [[1, 2]], workers=2)


class Echo(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, messages, time)


def test_the_cache_does_not_make_equal_keys_of_other_types_disagree():
    """Whatever key type comes first, equal keys go to one destination in every process."""
    release_caches()
    first = partition([np.int64(k) for k in range(100)], lambda r: r, 3)
    release_caches()
    second = partition(list(range(100)), lambda r: r, 3)
    assert [sorted(map(int, p)) for p in first] == [sorted(p) for p in second]


def test_a_join_of_int_and_numpy_keys_across_processes_finds_every_match():
    left = [(k, "L") for k in range(40)]
    right = [(np.int64(k), "R") for k in range(40)]

    def program(comp):
        a, b = comp.new_input(), comp.new_input()
        got = a.stream.join(b.stream, lambda r: r[0], lambda r: r[0],
                            lambda x, y: int(x[0])).collect()
        comp.activate()
        a.on_next(left[comp.process_index::2])
        b.on_next(right[(comp.process_index + 1) % 2::2])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=60)
        return got.results.get(0, [])

    found = sorted(k for part in naiad.execute(program, processes=2, workers=2) for k in part)
    assert found == list(range(40))
