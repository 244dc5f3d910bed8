"""iterate: a collection's loop to a fixed point, built from enter, feedback and leave.

As the seed explains, ``x.iterate(body)`` defines ``x[(t, 0)] = x[t]`` and
``x[(t, i)] = body(x[(t, i - 1)])``, and its result at ``t`` is ``x[(t, ∞)]``.  The collection
enters a loop (its times gain a counter 0); the variable is the entered collection plus a
feedback edge; the body's output minus the entered collection is fed back one iteration later
(summed by record first, unless the body ends in a reduction, whose changes are already real), so the variable at iteration ``i`` accumulates to the body's output at
``i - 1``; everything the body produces leaves the loop, where its differences add up to the
final value.  The loop stops by itself when no change circulates: a fixed point.

``loop.enter(c)`` brings an outer collection in.  Its changes sit at iteration 0 and, in the
product order, hold at every iteration: the same collection in each, shipped once per change.
``loop.enter_at(c, at)`` brings each record in from iteration ``at(record)`` on: a loop can
introduce its data by priority (the least labels of a label propagation first, so that fewer
nodes adopt a label they must give up later).

>>> from linq import differential as dd
>>> from linq.differential.testing import run_dd
>>> halve = lambda loop, x: x.map(lambda v: v // 2).concat(x).distinct()
>>> run_dd(lambda c: c.iterate(halve), [12], [[(12, -1), (5, 1)]])   # all halvings of the input
{0: [(0, 1), (1, 1), (3, 1), (6, 1), (12, 1)], 1: [(2, 1), (3, -1), (5, 1), (6, -1), (12, -1)]}
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import stages
from naiad.errors import GraphError
from naiad.loops import LoopContext
from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex
from linq.core import UserFunctionError, call, fn_name, label, need_callable
from linq.iteration import takes_loop
from linq.differential.arrange import not_a_collection
from linq.differential.collection import Collection

__all__ = ["Loop", "iterate"]


class Loop:
    """The loop a body runs in: ``loop.enter(c)`` brings an outer collection in."""

    def __init__(self, context: LoopContext, outer: Any, max_iterations: Optional[int] = None):
        self.context = context
        self.outer = outer
        self.max_iterations = max_iterations

    @property
    def name(self) -> str:
        """The loop's name."""
        return self.context.name

    def enter(self, collection: Collection) -> Collection:
        """``collection`` (of the scope enclosing the loop), the same at every iteration."""
        if not isinstance(collection, Collection):
            raise not_a_collection(f"loop {self.name!r}: enter", collection)
        if collection.scope is not self.outer:
            msg = (f"loop {self.name!r}: enter needs a collection of the scope enclosing the "
                   f"loop ({self.outer.path()}); this one is in {collection.scope.path()}")
            raise GraphError(msg)
        return Collection(self.context.enter(collection._stream), collection._steps)._repeating(
            collection.repeats)

    def enter_at(self, collection: Collection, at: Callable[[Any], int]) -> Collection:
        """``collection`` from iteration ``at(record)`` on (a record is absent before): the
        changes of iteration 0 move to iteration ``at(record)``, where they hold onwards.

        With ``iterate(..., max_iterations=n)``, a record entered at ``n`` or later is never
        seen: the loop has no such iteration."""
        need_callable("enter_at", "at", at, "at(record) -> iteration (int >= 0)")
        op = label("enter_at", at)
        entered = self.enter(collection).stream
        limit = self.max_iterations
        return Collection(stages.unary(entered, lambda: _EnterAt(op, at, limit), name=op))


class _EnterAt(Vertex):
    """Sends each change ``(record, diff)`` of loop counter ``i`` at ``max(i, at(record))``."""

    def __init__(self, op: str, at: Callable[[Any], int], limit: Optional[int]):
        super().__init__()
        self.op = op
        self.at = at
        self.limit = limit          # no iteration from there (max_iterations)

    def on_recv_batch(self, edge: int, batch: list, time: Timestamp) -> None:
        at = self.at
        try:
            its = [at(r) for r, _ in batch]
        except Exception:
            for r, _ in batch:
                call(self.op, "at", at, (r,))          # raises, naming the record
            raise
        outer, i = time[1][:-1], time[1][-1]
        by: Dict[int, List[Any]] = {}
        for rd, it in zip(batch, its):
            if type(it) is not int or it < 0:
                raise UserFunctionError(self.op, "at", at, (rd[0],),
                                        f"returned {it!r}", "an int >= 0 (an iteration)")
            lst = by.get(it)
            if lst is None:
                lst = by[it] = []
            lst.append(rd)
        for it, lst in sorted(by.items()):
            if self.limit is not None and it >= self.limit:
                break
            t = time if it <= i else Timestamp(time[0], outer + (it,))
            self.send_batch_by(0, lst, t)

    def checkpoint(self) -> Any:
        return None

    def restore(self, state: Any) -> None:
        pass


def iterate(collection: Collection, body: Callable[..., Collection],
            max_iterations: Optional[int] = None, *, name: Optional[str] = None) -> Collection:
    """``body(loop, x)`` (or ``body(x)``) applied until the collection stops changing.

    ``max_iterations`` stops it earlier: the result is then the body's output at iteration
    ``max_iterations - 1``.
    """
    need_callable("iterate", "body", body, "body(loop, x) -> collection")
    stream = collection._stream
    context = LoopContext(stream.computation, name or "iterate")
    entered = Collection(context.enter(stream), collection._steps)
    fb = context.feedback(max_iterations=max_iterations)
    x = Collection(entered.stream.concat(fb.stream))
    loop = Loop(context, collection.scope, max_iterations)
    out = body(loop, x) if takes_loop(body) else body(x)
    if not isinstance(out, Collection):
        msg = (f"iterate: the body {fn_name(body)} must return a differential Collection "
               f"computed in its loop; got {type(out).__name__} {out!r:.80}")
        raise TypeError(msg)
    if out.scope is not context.scope:
        msg = (f"iterate: the body {fn_name(body)} returned a collection of scope "
               f"{out.scope.path()}, not of its loop {context.scope.path()}; return one "
               "computed from the loop variable")
        raise GraphError(msg)
    back = out.concat(entered.negate())
    if not (out.consolidated and not out._steps):
        # A body ending in a linear operator may emit changes that cancel (+r and -r at one
        # time): summed before they go round, so the loop stops at the fixed point.  A body
        # ending in a reduction emits nothing once its keys stop changing.
        back = back.consolidate()
    fb.connect(back.stream)
    return Collection(context.exit(out.stream))


Collection.iterate = iterate           # type: ignore[method-assign]
