"""Occurrence and precursor counts of pointstamps, and the frontier they define (one per worker)."""

from __future__ import annotations

from typing import Set, Iterable

from naiad.config import DEBUG_ENV, debug_progress_default
from naiad.progress.reachability import Reachability
from naiad.progress.timestamp import Timestamp

__all__ = ["DEBUG_ENV", "Tracker", "debug_enabled"]

Pointstamp = tuple[int, Timestamp]

debug_enabled = debug_progress_default
"""Whether :data:`~naiad.config.DEBUG_ENV` asks new trackers to validate themselves after every
update."""


_FEW = 16
"""Active pointstamps up to which a change is compared with each of them, not looked up by
location."""


def _minimal(times: Iterable[Timestamp]) -> list[Timestamp]:
    """The minimal elements of ``times`` under the paper's order, sorted.

    Python's order on timestamps extends the paper's, so every element below ``t`` sorts first.
    """
    found: list[Timestamp] = []
    for t in sorted(set(times)):
        if not any(m.less_equal(t) for m in found):
            found.append(t)
    return found


class Tracker:
    """A worker's view of the outstanding events of a computation (the paper, section 2.3.2).

    Every pointstamp ``(loc, time)`` has an occurrence count: the net number of unfinished events
    (messages in flight, requested notifications) there, as far as this worker has heard.  The
    count may dip below zero when a retirement is heard before the event it retires.  A pointstamp
    is *active* while its count is positive; its precursor count is the number of other active
    pointstamps that could result in it, kept up to date as pointstamps activate and deactivate.
    The *frontier* is the set of active pointstamps with no precursor: nothing can happen any more
    that would lead to an event before them.

    >>> from naiad.progress.reachability import GraphBuilder
    >>> from naiad.progress.summary import PathSummary
    >>> g = GraphBuilder()
    >>> for loc in range(3):
    ...     g.add_location(loc, 0, f"stage{loc}")
    >>> g.add_edge(0, 1, PathSummary.identity(0))
    >>> g.add_edge(1, 2, PathSummary.identity(0))
    >>> tracker = Tracker(g.build())
    >>> tracker.update_many([((0, Timestamp(1)), 1), ((2, Timestamp(0)), 1)])
    >>> assert tracker.frontier() == [(2, Timestamp(0)), (0, Timestamp(1))]
    >>> tracker.update(2, Timestamp(0), -1)
    >>> assert tracker.frontier() == [(0, Timestamp(1))] and tracker.precursors(2, Timestamp(1)) == 1
    >>> assert tracker.frontier_at(2) == [Timestamp(1)]
    """

    def __init__(self, reach: Reachability, *, debug: bool | None = None) -> None:
        self.reach = reach
        self.debug = debug_enabled() if debug is None else debug
        self.version = 0
        self._depths = {loc: reach.depth(loc) for loc in reach.locations()}
        # Which locations each can reach and be reached from (itself included), and the
        # active times by location: a change looks only at active pointstamps that could be
        # related to it, not at every one (wide graphs have thousands).
        self._targets, self._sources = reach.related()   # shared by the process's workers
        self._active_at: dict[int, set[Timestamp]] = {}
        self._counts: dict[Pointstamp, int] = {}
        self._precursors: dict[Pointstamp, int] = {}  # exactly the active pointstamps
        self._frontier: set[Pointstamp] = set()
        self._unchecked = 0

    # -- changes ------------------------------------------------------------------------------

    def update(self, loc: int, time: Timestamp, delta: int) -> None:
        """Add ``delta`` to the occurrence count of ``(loc, time)``."""
        self._change((loc, time), delta)
        if self.debug:
            self._maybe_validate()

    def update_many(self, changes: Iterable[tuple[Pointstamp, int]]) -> None:
        """Apply a batch of ``((loc, time), delta)`` changes to the occurrence counts."""
        for pointstamp, delta in changes:
            self._change(pointstamp, delta)
        if self.debug:
            self._maybe_validate()

    def _maybe_validate(self) -> None:
        """Validation is quadratic in the active pointstamps: after every update while they are
        few, and after every 64th update when many are active, so debug runs stay usable."""
        self._unchecked += 1
        if len(self._precursors) <= 64 or self._unchecked >= 64:
            self._unchecked = 0
            self.validate()

    def _change(self, p: Pointstamp, delta: int) -> None:
        if not delta:
            return
        loc, time = p
        depth = self._depths.get(loc)
        if depth is None or not isinstance(time, Timestamp) or len(time[1]) != depth:
            self._reject(p)
        old = self._counts.get(p, 0)
        new = old + delta
        if new:
            self._counts[p] = new
        else:
            del self._counts[p]
        if old <= 0 < new:
            self._activate(p)
        elif new <= 0 < old:
            self._deactivate(p)

    def _reject(self, p: Pointstamp) -> None:
        loc, time = p
        if loc not in self._depths:
            msg = f"pointstamp {p!r} names location {loc}, which is not part of the graph"
            raise ValueError(msg)
        if not isinstance(time, Timestamp):
            msg = f"pointstamp {p!r} needs a Timestamp as its time; got {type(time).__name__}"
            raise TypeError(msg)
        msg = (
            f"pointstamp {p!r}: location {self.reach.name(loc)!r} has {self._depths[loc]} loop "
            f"counters but the time has {time.depth}; was the timestamp carried across a loop "
            f"boundary without ingress or egress?"
        )
        raise ValueError(msg)

    def _related(self, locs: frozenset[int]) -> Iterable[Pointstamp]:
        """The active pointstamps at ``locs``: through the smaller of the two sets."""
        active_at = self._active_at
        if len(locs) <= len(active_at):
            for loc in locs:
                times = active_at.get(loc)
                if times:
                    for t in times:
                        yield loc, t
        else:
            for loc, times in active_at.items():
                if loc in locs:
                    for t in times:
                        yield loc, t

    def _activate(self, p: Pointstamp) -> None:
        could_result_in = self.reach.could_result_in
        precursors = self._precursors
        loc = p[0]
        count = 0
        if len(precursors) <= _FEW:          # a few: comparing with each costs less
            for q in precursors:
                if could_result_in(q, p):
                    count += 1
                if could_result_in(p, q):
                    precursors[q] += 1
                    self._frontier.discard(q)
        else:
            for q in self._related(self._sources[loc]):
                if could_result_in(q, p):
                    count += 1
            for q in self._related(self._targets[loc]):
                if could_result_in(p, q):
                    precursors[q] += 1
                    self._frontier.discard(q)
        precursors[p] = count
        times = self._active_at.get(loc)
        if times is None:
            self._active_at[loc] = {p[1]}
        else:
            times.add(p[1])
        if not count:
            self._frontier.add(p)
        self.version += 1

    def _deactivate(self, p: Pointstamp) -> None:
        could_result_in = self.reach.could_result_in
        precursors = self._precursors
        del precursors[p]
        self._frontier.discard(p)
        loc = p[0]
        times = self._active_at[loc]
        times.discard(p[1])
        if not times:
            del self._active_at[loc]
        for q in precursors if len(precursors) <= _FEW else self._related(self._targets[loc]):
            if could_result_in(p, q):
                precursors[q] -= 1
                if not precursors[q]:
                    self._frontier.add(q)
        self.version += 1

    # -- queries ------------------------------------------------------------------------------

    def occurrence(self, loc: int, time: Timestamp) -> int:
        """The accumulated occurrence count of ``(loc, time)`` (0 if never seen)."""
        return self._counts.get((loc, time), 0)

    def is_active(self, loc: int, time: Timestamp) -> bool:
        """Whether ``(loc, time)`` has a positive occurrence count."""
        return (loc, time) in self._precursors

    def precursors(self, loc: int, time: Timestamp) -> int:
        """How many other active pointstamps could result in ``(loc, time)``.

        Maintained incrementally for active pointstamps; counted afresh for any other.
        """
        p = (loc, time)
        count = self._precursors.get(p)
        if count is not None:
            return count
        could_result_in = self.reach.could_result_in
        return sum(1 for q in self._precursors if could_result_in(q, p))

    def behind(self, loc: int, time: Timestamp) -> bool:
        """Whether another active pointstamp could result in ``(loc, time)``: it lies strictly
        behind the frontier (an active one has a precursor; for another, only the active
        pointstamps at locations that reach ``loc`` are looked at)."""
        p = (loc, time)
        count = self._precursors.get(p)
        if count is not None:
            return count > 0
        could_result_in = self.reach.could_result_in
        return any(q != p and could_result_in(q, p) for q in self._related(self._sources[loc]))

    def in_frontier(self, loc: int, time: Timestamp) -> bool:
        """Whether ``(loc, time)`` is active and no other active pointstamp could result in it."""
        return (loc, time) in self._frontier

    def frontier_view(self) -> "Set[Pointstamp]":
        """The frontier as a live, unordered set (read it, never change it): no sort, no copy."""
        return self._frontier

    def frontier(self) -> list[Pointstamp]:
        """The frontier, sorted by time then location."""
        return sorted(self._frontier, key=_by_time)

    def frontier_at(self, loc: int) -> list[Timestamp]:
        """The least times at which an event could still occur at ``loc``, sorted.

        An empty list means nothing can ever happen at ``loc`` again.  Only the frontier needs to
        be consulted: every active pointstamp is reached from some frontier pointstamp.
        """
        summaries = self.reach.summaries
        return _minimal(
            summary.apply(time) for src, time in self._frontier for summary in summaries(src, loc)
        )

    def is_empty(self) -> bool:
        """Whether no pointstamp is active."""
        return not self._precursors

    def active_times(self) -> list[Timestamp]:
        """The times of the active pointstamps; safe to call from another thread (the keys
        are copied in one step, under the GIL)."""
        return [t for _, t in list(self._precursors)]

    def active(self) -> dict[Pointstamp, int]:
        """The active pointstamps with their (positive) occurrence counts."""
        return {p: self._counts[p] for p in self._precursors}

    def __repr__(self) -> str:
        return f"Tracker(active={len(self._precursors)}, frontier={self.frontier()!r})"

    # -- invariants ---------------------------------------------------------------------------

    def validate(self) -> None:
        """Recompute every precursor count and the frontier by brute force; raise on a mismatch.

        Raises AssertionError naming the first pointstamp whose maintained state differs.
        """
        for p, count in self._counts.items():
            if not count:
                msg = f"pointstamp {p!r} is stored with occurrence count 0; zero entries must be removed"
                raise AssertionError(msg)
        active = [p for p, count in self._counts.items() if count > 0]
        if set(active) != set(self._precursors):
            msg = (
                f"active pointstamps {sorted(active, key=_by_time)!r} differ from the ones with "
                f"precursor counts {sorted(self._precursors, key=_by_time)!r}"
            )
            raise AssertionError(msg)
        indexed = {(loc, t) for loc, times in self._active_at.items() for t in times}
        if indexed != set(active) or any(not times for times in self._active_at.values()):
            msg = (f"the active pointstamps indexed by location {sorted(indexed, key=_by_time)!r}"
                   f" differ from the active ones {sorted(active, key=_by_time)!r}")
            raise AssertionError(msg)
        could_result_in = self.reach.could_result_in
        for p in active:
            expected = sum(1 for q in active if q != p and could_result_in(q, p))
            kept = self._precursors[p]
            if kept != expected:
                msg = (
                    f"pointstamp {p!r} has precursor count {kept} but {expected} other active "
                    f"pointstamps could result in it"
                )
                raise AssertionError(msg)
            if (expected == 0) != (p in self._frontier):
                where = "in" if p in self._frontier else "missing from"
                msg = f"pointstamp {p!r} with precursor count {expected} is wrongly {where} the frontier"
                raise AssertionError(msg)
        stray = self._frontier - set(active)
        if stray:
            msg = f"frontier holds inactive pointstamps {sorted(stray, key=_by_time)!r}"
            raise AssertionError(msg)


def _by_time(p: Pointstamp) -> tuple[Timestamp, int]:
    return p[1], p[0]
