"""The could-result-in relation of a logical graph, compiled from the path summaries of its edges."""

from __future__ import annotations

from typing import AbstractSet, Any

from naiad.progress.errors import NaiadError
from naiad.progress.summary import PathSummary
from naiad.progress.timestamp import Timestamp

__all__ = ["GraphBuilder", "GraphError", "Reachability"]

Pointstamp = tuple[int, Timestamp]


class GraphError(NaiadError):
    """The dataflow graph is malformed: an unknown location, a depth mismatch, or a stuck cycle."""


class GraphBuilder:
    """Collects the locations and summarized edges of a logical graph, then compiles them.

    Locations are small integers (stages and connectors alike), each with the number of loop
    counters of its timestamps and a name used in error messages.  An edge carries the summary of
    what happens to a timestamp travelling along it.

    >>> g = GraphBuilder()
    >>> g.add_location(0, 0, "input")
    >>> g.add_location(1, 1, "body")
    >>> g.add_location(2, 0, "output")
    >>> g.add_edge(0, 1, PathSummary.ingress(0))
    >>> g.add_edge(1, 1, PathSummary.feedback(1))
    >>> g.add_edge(1, 2, PathSummary.egress(1))
    >>> r = g.build()
    >>> assert r.summaries(0, 1) == (PathSummary.ingress(0),)
    >>> assert r.could_result_in((1, Timestamp(0, (3,))), (1, Timestamp(0, (5,))))
    >>> assert not r.could_result_in((1, Timestamp(0, (3,))), (1, Timestamp(0, (2,))))
    >>> assert r.could_result_in((1, Timestamp(0, (3,))), (2, Timestamp(0)))
    """

    def __init__(self) -> None:
        self._depths: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._edges: list[tuple[int, int, PathSummary]] = []

    def add_location(self, loc: int, depth: int, name: str) -> None:
        """Declare location ``loc`` whose timestamps have ``depth`` loop counters."""
        if loc in self._depths:
            msg = f"location {loc} is declared twice (as {self._names[loc]!r} and as {name!r})"
            raise GraphError(msg)
        if depth < 0:
            msg = f"location {name!r} ({loc}) has negative depth {depth}; depth counts enclosing loops"
            raise GraphError(msg)
        self._depths[loc] = depth
        self._names[loc] = name

    def add_edge(self, src: int, dst: int, summary: PathSummary) -> None:
        """Add an edge from ``src`` to ``dst`` along which timestamps change by ``summary``.

        The edge is checked against the depths of its endpoints now if both are declared, and
        otherwise by :meth:`build`.
        """
        if not isinstance(summary, PathSummary):
            msg = f"edge {src} -> {dst} needs a PathSummary; got {summary!r}"
            raise GraphError(msg)
        if src in self._depths and dst in self._depths:
            self._check_edge(src, dst, summary)
        self._edges.append((src, dst, summary))

    def _check_edge(self, src: int, dst: int, summary: PathSummary) -> None:
        for loc in (src, dst):
            if loc not in self._depths:
                msg = f"edge {src} -> {dst} names location {loc}, which was never added; call add_location"
                raise GraphError(msg)
        src_depth, dst_depth = self._depths[src], self._depths[dst]
        if summary.keep <= src_depth and summary.output_depth == dst_depth:
            return
        if dst_depth == src_depth + 1:
            hint = f"an edge into a loop takes PathSummary.ingress({src_depth})"
        elif dst_depth == src_depth - 1:
            hint = f"an edge out of a loop takes PathSummary.egress({src_depth})"
        elif dst_depth == src_depth:
            hint = f"an edge within a loop takes PathSummary.identity({src_depth}) or a feedback"
        else:
            hint = "an edge crosses at most one loop boundary"
        msg = (
            f"edge {self._label(src)} -> {self._label(dst)} has summary {summary!r}, which "
            f"reads {summary.keep} loop counters and produces {summary.output_depth}, but the "
            f"source has depth {src_depth} and the target depth {dst_depth}; {hint}"
        )
        raise GraphError(msg)

    def _label(self, loc: int) -> str:
        return f"{self._names[loc]!r} ({loc})"

    def build(self) -> "Reachability":
        """Compile the minimal path summaries between every ordered pair of locations."""
        for src, dst, summary in self._edges:
            self._check_edge(src, dst, summary)
        self._check_cycles()
        outgoing: dict[int, list[tuple[int, PathSummary]]] = {loc: [] for loc in self._depths}
        for src, dst, summary in self._edges:
            outgoing[src].append((dst, summary))
        # Equal summaries and antichains are made once and shared: a chain of a thousand
        # stages (two thousand locations) has two million pairs, each with the same one.
        interned: dict[Any, Any] = {}
        table = {src: _closure(src, self._depths[src], outgoing, interned)
                 for src in self._depths}
        return Reachability(dict(self._depths), dict(self._names), table)

    def _check_cycles(self) -> None:
        """Raise GraphError if some cycle's summary does not strictly advance timestamps.

        Composing summaries keeps the smallest ``keep`` and adds up the deltas of the edges with
        that smallest ``keep``.  So a cycle advances exactly when, among its edges with the least
        ``keep`` k, one has a positive delta.  For each k, drop the edges keeping fewer than k
        counters and the advancing edges keeping exactly k: any remaining edge keeping k that lies
        on a cycle closes a cycle that does not advance.
        """
        for k in sorted({summary.keep for _, _, summary in self._edges}):
            succ: dict[int, list[int]] = {loc: [] for loc in self._depths}
            suspects = []
            for src, dst, summary in self._edges:
                if summary.keep > k or (summary.keep == k and not summary.delta):
                    succ[src].append(dst)
                if summary.keep == k and not summary.delta:
                    suspects.append((src, dst))
            component = _strongly_connected(succ)
            for src, dst in suspects:
                if component[src] == component[dst]:
                    cycle = [src] + _shortest_path(succ, dst, src)
                    names = " -> ".join(self._label(loc) for loc in cycle)
                    msg = (
                        f"the cycle {names} does not advance timestamps, so an event on it could "
                        f"result in itself; every cycle must pass through a feedback edge "
                        f"(PathSummary.feedback) of the loop it stays in"
                    )
                    raise GraphError(msg)


