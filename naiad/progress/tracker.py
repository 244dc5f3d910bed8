"""Occurrence and precursor counts of pointstamps, and the frontier they define (one per worker)."""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import AbstractSet, Set, Iterable

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


def _time(epoch: int, counters: tuple[int, ...]) -> Timestamp:
    """A timestamp from parts known to be valid (``Timestamp()`` checks its counters)."""
    return tuple.__new__(Timestamp, (epoch, counters))


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
    is *active* while its count is positive.  The *frontier* is the set of active pointstamps that
    no other active pointstamp could result in: nothing can happen any more that would lead to an
    event before them.

    Only a few active pointstamps can matter to the frontier.  Path summaries never change the
    epoch and never move counters back, so at one location the active time with the least
    counters of an epoch could result in every other time of that epoch there, and it in turn is
    covered by an earlier epoch's least time at the location when that one's counters are no
    greater.  The tracker keeps, for each location, this *staircase* of least times (epochs
    increasing, counters decreasing) and counts precursors exactly among the staircases only:
    a loop with a thousand notification requests pending over twenty epochs has a few
    staircase times per location, and a change elsewhere compares itself with those.

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
        self.frontier_version = 0
        """Changes whenever the frontier does (``version`` changes with every active pointstamp)."""
        self._depths = {loc: reach.depth(loc) for loc in reach.locations()}
        # Which locations each can reach and be reached from (itself included), and the
        # staircase times by location: a change looks only at staircase pointstamps that could
        # be related to it, not at every one (wide graphs have thousands).
        self._targets, self._sources = reach.related()   # shared by the process's workers
        self._counts: dict[Pointstamp, int] = {}
        # The counters of the active times of each (location, epoch), the least of them by
        # location and epoch, and the staircase of each location (epoch -> counters).
        self._groups: dict[tuple[int, int], set[tuple[int, ...]]] = {}
        self._least: dict[int, dict[int, tuple[int, ...]]] = {}
        self._stairs: dict[int, dict[int, tuple[int, ...]]] = {}
        self._epochs: dict[int, list[int]] = {}            # the epochs of _least, sorted
        self._active_at: dict[int, set[Timestamp]] = {}   # the staircase times by location
        self._precursors: dict[Pointstamp, int] = {}      # exactly the staircase pointstamps
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
        if len(self._counts) <= 64 or self._unchecked >= 64:
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
            self._activate(loc, time)
        elif new <= 0 < old:
            self._deactivate(loc, time)

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

    def _activate(self, loc: int, time: Timestamp) -> None:
        self.version += 1
        epoch, counters = time
        group = self._groups.get((loc, epoch))
        if group is None:
            self._groups[loc, epoch] = {counters}
            if loc not in self._least:          # the only active time at its location
                self._least[loc] = {epoch: counters}
                self._epochs[loc] = [epoch]
                self._stairs[loc] = {epoch: counters}
                self._join((loc, time))
                return
            self._set_least(loc, epoch, counters)
        else:
            group.add(counters)
            if counters < self._least[loc][epoch]:
                self._set_least(loc, epoch, counters)

    def _deactivate(self, loc: int, time: Timestamp) -> None:
        self.version += 1
        epoch, counters = time
        group = self._groups[loc, epoch]
        group.discard(counters)
        if not group:
            del self._groups[loc, epoch]
            if len(self._least[loc]) == 1:      # it was the only active time at its location
                del self._least[loc], self._epochs[loc], self._stairs[loc]
                self._leave((loc, time))
                return
            self._set_least(loc, epoch, None)
        elif counters == self._least[loc][epoch]:
            self._set_least(loc, epoch, min(group))

    def _set_least(self, loc: int, epoch: int, counters: tuple[int, ...] | None) -> None:
        """Record the least counters of ``(loc, epoch)`` (None: none active) and bring the
        location's staircase, and so the precursor counts, up to date.

        Only the staircase from ``epoch`` on can change, and only until the running minimum of
        the counters is what it was (or has no counter above zero: no later epoch can be
        below it): a location with thousands of epochs active is not rescanned at every change.
        """
        least = self._least.get(loc)
        if least is None:
            least = self._least[loc] = {}
            self._epochs[loc] = []
        epochs = self._epochs[loc]
        if counters is not None and epochs and epoch > epochs[-1]:
            # A later epoch than any at the location (the usual way epochs come): it joins the
            # staircase only if below its last step, and nothing else changes.
            least[epoch] = counters
            epochs.append(epoch)
            stair = self._stairs[loc]
            if counters < next(reversed(stair.values())):
                stair[epoch] = counters
                self._join((loc, _time(epoch, counters)))
            return
        if counters is None:
            del least[epoch]
            del epochs[bisect_left(epochs, epoch)]
        else:
            if epoch not in least:
                insort(epochs, epoch)
            least[epoch] = counters
        old = self._stairs.get(loc, {})
        before = list(old.items())                 # by epoch: counters decreasing
        k = 0
        while k < len(before) and before[k][0] < epoch:
            k += 1
        low = old_low = before[k - 1][1] if k else None
        j = k
        changed: dict[int, tuple[int, ...]] = {}   # the new staircase from epoch on, so far
        rest = 0                                   # how many old members after the scan stay
        for i in range(bisect_left(epochs, epoch), len(epochs)):
            e = epochs[i]
            while j < len(before) and before[j][0] <= e:
                old_low = before[j][1]
                j += 1
            c = least[e]
            if low is None or c < low:
                changed[e] = low = c
            if low == old_low:
                rest = len(before) - j             # the staircase after e is as it was
                break
            if not any(low):
                break                              # nothing later can be below it
        gone = before[k:len(before) - rest]
        for e, c in gone:
            if changed.get(e) != c:
                self._leave((loc, _time(e, c)))
        for e, c in changed.items():
            if old.get(e) != c:
                self._join((loc, _time(e, c)))
        stair = dict(before[:k])
        stair.update(changed)
        stair.update(before[len(before) - rest:] if rest else ())
        if stair:
            self._stairs[loc] = stair
        elif loc in self._stairs:
            del self._stairs[loc]
        if not least:
            del self._least[loc], self._epochs[loc]

    def _related(self, locs: AbstractSet[int]) -> Iterable[Pointstamp]:
        """The staircase pointstamps at ``locs``: through the smaller of the two sets."""
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

    def _join(self, p: Pointstamp) -> None:
        """``p`` joins its location's staircase: count its precursors, and count it in those of
        the staircase pointstamps it could result in."""
        could_result_in = self.reach.could_result_in
        precursors = self._precursors
        loc = p[0]
        count = 0
        if len(precursors) <= _FEW:          # a few: comparing with each costs less
            for q in precursors:
                if could_result_in(q, p):
                    count += 1
                if could_result_in(p, q):
                    if not precursors[q]:
                        self._frontier.discard(q)
                        self.frontier_version += 1
                    precursors[q] += 1
        else:
            for q in self._related(self._sources[loc]):
                if could_result_in(q, p):
                    count += 1
            for q in self._related(self._targets[loc]):
                if could_result_in(p, q):
                    if not precursors[q]:
                        self._frontier.discard(q)
                        self.frontier_version += 1
                    precursors[q] += 1
        precursors[p] = count
        times = self._active_at.get(loc)
        if times is None:
            self._active_at[loc] = {p[1]}
        else:
            times.add(p[1])
        if not count:
            self._frontier.add(p)
            self.frontier_version += 1

    def _leave(self, p: Pointstamp) -> None:
        """``p`` leaves its location's staircase."""
        could_result_in = self.reach.could_result_in
        precursors = self._precursors
        if not precursors.pop(p):
            self._frontier.discard(p)
            self.frontier_version += 1
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
                    self.frontier_version += 1

    # -- queries ------------------------------------------------------------------------------

    def occurrence(self, loc: int, time: Timestamp) -> int:
        """The accumulated occurrence count of ``(loc, time)`` (0 if never seen)."""
        return self._counts.get((loc, time), 0)

    def is_active(self, loc: int, time: Timestamp) -> bool:
        """Whether ``(loc, time)`` has a positive occurrence count."""
        return self._counts.get((loc, time), 0) > 0

    def precursors(self, loc: int, time: Timestamp) -> int:
        """How many other active pointstamps could result in ``(loc, time)``.

        Counted afresh over the active pointstamps at locations that reach ``loc`` (for tests and
        diagnosis: the tracker itself keeps exact counts for the staircase pointstamps only).
        """
        p = (loc, time)
        could_result_in = self.reach.could_result_in
        sources = self._sources[loc]
        return sum(1 for (l2, e), group in self._groups.items() if l2 in sources
                   for c in group if (q := (l2, Timestamp(e, c))) != p and could_result_in(q, p))

    def behind(self, loc: int, time: Timestamp) -> bool:
        """Whether another active pointstamp could result in ``(loc, time)``: it lies strictly
        behind the frontier (an active one off its staircase has one at its own location; for
        another, only the staircase pointstamps at locations that reach ``loc`` are looked at)."""
        p = (loc, time)
        if self._counts.get(p, 0) > 0:
            count = self._precursors.get(p)
            return count is None or count > 0
        could_result_in = self.reach.could_result_in
        return any(could_result_in(q, p) for q in self._related(self._sources[loc]))

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
        return not self._groups

    def active_times(self) -> list[Timestamp]:
        """The times of the active pointstamps; safe to call from another thread: the keys are
        copied in one step, under the GIL (copying the items would make a tuple each, and a
        garbage collection started by one of them can run Python code and let the worker in)."""
        counts = self._counts
        return [p[1] for p in list(counts) if counts.get(p, 0) > 0]

    def active(self) -> dict[Pointstamp, int]:
        """The active pointstamps with their (positive) occurrence counts."""
        return {p: n for p, n in self._counts.items() if n > 0}

    def __repr__(self) -> str:
        return f"Tracker(active={len(self.active())}, frontier={self.frontier()!r})"

    # -- invariants ---------------------------------------------------------------------------

    def validate(self) -> None:
        """Recompute the staircases, their precursor counts and the frontier by brute force;
        raise on a mismatch.

        Raises AssertionError naming the first pointstamp whose maintained state differs.  The
        frontier is also checked against the minimal active pointstamps found by comparing every
        active pointstamp with every other one.
        """
        for p, count in self._counts.items():
            if not count:
                msg = f"pointstamp {p!r} is stored with occurrence count 0; zero entries must be removed"
                raise AssertionError(msg)
        active = [p for p, count in self._counts.items() if count > 0]
        grouped = {(loc, Timestamp(e, c)) for (loc, e), group in self._groups.items() for c in group}
        if grouped != set(active) or any(not group for group in self._groups.values()):
            msg = (f"the active pointstamps grouped by location and epoch "
                   f"{sorted(grouped, key=_by_time)!r} differ from the active ones "
                   f"{sorted(active, key=_by_time)!r}")
            raise AssertionError(msg)
        stairs = _staircases(active)
        if stairs != set(self._precursors):
            msg = (f"the staircase pointstamps {sorted(stairs, key=_by_time)!r} differ from the "
                   f"ones with precursor counts {sorted(self._precursors, key=_by_time)!r}")
            raise AssertionError(msg)
        indexed = {(loc, t) for loc, times in self._active_at.items() for t in times}
        if indexed != stairs or any(not times for times in self._active_at.values()):
            msg = (f"the staircase pointstamps indexed by location {sorted(indexed, key=_by_time)!r}"
                   f" differ from {sorted(stairs, key=_by_time)!r}")
            raise AssertionError(msg)
        could_result_in = self.reach.could_result_in
        for p in sorted(stairs, key=_by_time):
            expected = sum(1 for q in stairs if q != p and could_result_in(q, p))
            kept = self._precursors[p]
            if kept != expected:
                msg = (
                    f"pointstamp {p!r} has precursor count {kept} but {expected} other staircase "
                    f"pointstamps could result in it"
                )
                raise AssertionError(msg)
        minimal = {p for p in active if not any(q != p and could_result_in(q, p) for q in active)}
        if minimal != self._frontier:
            msg = (f"the frontier {sorted(self._frontier, key=_by_time)!r} differs from the active "
                   f"pointstamps no other one could result in {sorted(minimal, key=_by_time)!r}")
            raise AssertionError(msg)


def _staircases(active: Iterable[Pointstamp]) -> set[Pointstamp]:
    """The staircase pointstamps of ``active``, by brute force: at each location, the least
    time of each epoch whose counters are below those of every earlier epoch's least time."""
    least: dict[tuple[int, int], tuple[int, ...]] = {}
    for loc, (e, c) in active:
        if (loc, e) not in least or c < least[loc, e]:
            least[loc, e] = c
    found = set()
    for (loc, e), c in least.items():
        if all(not (e2 < e and c2 <= c) for (l2, e2), c2 in least.items() if l2 == loc):
            found.add((loc, Timestamp(e, c)))
    return found


def _by_time(p: Pointstamp) -> tuple[Timestamp, int]:
    return p[1], p[0]
