"""Differential times: the product order, least upper bounds, and advancing by a frontier.

A differential collection varies with a time ``(epoch, (i, j, ...))``: an epoch and one
iteration counter per enclosing loop.  Differences are accumulated in the *product* order, where
``t <= u`` when every coordinate of ``t`` is at most the same coordinate of ``u``.  The engine
orders loop counters lexicographically (the paper's order), which contains the product order:
when the engine says no message at a time ``<= T`` can arrive any more, no difference at a time
below ``T`` in the product order can either, so an operator may accumulate its input at ``T``.

Two changes at incomparable times both hold at their least upper bound (:func:`lub`), the
"interesting times" of the seed: ``(0, 3)`` and ``(1, 2)`` meet at ``(1, 3)``.

>>> from naiad import Timestamp
>>> lub(Timestamp(0, (3,)), Timestamp(1, (2,)))
Timestamp(1, (3,))
>>> le(Timestamp(0, (5,)), Timestamp(1, (2,))), le(Timestamp(0, (1, 9)), Timestamp(0, (2, 9)))
(False, True)
>>> advance(Timestamp(2, (4,)), [Timestamp(7, (0,))])    # epoch 2 is indistinguishable from 7
Timestamp(7, (4,))
"""

from __future__ import annotations

from typing import Iterable, List

from naiad.progress.timestamp import Timestamp

__all__ = ["le", "lub", "meet", "advance", "lower_bound"]


def le(t: Timestamp, u: Timestamp) -> bool:
    """The product order: every coordinate of ``t`` at most that of ``u``."""
    if t[0] > u[0]:
        return False
    tc, uc = t[1], u[1]
    if tc == uc:
        return True
    for a, b in zip(tc, uc):
        if a > b:
            return False
    return True


def lub(t: Timestamp, u: Timestamp) -> Timestamp:
    """The least upper bound: the coordinate-wise maximum."""
    tc, uc = t[1], u[1]
    if tc == uc:
        return t if t[0] >= u[0] else u
    e = t[0] if t[0] >= u[0] else u[0]
    return Timestamp(e, tuple(a if a >= b else b for a, b in zip(tc, uc)))


def meet(t: Timestamp, u: Timestamp) -> Timestamp:
    """The greatest lower bound: the coordinate-wise minimum."""
    e = t[0] if t[0] <= u[0] else u[0]
    return Timestamp(e, tuple(a if a <= b else b for a, b in zip(t[1], u[1])))


def lower_bound(frontier: Iterable[Timestamp]) -> List[Timestamp]:
    """A frontier in the product order below every time the engine's ``frontier`` allows.

    A time at or after ``(e, (c1, c2, ...))`` in the engine's lexicographic order has an epoch of
    at least ``e`` and an outer counter of at least ``c1``, but inner counters may start again
    from 0: so the inner counters of each element are lowered to 0.
    """
    out = []
    for f in frontier:
        c = f[1]
        out.append(f if len(c) <= 1 else Timestamp(f[0], (c[0],) + (0,) * (len(c) - 1)))
    return out


def advance(t: Timestamp, frontier: List[Timestamp]) -> Timestamp:
    """The least time that compares with every time at or after ``frontier`` as ``t`` does.

    It is the meet, over the frontier's elements ``f``, of ``lub(t, f)``.  Updates whose times
    advance to the same time can no longer be told apart and are merged: this is how traces
    stay the size of the live collection rather than of its history.
    """
    it = iter(frontier)
    out = lub(t, next(it))
    for f in it:
        out = meet(out, lub(t, f))
    return out
