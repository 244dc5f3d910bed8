"""The logical graph: stages, connectors between their ports, streams, and loop scopes."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from naiad.errors import GraphError
from naiad.partition import Exchange, Pipeline
from naiad.progress.summary import PathSummary
from naiad.progress.reachability import GraphBuilder, Reachability

if TYPE_CHECKING:  # pragma: no cover
    from naiad.computation import Computation

__all__ = ["Scope", "Stream", "StageDef", "Connector", "LogicalGraph"]

# Stage kinds.  System kinds change timestamps along the edge that leaves them.
VERTEX, INPUT, INGRESS, EGRESS, FEEDBACK = "vertex", "input", "ingress", "egress", "feedback"


class Scope:
    """The top level or a loop context; its locations carry timestamps with ``depth`` counters."""

    def __init__(self, graph: "LogicalGraph", name: str, parent: Optional["Scope"]):
        self.graph = graph
        self.name = name
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1

    def path(self) -> str:
        """A readable name such as ``top/cc/inner``."""
        return self.name if self.parent is None else f"{self.parent.path()}/{self.name}"

    def __repr__(self) -> str:
        return f"Scope({self.path()!r}, depth={self.depth})"


class Stream:
    """A typed-by-convention flow of timestamped records: one or more (stage, output port) sources.

    A stream made by :meth:`concat` has several sources; consuming it connects each of them.
    """

    __slots__ = ("graph", "sources", "scope", "__weakref__")

    def __init__(self, graph: "LogicalGraph", sources: Tuple[Tuple[int, int], ...], scope: Scope):
        self.graph = graph
        self.sources = sources
        self.scope = scope

    @property
    def computation(self) -> "Computation":
        """The computation this stream belongs to."""
        return self.graph.computation

    def concat(self, *others: "Stream") -> "Stream":
        """The records of this stream and of ``others``, at their own times, without a stage.

        A bag union, as LINQ's Concat: a stream concatenated with itself carries every record
        twice (one connector per source).
        """
        sources = list(self.sources)
        for o in others:
            if not isinstance(o, Stream):
                msg = f"concat takes Streams; got {type(o).__name__} {o!r}"
                raise TypeError(msg)
            self.graph.check_stream(o, "concat")
            self.graph.check_same_scope(self.scope, o.scope, "concat")
            sources.extend(o.sources)
        return Stream(self.graph, tuple(sources), self.scope)

    # The sinks are built by layers above the graph; ``naiad.io`` and ``naiad.probe`` install
    # them here when imported (``import naiad`` does), as ``import linq`` installs its operators.
    def subscribe(self, fn: Callable[[int, list], Any]) -> Any:
        """Call ``fn(epoch, records)`` once per completed epoch, in epoch order, in each process."""
        raise NotImplementedError("import naiad: naiad.io provides Stream.subscribe")

    def probe(self, name: Optional[str] = None) -> Any:
        """A :class:`~naiad.probe.Probe`: ``less_than(t)``, ``less_equal(t)``, ``done()`` and
        ``wait(epoch)`` tell how far the computation has got at this point of the graph."""
        raise NotImplementedError("import naiad: naiad.probe provides Stream.probe")

    def collect(self) -> Any:
        """Gather this process's records per epoch into ``.results`` (``{epoch: [records]}``)."""
        raise NotImplementedError("import naiad: naiad.io provides Stream.collect")

    def __repr__(self) -> str:
        names = ", ".join(f"{self.graph.stages[s].name}:{p}" for s, p in self.sources)
        return f"Stream({names}; scope={self.scope.path()})"


class Connector:
    """A logical edge from a stage's output port to a stage's input port, with its partitioning."""

    __slots__ = ("id", "loc", "src", "src_port", "dst", "dst_port", "exchange", "depth", "unused")

    def __init__(self, id: int, loc: int, src: int, src_port: int, dst: int, dst_port: int,
                 exchange, depth: int):
        self.id, self.loc, self.src, self.src_port = id, loc, src, src_port
        self.dst, self.dst_port, self.exchange, self.depth = dst, dst_port, exchange, depth
        self.unused = False     # leads to a pure stage nobody reads: nothing is sent on it


