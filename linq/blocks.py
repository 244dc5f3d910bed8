"""Pre-combined partial results exchanged as columns: one block per destination worker.

A vertex that folds locally (``spread``) knows the keys of its partial results as a list and
often their values as an array.  Instead of one ``(key, partial)`` tuple per key, partitioned
by hashing every key and pickled as tuples, it sends per destination worker one record
``(route, keys, values)``: ``route`` is the key that the exchange sends to that worker
(:func:`naiad.partition.route_keys`), ``keys`` a list of distinct keys whose hash goes there
and ``values`` their partials in the same order, a list or a one-dimensional numpy array (its
buffer crosses processes out of band, without a copy).  The exchange then hashes one key per
block, and the merging vertex folds ``zip(keys, values)``.

:class:`Router` splits keys by destination; destinations of a key list seen again (the
targets of a loop-invariant plan, the same every iteration) are computed once.
:func:`merge_blocks` is the second half: per time, the blocks' pairs folded with ``combine``
as ``aggregate``'s merge does, and a time that received a single block is emitted as it is,
without a dictionary (one worker, or one sender).

>>> r = Router(2)
>>> blocks = r.split(["a", "b", "c"], [1, 2, 3])
>>> sorted(k for _, keys, _ in blocks for k in keys)
['a', 'b', 'c']
>>> from naiad.partition import key_hash
>>> all(key_hash(route) % 2 == key_hash(k) % 2 for route, keys, _ in blocks for k in keys)
True
"""

from __future__ import annotations

import operator
from itertools import compress, repeat
from operator import itemgetter
from typing import Any, Callable, Dict, List, Optional, Sequence

from naiad.graph import Stream
from naiad.optional import numpy as _numpy   # optional: without it values travel as lists
from naiad.partition import destinations, route_keys
from linq.core import PerTimeVertex
from linq.invariant import inherit
from linq.folds import combiner, replay_pair
from linq.words import is_arrow, merge_blocks as merge_arrow


__all__ = ["Router", "merge_blocks", "MergeBlocksVertex"]

_first = itemgetter(0)
_NUMBERS = frozenset((int, float))


class Router:
    """Splits ``(keys, values)`` columns into blocks for ``workers`` workers."""

    def __init__(self, workers: int):
        self.workers = workers
        self.routes = route_keys(workers)
        self._known: Dict[int, tuple] = {}      # id(keys) -> (keys, its parts by destination)

    def forget(self) -> None:
        """Drop the destinations remembered for key lists (at the end of an epoch)."""
        self._known.clear()

    def split(self, keys: Sequence, values: Any) -> List[tuple]:
        """The blocks of ``keys`` (distinct) and ``values`` (a list or an array, same order)."""
        if not len(keys):
            return []
        if self.workers == 1:
            return [(self.routes[0], keys, values)]
        parts = self._parts(keys)
        out = []
        if isinstance(values, list):
            for d, (mask, _, part_keys) in enumerate(parts):
                if part_keys:
                    out.append((self.routes[d], part_keys, list(compress(values, mask))))
            return out
        np = _numpy()                                # an array: numpy is imported already
        for d, part in enumerate(parts):
            if part[2]:
                if part[1] is None:                  # its indices, once per key list
                    part[1] = np.flatnonzero(np.array(part[0], dtype=bool))
                out.append((self.routes[d], part[2], values[part[1]]))
        return out

    def remember(self, keys: list) -> None:
        """Keep the destinations of ``keys`` (a list that will be split again, by identity)."""
        self._known[id(keys)] = (keys, self._compute(keys))

    def _parts(self, keys: Sequence) -> list:
        known = self._known.get(id(keys))
        if known is not None and known[0] is keys:
            return known[1]
        return self._compute(keys)

    def _compute(self, keys: Sequence) -> list:
        """Per destination: ``[mask over keys, its indices (for arrays, made when first
        needed), its keys]``; the masks by C-speed comparisons, without numpy."""
        dests = destinations(keys, self.workers)
        parts = []
        for d in range(self.workers):
            mask = list(map(d.__eq__, dests))
            parts.append([mask, None, list(compress(keys, mask))])
        return parts


