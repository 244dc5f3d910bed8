"""Loop contexts: the paper's ingress, egress and feedback vertices around a cyclic subgraph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from naiad.config import positive_int
from naiad.errors import GraphError
from naiad.graph import (EGRESS, FEEDBACK, INGRESS, LogicalGraph, Scope, StageDef, Stream,
                         as_exchange)
from naiad.progress.timestamp import Timestamp
from naiad.vertex import Vertex

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["LoopContext", "Feedback"]


class _Ingress(Vertex):
    """``(e, c)`` becomes ``(e, c + (0,))``."""

    def on_recv_batch(self, edge, messages, time):
        t = Timestamp(time[0], time[1] + (0,))
        buf = self._out[0]
        lst = buf.get(t)
        if lst is None:
            buf[t] = messages
        else:
            buf[t] = lst + messages


class _Egress(Vertex):
    """``(e, c + (k,))`` becomes ``(e, c)``."""

    def on_recv_batch(self, edge, messages, time):
        t = Timestamp(time[0], time[1][:-1])
        buf = self._out[0]
        lst = buf.get(t)
        if lst is None:
            buf[t] = messages
        else:
            buf[t] = lst + messages


class _Feedback(Vertex):
    """``(e, c + (k,))`` becomes ``(e, c + (k + 1,))``; dropped once ``k + 1`` reaches the bound."""

    def __init__(self, max_iterations: Optional[int]):
        super().__init__()
        self.max_iterations = max_iterations

    def on_recv_batch(self, edge, messages, time):
        c = time[1]
        nxt = c[-1] + 1
        if self.max_iterations is not None and nxt >= self.max_iterations:
            return
        t = Timestamp(time[0], c[:-1] + (nxt,))
        buf = self._out[0]
        lst = buf.get(t)
        if lst is None:
            buf[t] = messages
        else:
            buf[t] = lst + messages


class Feedback:
    """The back edge of a loop: ``stream`` carries what ``connect`` receives, one iteration later."""

    def __init__(self, stage: StageDef, stream: Stream, partition_by):
        self.stage = stage
        self.stream = stream
        self.partition_by = partition_by
        self.connected = False

    def connect(self, stream: Stream) -> None:
        """Close the cycle: records of ``stream`` at ``(e, c + (k,))`` reappear at ``k + 1``."""
        if self.connected:
            msg = f"feedback {self.stage.name!r} is already connected"
            raise GraphError(msg)
        self.stage.graph.check_stream(stream, f"feedback {self.stage.name!r}")
        self.stage.new_input(stream, self.partition_by)
        self.connected = True


class LoopContext:
    """A loop: ``enter`` streams, build the body, ``feedback`` closes the cycle, ``exit`` leaves.

    The loop's scope nests inside the scope of the first stream entered (or of ``parent``),
    so loops nest by entering a stream that is itself inside a loop.  ``feedback()`` before any
    ``enter()`` places the loop at the top level.
    """

    def __init__(self, comp: "Computation", name: Optional[str] = None,
                 parent: Optional["LoopContext"] = None):
        if not isinstance(getattr(comp, "graph", None), LogicalGraph):
            msg = f"LoopContext needs the Computation as first argument; got {type(comp).__name__}"
            raise TypeError(msg)
        self.comp = comp
        self.name = comp.graph.unique_name(name, "loop")
        self.scope: Any = None          # a Scope once the loop is entered
        if parent is not None:
            if not isinstance(parent, LoopContext):
                msg = (f"loop {self.name!r}: parent must be the enclosing LoopContext; got "
                       f"{type(parent).__name__}")
                raise TypeError(msg)
            if parent.scope is None:
                msg = f"loop {self.name!r}: its parent loop {parent.name!r} has no scope yet"
                raise GraphError(msg)
            self._bind(parent.scope)

    def _bind(self, outer: Scope) -> Scope:
        if self.scope is None:
            self.scope = Scope(self.comp.graph, self.name, outer)
        elif self.scope.parent is not outer:
            msg = (f"loop {self.name!r} was entered from scope {self.scope.parent.path()}; "
                   f"cannot also enter from {outer.path()}")
            raise GraphError(msg)
        return self.scope

    def enter(self, stream: Stream) -> Stream:
        """Bring ``stream`` into the loop: ``Timestamp(e, c)`` becomes ``Timestamp(e, c + (0,))``."""
        graph = self.comp.graph
        graph.check_stream(stream, f"loop {self.name!r} enter")
        inner = self._bind(stream.scope)
        stage = graph.add_stage(f"{self.name}.enter", INGRESS, _Ingress, stream.scope)
        stage.new_input(stream, None)
        return stage.new_output(inner)

    def feedback(self, partition_by: Optional[Callable[[Any], Any]] = None,
                 max_iterations: Optional[int] = None) -> Feedback:
        """A back edge whose ``.stream`` carries records one iteration later.

        With ``max_iterations=n`` the body sees loop counters ``0 .. n-1`` only.
        """
        if self.scope is None:
            # Not entered yet: a loop at the top level (nested loops give parent= or enter first).
            self._bind(self.comp.graph.top)
        if max_iterations is not None:
            positive_int("max_iterations", max_iterations, what="max_iterations (or None)")
        try:
            as_exchange(partition_by)
        except TypeError as exc:
            raise TypeError(f"loop {self.name!r} feedback: {exc}") from None
        graph = self.comp.graph
        stage = graph.add_stage(f"{self.name}.feedback", FEEDBACK,
                                lambda: _Feedback(max_iterations), self.scope)
        stage.params["max_iterations"] = max_iterations
        return Feedback(stage, stage.new_output(self.scope), partition_by)

    def exit(self, stream: Stream) -> Stream:
        """Leave the loop: the last loop counter is dropped."""
        graph = self.comp.graph
        graph.check_stream(stream, f"loop {self.name!r} exit")
        if self.scope is None or stream.scope is not self.scope:
            msg = (f"loop {self.name!r} exit: the stream is in scope {stream.scope.path()}, not "
                   "in this loop")
            raise GraphError(msg)
        stage = graph.add_stage(f"{self.name}.exit", EGRESS, _Egress, self.scope)
        stage.new_input(stream, None)
        return stage.new_output(self.scope.parent)
