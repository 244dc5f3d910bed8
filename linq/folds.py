"""Folding ``(key, value)`` pairs with a combine: loops with the common combines inlined, and
the replay of a failing pair or record, one call at a time, for a precise error."""

from __future__ import annotations

import operator
from operator import itemgetter
from typing import Any, Callable, Iterable

from linq.core import HASHABLE, call

__all__ = ["combiner", "replay", "replay_pair"]

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


def combiner(combine: Callable) -> Callable[[dict, Iterable], None]:
    """A loop folding ``(key, value)`` pairs into ``acc``; the common combines are inlined."""
    if combine is operator.add:
        def fold(acc: dict, pairs: Iterable) -> None:
            get = acc.get
            pairs = iter(pairs)                 # the second loop goes on where this one stops
            for k, v in pairs:
                if type(v) is float:            # a sum of floats: start from 0.0, no test
                    acc[k] = get(k, 0.0) + v
                    break
                cur = get(k, _MISSING)
                acc[k] = v if cur is _MISSING else cur + v
            else:
                return
            for k, v in pairs:                  # the same iterator, on from the first float
                acc[k] = get(k, 0.0) + v
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