def merge_blocks(local: Stream, op: str, combine: Callable[[Any, Any], Any],
                 role: str) -> Stream:
    """``(key, acc)`` per time from the blocks of ``local`` (see the module documentation),
    the partials of a key folded with ``combine``."""
    import stages
    st = stages.new_stage(lambda: MergeBlocksVertex(op, combine, role), name=op)
    st.new_input(local, _first)
    return inherit(op, [local], st.new_output())


class MergeBlocksVertex(PerTimeVertex):
    """Per time, the blocks received; at the notification their pairs folded."""

    def __init__(self, op: str, combine: Callable[[Any, Any], Any], role: str):
        super().__init__(op, list, _extend, self._done)
        self.combine, self.role = combine, role
        self.fold = combiner(combine)
        self.sums = _Sums() if combine is operator.add else None   # float arrays only

    def _done(self, blocks: list) -> list:
        if any(is_arrow(b[1]) for b in blocks):     # word counts (linq.words)
            if self.combine is operator.add and all(is_arrow(b[1]) for b in blocks):
                return merge_arrow(blocks)
            blocks = [(r, _as_list(k), _as_list(v)) for r, k, v in blocks]
        if len(blocks) == 1:
            _, keys, values = blocks[0]
            return list(zip(keys, _as_list(values)))
        if self.sums is not None:
            out = self.sums.add(blocks)
            if out is not None:
                return out
        acc: dict = {}
        numbers = self.combine is operator.add and all(
            _NUMBERS.issuperset(map(type, _as_list(b[2]))) for b in blocks)
        for _, keys, values in blocks:
            values = _as_list(values)
            if not acc:
                acc.update(zip(keys, values))
                continue
            if numbers:        # ints and floats: acc.get(k, 0) + v for every key, in C
                acc.update(zip(keys, map(operator.add, map(acc.get, keys, repeat(0)),
                                         values)))
                continue
            try:
                self.fold(acc, zip(keys, values))
            except Exception:
                for kv in zip(keys, values):         # a failing call, named precisely
                    replay_pair(self.op, self.role, self.combine, acc, kv)
                raise
        return list(acc.items())


def _extend(blocks: list, edge: int, records: list) -> None:
    blocks.extend(records)


class _Sums:
    """Sums of float blocks in an array: every key the vertex has seen numbered once (the
    targets of a loop come back every iteration), each key list numbered once too (found
    again by its length, ends and equality), partials added in arrival order from ``0.0``."""

    def __init__(self) -> None:
        self.index: Dict[Any, int] = {}
        self.names: list = []
        self.known: Dict[tuple, tuple] = {}        # (len, first, last) -> (keys, ids)

    def _forget(self) -> None:
        self.index, self.names, self.known = {}, [], {}

    def add(self, blocks: list) -> Optional[list]:
        """The ``(key, sum)`` pairs of ``blocks``, or None when a block is not a float array."""
        if any(isinstance(b[2], list) for b in blocks):
            return None
        np = _numpy()
        if np is None or not all(isinstance(b[2], np.ndarray) and b[2].dtype == np.float64 for b in blocks):
            return None
        ids = [self._ids(keys) for _, keys, _ in blocks]
        total = np.zeros(len(self.names))
        seen = np.zeros(len(self.names), dtype=bool)
        for at, (_, _, values) in zip(ids, blocks):
            total[at] += values                # distinct keys in a block: no index twice
            seen[at] = True
        if seen.all():
            out = list(zip(self.names, total.tolist()))
        else:
            out = list(zip(compress(self.names, seen.tolist()), total[seen].tolist()))
        if len(self.names) > 4 * len(out) + 4096:      # keys of other times: start afresh
            self._forget()
        return out

    def _ids(self, keys: list) -> Any:
        sig = (len(keys), keys[0], keys[-1])
        got = self.known.get(sig)
        if got is not None and (got[0] is keys or got[0] == keys):
            return got[1]
        index, names = self.index, self.names
        fresh = [k for k in dict.fromkeys(keys) if k not in index]
        index.update(zip(fresh, range(len(names), len(names) + len(fresh))))
        names.extend(fresh)
        np = _numpy()
        ids = np.fromiter(map(index.__getitem__, keys), np.intp, len(keys))
        if len(self.known) > 64:
            self.known.clear()
        self.known[sig] = (keys, ids)
        return ids


def _as_list(values: Any) -> list:
    if isinstance(values, list):
        return values
    return values.to_pylist() if is_arrow(values) else values.tolist()
