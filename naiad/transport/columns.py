"""Lists of ``(key, value)`` pairs sent as two columns: what a keyed exchange and a collected
result mostly are (word counts, ranks by node).

Pickling a list of pairs costs a tuple, a memo entry and a key per pair on each side; the same
pairs as one string of keys and one array of values pickle in a few copies, and come back as
``list(zip(keys, values))``.  :func:`pack` turns a list of at least :data:`MIN_PAIRS` pairs whose
keys are all ``str`` (without a newline, the separator) or all ``int``, and whose values are all
``int`` or all ``float`` (exact types: ``bool`` is neither), into a :class:`PairColumns` that
pickles as the columns and unpickles as the equal list; anything else is left alone (``None``).
Every check runs at C speed (``map`` over the list), so a list of another shape costs a few of
them.  Integers beyond 64 bits are left alone too.

>>> import pickle
>>> pairs = [(f"w{i}", i) for i in range(1000)]
>>> packed = pack(pairs)
>>> pickle.loads(pickle.dumps(packed)) == pairs
True
>>> pack([("a\\nb", 1)] * 1000) is None          # the separator inside a key
True
"""

from __future__ import annotations

from array import array
from operator import itemgetter
from typing import Any, Dict, List, Optional

__all__ = ["PairColumns", "pack", "pack_result", "MIN_PAIRS"]

MIN_PAIRS = 512
"""Shorter lists are pickled as they are: the checks would cost more than they save."""

_first, _second = itemgetter(0), itemgetter(1)
_VALUE_CODES = {int: "q", float: "d"}


def _unpack(keys: Any, values: array) -> list:
    ks = keys.split("\n") if type(keys) is str else keys.tolist()
    return list(zip(ks, values.tolist()))


class PairColumns:
    """A list of pairs, held as its two columns; unpickles as the list."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: Any, values: array):
        self.keys, self.values = keys, values

    def __reduce__(self):
        return _unpack, (self.keys, self.values)


def _one_type(items: list) -> Optional[type]:
    types = set(map(type, items))
    return types.pop() if len(types) == 1 else None


def pack(records: Any) -> Optional[PairColumns]:
    """``records`` as columns, or None when it is not a long list of such pairs."""
    if type(records) is not list or len(records) < MIN_PAIRS:
        return None
    head = records[0]
    if type(head) is not tuple or len(head) != 2:
        return None
    try:
        if _one_type(records) is not tuple or set(map(len, records)) != {2}:
            return None
        keys = list(map(_first, records))
        values = list(map(_second, records))
        code = _VALUE_CODES.get(_one_type(values))  # type: ignore[arg-type]
        key_type = _one_type(keys)
        if code is None or key_type not in (str, int):
            return None
        column = array(code, values)
        if key_type is int:
            return PairColumns(array("q", keys), column)
    except OverflowError:        # an integer beyond 64 bits
        return None
    joined = "\n".join(keys)
    if joined.count("\n") != len(keys) - 1:
        return None
    return PairColumns(joined, column)


def pack_result(value: Any) -> Any:
    """A program's return value with its long pair lists packed: the value itself, or the
    items of a tuple or list of up to 16 items (``(seconds, pairs)``, one list per stage)."""
    packed = pack(value)
    if packed is not None:
        return packed
    if type(value) in (tuple, list) and len(value) <= 16:
        packed_by_id: Dict[int, Any] = {}     # a list held twice is packed once (pickle's memo)
        items: List[Any] = []
        for v in value:
            if id(v) not in packed_by_id:
                packed_by_id[id(v)] = pack(v) or v
            items.append(packed_by_id[id(v)])
        if any(type(v) is PairColumns for v in items):
            return tuple(items) if type(value) is tuple else items
    return value
