"""Set operators with distinct results, per time: distinct, union, intersect, except_.

Records are exchanged by their own value, so equal records meet on one worker (records must be
hashable).  ``distinct``, ``union`` and ``intersect`` stream: a record leaves the moment it
qualifies, and the notification only drops the state of its time.  ``except_`` must wait for
the notification, since a later record of the other side could still cancel one of this side.
"""

from __future__ import annotations

from typing import Any

from naiad.graph import Stream
from linq.core import _repr, check_hashable, need_stream
from linq.staging import per_time_stage

__all__ = ["distinct", "union", "intersect", "except_", "identity"]


def identity(record: Any) -> Any:
    """The record itself: the partition key of the set operators."""
    return record


def _two_sets() -> tuple:
    return (set(), set())


def distinct(stream: Stream, *args: Any) -> Stream:
    """Each distinct record once per time, emitted when it is first seen (records compared
    whole: it takes no key function).

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.distinct(), [[3, 1, 3, 2, 1], [3, 3]], workers=2)
    {0: [1, 2, 3], 1: [3]}
    """
    if args:
        msg = (f"distinct takes no arguments; got {len(args)} ({_repr.repr(args[0])}): it "
               "compares whole records; for one record per key, use "
               "group_by(key, lambda k, records: records[:1])")
        raise TypeError(msg)
    return _distinct(stream, "distinct")


def _distinct(stream: Stream, op: str) -> Stream:
    """:func:`distinct`, ``op`` naming the stage and its errors."""
    def on_batch(seen: set, edge: int, records: list) -> list:
        add = seen.add
        return [r for r in records if not (r in seen or add(r))]
    return per_time_stage([(stream, identity)], op, set, on_batch, None, check_hashable(op))


def union(stream: Stream, other: Stream) -> Stream:
    """The distinct records of either stream, per time (LINQ's ``Union``).

    >>> import linq
    >>> from naiad.testing import run
    >>> build = lambda comp, s: s.where(lambda x: x < 3).union(s.where(lambda x: x > 1))
    >>> run(build, [[1, 2, 3, 2]])
    {0: [1, 2, 3]}
    """
    need_stream("union", stream, other)
    return _distinct(stream.concat(other), "union")


def intersect(stream: Stream, other: Stream) -> Stream:
    """The distinct records present in both streams, per time, emitted once both have shown them.

    >>> import linq
    >>> from naiad.testing import run
    >>> build = lambda comp, s: s.where(lambda x: x < 4).intersect(s.where(lambda x: x > 1))
    >>> run(build, [[1, 2, 3, 4, 2]], workers=2)
    {0: [2, 3]}
    """
    need_stream("intersect", stream, other)

    def on_batch(sides: tuple, edge: int, records: list) -> list:
        mine, theirs = sides[edge], sides[1 - edge]
        out = []
        for r in records:
            if r not in mine:
                mine.add(r)
                if r in theirs:
                    out.append(r)
        return out
    return per_time_stage([(stream, identity), (other, identity)], "intersect", _two_sets,
                          on_batch, None, check_hashable("intersect"))


def except_(stream: Stream, other: Stream) -> Stream:
    """The distinct records of this stream that the other does not hold at the same time.

    >>> import linq
    >>> from naiad.testing import run
    >>> build = lambda comp, s: s.except_(s.where(lambda x: x % 2 == 0))
    >>> run(build, [[1, 2, 3, 4, 3], [2]])
    {0: [1, 3], 1: []}
    """
    need_stream("except_", stream, other)

    def on_batch(sides: tuple, edge: int, records: list) -> None:
        sides[edge].update(records)

    def on_done(sides: tuple) -> list:
        mine, theirs = sides
        return [r for r in mine if r not in theirs]
    return per_time_stage([(stream, identity), (other, identity)], "except_", _two_sets,
                          on_batch, on_done, check_hashable("except_"))
