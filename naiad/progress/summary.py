"""Path summaries: what must happen to a timestamp as it travels along a path of the graph."""

from __future__ import annotations

from typing import Any, Iterable

from naiad.progress.timestamp import Timestamp

__all__ = ["PathSummary"]


_make = tuple.__new__


class PathSummary(tuple):
    """A function on timestamps in normal form ``(keep, delta, extra)``.

    Applied to a timestamp it keeps the first ``keep`` loop counters, adds ``delta`` to the last
    kept counter, then appends the counters ``extra``.  The epoch never changes.  Every path of a
    Naiad graph has a summary of this shape: a plain edge is the identity, entering a loop appends
    a zero counter, leaving a loop drops the innermost counter, and a feedback edge increments it.
    Composing such functions gives a function of the same shape (:meth:`then`), so the set of paths
    between two locations is summarized by a finite antichain of these triples.

    The summary does not record the depth of its source: it reads only the first ``keep`` counters,
    so it applies to a timestamp of any depth of at least ``keep``.

    Like :class:`Timestamp`, Python's ``<`` is a sort order only; the order of summaries as
    functions is :meth:`less_equal`.

    >>> t = Timestamp(3, (1, 4))
    >>> assert PathSummary.feedback(2).apply(t) == Timestamp(3, (1, 5))
    >>> assert PathSummary.egress(2).apply(t) == Timestamp(3, (1,))
    >>> assert PathSummary.ingress(2).apply(t) == Timestamp(3, (1, 4, 0))
    >>> around = PathSummary.egress(2).then(PathSummary.feedback(1)).then(PathSummary.ingress(1))
    >>> assert around == PathSummary(1, 1, (0,)) and around.apply(t) == Timestamp(3, (2, 0))
    >>> assert PathSummary.identity(2).less_equal(around) and around.advances()
    """

    __slots__ = ()

    def __new__(cls, keep: int, delta: int = 0, extra: Iterable[int] = ()) -> "PathSummary":
        if type(extra) is not tuple:
            extra = tuple(extra)
        if keep < 0:
            msg = f"PathSummary keep must be >= 0 (it counts leading loop counters); got {keep}"
            raise ValueError(msg)
        if delta < 0:
            msg = f"PathSummary delta must be >= 0: summaries never move timestamps back; got {delta}"
            raise ValueError(msg)
        if delta and not keep:
            msg = (
                f"PathSummary delta must be 0 when keep == 0 (there is no kept counter to add "
                f"{delta} to); got keep=0, delta={delta}"
            )
            raise ValueError(msg)
        if any(c < 0 for c in extra):
            msg = f"PathSummary extra counters must be >= 0; got {extra!r}"
            raise ValueError(msg)
        return tuple.__new__(cls, (keep, delta, extra))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    @property
    def keep(self) -> int:
        """How many leading loop counters of the input survive."""
        return self[0]

    @property
    def delta(self) -> int:
        """What is added to the last kept counter."""
        return self[1]

    @property
    def extra(self) -> tuple[int, ...]:
        """Counters appended after the kept ones."""
        return self[2]

    @property
    def output_depth(self) -> int:
        """Number of loop counters of every timestamp this summary produces."""
        return self[0] + len(self[2])

    # -- the summaries of single edges -------------------------------------------------------

    @classmethod
    def identity(cls, depth: int) -> "PathSummary":
        """The summary of a path that leaves timestamps of ``depth`` counters unchanged."""
        return cls(depth)

    @classmethod
    def ingress(cls, depth: int) -> "PathSummary":
        """Entering a loop from a location of ``depth`` counters: a new innermost counter, 0."""
        return cls(depth, 0, (0,))

    @classmethod
    def egress(cls, depth: int) -> "PathSummary":
        """Leaving a loop whose locations have ``depth`` counters: the innermost one is dropped."""
        if depth < 1:
            msg = f"PathSummary.egress needs the depth inside the loop (>= 1); got {depth}"
            raise ValueError(msg)
        return cls(depth - 1)

    @classmethod
    def feedback(cls, depth: int, step: int = 1) -> "PathSummary":
        """Going around a loop whose locations have ``depth`` counters: the innermost grows by step."""
        if depth < 1:
            msg = f"PathSummary.feedback needs the depth inside the loop (>= 1); got {depth}"
            raise ValueError(msg)
        if step < 1:
            msg = f"PathSummary.feedback step must be >= 1 so that the loop makes progress; got {step}"
            raise ValueError(msg)
        return cls(depth, step)

    # -- the function -------------------------------------------------------------------------

    def apply(self, t: Timestamp) -> Timestamp:
        """The timestamp ``t`` becomes after travelling a path with this summary."""
        keep, delta, extra = self
        counters = t[1]
        if keep > len(counters):
            msg = (
                f"{self!r} reads {keep} loop counters but {t!r} has only {len(counters)}: the "
                f"summary belongs to a location of a different depth"
            )
            raise ValueError(msg)
        if delta:
            counters = counters[: keep - 1] + (counters[keep - 1] + delta,) + extra
        elif keep < len(counters):
            counters = counters[:keep] + extra
        elif extra:
            counters = counters + extra
        else:
            return t
        return Timestamp(t[0], counters)

    def then(self, other: "PathSummary") -> "PathSummary":
        """The summary of a path with summary ``self`` followed by a path with summary ``other``.

        ``a.then(b).apply(t) == b.apply(a.apply(t))`` for every timestamp ``t`` of the source.
        """
        # Composing two valid summaries gives a valid one, so the result is built without
        # __new__'s checks (graph compilation composes summaries a few hundred times).
        k1, d1, e1 = self
        k2, d2, e2 = other
        if k2 < k1:
            # other drops the counter self added to; only other's effect remains.
            return other if type(other) is PathSummary else PathSummary(k2, d2, e2)
        if k2 == k1:
            return _make(PathSummary, (k1, d1 + d2, e2))
        reach = k2 - k1  # how many of self's appended counters other keeps
        if reach > len(e1):
            msg = (
                f"cannot follow {self!r} (which produces {self.output_depth} loop counters) by "
                f"{other!r} (which reads {k2}): the paths meet at locations of different depths"
            )
            raise ValueError(msg)
        return _make(PathSummary, (k1, d1, e1[: reach - 1] + (e1[reach - 1] + d2,) + e2))

    def less_equal(self, other: "PathSummary") -> bool:
        """True when ``self.apply(t)`` is at most ``other.apply(t)`` for every timestamp ``t``.

        Both summaries must start at the same location.  The answer is exact for counters that are
        natural numbers: summaries producing different depths are incomparable; with equal
        ``keep`` the smaller ``delta`` wins, then the smaller ``extra``; a summary keeping fewer
        counters is below one keeping more only if it adds nothing to its last kept counter and
        its ``extra`` is at most what the other produces from all-zero counters; a summary keeping
        more counters is below one keeping fewer only if that one adds to its last kept counter.
        """
        k1, d1, e1 = self
        k2, d2, e2 = other
        if k1 + len(e1) != k2 + len(e2):
            return False
        if k1 == k2:
            return d1 < d2 or (d1 == d2 and e1 <= e2)
        if k1 > k2:
            # self leaves counter k2-1 alone and keeps more input counters, which can be large.
            return d2 > 0
        if d1:
            return False
        floor = (0,) * (k2 - k1 - 1) + (d2,) + e2
        return e1 <= floor

    def advances(self) -> bool:
        """True when the summary strictly advances every timestamp it maps to its own depth.

        This is the condition on the summary of every cycle of a graph: a cycle that does not
        advance timestamps would let an event result in itself.
        """
        return self[1] > 0

    def __repr__(self) -> str:
        keep, delta, extra = self
        return f"PathSummary(keep={keep}, delta={delta}, extra={extra!r})"
