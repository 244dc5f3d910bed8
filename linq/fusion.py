"""Fused pipelines: consecutive stateless operators on one worker run as one batch function.

``select``, ``where``, ``select_many`` and the keying before an exchange are *steps*: a kind and
a user function.  When a step is applied to a stream made by a stage of steps whose input is
not exchanged, no new stage is chained behind it: a new stage runs all the steps over the
first stage's input, as one chain of C iterators (``map``, ``filter``,
``chain.from_iterable``), so a batch crosses one vertex and one list is built, whatever the
length of the pipeline.  The local pre-combine of ``count``, ``aggregate``, ``min`` and ``max``
consumes such a chain directly: ``select_many(str.split).count()`` runs as
``Counter(chain.from_iterable(map(str.split, batch)))`` (or, for a large batch of ``str``
lines with pyarrow installed, by Arrow kernels: :mod:`linq.words`).  The stage left behind has no
consumer; its vertices drop what they receive without running the steps.

When the fused function raises, each step runs again over the batch in turn, so that the
error names the operator and the record, as without fusion.  ``FUSE = False`` (or the
environment variable ``NAIAD_LINQ_FUSE=0``) builds one stage per operator instead.

>>> from itertools import chain
>>> steps = [Step("select_many", str.split), Step("where", str.isalpha), Step("select", len)]
>>> list(chain_of(steps)(["ab c1 d", "eee"]))
[2, 1, 3]
"""

from __future__ import annotations

import os
from itertools import chain
from typing import Callable, Iterator, List, Optional

from naiad.graph import Stream

__all__ = ["Step", "chain_of", "list_of", "fusable", "FUSE"]

FUSE = os.environ.get("NAIAD_LINQ_FUSE", "1") != "0"
_KEY = "linq.steps"          # StageDef.params: (input stream, [Step, ...]) of a fusable stage

_from_iterable = chain.from_iterable


class Step:
    """One stateless operator: ``kind`` is ``select``, ``where``, ``select_many`` or ``key``
    (``(fn(r), r)`` pairs); ``op`` names it and ``diagnose`` finds the failing record."""

    __slots__ = ("kind", "fn", "op", "diagnose")

    def __init__(self, kind: str, fn: Callable, op: str = "", diagnose=None):
        assert kind in ("select", "where", "select_many", "key"), kind
        self.kind, self.fn, self.op, self.diagnose = kind, fn, op, diagnose

    def apply(self, it) -> Iterator:
        f = self.fn
        if self.kind == "select":
            return map(f, it)
        if self.kind == "where":
            return filter(f, it)
        if self.kind == "select_many":
            return _from_iterable(map(f, it))
        records = it if type(it) is list else list(it)
        return zip(map(f, records), records)


def chain_of(steps: List[Step]) -> Callable[[list], Iterator]:
    """A function from a batch to the iterator of all ``steps`` applied in order."""
    if len(steps) == 1:
        return steps[0].apply

    def run(records: list) -> Iterator:
        it = iter(records)
        for s in steps:
            it = s.apply(it)
        return it
    return run


def list_of(steps: List[Step]) -> Callable[[list], list]:
    """A batch function for a :class:`~linq.core.MapVertex`: the list of the chain."""
    if len(steps) == 1:
        s = steps[0]
        f = s.fn
        if s.kind == "select":
            return lambda records: [f(r) for r in records]
        if s.kind == "where":
            return lambda records: [r for r in records if f(r)]
        if s.kind == "select_many":
            return lambda records: [x for r in records for x in f(r)]
        return lambda records: list(zip(map(f, records), records))
    it = chain_of(steps)
    return lambda records: list(it(records))


def replay(steps: List[Step], edge: int, records: list) -> list:
    """Run ``steps`` one at a time over ``records``; a step that fails is diagnosed precisely.
    Returns the output of the last step."""
    for s in steps:
        try:
            records = list(s.apply(records))
        except Exception:
            if s.diagnose is not None:
                s.diagnose(edge, records)
            raise
    return records


def fusable(stream: Stream) -> Optional[tuple]:
    """``(input stream, steps)`` when ``stream`` is the output of a stage of steps over a
    non-exchanged input (and fusion is on); else ``None``."""
    if not FUSE or len(stream.sources) != 1:
        return None
    sid, _ = stream.sources[0]
    return stream.graph.stages[sid].params.get(_KEY)


def mark(stream: Stream, source: Stream, steps: List[Step]) -> Stream:
    """Record that ``stream`` is ``steps`` over ``source`` (a fusable stage)."""
    sid, _ = stream.sources[0]
    stream.graph.stages[sid].params[_KEY] = (source, steps)
    return stream