class StageDef:
    """A logical stage: a vertex factory expanded to one vertex per worker, and its ports."""

    def __init__(self, graph: "LogicalGraph", id: int, loc: int, name: str, kind: str,
                 factory: Optional[Callable[[], Any]], scope: Scope):
        self.graph = graph
        self.id = id
        self.loc = loc
        self.name = name
        self.kind = kind
        self.factory = factory
        self.scope = scope                  # scope of the stage's inputs and notifications
        self.output_scopes: List[Scope] = []
        self.inputs: List[Connector] = []   # every connector into this stage
        self.input_ports = 0
        self.outputs: List[List[Connector]] = []
        self.params: Dict[str, Any] = {}    # what layers above keep about the stage
        # A pure stage's vertices have no effect but their output (LINQ's stateless operators):
        # when nothing reads that output, the stage is left out of the dataflow at activate().
        self.pure = False
        self.unused = False

    @property
    def output_count(self) -> int:
        return len(self.output_scopes)

    def new_input(self, stream: Stream, exchange) -> int:
        """Connect ``stream`` to a new input port of this stage; returns the port number."""
        if self.outputs and any(self.outputs) and self.kind != FEEDBACK:
            msg = (f"stage {self.name!r}: connect all inputs before using its outputs "
                   "(only a loop's feedback may be connected after its output is used)")
            raise GraphError(msg)
        if self.kind != FEEDBACK and any(src == self.id for src, _ in
                                         getattr(stream, "sources", ())):
            msg = (f"stage {self.name!r}: its own output cannot be its input: a cycle must "
                   "pass through a loop's feedback (stages.LoopContext(...).feedback())")
            raise GraphError(msg)
        port = self.input_ports
        self.input_ports += 1
        self.graph.connect(stream, self, port, exchange)
        return port

    def new_output(self, scope: Optional[Scope] = None) -> Stream:
        """Add an output port; returns the stream it produces."""
        port = len(self.output_scopes)
        self.output_scopes.append(scope or self.scope)
        self.outputs.append([])
        return Stream(self.graph, ((self.id, port),), scope or self.scope)

    def __repr__(self) -> str:
        return f"StageDef({self.name!r}, kind={self.kind}, id={self.id})"


def as_exchange(partition_by) -> Any:
    """A partition_by argument as a contract object: None means Pipeline, a callable Exchange."""
    if partition_by is None or isinstance(partition_by, Pipeline):
        return Pipeline()
    if isinstance(partition_by, Exchange):
        return partition_by
    return Exchange(partition_by)


def _qualified(fn: Any) -> str:
    """``module.qualname`` of a function or class (the same in every process of one program)."""
    if fn is None:
        return "-"
    target = getattr(fn, "func", fn)         # functools.partial
    name = getattr(target, "__qualname__", type(target).__qualname__)
    return f"{getattr(target, '__module__', '?')}.{name}"


