"""Connected components by min-label propagation, as iterative MapReduce with LINQ operators.

A record is ``(node, label, neighbours)`` over the undirected graph; labels start as the node
itself.  Each round, a node offers its label to its neighbours (``select_many``) and takes the
least label offered or held (``group_by`` node); the adjacency travels along, as in Hadoop.
After ``r`` rounds every node holds the least node within distance ``r``, so once ``rounds``
reaches the largest distance from a node to its component's least node, every node is
labelled by the least node of its component.  :func:`rounds_needed` computes that bound with
a breadth-first search; ``samples.components_vertex`` shows the loop that stops by itself.

    python -m samples.components                     # the standard library's import graph
    python -m samples.components --random 5000 -t 2
    python -m samples.components --invariant -n 2    # edges as a loop-invariant input

:func:`components_invariant` keeps the edges out of the iterated records: only ``(node,
label)`` pairs iterate, ``loop.enter`` brings the adjacency in once per epoch, and each round
joins the labels with it, offers each label to the neighbours and keeps the least per node
(``min``, combined on each worker before the exchange); :func:`components_spread` does the
round with one operator, ``spread``, in arrays.  :func:`label_propagation` is the same rounds
in plain Python.

>>> from naiad.testing import run
>>> edges = [(1, 2), (2, 3), (7, 8)]
>>> run(lambda comp, s: components(s, rounds=2), [undirected_records(edges)])
{0: [(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)]}
>>> run(lambda comp, s: components_invariant(s, rounds=2), [undirected_records(edges)], workers=2)
{0: [(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)]}
>>> run(lambda comp, s: components_spread(s, rounds=2), [undirected_records(edges)], workers=2)
{0: [(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)]}
>>> label_propagation(undirected_records(edges), 2) == {1: 1, 2: 1, 3: 1, 7: 7, 8: 7}
True
"""

from __future__ import annotations

import operator
import sys
import time
from collections import deque
from itertools import repeat
from typing import Dict, Hashable, Iterable, List, Sequence, Tuple

import linq  # noqa: F401 - installs the Stream methods
import naiad
from naiad.graph import Stream
from naiad.testing import shard
from samples.graphs import adjacency, random_edges, stdlib_import_graph, undirected
from samples._options import naiad_sample, positive, sample_parser

__all__ = ["components", "components_invariant", "components_spread", "label_propagation", "undirected_records", "rounds_needed", "oracle", "program",
           "run_components", "main"]


def undirected_records(edges: Iterable[Tuple[Hashable, Hashable]]) -> List[tuple]:
    """``(node, neighbours)`` of the undirected graph, one record per node (a node whose
    only edge is a self loop too: it is a component of its own)."""
    edges = list(edges)
    nodes, adj = adjacency(undirected(edges), nodes=[x for e in edges for x in e])
    return [(u, adj[u]) for u in nodes]


def _offer(record: tuple) -> list:
    node, label, adj = record
    return [(node, label, adj)] + [(v, label, None) for v in adj]


def _least(node: Hashable, records: list) -> list:
    label = None
    adj = ()
    for _, offered, structure in records:
        if label is None or offered < label:
            label = offered
        if structure is not None:
            adj = structure
    return [(node, label, adj)]


def _node(record: tuple) -> Hashable:
    return record[0]


def components(graph: Stream, rounds: int) -> Stream:
    """``(node, least node of its component)`` from ``(node, neighbours)`` records of an
    undirected graph, after ``rounds`` rounds of propagation."""
    start = graph.select(lambda r: (r[0], r[0], tuple(r[1])))
    return (start.iterate(lambda s: s.select_many(_offer).group_by(_node, _least), rounds)
            .select(lambda r: (r[0], r[1])))


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


def _label_and_neighbours(node_label: tuple, node_adj: tuple) -> tuple:
    return (node_label[0], node_label[1], node_adj[1])


def _offers(record: tuple):
    """``(v, label)`` for the node itself and each neighbour, made in C by zip and repeat."""
    node, label, adj = record
    return zip(adj + (node,), repeat(label))


def components_invariant(graph: Stream, rounds: int) -> Stream:
    """The same labels as :func:`components`, the adjacency a loop-invariant input."""
    structure = graph.select(lambda r: (r[0], tuple(r[1])))
    labels = graph.select(lambda r: (r[0], r[0]))

    def round_(loop, x: Stream) -> Stream:
        return (x.join(loop.enter(structure), _first, _first, _label_and_neighbours)
                 .select_many(_offers)
                 .min(_first, _second))
    return labels.iterate(round_, rounds)


