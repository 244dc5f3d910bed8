"""Stage builders: a vertex factory plus connected inputs expands into one vertex per worker."""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

from naiad.errors import GraphError
from naiad.graph import VERTEX, StageDef, Stream, as_exchange
from naiad.vertex import Vertex

__all__ = ["Stage", "new_stage", "unary", "binary", "sink"]

Factory = Callable[[], Vertex]
KeyFn = Optional[Callable[[Any], Hashable]]


class Stage:
    """Naiad's ``NewStage``: add inputs with :meth:`new_input`, then outputs with :meth:`new_output`.

    The stage joins the scope of its first input stream; every input must share that scope.
    """

    def __init__(self, factory: Factory, name: Optional[str] = None):
        if name is not None and not isinstance(name, str):
            msg = f"a stage's name must be a str (or None); got {type(name).__name__} {name!r:.40}"
            raise TypeError(msg)
        if not callable(factory):
            msg = (f"stage {name or 'unnamed'!r}: factory must be a Vertex subclass or a "
                   f"zero-argument callable returning a Vertex; got {type(factory).__name__}")
            raise TypeError(msg)
        self.factory = factory
        self.name = name
        self._def: Optional[StageDef] = None

    @property
    def _label(self) -> str:
        """The name to give in an error before the stage is in the graph."""
        return self.name or str(getattr(self.factory, "__name__", "stage"))

    @property
    def stage(self) -> StageDef:
        if self._def is None:
            msg = f"stage {self.name!r}: connect an input with new_input(stream) first"
            raise GraphError(msg)
        return self._def

    def new_input(self, stream: Stream, partition_by: KeyFn = None) -> int:
        """Connect ``stream`` to the next input port; records are routed by ``partition_by``."""
        if not isinstance(stream, Stream):
            msg = (f"stage {self._label!r}: new_input needs a Stream; got "
                   f"{type(stream).__name__} (did you pass an input handle instead of its "
                   ".stream?)")
            raise TypeError(msg)
        try:
            as_exchange(partition_by)
        except TypeError as exc:
            port = 0 if self._def is None else self._def.input_ports
            raise TypeError(f"stage {self._label!r}, input {port}: {exc}") from None
        if self._def is None:
            default = getattr(self.factory, "__name__", "stage")
            self._def = stream.graph.add_stage(self.name, VERTEX, self.factory, stream.scope,
                                               default=default)
        return self._def.new_input(stream, partition_by)

    def new_output(self) -> Stream:
        """Add an output port and return its stream."""
        return self.stage.new_output()

    @property
    def name_in_graph(self) -> str:
        return self.stage.name


def new_stage(factory: Factory, name: Optional[str] = None) -> Stage:
    """A general stage with any number of inputs and outputs."""
    return Stage(factory, name)


def unary(stream: Stream, factory: Factory, partition_by: KeyFn = None,
          name: Optional[str] = None) -> Stream:
    """One input, one output: ``factory()`` per worker, records routed by ``partition_by``.

    >>> import naiad, stages
    >>> class Inc(naiad.Vertex):
    ...     def on_recv(self, edge, message, time):
    ...         self.send_by(0, message + 1, time)
    >>> def program(comp):
    ...     inp = comp.new_input()
    ...     got = stages.unary(inp.stream, Inc, partition_by=lambda r: r).collect()
    ...     comp.activate(); inp.on_next([1, 2]); inp.on_completed(); comp.join()
    ...     return sorted(got.results[0])
    >>> naiad.execute(program, workers=2)
    [[2, 3]]
    """
    st = Stage(factory, name)
    st.new_input(stream, partition_by)
    return st.new_output()


def binary(left: Stream, right: Stream, factory: Factory, partition_by_left: KeyFn = None,
           partition_by_right: KeyFn = None, name: Optional[str] = None) -> Stream:
    """Two inputs (ports 0 and 1), one output."""
    st = Stage(factory, name)
    st.new_input(left, partition_by_left)
    st.new_input(right, partition_by_right)
    return st.new_output()


def sink(stream: Stream, factory: Factory, partition_by: KeyFn = None,
         name: Optional[str] = None) -> Stage:
    """One input, no output: vertices that consume records (and act on notifications)."""
    st = Stage(factory, name)
    st.new_input(stream, partition_by)
    return st
