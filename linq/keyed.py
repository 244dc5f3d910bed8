"""Keyed operators needing all of a time: group_by, cogroup_by, count, min, max, aggregate.

Each waits for the notification of a time before it emits.  ``group_by`` and ``cogroup_by``
compute the key once per record (a pipelined keying stage), exchange ``(key, record)`` pairs on
the key and call the reducer once per key.  ``count``, ``min``, ``max`` and ``aggregate``
combine locally first (one accumulator per key and time on each worker, no exchange), then
exchange only the partial results and combine them again: for word count that sends one
``(word, n)`` per distinct word and worker instead of one record per word.  On a computation
of a single worker there is nothing to exchange and one stage does both.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Hashable, Iterable, Optional

from naiad.graph import Stream
from naiad.partition import route_keys
from linq.blocks import Router, merge_blocks
from linq.folds import combiner, record_combiner, replay
from linq.fusion import chain_of, fusable
from linq import words as _words
from linq.invariant import held, held_stage
from linq.core import (HASHABLE, call, check_hashable, check_keys, emit, label, need_callable,
                       need_stream)
from linq.staging import fused_diagnose, key_pairs, per_time_stage

__all__ = ["group_by", "cogroup_by", "count", "min", "max", "aggregate"]

_first = itemgetter(0)
_MISSING = object()
_builtin_min, _builtin_max = min, max


def _identity(record: Any) -> Any:
    return record


def group_by(stream: Stream, key: Callable[[Any], Hashable],
             reducer: Callable[[Hashable, list], Iterable[Any]]) -> Stream:
    """Per time, ``reducer(key, records)`` once per distinct key; emits every record it returns.

    ``records`` is the list of records with that key at that time, in no particular order.

    >>> import linq
    >>> from naiad.testing import run
    >>> words = [["apple", "avocado", "banana"], ["cherry"]]
    >>> run(lambda comp, s: s.group_by(lambda w: w[0], lambda k, ws: [(k, len(ws))]), words)
    {0: [('a', 2), ('b', 1)], 1: [('c', 1)]}
    """
    need_callable("group_by", "key", key, "key(record) -> hashable")
    need_callable("group_by", "reducer", reducer, "reducer(key, records) -> iterable")
    op = label("group_by", key, reducer)

    def on_batch(groups: defaultdict, edge: int, records: list) -> None:
        for k, r in records:
            groups[k].append(r)

    def on_done(groups: defaultdict) -> list:
        return _reduce_groups(op, reducer, groups)
    pairs = key_pairs(stream, op, key)
    return per_time_stage([(pairs, _first)], op, _lists, on_batch, on_done, check_keys(op, key))


def _lists() -> defaultdict:
    return defaultdict(list)


def _list_pairs() -> defaultdict:
    return defaultdict(_two_lists)


def _two_lists() -> tuple:
    return ([], [])


def _reduce_groups(op: str, reducer: Callable, groups: dict) -> list:
    """``reducer(key, *group)`` for every group, the results concatenated; a failing key is
    replayed through :func:`emit` for a precise error."""
    out: list = []
    extend = out.extend
    k = group = None
    try:
        for k, group in groups.items():
            extend(reducer(k, *group) if type(group) is tuple else reducer(k, group))
    except Exception:
        emit([], op, "reducer", reducer, (k, *group) if type(group) is tuple else (k, group))
        raise
    return out


def cogroup_by(stream: Stream, other: Stream, key: Callable[[Any], Hashable],
               other_key: Callable[[Any], Hashable],
               reducer: Callable[[Hashable, list, list], Iterable[Any]]) -> Stream:
    """Per time, ``reducer(key, mine, theirs)`` once per key present on either side.

    ``mine`` are this stream's records with the key, ``theirs`` the other stream's (either
    may be empty).

    >>> import linq
    >>> from naiad.testing import run
    >>> def build(comp, s):
    ...     names = s.where(lambda r: r[0] == "name").select(lambda r: r[1:])
    ...     ages = s.where(lambda r: r[0] == "age").select(lambda r: r[1:])
    ...     return names.cogroup_by(ages, lambda r: r[0], lambda r: r[0],
    ...                             lambda k, ns, ag: [(k, len(ns), len(ag))])
    >>> run(build, [[("name", 1, "ann"), ("age", 1, 30), ("age", 2, 40)]])
    {0: [(1, 1, 1), (2, 0, 1)]}
    """
    op = "cogroup_by"
    need_stream(op, stream, other)
    need_callable(op, "key", key, "key(record) -> hashable")
    need_callable(op, "other key", other_key, "other_key(record) -> hashable")
    need_callable(op, "reducer", reducer, "reducer(key, mine, theirs) -> iterable")
    op = label(op, key, other_key, reducer)

    def on_batch(groups: defaultdict, edge: int, records: list) -> None:
        for k, r in records:
            groups[k][edge].append(r)

    def on_done(groups: defaultdict) -> list:
        return _reduce_groups(op, reducer, groups)
    left = key_pairs(stream, op, key)
    right = key_pairs(other, op, other_key, "other key")
    diagnose = check_keys(op, key, other_key)
    if (held(left) is None) != (held(right) is None):
        return held_stage(op, left, right, diagnose, reducer=reducer)
    return per_time_stage([(left, _first), (right, _first)], op, _list_pairs, on_batch, on_done,
                          diagnose)


def count(stream: Stream) -> Stream:
    """Per time, ``(record, n)`` for every distinct record, ``n`` its number of occurrences.

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.count(), [["a", "b", "a"], ["b"]], workers=2)
    {0: [('a', 2), ('b', 1)], 1: [('b', 1)]}
    """
    source, batch, diagnose = _fused_input(stream, check_hashable("count"))
    words = _splits_words(stream)

    def local_batch(tally: Tally, edge: int, records: list) -> None:
        if words:
            columns = _words.count_words(records)
            if columns is not None:
                tally.add_columns(*columns)
                return
        tally.add(batch(records))

    workers = stream.computation.workers
    if workers == 1:                        # nothing to exchange: one stage does it all
        return per_time_stage([(source, None)], "count", Tally, local_batch, _tally_items,
                              diagnose)
    local = per_time_stage([(source, None)], "count.local", Tally, local_batch,
                           _tally_columns(workers), diagnose)
    return merge_blocks(local, "count", operator.add, "combine")


def _splits_words(stream: Stream) -> bool:
    """Whether ``stream`` is a fused ``select_many(str.split)`` (:mod:`linq.words` may count
    its batches)."""
    up = fusable(stream)
    return up is not None and len(up[1]) == 1 and up[1][0].kind == "select_many" \
        and up[1][0].fn is str.split


class Tally:
    """The counts of one time on one worker: a ``Counter``, or the Arrow columns (distinct
    records, their counts) of a single batch counted by :func:`linq.words.count_words`, kept
    as they are until a second batch comes."""

    __slots__ = ("counts", "keys", "values")

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.keys: Any = None
        self.values: Any = None

    def add(self, records: Iterable) -> None:
        self._settle()
        self.counts.update(records)

    def add_columns(self, keys: Any, values: Any) -> None:
        if self.keys is None and not self.counts:
            self.keys, self.values = keys, values
            return
        self._settle()
        counts = self.counts
        keys = keys.to_pylist()
        dict.update(counts, zip(keys, map(operator.add, map(counts.get, keys, repeat(0)),
                                          values.to_pylist())))

    def _settle(self) -> None:
        """The columns kept so far moved into the Counter (still empty then)."""
        if self.keys is not None:
            dict.update(self.counts, zip(self.keys.to_pylist(), self.values.to_pylist()))
            self.keys = self.values = None

    def items(self) -> list:
        if self.keys is not None:
            return list(zip(self.keys.to_pylist(), self.values.to_pylist()))
        return list(self.counts.items())


def _tally_items(tally: Tally) -> list:
    return tally.items()


def _tally_columns(workers: int) -> Callable[[Tally], list]:
    """The blocks of a time's counts for ``workers`` workers (:mod:`linq.blocks`; Arrow
    columns stay Arrow arrays)."""
    routes, of_dict = route_keys(workers), _columns(workers)

    def blocks(tally: Tally) -> list:
        if tally.keys is not None:
            return _words.split_blocks(routes, tally.keys, tally.values)
        return of_dict(tally.counts)
    return blocks


def _fused_input(stream: Stream, diagnose):
    """``(source, batch, diagnose)``: the stream a local pre-combine reads, the function from its
    batches to the records to combine (the chain of fused steps, or the batch itself) and the
    diagnosis of a failing batch."""
    up = fusable(stream)
    if up is None:
        return stream, _identity, diagnose
    source, steps = up
    return source, chain_of(steps), fused_diagnose(steps, diagnose)


def _items(acc: dict) -> list:
    return list(acc.items())


def _columns(workers: int) -> Callable[[dict], list]:
    """The partial accumulators of a time as blocks for ``workers`` workers
    (:mod:`linq.blocks`): keys and values in two lists, split by destination."""
    router = Router(workers)          # never asked to remember: safe to share between workers

    def blocks(acc: dict) -> list:
        return router.split(list(acc), list(acc.values()))
    return blocks


def _combine_by(stream: Stream, op: str, key: Callable, value: Callable,
                combine: Callable[[Any, Any], Any], role: str) -> Stream:
    """Local fold of ``value(r)`` per ``key(r)`` and time, an exchange of the partial
    accumulators on the key, and a final fold of the partials with ``combine``."""
    source, batch, _ = _fused_input(stream, None)
    combine_pairs = combiner(combine)
    combine_records = record_combiner(combine)

    pairs_as_records = _is_item(key, 0) and _is_item(value, 1)

    def fold(acc: dict, edge: int, records: list) -> None:
        if pairs_as_records:
            # Records are (key, value) pairs: fold them straight off the chain, no list (a
            # zip in the user's function then reuses one tuple).  Into a fresh dict, so that
            # a record of another shape can fall back to the general path below.
            part: dict = {}
            try:
                combine_records(part, batch(records))
            except (TypeError, ValueError):
                pass
            else:
                if not acc:
                    acc.update(part)
                else:
                    combine_pairs(acc, part.items())
                return
        items = batch(records)
        if type(items) is not list:
            items = list(items)
        try:
            combine_pairs(acc, zip(map(key, items), map(value, items)))
        except Exception:
            replay_all(items)               # raises the precise error
            raise

    def replay_all(items: list) -> None:
        scratch: dict = {}
        for r in items:
            replay(op, role, combine, scratch, key, value, r)
            k, v = key(r), value(r)
            cur = scratch.get(k, _MISSING)
            scratch[k] = v if cur is _MISSING else combine(cur, v)

    diagnose = _fused_input(stream, None)[2]
    workers = stream.computation.workers
    if workers == 1:                        # nothing to exchange: one stage does it all
        return per_time_stage([(source, None)], op, dict, fold, _items, diagnose)
    local = per_time_stage([(source, None)], f"{op}.local", dict, fold, _columns(workers),
                           diagnose)
    return merge_blocks(local, op, combine, role)


def _is_item(fn: Callable, index: int) -> bool:
    """Whether ``fn`` is ``operator.itemgetter(index)``."""
    return type(fn) is operator.itemgetter and repr(fn) == f"operator.itemgetter({index})"


def min(stream: Stream, key: Callable[[Any], Hashable],
        value: Optional[Callable[[Any], Any]] = None) -> Stream:
    """Per time, ``(key, v)`` with ``v`` the least ``value(record)`` among records with that key.

    ``value`` defaults to the record itself.

    >>> import linq
    >>> from naiad.testing import run
    >>> pairs = [[("a", 3), ("b", 5), ("a", 1)], [("a", 7)]]
    >>> run(lambda comp, s: s.min(lambda r: r[0], lambda r: r[1]), pairs, workers=2)
    {0: [('a', 1), ('b', 5)], 1: [('a', 7)]}
    """
    return _extreme(stream, "min", key, value, _builtin_min)


def max(stream: Stream, key: Callable[[Any], Hashable],
        value: Optional[Callable[[Any], Any]] = None) -> Stream:
    """Per time, ``(key, v)`` with ``v`` the greatest ``value(record)`` among records with that key.

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.max(len, str.upper), [["ab", "cd", "e"]])
    {0: [(1, 'E'), (2, 'CD')]}
    """
    return _extreme(stream, "max", key, value, _builtin_max)


def _extreme(stream: Stream, name: str, key, value, combine) -> Stream:
    need_callable(name, "key", key, "key(record) -> hashable")
    if value is None:
        value = _identity
    need_callable(name, "value", value, "value(record) -> comparable")
    return _combine_by(stream, label(name, key, value), key, value, combine, "comparison")


def aggregate(stream: Stream, key: Callable[[Any], Hashable], value: Callable[[Any], Any],
              combine: Callable[[Any, Any], Any]) -> Stream:
    """Per time, ``(key, acc)``: the ``value(record)`` of each key folded with ``combine``.

    ``combine(a, b)`` must be associative and commutative (it merges values and partial
    accumulators alike, in any order): each worker folds its own records first and only the
    partial accumulators cross the network.

    >>> import linq
    >>> from naiad.testing import run
    >>> sales = [[("tea", 2), ("jam", 1), ("tea", 3)], [("jam", 4)]]
    >>> add = lambda a, b: a + b
    >>> run(lambda comp, s: s.aggregate(lambda r: r[0], lambda r: r[1], add), sales, workers=2)
    {0: [('jam', 1), ('tea', 5)], 1: [('jam', 4)]}
    """
    need_callable("aggregate", "key", key, "key(record) -> hashable")
    need_callable("aggregate", "value", value, "value(record) -> value")
    need_callable("aggregate", "combine", combine, "combine(a, b) -> value")
    return _combine_by(stream, label("aggregate", key, value, combine), key, value, combine,
                       "combine")