def _keep(label: Hashable, adj: tuple) -> Hashable:
    return label


def _same(label: Hashable) -> Hashable:
    return label


def components_spread(graph: Stream, rounds: int) -> Stream:
    """:func:`components_invariant` with ``spread``: each label goes along the invariant
    adjacency (and to the node itself) and the least is kept per node, in arrays."""
    structure = graph.select(lambda r: (r[0], tuple(r[1])))
    labels = graph.select(lambda r: (r[0], r[0]))

    def round_(loop, x: Stream) -> Stream:
        return x.spread(loop.enter(structure), _keep, min, own=_same)
    return labels.iterate(round_, rounds)


def label_propagation(records: Sequence[tuple], rounds: int) -> Dict[Hashable, Hashable]:
    """The baseline: ``rounds`` rounds of least-label propagation with plain dicts."""
    label = {u: u for u, _ in records}
    for _ in range(rounds):
        new = dict(label)
        for u, adj in records:
            mine = label[u]
            for v in adj:
                if mine < new[v]:
                    new[v] = mine
        label = new
    return label


def rounds_needed(records: Sequence[tuple]) -> int:
    """Rounds after which every label is final: the largest BFS depth from each component's
    least node (at least 1)."""
    adj = dict(records)
    seen: Dict[Hashable, int] = {}
    deepest = 0
    for root in sorted(adj, key=lambda x: (type(x).__name__, x)):
        if root in seen:
            continue
        seen[root] = 0
        queue = deque([root])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if v not in seen:
                    seen[v] = seen[u] + 1
                    deepest = max(deepest, seen[v])
                    queue.append(v)
    return max(deepest, 1)


def oracle(records: Sequence[tuple]) -> Dict[Hashable, Hashable]:
    """Each node's least component member, by networkx."""
    import networkx as nx
    g = nx.Graph()
    for u, adj in records:
        g.add_node(u)
        g.add_edges_from((u, v) for v in adj)
    return {u: min(comp) for comp in nx.connected_components(g) for u in comp}


def oracle_of_edges(edges: Iterable[Tuple[Hashable, Hashable]]) -> Dict[Hashable, Hashable]:
    """Each node's least component member, by networkx from the edges as given (self loops
    and all: the check does not share the sample's preparation of the graph)."""
    import networkx as nx
    g = nx.Graph()
    g.add_edges_from(edges)
    return {u: min(comp) for comp in nx.connected_components(g) for u in comp}


def program(records: Sequence[tuple], rounds: int, invariant: bool = False):
    """A program for ``naiad.execute``: each process supplies its share of the nodes."""
    def run(comp: naiad.Computation) -> List[tuple]:
        inp = comp.new_input(name="graph")
        build = components_invariant if invariant else components
        got = build(inp.stream, rounds).collect()
        comp.activate()
        inp.on_next(shard(records, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join()
        return got.results.get(0, [])
    return run


def run_components(records: Sequence[tuple], rounds: int, processes: int = 1,
                   workers: int = 1, invariant: bool = False) -> Dict[Hashable, Hashable]:
    parts = naiad.execute(program(records, rounds, invariant), processes=processes,
                          workers=workers)
    return {u: label for part in parts for u, label in part}


def main(argv: Iterable[str] = None) -> int:
    parser = sample_parser("components", __doc__)
    parser.add_argument("--random", type=positive, metavar="NODES",
                        help="a seeded random graph with NODES nodes and as many edges")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    parser.add_argument("--invariant", action="store_true",
                        help="edges as a loop-invariant input (components_invariant)")
    args = parser.parse_args(argv)
    if args.random:
        edges = random_edges(args.random, args.random, seed=args.seed)
    else:
        edges = stdlib_import_graph()
    records = undirected_records(edges)
    rounds = rounds_needed(records)
    t0 = time.perf_counter()
    labels = run_components(records, rounds, args.processes, args.workers, args.invariant)
    took = time.perf_counter() - t0
    sizes: Dict[Hashable, int] = {}
    for label in labels.values():
        sizes[label] = sizes.get(label, 0) + 1
    ok = labels == oracle_of_edges(edges)
    print(f"{len(sizes)} components over {len(records)} nodes in {rounds} rounds, "
          f"{args.processes} process(es) x {args.workers} worker(s): {took:.2f} s; "
          f"{'equal to' if ok else 'DIFFERENT from'} networkx")
    for label, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {size:6d} nodes, least {label}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("components"))
