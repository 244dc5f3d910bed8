"""Strongly connected components (differential): nested iterate, trimming forward and backward.

An edge lies inside a strongly connected component exactly when it survives the repetition of
two trims: label every node by the least node that reaches it along the remaining edges (an
inner ``iterate``: min-label propagation) and keep the edges whose ends carry the same label,
then do the same on the reversed edges.  The outer ``iterate`` repeats both until no edge goes;
its result is the edges of every strongly connected component.  Updates to the graph flow
through both loops only as far as they matter.

    python -m samples.dd_scc                          # the standard library's import graph
    python -m samples.dd_scc --random 3000 --epochs 5

>>> from linq.differential.testing import run_dd
>>> out = run_dd(scc, [(1, 2), (2, 1), (2, 3)], [[((3, 1), 1)]])
>>> out[0], out[1]
([((1, 2), 1), ((2, 1), 1)], [((2, 3), 1), ((3, 1), 1)])
"""

from __future__ import annotations

import random
import sys
import time
from operator import itemgetter
from typing import Any, Dict, Hashable, Iterable, List, Optional, Sequence, Set, Tuple

import networkx as nx

import naiad
from linq import differential as dd
from linq.differential import Collection
from linq.differential.testing import replay
from samples.graphs import free_edge, random_edges
from samples.textdata import stdlib_import_graph
from samples._options import at_least, naiad_sample, positive, sample_parser

__all__ = ["scc", "trim", "oracle", "run", "main"]

Edge = Tuple[Hashable, Hashable]


_first = itemgetter(0)
_second = itemgetter(1)


def _ends(e: tuple) -> list:
    return [(e[0], e[0]), (e[1], e[1])]


def _reverse(e: tuple) -> tuple:
    return (e[1], e[0])


def _offer(node_label: tuple, edge: tuple) -> tuple:
    return (edge[1], node_label[1])


def _with_label(edge: tuple, node_label: tuple) -> tuple:
    return (edge, node_label[1])


def _dst(edge_label: tuple) -> Any:
    return edge_label[0][1]


def _both_labels(edge_label: tuple, node_label: tuple) -> tuple:
    return (edge_label[0], edge_label[1], node_label[1])


def _same_label(x: tuple) -> bool:
    return x[1] == x[2]


def trim(edges: Collection) -> Collection:
    """The edges whose ends are reached from the same least node along ``edges``."""
    nodes = edges.flat_map(_ends).distinct()
    labels = nodes.iterate(lambda loop, lab: (
        lab.join(loop.enter(edges), key=_first, other_key=_first, result=_offer)
           .concat(loop.enter(nodes))
           .min(key=_first, value=_second)), name="reach")
    return (edges.join(labels, key=_first, other_key=_first, result=_with_label)
                 .join(labels, key=_dst, other_key=_first, result=_both_labels)
                 .filter(_same_label)
                 .map(_first))


def scc(edges: Collection) -> Collection:
    """The edges inside strongly connected components."""
    return edges.iterate(lambda loop, inner: trim(trim(inner).map(_reverse)).map(_reverse),
                         name="scc")


def oracle(edges: Iterable[Edge]) -> Set[Edge]:
    """The edges inside strongly connected components, by networkx."""
    g = nx.DiGraph()
    g.add_edges_from(edges)
    comp: Dict[Hashable, int] = {}
    for i, c in enumerate(nx.strongly_connected_components(g)):
        for v in c:
            comp[v] = i
    return {(u, v) for u, v in g.edges() if comp[u] == comp[v] and u != v} | \
        {(u, u) for u, v in g.edges() if u == v}


def run(edges: Sequence[Edge], updates: Sequence[Sequence[Tuple[Edge, int]]],
        processes: int = 1, workers: int = 1) -> List[Dict[int, list]]:
    """Each process's collected changes of the strongly connected edges."""
    def program(comp: naiad.Computation) -> Dict[int, list]:
        inp = dd.new_input(comp, name="edges")
        got = scc(inp.collection).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        inp.on_next(list(edges)[me::n])
        for u in updates:
            inp.update(list(u)[me::n])
        inp.on_completed()
        comp.join()
        return got.results
    return naiad.execute(program, processes=processes, workers=workers)


def check(edges: Sequence[Edge], updates: Sequence[Sequence[Tuple[Edge, int]]],
          results: List[Dict[int, list]]) -> None:
    """Raise unless every epoch's edges equal networkx's components of the graph then."""
    for epoch, current, got in replay(edges, updates, results):
        if got != {e: 1 for e in oracle(current)}:
            msg = f"epoch {epoch}: the strongly connected edges differ from networkx"
            raise AssertionError(msg)


def rewire(edges: Sequence[Edge], epochs: int, seed: int) -> List[List[Tuple[Edge, int]]]:
    """Epochs that each remove one edge and add one between two different random nodes.

    When no such edge is free (the edges have one node, or every edge between two different
    nodes is there), the epoch has no changes.

    >>> rewire([(1, 1)], epochs=2, seed=0)
    [[], []]
    >>> rewire([(1, 2), (2, 1)], epochs=1, seed=0)
    [[]]
    >>> rewire([(1, 1), (2, 2)], epochs=1, seed=0)
    [[((2, 2), -1), ((2, 1), 1)]]
    """
    rng = random.Random(seed)
    present = set(edges)
    nodes = sorted({u for e in present for u in e}, key=repr)

    def draw() -> Edge:
        return (rng.choice(nodes), rng.choice(nodes))

    def every() -> Iterable[Edge]:
        return ((u, v) for u in nodes for v in nodes if u != v)
    out: List[List[Tuple[Edge, int]]] = []
    for _ in range(epochs):
        if len(nodes) < 2:
            out.append([])              # one node: no edge between two different nodes
            continue
        gone = rng.choice(sorted(present, key=repr))
        present.discard(gone)
        new = free_edge(rng, draw, lambda e: e not in present and e != gone and e[0] != e[1],
                        every)
        if new is None:                 # every edge between two different nodes is there
            present.add(gone)
            out.append([])
            continue
        present.add(new)
        out.append([(gone, -1), (new, 1)])
    return out


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = sample_parser("dd_scc", __doc__)
    parser.add_argument("--random", type=at_least(2), metavar="NODES",
                        help="a seeded random directed graph with NODES nodes and twice the edges")
    parser.add_argument("--epochs", type=positive, default=3, help="epochs of one rewired edge")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.random:
        edges: List[Edge] = sorted(set(random_edges(args.random, 2 * args.random, seed=args.seed)))
        what = f"random graph ({args.random} nodes)"
    else:
        edges = sorted(set(stdlib_import_graph()))
        what = "standard library import graph"
    updates = rewire(edges, args.epochs, args.seed)
    t0 = time.perf_counter()
    results = run(edges, updates, args.processes, args.workers)
    took = time.perf_counter() - t0
    check(edges, updates, results)
    rewired = sum(1 for u in updates if u)
    done = (f"{args.epochs} rewirings" if rewired == args.epochs else
            f"{args.epochs} epochs, {rewired} rewiring an edge and {args.epochs - rewired} "
            "without (no edge between two different nodes was free to rewire to)")
    print(f"strongly connected edges of the {what} ({len(edges)} edges), then {done}: "
          f"{took:.2f} s; every epoch equal to networkx")
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("dd_scc"))
