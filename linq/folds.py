"""Folding ``(key, value)`` pairs with a combine: loops with the common combines inlined, and
the replay of a failing pair or record, one call at a time, for a precise error."""

from __future__ import annotations

import operator
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Iterable

from linq.core import HASHABLE, call

__all__ = ["combiner", "record_combiner", "replay", "replay_pair"]

_first = itemgetter(0)
_second = itemgetter(1)
_MISSING = object()
_builtin_min, _builtin_max = min, max


def replay(op: str, role: str, combine: Callable, acc: dict, key: Callable, value: Callable,
           r: Any) -> None:
    """The failing record again, one call at a time, against the state it met."""
    k = call(op, "key", key, (r,), HASHABLE)
    v = call(op, "value", value, (r,))
    cur = acc.get(k, _MISSING)
    if cur is not _MISSING:
        call(op, role, combine, (cur, v))


def replay_pair(op: str, role: str, combine: Callable, acc: dict, pair: tuple) -> None:
    """:func:`replay` of a ``(key, partial)`` pair."""
    replay(op, role, combine, acc, _first, _second, pair)


def record_combiner(combine: Callable) -> Callable[[dict, Iterable], None]:
    """A loop folding a batch of ``(key, value)`` tuples into ``acc``, unpacked (what
    ``itemgetter(0)`` and ``itemgetter(1)`` give): a batch whose first record is not a tuple
    raises TypeError, for the caller to fold it with the getters (a dict would unpack to its
    keys, not to its values at 0 and 1; a set, in no order).  Only the first record is looked
    at: a batch's records are of one type in practice, and checking each costs ~10%."""
    fold = combiner(combine)

    def checked(acc: dict, records: Iterable) -> None:
        if type(records) is list:
            if records and type(records[0]) is not tuple:
                raise TypeError("the records are not tuples")
            fold(acc, records)
            return
        it = iter(records)
        first = next(it, _MISSING)
        if first is _MISSING:
            return
        if type(first) is not tuple:
            raise TypeError("the records are not tuples")
        fold(acc, chain((first,), it))
    return checked


def combiner(combine: Callable) -> Callable[[dict, Iterable], None]:
    """A loop folding ``(key, value)`` pairs into ``acc``; the common combines are inlined."""
    if combine is operator.add:
        def fold(acc: dict, pairs: Iterable) -> None:
            # Each key's first value is taken as it is: the sum of ints stays an int, strings
            # or tuples add up too.  A float starts from -0.0, which adds exactly (-0.0 + x is
            # x for every float x, -0.0 included), one test cheaper than the general step.
            get = acc.get
            for k, v in pairs:
                if type(v) is float:
                    acc[k] = get(k, -0.0) + v
                else:
                    cur = get(k, _MISSING)
                    acc[k] = v if cur is _MISSING else cur + v
    elif combine is _builtin_min:
        def fold(acc: dict, pairs: Iterable) -> None:
            get = acc.get
            for k, v in pairs:
                cur = get(k, _MISSING)
                if cur is _MISSING or v < cur:
                    acc[k] = v
    elif combine is _builtin_max:
        def fold(acc: dict, pairs: Iterable) -> None:
            get = acc.get
            for k, v in pairs:
                cur = get(k, _MISSING)
                if cur is _MISSING or v > cur:
                    acc[k] = v
    else:
        def fold(acc: dict, pairs: Iterable) -> None:
            get = acc.get
            for k, v in pairs:
                cur = get(k, _MISSING)
                acc[k] = v if cur is _MISSING else combine(cur, v)
    return fold
