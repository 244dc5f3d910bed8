"""Fixed-count loops over a LoopContext: iterate and iterate_and_accumulate, nestable.

``s.iterate(body, n)`` is the paper's loop: the stream enters a loop context (its times gain a
counter 0), ``body`` is applied to it together with a feedback edge that brings the body's own
output back at counter ``c + 1``, and the feedback stops at counter ``n - 1``.  So at counter
``c`` the body sees ``body^c(s)`` and produces ``body^(c+1)(s)``.  ``iterate`` lets only the
output of counter ``n - 1`` leave the loop; ``iterate_and_accumulate`` lets every counter's output
leave.  Inside the body every operator works per time, and a time there includes the counter, so
iterations never mix.  A body may itself iterate: the inner loop's times carry two counters.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import stages
from naiad.config import positive_int
from naiad.errors import GraphError
from naiad.graph import Stream
from naiad.loops import LoopContext
from naiad.vertex import Vertex
from linq.core import fn_name, need_callable
from linq.streaming import _GuardedKey
from linq.invariant import Loop, held, mark_held

__all__ = ["iterate", "iterate_and_accumulate", "takes_loop"]


class _AtCounter(Vertex):
    """Passes the batches whose innermost loop counter is ``counter``; drops the others."""

    def __init__(self, counter: int):
        super().__init__()
        self.counter = counter

    def on_recv_batch(self, edge: int, records: list, time) -> None:
        if time[1][-1] == self.counter:
            self.send_batch_by(0, records, time)


class _FedBackKey(_GuardedKey):
    """The guarded ``partition_by`` of a loop's feedback; the graph's fingerprint names the
    user's function (``func``), as it did before the guard."""

    __slots__ = ()

    @property
    def func(self) -> Callable[[Any], Any]:
        return getattr(self.key, "func", self.key)     # a partial's function, as before


def _loop(stream: Stream, body: Callable[[Stream], Stream], iterations: int, what: str,
          partition_by: Optional[Callable[[Any], Any]], name: Optional[str]):
    need_callable(what, "body", body, "body(stream) -> stream or body(loop, stream) -> stream")
    positive_int("iterations", iterations, what=f"{what}: the number of iterations")
    outer = held(stream)          # iterating a stream invariant in the enclosing loop
    loop = LoopContext(stream.computation, name or what)
    entered = loop.enter(stream)
    if partition_by is not None:
        need_callable(what, "partition_by", partition_by, "partition_by(record) -> key")
        partition_by = _FedBackKey(f"{what}(partition_by={fn_name(partition_by)})", partition_by)
    fb = loop.feedback(partition_by=partition_by, max_iterations=iterations)
    x = entered.concat(fb.stream)
    shaped: Any = body             # body(stream) or body(loop, stream), told apart at run time
    loop_arg = Loop(loop, iterations) if takes_loop(body) else None
    out = shaped(loop_arg, x) if loop_arg is not None else shaped(x)
    if not isinstance(out, Stream) or out.scope is not loop.scope:
        got = (f"a stream of scope {out.scope.path()}" if isinstance(out, Stream)
               else f"{type(out).__name__} {out!r}")
        msg = (f"{what}: the body {fn_name(body)} must return a stream computed from its "
               f"argument (inside loop {loop.name!r}); got {got}")
        raise GraphError(msg) if isinstance(out, Stream) else TypeError(msg)
    if held(out) is not None:
        msg = (f"{what}: the body {fn_name(body)} returns a loop-invariant stream (made from "
               "loop.enter only); return one computed from the iterated stream")
        raise GraphError(msg)
    fb.connect(out)
    return loop, out, outer, loop_arg


def _invariant_result(stream: Stream, outer: Optional[tuple], body: Callable, what: str,
                      loop_arg: Optional[Loop]) -> Stream:
    """The loop's result; invariant in the enclosing loop when the iterated stream is (and
    the body brought nothing varying in), a GraphError when it would mix the two kinds."""
    if outer is None:
        return stream
    if loop_arg is not None and loop_arg.entered_varying:
        msg = (f"{what}: the iterated stream is loop-invariant in the enclosing loop "
               f"{outer[0].path()}, but the body {fn_name(body)} enters a stream that varies "
               "with it; iterate the varying stream instead, or join the two in the "
               "enclosing loop's body")
        raise GraphError(msg)
    return mark_held(stream, outer)


def takes_loop(body: Callable) -> bool:
    """Whether ``body`` takes ``(loop, stream)`` rather than ``(stream)``."""
    import inspect      # here, not at import: only programs with loops pay for it (~4 ms)
    try:
        sig = inspect.signature(body)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(None)
    except TypeError:
        try:
            sig.bind(None, None)
            return True
        except TypeError:
            name = getattr(body, "__name__", type(body).__name__)
            msg = (f"iterate: the body {name}{sig} takes neither (x) nor (loop, x); write it "
                   "as body(loop, x) -> the next value of x (or body(x))")
            raise TypeError(msg) from None
    return False


def iterate(stream: Stream, body: Callable[[Stream], Stream], iterations: int, *,
            partition_by: Optional[Callable[[Any], Any]] = None,
            name: Optional[str] = None) -> Stream:
    """``body`` applied ``iterations`` times; the result is the body's output at the last one.

    ``partition_by`` routes the records fed back between iterations (default: they stay on
    their worker).  Each epoch iterates on its own.  A body of two arguments,
    ``body(loop, s)``, may bring loop-invariant inputs in with ``loop.enter(other)``
    (:mod:`linq.invariant`).

    >>> import linq
    >>> from naiad.testing import run
    >>> run(lambda comp, s: s.iterate(lambda x: x.select(lambda v: v * 2), 3), [[1, 5], [7]])
    {0: [8, 40], 1: [56]}
    >>> halve = lambda s: s.select(lambda v: v // 2).where(lambda v: v > 0).distinct()
    >>> run(lambda comp, s: s.iterate(halve, 2), [[8, 9, 3, 1]])   # 1 and 3 die out
    {0: [2]}
    """
    loop, out, outer, arg = _loop(stream, body, iterations, "iterate", partition_by, name)
    last = stages.unary(out, lambda: _AtCounter(iterations - 1), name=f"{loop.name}.last")
    return _invariant_result(loop.exit(last), outer, body, "iterate", arg)


def iterate_and_accumulate(stream: Stream, body: Callable[[Stream], Stream], iterations: int,
                           *, partition_by: Optional[Callable[[Any], Any]] = None,
                           name: Optional[str] = None) -> Stream:
    """``body`` applied ``iterations`` times; the result is everything it produced, in every one.

    >>> import linq
    >>> from naiad.testing import run
    >>> step = lambda s: s.select(lambda v: v + 10)
    >>> run(lambda comp, s: s.iterate_and_accumulate(step, 3), [[1, 2]])
    {0: [11, 12, 21, 22, 31, 32]}
    """
    loop, out, outer, arg = _loop(stream, body, iterations, "iterate_and_accumulate",
                                  partition_by, name)
    return _invariant_result(loop.exit(out), outer, body, "iterate_and_accumulate", arg)
