"""Accumulation of a worker's progress updates before broadcast (the paper, section 3.3.2 b)."""

from __future__ import annotations

from typing import Iterable

from naiad.progress.reachability import Reachability
from naiad.progress.timestamp import Timestamp
from naiad.progress.tracker import Tracker

__all__ = ["ProgressBuffer"]

Pointstamp = tuple[int, Timestamp]
Update = tuple[Pointstamp, int]


class ProgressBuffer:
    """Merges a worker's occurrence-count updates and decides which to broadcast now.

    Updates to the same pointstamp are summed, and entries that reach zero vanish: an event
    produced and consumed between two broadcasts costs nothing.  :meth:`drain` returns what to
    broadcast (as one atomic batch, positives first) and may hold back some retirements.

    The rule: positive updates always go out.  A negative update at ``p`` is held while some other
    pointstamp of the worker's local frontier could result in ``p``: ``p`` lies strictly behind
    that frontier, so no worker can act on its retirement before the frontier moves anyway.

    Why this is safe.  Without holding, every worker's view accumulates, per sender, a prefix of
    that sender's atomic update batches, and the safety property of the protocol holds for such
    views.  Merging consecutive batches only removes some prefixes from consideration.  Holding
    never delays a positive update, so a positive travels no later than the retirement it came
    with; a view under holding is therefore a legal view plus the held retirements, that is, a
    legal view with some counts raised.  Raising counts can only keep more pointstamps active and
    hold other frontiers back, never move a frontier ahead of the true one.

    Why it does not stall.  A held ``p`` waits for a frontier pointstamp ``f`` of the local view,
    and the retirement of ``f`` itself is never held (no other frontier pointstamp precedes it).
    The worker must call :meth:`drain` after producing updates and again whenever its tracker's
    ``version`` changes; once the pointstamps before ``p`` retire, ``p`` reaches the frontier or
    stops being covered, and goes out.  Whether ``p`` lies behind the frontier depends on the
    frontier alone, so held retirements are looked at again only when the tracker's
    ``frontier_version`` has changed since they were held.

    >>> from naiad.progress.reachability import GraphBuilder
    >>> from naiad.progress.summary import PathSummary
    >>> g = GraphBuilder()
    >>> g.add_location(0, 0, "a")
    >>> g.add_location(1, 0, "b")
    >>> g.add_edge(0, 1, PathSummary.identity(0))
    >>> reach = g.build()
    >>> tracker = Tracker(reach)
    >>> tracker.update_many([((0, Timestamp(0)), 1), ((1, Timestamp(0)), 1)])
    >>> buffer = ProgressBuffer(reach)
    >>> buffer.add(1, Timestamp(0), -1)
    >>> buffer.add(1, Timestamp(1), +1)
    >>> assert buffer.drain(tracker) == [((1, Timestamp(1)), 1)] and buffer.pending() == 1
    >>> tracker.update(0, Timestamp(0), -1)
    >>> assert buffer.drain(tracker) == [((1, Timestamp(0)), -1)] and not buffer
    """

    def __init__(self, reach: Reachability) -> None:
        self.reach = reach
        self._updates: dict[Pointstamp, int] = {}
        # Retirements held behind the frontier, by location, epoch and counters, and the
        # tracker's frontier_version they were found behind at: whether a pointstamp lies
        # behind the frontier depends on the frontier alone, so a drain looks at them again only
        # once it has changed.
        self._held: dict[int, dict[int, dict[tuple[int, ...], int]]] = {}
        self._n_held = 0
        self._held_at = -1

    def add(self, loc: int, time: Timestamp, delta: int) -> None:
        """Accumulate ``delta`` into the pending update of ``(loc, time)``."""
        p = (loc, time)
        at = self._held.get(loc)
        if at is not None:
            epoch, counters = time
            group = at.get(epoch)
            if group is not None and counters in group:
                total = group[counters] + delta
                if total < 0:
                    group[counters] = total     # still a retirement, still behind
                    return
                self._unhold(loc, epoch, counters)
                if total:
                    self._updates[p] = total
                return
        total = self._updates.get(p, 0) + delta
        if total:
            self._updates[p] = total
        else:
            self._updates.pop(p, None)

    def add_many(self, changes: Iterable[Update]) -> None:
        """Accumulate a batch of ``((loc, time), delta)`` updates."""
        for (loc, time), delta in changes:
            self.add(loc, time, delta)

    def drain(self, tracker: Tracker, hold: bool = True) -> list[Update]:
        """Remove and return the updates to broadcast now: positives first, then negatives.

        With ``hold`` false everything goes out.  With ``hold`` true, negative updates at
        pointstamps strictly behind ``tracker``'s frontier stay in the buffer; call again when
        ``tracker.version`` changes.
        """
        updates = self._updates
        if self._held and (not hold or tracker.frontier_version != self._held_at):
            self._release(tracker if hold else None)
        self._held_at = tracker.frontier_version
        if not updates:
            return []
        ordered = sorted(updates.items(), key=_by_time)
        self._updates = {}
        positives = [(p, delta) for p, delta in ordered if delta > 0]
        negatives = [(p, delta) for p, delta in ordered if delta < 0]
        if hold and negatives:
            behind = tracker.behind
            out = []
            for p, delta in negatives:
                if behind(*p):
                    self._hold(p, delta)
                else:
                    out.append((p, delta))
            negatives = out
        return positives + negatives

    def _hold(self, p: Pointstamp, delta: int) -> None:
        loc, (epoch, counters) = p
        self._held.setdefault(loc, {}).setdefault(epoch, {})[counters] = delta
        self._n_held += 1

    def _unhold(self, loc: int, epoch: int, counters: tuple[int, ...]) -> int:
        at = self._held[loc]
        group = at[epoch]
        delta = group.pop(counters)
        self._n_held -= 1
        if not group:
            del at[epoch]
            if not at:
                del self._held[loc]
        return delta

    def _release(self, tracker: Tracker | None) -> None:
        """Move the held retirements no longer behind ``tracker``'s frontier (all of them if
        None) back to the updates to send.

        At one location, a retirement found behind covers every held one of a later or equal
        epoch with counters no smaller (the identity path leads from it to them), so each
        location is scanned in epoch order and the tracker is asked only about those not so
        covered: a worker running many epochs ahead holds thousands, and asking about each at
        every move of the frontier took time quadratic in the epochs in flight.
        """
        updates = self._updates
        for loc, at in list(self._held.items()):
            low: tuple[int, ...] | None = None
            for epoch in sorted(at):
                if low is not None and not any(low):
                    break                   # least counters: every later epoch is covered
                group = at[epoch]
                for counters in sorted(group):
                    if low is not None and low <= counters:
                        break               # covered, and so is the rest of the group
                    if tracker is not None and tracker.behind(loc, Timestamp(epoch, counters)):
                        low = counters
                        break
                    updates[(loc, Timestamp(epoch, counters))] = self._unhold(loc, epoch, counters)

    def pending(self) -> int:
        """How many pointstamps have an update waiting in the buffer."""
        return len(self._updates) + self._n_held

    def __bool__(self) -> bool:
        return bool(self._updates) or bool(self._held)

    def __repr__(self) -> str:
        return f"ProgressBuffer(pending={self.pending()})"


def _by_time(update: Update) -> tuple[Timestamp, int]:
    (loc, time), _ = update
    return time, loc
