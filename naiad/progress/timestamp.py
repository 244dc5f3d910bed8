"""Logical timestamps: an epoch and a vector of loop counters, with the paper's partial order."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Iterable

__all__ = ["Timestamp"]


class Timestamp(tuple):
    """A logical time ``(epoch, counters)``: the epoch of an input and one counter per enclosing loop.

    The paper's order is a product order: ``t <= u`` when ``t.epoch <= u.epoch`` and the
    counters of ``t`` are lexicographically at most those of ``u``.  That order is partial, so it
    is spelled :meth:`less_equal`; Python's ``<`` compares ``(epoch, counters)`` as a tuple and is
    a total order that extends it, for sorting only.

    >>> t = Timestamp(1, (0, 3))
    >>> (t.epoch, t.counters)
    (1, (0, 3))
    >>> t.less_equal(Timestamp(1, (1, 0))), Timestamp(2, (0,)).less_equal(Timestamp(1, (5,)))
    (True, False)
    >>> Timestamp(0, (5,)).less_equal(Timestamp(1, (2,)))   # epochs agree, counters do not
    False
    >>> sorted([Timestamp(1), Timestamp(0)])[0] == Timestamp(0)
    True
    """

    __slots__ = ()

    def __new__(cls, epoch: int = 0, counters: Iterable[int] = ()) -> "Timestamp":
        if type(counters) is not tuple:
            counters = tuple(counters)
        return tuple.__new__(cls, (epoch, counters))

    epoch = property(itemgetter(0), doc="The input epoch.")
    counters = property(itemgetter(1), doc="Loop counters, outermost first.")

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)

    def less_equal(self, other: "Timestamp") -> bool:
        """The paper's partial order: epochs compared, counters compared lexicographically."""
        return self[0] <= other[0] and self[1] <= other[1]

    def less_than(self, other: "Timestamp") -> bool:
        """Strictly less in the paper's order."""
        return self.less_equal(other) and self != other

    def join(self, other: "Timestamp") -> "Timestamp":
        """The least upper bound of two timestamps of the same depth."""
        return Timestamp(max(self[0], other[0]), max(self[1], other[1]))

    @property
    def depth(self) -> int:
        """Number of loop counters (how many loops enclose the location)."""
        return len(self[1])

    def __repr__(self) -> str:
        if self[1]:
            return f"Timestamp({self[0]}, {self[1]!r})"
        return f"Timestamp({self[0]})"
