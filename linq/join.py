"""The streaming equi-join: matches leave as soon as both records have arrived, at their time.

Each side is keyed once (a pipelined keying stage) and exchanged on the key.  The join vertex
keeps, per time and key, the records of both sides seen so far; a new record is matched against
the other side's list and remembered in its own.  It never waits for a notification to emit;
the notification only drops the state of its time (Naiad's ``Join`` is asynchronous in the
same way).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Dict, Hashable, Tuple

from naiad.graph import Stream
from linq.invariant import held, held_stage
from linq.core import UserFunctionError, check_keys, label, need_callable, need_stream
from linq.staging import key_pairs, per_time_stage

__all__ = ["join"]

_first = itemgetter(0)


def join(stream: Stream, other: Stream, key: Callable[[Any], Hashable],
         other_key: Callable[[Any], Hashable], result: Callable[[Any, Any], Any]) -> Stream:
    """``result(a, b)`` for every ``a`` of this stream and ``b`` of ``other`` with equal keys at
    the same time.

    >>> import linq
    >>> from naiad.testing import run
    >>> def build(comp, s):
    ...     people = s.where(lambda r: r[0] == "p").select(lambda r: r[1:])  # (city, name)
    ...     cities = s.where(lambda r: r[0] == "c").select(lambda r: r[1:])  # (city, country)
    ...     return people.join(cities, lambda p: p[0], lambda c: c[0],
    ...                        lambda p, c: (p[1], c[1]))
    >>> epochs = [[("p", "Oslo", "ann"), ("c", "Oslo", "NO"), ("p", "Oslo", "bo"),
    ...            ("p", "Rome", "cy")], [("p", "Rome", "di")]]
    >>> run(build, epochs, workers=2)         # epoch 1 has no city: nothing joins
    {0: [('ann', 'NO'), ('bo', 'NO')], 1: []}
    """
    op = "join"
    need_stream(op, stream, other)
    need_callable(op, "key", key, "key(record) -> hashable")
    need_callable(op, "other key", other_key, "other_key(record) -> hashable")
    need_callable(op, "result", result, "result(a, b) -> record")
    op = label(op, key, other_key, result)

    def on_batch(table: Dict[Any, Tuple[list, list]], edge: int, records: list) -> list:
        out: list = []
        append = out.append
        get = table.get
        for k, r in records:
            sides = get(k)
            if sides is None:
                sides = table[k] = ([], [])   # (left records, right records)
            sides[edge].append(r)
            matches = sides[1 - edge]
            if matches:
                try:
                    if edge == 0:
                        for b in matches:
                            append(result(r, b))
                    else:
                        for b in matches:
                            append(result(b, r))
                except Exception as exc:
                    pair = (r, b) if edge == 0 else (b, r)
                    raise UserFunctionError(op, "result", result, pair,
                                            f"raised {type(exc).__name__}: {exc}") from exc
        return out
    left = key_pairs(stream, op, key)
    right = key_pairs(other, op, other_key, "other key")
    diagnose = check_keys(op, key, other_key)
    if (held(left) is None) != (held(right) is None):
        return held_stage(op, left, right, diagnose, result=result)
    return per_time_stage([(left, _first), (right, _first)], op, dict, on_batch, None, diagnose)
