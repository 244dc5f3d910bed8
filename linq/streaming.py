"""Record-at-a-time operators that emit as records arrive: select, where, select_many, partition_by.

None of them waits for a notification and none exchanges records except ``partition_by``:
records stay on the worker that produced them.  Each batch costs one framework call; the only
per-record Python calls are the user's own function.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable

from naiad.graph import Stream
from linq.fusion import Step
from linq.core import (HASHABLE, ITERABLE, TRUTH, UserFunctionError, check_each, label,
                       need_callable)
from linq.staging import map_stage

__all__ = ["select", "where", "select_many", "partition_by"]


def select(stream: Stream, f: Callable[[Any], Any]) -> Stream:
    """``f(record)`` for every record, at the record's time.

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.select(lambda x: x * 10), [[1, 2], [3]])
    {0: [10, 20], 1: [30]}
    """
    need_callable("select", "selector", f, "f(record) -> record")
    op = label("select", f)

    def fn(records: list) -> list:
        return [f(r) for r in records]
    diagnose = check_each(op, "selector", f)
    return map_stage(stream, op, fn, diagnose, step=Step("select", f, op, diagnose))


def where(stream: Stream, pred: Callable[[Any], Any]) -> Stream:
    """The records for which ``pred(record)`` is true.

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.where(lambda x: x % 2 == 0), [[1, 2, 3, 4], [5]])
    {0: [2, 4], 1: []}
    """
    need_callable("where", "predicate", pred, "pred(record) -> bool")
    op = label("where", pred)

    def fn(records: list) -> list:
        return [r for r in records if pred(r)]
    diagnose = check_each(op, "predicate", pred, TRUTH)
    return map_stage(stream, op, fn, diagnose, step=Step("where", pred, op, diagnose))


def select_many(stream: Stream, f: Callable[[Any], Iterable[Any]]) -> Stream:
    """Every element of ``f(record)`` (an iterable) for every record.

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.select_many(str.split), [["a b", "c"], ["d e f"]])
    {0: ['a', 'b', 'c'], 1: ['d', 'e', 'f']}
    """
    need_callable("select_many", "selector", f, "f(record) -> iterable")
    op = label("select_many", f)

    def fn(records: list) -> list:
        return [x for r in records for x in f(r)]
    diagnose = check_each(op, "selector", f, ITERABLE)
    return map_stage(stream, op, fn, diagnose, step=Step("select_many", f, op, diagnose))


class _GuardedKey:
    """A partition key that reports a failing user key function by operator and name (its
    qualified name is part of a graph's fingerprint: renaming it refuses older checkpoints)."""

    __slots__ = ("op", "key")

    def __init__(self, op: str, key: Callable[[Any], Hashable]):
        self.op = op
        self.key = key

    @property
    def __name__(self) -> str:      # what the graph's picture labels the exchange with
        return getattr(self.key, "__name__", type(self.key).__name__)

    def __call__(self, record: Any) -> Hashable:
        try:
            return self.key(record)
        except Exception as exc:
            raise UserFunctionError(self.op, "key", self.key, (record,),
                                    f"raised {type(exc).__name__}: {exc}", HASHABLE) from exc


def partition_by(stream: Stream, key: Callable[[Any], Hashable]) -> Stream:
    """The same records, moved so that equal ``key(record)`` meet on one worker (in any process).

    >>> import linq, naiad, stages
    >>> from naiad.testing import run
    >>> class Placed(naiad.Vertex):          # tags each record with the worker it reached
    ...     def on_recv_batch(self, edge, records, time):
    ...         self.send_batch_by(0, [(self.index, r) for r in records], time)
    >>> build = lambda comp, s: stages.unary(s.partition_by(lambda x: x % 2), Placed)
    >>> placed = run(build, [range(10)], workers=3)[0]
    >>> [len({w for w, x in placed if x % 2 == parity}) for parity in (0, 1)]
    [1, 1]
    """
    need_callable("partition_by", "key", key, "key(record) -> hashable key")
    op = label("partition_by", key)

    def fn(records: list) -> list:
        return records
    return map_stage(stream, op, fn, partition_by=_GuardedKey(op, key))
