"""A process's result reaches ``execute`` intact, whichever encoding carries it (naiad.outcome).

Plain built-in values travel by marshal, everything else by pickle or cloudpickle; the tests
return each kind from real child processes and compare with what the program built, including
the types, shared references and cycles that a careless encoding would lose.
"""

from __future__ import annotations

import random
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naiad
from naiad import outcome

Pair = namedtuple("Pair", "word n")


class Word(str):
    """A str subclass: marshal would turn it into a plain str."""


def _pairs(seed: int, n: int):
    rng = random.Random(seed)
    return [("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 8))),
             rng.randint(-10**20, 10**20)) for _ in range(n)]


def _plain(comp):
    return _pairs(comp.process_index, 5000)


def _shared_and_cyclic(comp):
    shared = [comp.process_index]
    cycle: list = [1]
    cycle.append(cycle)
    return (shared, shared, cycle)


def _typed(comp):
    return [Pair(Word("w"), comp.process_index), {Word("k"): frozenset({1, 2})}]


def _unpicklable_by_pickle(comp):
    offset = comp.process_index
    return lambda x: x + offset


def test_plain_results_arrive_equal_and_by_marshal():
    got = naiad.execute(_plain, processes=2)
    assert got == [_pairs(0, 5000), _pairs(1, 5000)]
    assert outcome.encode(("ok", got[0], ""))[:1] == b"M"


def test_shared_references_and_cycles_survive():
    for i, (a, b, cycle) in enumerate(naiad.execute(_shared_and_cyclic, processes=2)):
        assert a == [i] and a is b
        assert cycle[1] is cycle


def test_subclasses_keep_their_types():
    for i, (pair, mapping) in enumerate(naiad.execute(_typed, processes=2)):
        assert type(pair) is Pair and type(pair.word) is Word and pair.n == i
        (key,) = mapping
        assert type(key) is Word and mapping[key] == frozenset({1, 2})


def test_what_only_cloudpickle_encodes_still_arrives():
    fns = naiad.execute(_unpicklable_by_pickle, processes=2)
    assert [f(10) for f in fns] == [10, 11]


def test_an_unknown_encoding_is_refused_by_name():
    with pytest.raises(ValueError, match="must start with"):
        outcome.decode(b"Xjunk")


_atoms = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
          | st.text() | st.binary())
_values = st.recursive(_atoms, lambda inner: st.lists(inner) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(), inner) | st.frozensets(st.integers()),
                       max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(_values)
def test_any_builtin_value_round_trips(value):
    data = outcome.encode(value)
    assert data[:1] == b"M"
    back = outcome.decode(data)
    assert back == value and type(back) is type(value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"E", b"A", b"R"]), st.binary(max_size=3000)),
                min_size=1, max_size=6),
       st.lists(st.integers(1, 5000), min_size=1, max_size=50))
def test_framed_messages_are_reassembled_from_any_pieces(messages, cuts):
    from naiad.link import MessageReader, _HEADER
    stream = b"".join(_HEADER.pack(kind, len(body)) + body for kind, body in messages)
    reader, got, at, i = MessageReader(), [], 0, 0
    while at < len(stream):
        n = cuts[i % len(cuts)]
        got += reader.feed(stream[at:at + n])
        at, i = at + n, i + 1
    assert got == messages
    assert all(type(body) is bytes for _, body in got)


def _buffers(comp):
    import array

    import numpy as np
    return [np.arange(3) + comp.process_index, bytearray(b"ab"), array.array("i", [1, 2])]


def test_objects_with_the_buffer_protocol_keep_their_types():
    """marshal would write each of these as plain bytes."""
    import array

    import numpy as np
    for i, (arr, buf, arr2) in enumerate(naiad.execute(_buffers, processes=2)):
        assert isinstance(arr, np.ndarray) and arr.tolist() == [i, i + 1, i + 2]
        assert type(buf) is bytearray and buf == b"ab"
        assert type(arr2) is array.array and arr2.tolist() == [1, 2]


def test_plain_is_false_for_anything_marshal_would_change():
    import array
    assert outcome.plain([("a", 1), {"k": [None, 2.5, 1j, b"x", frozenset({True})]}])
    for odd in (bytearray(), memoryview(b""), array.array("i"), Pair("a", 1), Word("w"),
                Ellipsis, object()):
        assert not outcome.plain([("a", 1), {"k": [odd]}])
        assert outcome.encode(("ok", [odd], ""))[:1] == b"P"
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert not outcome.plain(deep)
    assert outcome.decode(outcome.encode(deep)) == deep


def test_heavily_shared_structure_is_not_expanded():
    """Each level refers to the one below twice: 2**40 paths, a few objects."""
    shared: list = ["leaf"]
    for _ in range(40):
        shared = [shared, shared]
    assert not outcome.plain(shared)
    back = outcome.decode(outcome.encode(("ok", shared, "")))[1]
    assert back[0] is back[1]
