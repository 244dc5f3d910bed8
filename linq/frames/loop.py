"""Fixed-count loops over frames, with loop-invariant inputs: ``FrameStream.iterate``.

``f.iterate(body, n)`` runs on the loop machinery of :mod:`linq.iteration` (a LoopContext: the
paper's ingress, feedback and egress vertices); ``body(f)`` or ``body(loop, f)`` receives the
iterated tables as a FrameStream and returns the next iteration's.  ``loop.enter(other)``
brings a frame stream from outside the loop in as a loop-invariant input
(:mod:`linq.invariant`): its tables at epoch ``e`` hold at every iteration of ``e`` and arrive
once.  Stateless operators and ``group_by`` over invariant tables give invariant tables (made
once); a ``join`` of an invariant side with a varying one keeps the invariant side's index for
the whole epoch (:class:`linq.frames.held.HeldJoin`), so the static side crosses the network
and is sorted once per epoch, not once per iteration.

>>> import pyarrow as pa, pyarrow.compute as pc
>>> from naiad.testing import run
>>> from linq import frames
>>> def build(comp, s):
...     f = frames.of(s)
...     factors = f.filter(lambda t: pc.equal(t["kind"], "w")).map_batches(
...         lambda t: pa.table({"key": t["key"], "w": t["v"]}))
...     start = f.filter(lambda t: pc.equal(t["kind"], "x")).map_batches(
...         lambda t: pa.table({"key": t["key"], "v": t["v"]}))
...     def body(loop, x):
...         return x.join(loop.enter(factors), on="key").map_batches(
...             lambda t: pa.table({"key": t["key"], "v": pc.multiply(t["v"], t["w"])}))
...     return start.iterate(body, 3).to_records()
>>> t = pa.table({"kind": ["w", "w", "x", "x"], "key": ["a", "b", "a", "b"], "v": [2, 10, 1, 1]})
>>> run(build, [[t]], workers=2)
{0: [('a', 8), ('b', 1000)]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from naiad.errors import GraphError
from naiad.graph import Stream
from linq.core import fn_name, need_callable
from linq.invariant import Loop
from linq.iteration import iterate as iterate_records, takes_loop

if TYPE_CHECKING:  # pragma: no cover
    from linq.frames.stream import FrameStream

__all__ = ["FrameLoop", "iterate"]


class FrameLoop:
    """The loop a two-argument body receives: ``loop.enter(frames)`` brings an invariant input."""

    def __init__(self, loop: Loop, wrap: Callable[[Stream], "FrameStream"]):
        self.loop = loop
        self._wrap = wrap

    @property
    def name(self) -> str:
        return self.loop.name

    @property
    def iterations(self) -> int:
        return self.loop.iterations

    def enter(self, other: Any) -> "FrameStream":
        """``other`` (a FrameStream or a Stream of tables, from outside the loop) inside it; its
        tables hold at every iteration of their epoch and are sent once."""
        stream = getattr(other, "stream", other)
        return self._wrap(self.loop.enter(stream))


def iterate(frames: "FrameStream", body: Callable, iterations: int,
            wrap: Callable[[Stream], "FrameStream"], name: str = "frames.iterate") -> Stream:
    """The stream of :meth:`FrameStream.iterate` (``wrap`` makes a FrameStream of a Stream)."""
    need_callable("frames.iterate", "body", body,
                  "body(frames) -> frames or body(loop, frames) -> frames")
    two = takes_loop(body)

    def step(loop: Loop, s: Stream) -> Stream:
        f = wrap(s)
        out = body(FrameLoop(loop, wrap), f) if two else body(f)
        stream = getattr(out, "stream", None)
        if not isinstance(stream, Stream):
            msg = (f"frames.iterate: the body {fn_name(body)} must return a FrameStream "
                   f"computed from its argument; got {type(out).__name__} {out!r:.100}")
            raise (GraphError if isinstance(out, Stream) else TypeError)(msg)
        return stream

    step.__name__ = step.__qualname__ = fn_name(body)
    return iterate_records(frames.stream, step, iterations, name=name)
