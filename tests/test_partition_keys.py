"""Equal keys meet, whatever their Python type; keys that cannot be partitioned are refused.

numpy scalars, Decimal, Fraction and float subclasses used to fall through to hashing their
pickle, so a join of int keys against numpy.int64 keys across two processes found 19 of 40
matches.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import fractions
import os
import subprocess
import sys
import textwrap

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
    (True, np.True_), (0, np.False_), (1, 1 + 0j), (2.5, complex(2.5, 0)),
    ((True, "a"), (np.bool_(True), "a")),
    # Equal to no float: the exact ratio, whatever the form (they split across processes).
    (decimal.Decimal("0.1"), decimal.Decimal("0.10")),
    (decimal.Decimal("0.1"), fractions.Fraction(1, 10)),
    ((decimal.Decimal("0.3"), "x"), (fractions.Fraction(3, 10), "x")),
    (b"ab", np.bytes_(b"ab")),
    (_dt.datetime(2020, 1, 1, 12, 1, tzinfo=_dt.timezone.utc),
     _dt.datetime(2020, 1, 1, 13, 1, tzinfo=_dt.timezone(_dt.timedelta(hours=1)))),
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


def test_a_join_of_equal_keys_in_other_forms_across_processes_finds_every_match():
    """Decimal('0.1') and Decimal('0.10'), one aware instant in two zones, bytes and
    numpy.bytes_: equal keys, hashed apart, met in no vertex when they came from different
    processes."""
    utc, plus1 = _dt.timezone.utc, _dt.timezone(_dt.timedelta(hours=1))
    forms = ([(decimal.Decimal(f"0.{k + 1}3"), decimal.Decimal(f"0.{k + 1}30")) for k in range(20)]
             + [(_dt.datetime(2020, 1, 1, 12, k, tzinfo=utc),
                 _dt.datetime(2020, 1, 1, 13, k, tzinfo=plus1)) for k in range(20)]
             + [(b"k%d" % k, np.bytes_(b"k%d" % k)) for k in range(20)])
    left = [(a, i) for i, (a, _) in enumerate(forms)]
    right = [(b, i) for i, (_, b) in enumerate(forms)]

    def program(comp):
        a, b = comp.new_input(), comp.new_input()
        got = a.stream.join(b.stream, lambda r: r[0], lambda r: r[0],
                            lambda x, y: (x[1], y[1])).collect()
        comp.activate()
        a.on_next(left if comp.process_index == 0 else [])
        b.on_next(right if comp.process_index == 1 else [])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=60)
        return got.results.get(0, [])

    found = sorted(pair for part in naiad.execute(program, processes=2, workers=2) for pair in part)
    assert found == [(i, i) for i in range(len(forms))]


@dataclasses.dataclass(frozen=True)
class Tagged:
    name: str
    tags: frozenset
    extra: tuple = ()


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


_HASH_IN_A_PROCESS = textwrap.dedent("""
    import sys, numpy as np
    from naiad.partition import key_hash
    from tests.test_partition_keys import Colour, Tagged
    keys = [Tagged("a", frozenset({"red", "green", "blue", "x", "y", "z"})),
            Tagged("b", frozenset({("k", 1), ("j", 2)}), extra=(Colour.RED, [1, {"p", "q"}])),
            [frozenset("abcdef"), Colour.BLUE], np.array([1, 2, 3]), complex(1, 2)]
    print([key_hash(k) for k in keys])
""")


def test_keys_made_of_sets_or_of_the_programs_classes_hash_alike_in_every_process():
    """A dataclass holding a frozenset of strings used to be hashed through its pickle, whose
    set order follows the process's string hash seed: equal records went to different
    workers."""
    seen = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _HASH_IN_A_PROCESS], env=env, text=True,
                             capture_output=True, timeout=60, check=True).stdout
        seen.add(out)
    assert len(seen) == 1, seen


def test_equal_records_of_the_programs_own_class_meet_across_processes(tmp_path):
    """Records of a class defined in the script run as ``__main__``, counted across two
    processes: they used to fail to pickle for the hash in the children (``Can't pickle
    <class '__main__.Point'>``), and records holding a frozenset went to different workers."""
    script = tmp_path / "points.py"
    script.write_text(textwrap.dedent("""
        import dataclasses
        import linq  # noqa: F401
        import naiad

        @dataclasses.dataclass(frozen=True)
        class Point:
            x: int
            tags: frozenset

        def program(comp):
            inp = comp.new_input()
            got = inp.stream.count().collect()
            comp.activate()
            inp.on_next([Point(i % 7, frozenset({"red", "green", "blue", f"t{i % 7}"}))
                         for i in range(70)])
            inp.on_completed()
            comp.join(timeout=60)
            return got.results.get(0, [])

        if __name__ == "__main__":
            parts = naiad.execute(program, processes=2, workers=2)
            print(sorted((p.x, n) for part in parts for p, n in part))
    """))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str([(x, 20) for x in range(7)])
