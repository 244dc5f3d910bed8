"""Word counts by Arrow kernels (linq.words) against plain Python: the kernels split where
``str.split`` does over every code point, random Unicode lines count as ``Counter`` counts
them, the exchanged Arrow blocks reach the worker of ``key_hash``, and the fused
``select_many(str.split).count()`` gives ``Counter``'s counts on 1 to 3 workers and 2
processes, with the same error as without Arrow for a record that is not a str."""

from __future__ import annotations

import random
import sys
from collections import Counter
from itertools import chain

import pytest
from hypothesis import given, settings, strategies as st

import linq  # noqa: F401 - installs the Stream methods
from linq import words
from linq.core import UserFunctionError
from naiad.partition import key_hash
from naiad.testing import run

pa = pytest.importorskip("pyarrow")
if not words._checked(pa):
    pytest.skip(f"linq.words counts with pyarrow {words._VERSION} only", allow_module_level=True)

SPACES = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def as_counter(got) -> Counter:
    keys, counts = got
    return Counter(dict(zip(keys.to_pylist(), counts.to_pylist())))


def plain(lines) -> Counter:
    return Counter(chain.from_iterable(map(str.split, lines)))


def test_wide_spaces_are_the_non_ascii_whitespace():
    assert words.WIDE_SPACES == {c for c in SPACES if not c.isascii()}


@pytest.mark.parametrize("kernel", ["utf8_split_whitespace", "ascii_split_whitespace"])
def test_kernels_split_where_str_split_does_over_every_code_point(kernel):
    """Each code point between two letters: split by the UTF-8 kernel exactly when
    ``str.isspace()`` holds; by the ASCII kernel exactly for ASCII whitespace but
    ``\\x1c``-``\\x1f`` (which linq.words never gives it)."""
    top = sys.maxunicode if kernel.startswith("utf8") else 0x7F
    points = [chr(c) for c in range(top + 1) if not 0xD800 <= c <= 0xDFFF]
    text = pa.array(["a" + c + "b" for c in points])
    got = pa.compute.call_function(kernel, [text]).to_pylist()
    split = {c for c, parts in zip(points, got) if [p for p in parts if p] == ["a", "b"]}
    kept = {c for c, parts in zip(points, got) if [p for p in parts if p] == ["a" + c + "b"]}
    want = {c for c in points if c.isspace()}
    if kernel.startswith("ascii"):
        want -= set("\x1c\x1d\x1e\x1f")
    assert split == want and len(split) + len(kept) == len(points)


ALPHABET = SPACES + ["a", "b", "Z", "é", "ß", "日本", "\x00", "\x7f", "-", "💡", "\u0301"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(ALPHABET), max_size=12).map("".join), max_size=60),
       st.integers(0, 2 ** 16))
def test_random_unicode_lines_count_as_counter_counts(pieces, seed):
    rng = random.Random(seed)
    ascii_lines = ["".join(rng.choice(" \t\nab x1.") for _ in range(rng.randint(0, 9)))
                   for _ in range(rng.randint(0, 200))]
    lines = ascii_lines + pieces
    rng.shuffle(lines)
    got = words.count_words(lines, at_least=0)
    if not lines:
        assert got is None
        return
    assert as_counter(got) == plain(lines)
    assert got[0].to_pylist() == list(plain(lines))            # first occurrence, as Counter
    assert all(type(n) is int for n in got[1].to_pylist())


@pytest.mark.parametrize("lines", [
    ["ab cd"] * 10 + ["x\x1fy z"],                              # ASCII, a control: UTF-8 kernel
    ["ab cd"] * 40 + ["é\u3000f"],                              # a wide space in a wide line
    ["é f"] * 10 + ["a b"],                                     # mostly wide
    ["", " ", "\n\n", "a"],                                     # empty words dropped
    ["é"] * 3,
])
def test_each_branch_counts_as_counter(lines):
    assert as_counter(words.count_words(lines, at_least=0)) == plain(lines)


@pytest.mark.parametrize("lines", [["a b", 3], ["a", b"b c"], ["a", None], ["a\ud800 b"],
                                   ["x"] * 5])
def test_what_arrow_cannot_count_exactly_is_left_to_counter(lines):
    assert words.count_words(lines, at_least=0 if len(lines) < 5 else 6) is None


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_blocks_reach_the_worker_of_every_word_and_merge_to_the_sums(workers):
    rng = random.Random(workers)
    vocabulary = [f"w{i}" for i in range(500)] + ["é", "日本", "x\u0301"]
    parts = [[" ".join(rng.choices(vocabulary, k=rng.randint(0, 9))) for _ in range(300)]
             for _ in range(workers)]
    routes = [words.split_blocks(list(range(100, 100 + workers)), *words.count_words(p, 0))
              for p in parts]
    for blocks in routes:
        for route, keys, counts in blocks:
            d = route - 100
            assert all(key_hash(k) % workers == d for k in keys.to_pylist())
            assert len(keys) == len(counts)
    merged = Counter()
    for d in range(workers):
        mine = [b for blocks in routes for b in blocks if b[0] == 100 + d]
        pairs = words.merge_blocks(mine) if mine else []
        assert len({k for k, _ in pairs}) == len(pairs)
        merged.update(dict(pairs))
    assert merged == plain(chain.from_iterable(parts))