def _closure(
    src: int, depth: int, outgoing: dict[int, list[tuple[int, PathSummary]]],
    interned: dict[Any, Any],
) -> dict[int, tuple[PathSummary, ...]]:
    """Minimal antichains of summaries of all paths from ``src``, by a worklist fixed point.

    Summaries with the same ``keep`` are totally ordered, so an antichain holds at most one per
    ``keep``, and each replacement is strictly smaller in a well-order: the iteration ends.
    """
    start = PathSummary.identity(depth)
    best: dict[int, list[PathSummary]] = {src: [start]}
    work = [(src, start)]
    while work:
        loc, summary = work.pop()
        if summary not in best[loc]:
            continue  # superseded by a smaller summary since it was queued
        for dst, edge in outgoing[loc]:
            new = summary.then(edge)
            new = interned.setdefault(new, new)
            chain = best.get(dst)
            if chain is None:
                best[dst] = [new]
                work.append((dst, new))
                continue
            for old in chain:
                if old.less_equal(new):
                    break
            else:
                chain[:] = [old for old in chain if not new.less_equal(old)]
                chain.append(new)
                work.append((dst, new))
    rows: dict[int, tuple[PathSummary, ...]] = {}
    for dst, chain in best.items():
        antichain = tuple(sorted(chain))
        rows[dst] = interned.setdefault(antichain, antichain)
    return rows


