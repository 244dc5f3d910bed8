"""What a reduction computes for one key: its logic, from the key's input to its output.

A logic maps a key and its accumulated input, ``{record: count}`` without zero counts, to the
output it should have, in the same form; :class:`~linq.differential.operators.ReduceVertex`
emits the difference from the output it had.  The built-in reductions (``distinct``, ``count``,
``sum``, ``min``, ``max``) and ``group_by``'s user reducer are logics; a user function or values
that cannot be combined raise a :class:`~linq.core.UserFunctionError` naming the operator.

>>> keyed_logic("count")("a", {"x": 2, "y": 1})
{('a', 3): 1}
>>> keyed_logic("sum")("a", {5: 2, 1: 1})
{('a', 11): 1}
>>> keyed_logic("min", None, "min(k, v)")("a", {1: 1, "b": 1})
Traceback (most recent call last):
  ...
linq.core.UserFunctionError: min(k, v): a value returned values min cannot combine for key 'a': 'b', 1 ...
"""

from __future__ import annotations

import reprlib
from collections import Counter
from typing import Any, Callable, Dict, Hashable, Iterable, Optional, Tuple

from linq.core import UserFunctionError, call, emit

__all__ = ["Logic", "keyed_logic", "group_logic", "valued_logic"]

# logic(key, input) -> output, both as {record: count}; ``input`` has no zero counts.
Logic = Callable[[Hashable, Dict[Any, int]], Dict[Any, int]]
_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60


def keyed_logic(kind: str, fn: Optional[Callable] = None, op: str = "") -> Logic:
    """The logic of the built-in reductions, over ``{value: count}`` per key."""
    if kind == "distinct":
        return lambda key, acc: {key: 1} if sum(acc.values()) > 0 else {}
    if kind == "count":
        def count(key: Hashable, acc: Dict[Any, int]) -> Dict[Any, int]:
            n = sum(acc.values())
            return {(key, n): 1} if n else {}
        return count
    if kind in _FOLDS:
        return _folded(kind, fn, op)
    msg = f"unknown reduction {kind!r}"
    raise ValueError(msg)


_FOLDS: Dict[str, Tuple[Callable[[Dict[Any, int]], Any], str]] = {
    "sum": (lambda acc: sum(v * n for v, n in acc.items()), "numbers, or values with + and *"),
    "min": (min, "values of one ordered type"),
    "max": (max, "values of one ordered type"),
}


def _folded(kind: str, fn: Optional[Callable], op: str) -> Logic:
    """``sum``, ``min`` or ``max`` over a key's ``{value: count}``; values the fold cannot
    combine (a str added to an int, an int compared with None) name the value function."""
    fold, expect = _FOLDS[kind]

    def logic(key: Hashable, acc: Dict[Any, int]) -> Dict[Any, int]:
        try:
            return {(key, fold(acc)): 1}
        except TypeError as exc:
            values = ", ".join(_repr.repr(v) for v in sorted(acc, key=repr)[:4])
            raise UserFunctionError(op or kind, "value", fn, (),
                                    f"returned values {kind} cannot combine for key "
                                    f"{_repr.repr(key)}: {values} ({exc})", expect,
                                    "make the value function return one type") from exc
    return logic


def group_logic(op: str, reducer: Callable[[Hashable, list], Iterable[Any]]) -> Logic:
    """``group_by``'s logic: ``reducer(key, records)``, records repeated by multiplicity."""
    def logic(k: Hashable, acc: Dict[Any, int]) -> Dict[Any, int]:
        records = [r for r, n in acc.items() for _ in range(n)]
        out: list = []
        emit(out, op, "reducer", reducer, (k, records))
        try:
            return dict(Counter(out))
        except TypeError:
            raise UserFunctionError(op, "reducer", reducer, (k, records),
                                    "returned unhashable records", "hashable records",
                                    "convert lists to tuples") from None
    return logic


def valued_logic(kind: str, op: str, value: Callable[[Any], Any]) -> Logic:
    """A built-in reduction (``sum``, ``min``, ``max``) of ``value(record)`` over a key's
    records, for an input whose values are the records themselves (an arrangement)."""
    inner = keyed_logic(kind, value, op)

    def logic(key: Hashable, acc: Dict[Any, int]) -> Dict[Any, int]:
        values: Dict[Any, int] = {}
        for r, n in acc.items():
            v = call(op, "value", value, (r,))
            values[v] = values.get(v, 0) + n
        values = {v: n for v, n in values.items() if n}
        return inner(key, values) if values else {}
    return logic