def test_blocks_without_numpy_are_lists_with_the_same_routes(monkeypatch):
    """Where numpy is missing the blocks are lists: each word with its count, at the same
    destination as the Arrow blocks."""
    counted = words.count_words(_lines(12, 300), 0)
    with_arrays = words.split_blocks([7, 8, 9], *counted)
    monkeypatch.setattr(words, "numpy", lambda: None)
    as_lists = words.split_blocks([7, 8, 9], *counted)
    assert [r for r, _, _ in as_lists] == [r for r, _, _ in with_arrays]
    for (_, keys, counts), (_, akeys, acounts) in zip(as_lists, with_arrays):
        assert isinstance(keys, list) and isinstance(counts, list)
        assert dict(zip(keys, counts)) == dict(zip(akeys.to_pylist(), acounts.to_pylist()))


def _lines(seed: int, n: int) -> list:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)] + ["é", "日本"] + SPACES
    return ["".join(rng.choices(vocabulary, k=rng.randint(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_fused_word_count_with_arrow_equals_counter(monkeypatch, workers):
    monkeypatch.setattr(words, "MIN_LINES", 1)
    monkeypatch.setattr(words, "MIN_LINES_IMPORT", 1)
    counted = []
    count_words = words.count_words

    def spy(lines, at_least=None):
        got = count_words(lines, at_least)
        counted.append(got is not None)
        return got
    monkeypatch.setattr(words, "count_words", spy)
    epochs = [_lines(1, 3000), _lines(2, 10), ["a b"] * 4 + ["é"]]
    got = run(lambda comp, s: s.select_many(str.split).count(), epochs, workers=workers,
              sort=False)
    assert counted and all(counted)                             # Arrow counted every batch
    for e, lines in enumerate(epochs):
        assert Counter(dict(got[e])) == plain(lines) and len(got[e]) == len(plain(lines))
        assert all(type(k) is str and type(n) is int for k, n in got[e])


def _build_in_child_counting_with_arrow(comp, s):
    from linq import words as in_child
    assert in_child.ARROW and in_child.MIN_LINES == in_child.MIN_LINES_IMPORT == 1
    return s.select_many(str.split).count()


def test_fused_word_count_across_two_processes_with_arrow_equals_counter(monkeypatch):
    monkeypatch.setenv("NAIAD_LINQ_ARROW", "always")        # read by the children
    epochs = [_lines(3, 2000), _lines(4, 50)]
    got = run(_build_in_child_counting_with_arrow, epochs, processes=2, sort=False)
    for e, lines in enumerate(epochs):
        assert Counter(dict(got[e])) == plain(lines) and len(got[e]) == len(plain(lines))


def test_a_record_that_is_not_a_str_fails_as_without_arrow(monkeypatch):
    def failure():
        with pytest.raises(Exception) as info:
            run(lambda comp, s: s.select_many(str.split).count(), [["a b"] * 50 + [7]])
        err = info.value
        while err is not None and not isinstance(err, UserFunctionError):
            err = err.__cause__
        assert err is not None
        return err.operator, err.record, str(err)
    monkeypatch.setattr(words, "MIN_LINES", 1)
    monkeypatch.setattr(words, "MIN_LINES_IMPORT", 1)
    with_arrow = failure()
    monkeypatch.setattr(words, "ARROW", False)
    assert failure() == with_arrow and "select_many" in with_arrow[0]


def test_merge_of_arrow_and_list_blocks_equals_a_dict_fold():
    """A worker that counted with Counter (a small batch) sends lists, another Arrow arrays."""
    import operator
    from linq.blocks import MergeBlocksVertex
    arrow_block = words.split_blocks([0], *words.count_words(["a b b", "c é"], at_least=0))[0]
    list_block = (0, ["b", "z", "é"], [5, 1, 2])
    vertex = MergeBlocksVertex("count", operator.add, "combine")
    for blocks in ([arrow_block, list_block], [list_block, arrow_block], [arrow_block]):
        want = Counter()
        for _, keys, counts in blocks:
            keys = keys if isinstance(keys, list) else keys.to_pylist()
            counts = counts if isinstance(counts, list) else counts.to_pylist()
            want.update(dict(zip(keys, counts)))
        got = vertex._done(list(blocks))
        assert dict(got) == want and len(got) == len(want)
        assert all(type(k) is str and type(n) is int for k, n in got)


def test_a_time_of_several_batches_tallies_as_counter():
    """Arrow columns and Counter batches of one time, in any order, add up as Counter."""
    from linq.keyed import Tally
    rng = random.Random(9)
    batches = [_lines(s, rng.randint(1, 40)) for s in range(6)]
    for order in range(4):
        rng.shuffle(batches)
        tally, want = Tally(), Counter()
        for i, lines in enumerate(batches):
            if (i + order) % 2:
                tally.add_columns(*words.count_words(lines, at_least=0))
            else:
                tally.add(chain.from_iterable(map(str.split, lines)))
            want.update(plain(lines))
        got = tally.items()
        assert dict(got) == want and len(got) == len(want)
