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
        # Retirements held behind the frontier, and the tracker's frontier_version they were
        # found behind at: whether a pointstamp lies behind the frontier depends on the frontier
        # alone, so a drain looks at them again only once it has changed.
        self._held: dict[Pointstamp, int] = {}
        self._held_at = -1

    def add(self, loc: int, time: Timestamp, delta: int) -> None:
        """Accumulate ``delta`` into the pending update of ``(loc, time)``."""
        p = (loc, time)
        held = self._held.pop(p, None)
        if held is not None:
            total = held + delta
            if total < 0:
                self._held[p] = total       # still a retirement, still behind
                return
        else:
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
            updates.update(self._held)       # the frontier moved: look at them again
            self._held = {}
        self._held_at = tracker.frontier_version
        if not updates:
            return []
        ordered = sorted(updates.items(), key=_by_time)
        self._updates = {}
        positives = [(p, delta) for p, delta in ordered if delta > 0]
        negatives = [(p, delta) for p, delta in ordered if delta < 0]
        if hold and negatives:
            behind = tracker.behind
            held = self._held
            out = []
            for p, delta in negatives:
                if behind(*p):
                    held[p] = delta
                else:
                    out.append((p, delta))
            negatives = out
        return positives + negatives

    def pending(self) -> int:
        """How many pointstamps have an update waiting in the buffer."""
        return len(self._updates) + len(self._held)

    def __bool__(self) -> bool:
        return bool(self._updates) or bool(self._held)

    def __repr__(self) -> str:
        return f"ProgressBuffer(pending={self.pending()})"


def _by_time(update: Update) -> tuple[Timestamp, int]:
    (loc, time), _ = update
    return time, loc