class Reachability:
    """The compiled could-result-in relation: minimal path summaries between locations.

    A pointstamp ``(loc, time)`` could result in ``(loc2, time2)`` when some path from ``loc`` to
    ``loc2`` has a summary ``s`` with ``s.apply(time)`` at most ``time2``; it is enough to try the
    minimal summaries.  Built by :meth:`GraphBuilder.build`; immutable afterwards.
    """

    def __init__(
        self,
        depths: dict[int, int],
        names: dict[int, str],
        table: dict[int, dict[int, tuple[PathSummary, ...]]],
    ) -> None:
        self._depths = depths
        self._names = names
        self._identity = {loc: (PathSummary.identity(d),) for loc, d in depths.items()}
        # The hot path: None where the only minimal summary is the identity (compare times
        # directly), else the summaries to apply.
        self._fast = {
            src: {dst: (None if len(ss) == 1 and tuple(ss[0]) == (depths[src], 0, ()) else ss)
                  for dst, ss in row.items()}
            for src, row in table.items()
        }
        self._related: tuple[dict[int, AbstractSet[int]], dict[int, AbstractSet[int]]] | None = None

    def _known(self, loc: int) -> None:
        if loc not in self._depths:
            msg = f"location {loc} is not part of this graph; add it with GraphBuilder.add_location"
            raise GraphError(msg)

    def locations(self) -> list[int]:
        """All locations, in increasing order."""
        return sorted(self._depths)

    def depth(self, loc: int) -> int:
        """Number of loop counters of timestamps at ``loc``."""
        self._known(loc)
        return self._depths[loc]

    def name(self, loc: int) -> str:
        """The name given to ``loc``."""
        self._known(loc)
        return self._names[loc]

    def summaries(self, src: int, dst: int) -> tuple[PathSummary, ...]:
        """The minimal summaries of paths from ``src`` to ``dst``; empty if there is no path."""
        self._known(src)
        row = self._fast[src]
        if dst not in row:
            return ()
        got = row[dst]
        return self._identity[src] if got is None else got

    def targets(self, src: int) -> dict[int, tuple[PathSummary, ...]]:
        """Every location reachable from ``src`` (itself included) with its minimal summaries."""
        self._known(src)
        return {dst: self.summaries(src, dst) for dst in self._fast[src]}

    def related(self) -> tuple[dict[int, AbstractSet[int]], dict[int, AbstractSet[int]]]:
        """``(targets, sources)``: for each location, the locations it can reach and those that
        can reach it (itself included).  Computed once and shared by every tracker of this
        graph (each worker of a process has one; for a long chain they are large)."""
        if self._related is None:
            # The targets are the rows' own keys (no copies); the sources are the inverse.
            targets: dict[int, AbstractSet[int]] = {loc: self._fast[loc].keys()
                                                    for loc in self._depths}
            sources: dict[int, set[int]] = {loc: set() for loc in self._depths}
            for src, dsts in targets.items():
                for dst in dsts:
                    sources[dst].add(src)
            self._related = (targets, {loc: frozenset(s) for loc, s in sources.items()})
        return self._related

    def could_result_in(self, p: Pointstamp, q: Pointstamp) -> bool:
        """Whether an event at pointstamp ``p`` could lead to an event at pointstamp ``q``."""
        row = self._fast[p[0]]
        dst = q[0]
        if dst not in row:
            return False
        summaries = row[dst]
        t1, t2 = p[1], q[1]
        if summaries is None:
            return t1[0] <= t2[0] and t1[1] <= t2[1]
        for summary in summaries:
            if summary.apply(t1).less_equal(t2):
                return True
        return False


def _strongly_connected(succ: dict[int, list[int]]) -> dict[int, int]:
    """Tarjan's algorithm, iteratively: location -> index of its strongly connected component."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    component: dict[int, int] = {}
    counter = 0
    for root in succ:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = succ[node]
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = node
                    if member == node:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return component


def _shortest_path(succ: dict[int, list[int]], src: int, dst: int) -> list[int]:
    """Breadth-first path from ``src`` to ``dst`` (both included)."""
    previous: dict[int, int] = {src: src}
    frontier = [src]
    while frontier and dst not in previous:
        nxt = []
        for node in frontier:
            for child in succ[node]:
                if child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    path = [dst]
    while path[-1] != src:
        path.append(previous[path[-1]])
    return path[::-1]
