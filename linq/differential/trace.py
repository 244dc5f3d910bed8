"""Arrangements: the state of differential operators, indexed by key and compacted by frontier.

A :class:`Trace` holds, for every key, the updates ``(value, time, diff)`` an operator has
received (or produced).  It is the seed's ``Trace<K, T, V>``: a map from key to that key's
history.  Operators look a key up (join walks the other side's updates for the key; reduce
accumulates a key's updates at a time) and append new updates to it.

Compaction keeps the state the size of the live collection rather than of its history.  When the
frontier of the operator advances, every key holding updates of two or more epochs has its times
advanced by the frontier (:func:`~linq.differential.lattice.advance`); updates whose times become
equal are summed and those summing to zero are dropped, and a key with no update left disappears.
Compaction visits only those keys, so its cost follows the changes, not the state.

>>> from naiad import Timestamp
>>> tr = Trace()
>>> for epoch in range(1000):                 # insert and remove the same record, again and again
...     tr.add("k", "v", Timestamp(epoch), 1 if epoch % 2 == 0 else -1)
...     tr.compact([Timestamp(epoch + 1)])
>>> tr.updates(), len(tr), len(tr.times) <= 64      # the times seen are not all kept either
(0, 0, True)
>>> tr.add("k", "v", Timestamp(5000), 1); tr.compact([Timestamp(6000)]); tr.get("k")
[('v', Timestamp(5000), 1)]
>>> tr.add("k", "v", Timestamp(5001), 1); tr.compact([Timestamp(6000)]); tr.get("k")
[('v', Timestamp(6000), 2)]
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, Iterable, List, Optional, Set, Tuple

from naiad.progress.timestamp import Timestamp
from linq.differential.lattice import advance, le

__all__ = ["Trace", "Update", "accumulate", "consolidate"]

Update = Tuple[Any, Timestamp, int]          # (value, time, diff)
_NONE: List[Update] = []                      # no update left out (shared: never written)
_RECOUNT = 64          # times a trace may hold, beyond those of its updates, before a recount


class Trace:
    """Updates by key: ``index[key] -> [(value, time, diff), ...]``, compacted by frontier."""

    __slots__ = ("index", "dirty", "since", "cache", "times", "tops", "epochs", "limit")

    def __init__(self) -> None:
        self.index: Dict[Hashable, List[Update]] = {}
        self.dirty: Set[Hashable] = set()
        self.since: Optional[List[Timestamp]] = None     # the frontier last compacted to
        # key -> (time, collection at time, updates read, updates read but not <= time)
        self.cache: Dict[Hashable, Tuple[Timestamp, Dict[Any, int], int, List[Update]]] = {}
        # Every time an update may carry (a superset: compaction adds the advanced times and
        # keeps the old ones), so that "all updates are at or before t" is cheap to rule on.
        # Recounted from the updates held once it grows past ``limit``: a trace whose live
        # updates stay few, over ever new epochs, keeps few times too.
        self.times: Set[Timestamp] = set()
        # The maximal elements of ``times`` in the product order: "every update is at or before
        # t" asks only them, and they stay few (one per incomparable iteration depth).
        self.tops: List[Timestamp] = []
        # The least and greatest epoch of those times: while both equal the epoch of a batch,
        # no key can hold updates of two epochs, so adding it marks nothing for compaction.
        self.epochs: Optional[Tuple[int, int]] = None
        self.limit = _RECOUNT

    def __getstate__(self) -> dict:
        return {"index": self.index, "dirty": self.dirty, "since": self.since}

    def __setstate__(self, state: dict) -> None:
        self.index = state["index"]
        self.dirty = state["dirty"]
        self.since = state["since"]
        self.cache = {}
        self._recount()

    def _recount(self) -> None:
        """``times``, ``tops`` and ``epochs`` of the updates held, and the size ``times`` may
        reach before the next recount: twice this, and at least an eighth of the updates held,
        so that a recount, which reads every update, is paid for by as many new times."""
        times: Set[Timestamp] = set()
        held = 0
        for lst in self.index.values():
            held += len(lst)
            times.update(t for _, t, _ in lst)
        self.times = times
        self.tops = []
        for t in times:
            self._top(t)
        self.epochs = (min(t[0] for t in times), max(t[0] for t in times)) if times else None
        self.limit = 2 * len(times) + max(_RECOUNT, held // 8)

    def __len__(self) -> int:
        """The number of keys with updates."""
        return len(self.index)

    def updates(self) -> int:
        """The number of updates held, over all keys."""
        return sum(len(u) for u in self.index.values())

    def get(self, key: Hashable) -> Optional[List[Update]]:
        """The updates of ``key`` (not a copy), or None."""
        return self.index.get(key)

    def add(self, key: Hashable, value: Any, time: Timestamp, diff: int) -> None:
        """Append one update."""
        self._saw(time)
        lst = self.index.get(key)
        if lst is None:
            self.index[key] = [(value, time, diff)]
        else:
            if lst[0][1][0] != time[0]:
                self.dirty.add(key)
            lst.append((value, time, diff))

    def add_batch(self, triples: Iterable[Tuple[Hashable, Any, int]], time: Timestamp) -> None:
        """Append ``(key, value, diff)`` updates, all at ``time``.

        A key becomes due for compaction when it gets updates at a second epoch: updates of
        one epoch only can never merge further (iterations of a loop stay apart), so keys
        written once and never again cost nothing when the frontier moves.
        """
        index = self.index
        epoch = time[0]
        self._saw(time)
        if self.epochs == (epoch, epoch):
            # Every update held is of this epoch: nothing becomes due for compaction.  (A new
            # key costs an exception; they are few after the first batch.)
            for k, v, d in triples:
                try:
                    index[k].append((v, time, d))
                except KeyError:
                    index[k] = [(v, time, d)]
            return
        dirty = self.dirty
        for k, v, d in triples:
            lst = index.get(k)
            if lst is None:
                index[k] = [(v, time, d)]
            else:
                if lst[0][1][0] != epoch:
                    dirty.add(k)
                lst.append((v, time, d))

    def _saw(self, time: Timestamp) -> None:
        if time in self.times:
            return
        self.times.add(time)
        self._top(time)
        e = time[0]
        ep = self.epochs
        if ep is None:
            self.epochs = (e, e)
        elif e < ep[0] or e > ep[1]:
            self.epochs = (min(e, ep[0]), max(e, ep[1]))

    def accumulate_all(self, key: Hashable, time: Timestamp) -> Dict[Any, int]:
        """The collection of ``key`` at ``time`` when every update is at a time ``<= time``
        (the caller knows it from :meth:`all_at_or_before`): the sum of all its updates.

        No time is compared: the cached sum (whatever time it was asked at) plus the updates
        it left out and those appended since.  The cached dictionary is updated in place and
        returned; the caller must not keep it past its next call for ``key``.
        """
        lst = self.index.get(key)
        if not lst:
            return {}
        c = self.cache.get(key)
        todo: Iterable[Update]
        if c is None:
            acc: Dict[Any, int] = {}
            todo = lst
        else:
            acc = c[1]
            if c[3]:
                todo = c[3] + lst[c[2]:]
            elif c[2] == len(lst):
                return acc                      # nothing new: the entry stays as it is
            else:
                todo = lst[c[2]:]
        get = acc.get
        for v, _, d in todo:
            n = get(v, 0) + d
            if n:
                acc[v] = n
            else:
                del acc[v]
        self.cache[key] = (time, acc, len(lst), _NONE)
        return acc

    def chain_at(self, time: Timestamp) -> Optional[Dict[Timestamp, bool]]:
        """``{t: t <= time}`` over the times held, when every update is of ``time``'s epoch
        (so none was ever moved by compaction) and every time compares with ``time``; else
        None.  Then every update not at or before ``time`` is after it: the first epoch of a
        loop, whose iterations form a chain."""
        e = time[0]
        if self.epochs != (e, e) and self.epochs is not None:
            return None
        out: Dict[Timestamp, bool] = {}
        for t in self.times:
            b = out[t] = le(t, time)
            if not b and not le(time, t):
                return None
        return out

    def accumulate(self, key: Hashable, time: Timestamp,
                   below: Optional[Dict[Timestamp, bool]] = None
                   ) -> Tuple[Dict[Any, int], List[Update]]:
        """The collection of ``key`` at ``time``, and its updates at times not ``<= time``.

        The result at the last time asked is kept per key: asked again at a later time, only
        the updates appended since and those left out then are read, so a key's cost follows
        its new updates, not its history (compaction, which rewrites the history, drops it).
        """
        lst = self.index.get(key)
        if not lst:
            return {}, []
        c = self.cache.get(key)
        if c is not None and (c[0] is time or le(c[0], time)):
            acc = dict(c[1])
            todo: Iterable[Update] = c[3] + lst[c[2]:] if c[3] else lst[c[2]:]
        else:
            acc = {}
            todo = lst
        later: List[Update] = []
        if below is None:
            below = {}                           # each distinct time compared once
        for u in todo:
            t = u[1]
            b = below.get(t)
            if b is None:
                b = below[t] = le(t, time)
            if b:
                v = u[0]
                n = acc.get(v, 0) + u[2]
                if n:
                    acc[v] = n
                else:
                    del acc[v]
            else:
                later.append(u)
        self.cache[key] = (time, acc, len(lst), later)
        return acc, later

    def _top(self, time: Timestamp) -> None:
        """Keep ``tops`` the maximal times seen, with ``time`` seen now."""
        tops = self.tops
        for t in tops:
            if le(time, t):
                return
        self.tops = [t for t in tops if not le(t, time)]
        self.tops.append(time)

    def all_at_or_before(self, time: Timestamp) -> bool:
        """Whether every update is at a time ``<= time`` (so any pair with an update at
        ``time`` is at ``time`` itself): asked of the maximal times only."""
        for t in self.tops:
            if not (t is time or le(t, time)):
                return False
        return True

    def compact(self, frontier: List[Timestamp]) -> None:
        """Advance the times of the keys touched since the last call, and merge their updates.

        ``frontier`` must be a frontier in the product order below every time at which the
        trace will still be read or written.
        """
        self.since = frontier
        if frontier and self.dirty:
            self._merge(frontier)
        if len(self.times) > self.limit:
            self._recount()

    def _merge(self, frontier: List[Timestamp]) -> None:
        """Advance the dirty keys' times to ``frontier`` and merge their updates."""
        index = self.index
        single = frontier[0] if len(frontier) == 1 and not frontier[0][1] else None
        moved: Dict[Timestamp, Timestamp] = {}      # each distinct time advanced once
        cache = self.cache
        still: Set[Hashable] = set()     # keys a later frontier may merge further
        for key in self.dirty:
            cache.pop(key, None)
            lst = index.get(key)
            if lst is None:
                continue
            if single is not None:          # outside loops: one epoch bound
                bound = single[0]
                acc: Dict[Tuple[Any, Timestamp], int] = {}
                for v, t, d in lst:
                    if t[0] < bound:
                        t = single
                        self._saw(single)
                    acc[(v, t)] = acc.get((v, t), 0) + d
            else:
                acc = {}
                for v, t, d in lst:
                    a = moved.get(t)
                    if a is None:
                        a = moved[t] = advance(t, frontier)
                        self._saw(a)
                    acc[(v, a)] = acc.get((v, a), 0) + d
            kept = [(v, t, d) for (v, t), d in acc.items() if d]
            if kept:
                index[key] = kept
                first = kept[0][1][0]
                if any(t[0] != first for _, t, _ in kept):
                    still.add(key)
            else:
                del index[key]
        self.dirty = still


def accumulate(updates: Iterable[Update], time: Timestamp) -> Dict[Any, int]:
    """The collection at ``time``: the sum of the updates at times ``<= time``, zeros dropped."""
    acc: Dict[Any, int] = {}
    below: Dict[Timestamp, bool] = {}        # each distinct time compared once
    for v, t, d in updates:
        b = below.get(t)
        if b is None:
            b = below[t] = le(t, time)
        if b:
            acc[v] = acc.get(v, 0) + d
    return {v: n for v, n in acc.items() if n}


def consolidate(changes: Iterable[Tuple[Any, int]]) -> List[Tuple[Any, int]]:
    """``(record, diff)`` pairs summed by record, zeros dropped, in first-seen order.

    >>> consolidate([("a", 1), ("b", 2), ("a", -1), ("b", 1)])
    [('b', 3)]
    """
    acc: Dict[Any, int] = {}
    for r, d in changes:
        acc[r] = acc.get(r, 0) + d
    return [(r, d) for r, d in acc.items() if d]