class LogicalGraph:
    """Every stage and connector of one computation, in construction order."""

    def __init__(self, computation: "Computation"):
        self.computation = computation
        self.top = Scope(self, "top", None)
        self.stages: List[StageDef] = []
        self.connectors: List[Connector] = []
        self._next_loc = 0
        self._names: Dict[str, int] = {}
        self.frozen = False

    def _loc(self) -> int:
        loc = self._next_loc
        self._next_loc += 1
        return loc

    def unique_name(self, name: Optional[str], default: str) -> str:
        base = name or default
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def add_stage(self, name: Optional[str], kind: str, factory, scope: Scope,
                  default: str = "stage") -> StageDef:
        if self.frozen:
            msg = "the dataflow graph cannot change after comp.activate(); build it first"
            raise GraphError(msg)
        if factory is not None and not callable(factory):
            msg = (f"stage {name or default!r}: the vertex factory must be a zero-argument "
                   f"callable or a Vertex subclass; got {type(factory).__name__}")
            raise TypeError(msg)
        stage = StageDef(self, len(self.stages), self._loc(), self.unique_name(name, default),
                         kind, factory, scope)
        self.stages.append(stage)
        return stage

    def check_same_scope(self, a: Scope, b: Scope, what: str) -> None:
        if a is not b:
            msg = (f"{what}: streams from different scopes ({a.path()} and {b.path()}); "
                   "bring a stream into a loop with loop.enter(stream) and out with loop.exit")
            raise GraphError(msg)

    def check_stream(self, stream: Any, what: str) -> Stream:
        if not isinstance(stream, Stream):
            msg = (f"{what} must be a Stream; got {type(stream).__name__} {stream!r} "
                   "(did you pass an input handle instead of its .stream?)")
            raise TypeError(msg)
        if stream.graph is not self:
            msg = f"{what}: the stream belongs to another computation"
            raise GraphError(msg)
        return stream

    def connect(self, stream: Stream, dst: StageDef, port: int, partition_by) -> None:
        self.check_stream(stream, f"input {port} of stage {dst.name!r}")
        if dst.kind != INGRESS and dst.kind != EGRESS:
            self.check_same_scope(stream.scope, dst.scope, f"stage {dst.name!r}")
        elif stream.scope is not dst.scope:
            msg = (f"stage {dst.name!r}: stream is in scope {stream.scope.path()}, expected "
                   f"{dst.scope.path()}")
            raise GraphError(msg)
        exchange = as_exchange(partition_by)
        for src_id, src_port in stream.sources:
            conn = Connector(len(self.connectors), self._loc(), src_id, src_port, dst.id, port,
                             exchange, stream.scope.depth)
            self.connectors.append(conn)
            self.stages[src_id].outputs[src_port].append(conn)
            dst.inputs.append(conn)

    def unread(self) -> set:
        """The ids of the stages :meth:`prune` leaves out (or left out): pure stages whose
        output nobody reads, and then the pure stages that only they read.  The graph is not
        changed."""
        gone = {st.id for st in self.stages if st.unused}
        readers = {st.id: sum(1 for port in st.outputs for c in port if c.dst not in gone)
                   for st in self.stages}
        changed = True
        while changed:
            changed = False
            for st in self.stages:
                if st.pure and st.id not in gone and not readers[st.id]:
                    gone.add(st.id)
                    changed = True
                    for c in st.inputs:
                        readers[c.src] -= 1
        return gone

    def prune(self) -> None:
        """Leave out the :meth:`unread` stages: no record is sent to them.  (They stay in the
        graph, marked ``unused``, their input connectors too.)"""
        for sid in sorted(self.unread()):
            st = self.stages[sid]
            if st.unused:
                continue
            st.unused = True
            for c in st.inputs:
                c.unused = True
                self.stages[c.src].outputs[c.src_port].remove(c)

    def compile(self) -> Reachability:
        """Check the graph and compute could-result-in between all its locations."""
        builder = GraphBuilder()
        for st in self.stages:
            if st.kind == FEEDBACK and not st.inputs:
                msg = (f"feedback {st.name!r} was never connected: call fb.connect(stream) with "
                       "the loop body's output")
                raise GraphError(msg)
            builder.add_location(st.loc, st.scope.depth, f"stage {st.name!r}")
        for c in self.connectors:
            src, dst = self.stages[c.src], self.stages[c.dst]
            builder.add_location(c.loc, c.depth, f"connector {src.name!r}->{dst.name!r}")
        for c in self.connectors:
            src = self.stages[c.src]
            depth = src.scope.depth
            if src.kind == INGRESS:
                summary = PathSummary.ingress(depth)
            elif src.kind == EGRESS:
                summary = PathSummary.egress(depth)
            elif src.kind == FEEDBACK:
                summary = PathSummary.feedback(depth)
            else:
                summary = PathSummary.identity(depth)
            builder.add_edge(src.loc, c.loc, summary)
            builder.add_edge(c.loc, self.stages[c.dst].loc, PathSummary.identity(c.depth))
        return builder.build()

    def fingerprint(self) -> str:
        """A digest of the graph: its shape, each stage's vertex factory and each connector's
        partitioning (by qualified name); processes compare it to detect differing programs,
        and a checkpoint is resumed only by the dataflow that wrote it."""
        h = hashlib.sha256()
        for st in self.stages:
            h.update(f"{st.id}|{st.name}|{st.kind}|{st.scope.depth}|{st.output_count}|"
                     f"{_qualified(st.factory)};".encode())
        for c in self.connectors:
            kind = f"x:{_qualified(c.exchange.key)}" if c.exchange.key is not None else "p"
            h.update(f"{c.src}.{c.src_port}>{c.dst}.{c.dst_port}{kind};".encode())
        return h.hexdigest()[:16]
