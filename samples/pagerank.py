"""PageRank as iterative MapReduce, in the Hadoop form: each node's adjacency travels with it.

A record is ``(node, rank, out_neighbours)``.  One iteration is one MapReduce round:

* map (``select_many``): a node sends ``rank / degree`` to each out-neighbour as
  ``(neighbour, share, None)`` and re-emits its own structure as ``(node, 0.0, neighbours)``;
* reduce (``group_by`` node): the new rank is ``(1 - d) / N + d * sum(shares)``, and the
  structure goes on to the next round.

By default a combiner sums the shares per destination on each worker before the shuffle
(``aggregate``, which pre-combines locally), and ``cogroup_by`` meets each node's sum with its
structure: fewer records cross the network, the result is the same.

``iterate`` runs a fixed number of rounds.  Rank that reaches a node without out-edges is not
passed on (as in Pregel's PageRank), so the ranks sum to at most 1; :func:`power_iteration` is
the same computation in plain Python, the oracle.

    python -m samples.pagerank                       # the standard library's import graph
    python -m samples.pagerank --rmat 12 -t 2 -n 2   # an RMAT graph, 2 processes x 2 workers
    python -m samples.pagerank --invariant           # the loop-invariant form

:func:`pagerank_invariant` is the same computation with the graph as a loop-invariant input:
only ``(node, rank)`` records iterate; ``loop.enter(structure)`` brings the adjacency in once
per epoch, and each round joins the ranks with it (the join keeps the adjacency for every
iteration, so it crosses the network once), spreads the shares and sums them per node with
``aggregate`` (combined on each worker before the exchange).

>>> from naiad.testing import run
>>> graph = [("a", ("b",)), ("b", ("a", "c")), ("c", ())]
>>> want = power_iteration(dict(graph), iterations=5)
>>> for combiner in (True, False):
...     ranks = run(lambda comp, s: pagerank(s, 3, 5, combiner=combiner), [graph])[0]
...     assert all(abs(r - want[n]) < 1e-12 for n, r in ranks), ranks
>>> for form in (pagerank_invariant, pagerank_spread):
...     ranks = run(lambda comp, s: form(s, 3, 5), [graph], workers=2)[0]
...     assert all(abs(r - want[n]) < 1e-12 for n, r in ranks), ranks
"""

from __future__ import annotations

import operator
import sys
import time
from itertools import chain, repeat
from typing import Dict, Hashable, Iterable, List, Sequence, Tuple

import linq  # noqa: F401 - installs the Stream methods
import naiad
from naiad.graph import Stream
from naiad.testing import shard
from samples.graphs import adjacency, rmat_edges, stdlib_import_graph
from samples._options import max_difference, naiad_sample, positive, rmat_scale, sample_parser

__all__ = ["pagerank", "pagerank_invariant", "pagerank_spread", "power_iteration", "program", "run_pagerank", "main"]

DAMPING = 0.85


node_of = operator.itemgetter(0)     # C functions: keys and values are read at C speed
share_of = operator.itemgetter(1)


def pagerank(adjacency_stream: Stream, nodes: int, iterations: int,
             damping: float = DAMPING, combiner: bool = True) -> Stream:
    """``(node, rank)`` after ``iterations`` rounds, from ``(node, out_neighbours)`` records.

    ``nodes`` is the number of nodes (every node must have a record, with ``()`` when it has no
    out-edges).  Ranks start at ``1 / nodes``.  With ``combiner`` (the default) the shares
    are summed per destination on each worker before they are exchanged, as a Hadoop combiner
    does: ``aggregate`` does that, and ``cogroup_by`` meets each node's sum with its
    structure.  Without it, one ``group_by`` receives every share (the plain MapReduce form).
    """
    base = (1.0 - damping) / nodes
    start = 1.0 / nodes

    def spread(record: tuple) -> list:
        node, rank, adj = record
        out = [(node, 0.0, adj)]
        if adj:
            share = rank / len(adj)
            out.extend([(v, share, None) for v in adj])
        return out

    def combine(node: Hashable, records: list) -> list:
        total = 0.0
        adj = ()
        for _, share, structure in records:
            if structure is None:
                total += share
            else:
                adj = structure
        return [(node, base + damping * total, adj)]

    def shares(record: tuple) -> list:
        node, rank, adj = record
        if not adj:
            return []
        share = rank / len(adj)
        return [(v, share) for v in adj]

    def update(node: Hashable, mine: list, summed: list) -> list:
        total = summed[0][1] if summed else 0.0
        return [(node, base + damping * total, mine[0][2])]

    def round_(s: Stream) -> Stream:
        if not combiner:
            return s.select_many(spread).group_by(node_of, combine)
        summed = s.select_many(shares).aggregate(node_of, share_of, operator.add)
        return s.cogroup_by(summed, node_of, node_of, update)
    ranked = adjacency_stream.select(lambda r: (r[0], start, tuple(r[1])))
    return ranked.iterate(round_, iterations).select(lambda r: (r[0], r[1]))


def _with_structure(node_rank: tuple, node_adj: tuple) -> tuple:
    return (node_rank[0], node_rank[1], node_adj[1])


def _shares(record: tuple):
    """``(neighbour, rank / degree)`` for each out-neighbour, and a zero share for the node
    itself (so that it has a rank next round even when nothing points to it).  ``zip`` and
    ``repeat`` make the pairs in C."""
    node, rank, adj = record
    if not adj:
        return ((node, 0.0),)
    return zip(adj + (node,), chain(repeat(rank / len(adj), len(adj)), _ZERO))


_ZERO = (0.0,)


def _invariant_parts(adjacency_stream: Stream, nodes: int, damping: float):
    """The loop-invariant structure ``(node, adjacency tuple)``, the starting ranks
    ``(node, 1 / N)`` and the damping of a summed ``(node, total)``."""
    base = (1.0 - damping) / nodes
    start = 1.0 / nodes
    structure = adjacency_stream.select(lambda r: (r[0], tuple(r[1])))
    ranks = adjacency_stream.select(lambda r: (r[0], start))

    def damp(node_total: tuple) -> tuple:
        return (node_total[0], base + damping * node_total[1])
    return structure, ranks, damp


def pagerank_invariant(adjacency_stream: Stream, nodes: int, iterations: int,
                       damping: float = DAMPING) -> Stream:
    """``(node, rank)`` after ``iterations`` rounds, the graph a loop-invariant input.

    The same result as :func:`pagerank`; only ranks iterate, the adjacency is entered once.
    """
    structure, ranks, damp = _invariant_parts(adjacency_stream, nodes, damping)

    def round_(loop, r: Stream) -> Stream:
        return (r.join(loop.enter(structure), node_of, node_of, _with_structure)
                 .select_many(_shares)
                 .aggregate(node_of, share_of, operator.add)
                 .select(damp))
    return ranks.iterate(round_, iterations)


def _share(rank: float, adj: tuple) -> float:
    return rank / len(adj) if adj else 0.0


def _nothing(rank: float) -> float:
    return 0.0


def pagerank_spread(adjacency_stream: Stream, nodes: int, iterations: int,
                    damping: float = DAMPING) -> Stream:
    """:func:`pagerank_invariant` with ``spread``: each round sends ``rank / degree`` along
    the invariant adjacency and sums per node in arrays (and ``0.0`` to the node itself, so
    that a node nothing points to still has a rank)."""
    structure, ranks, damp = _invariant_parts(adjacency_stream, nodes, damping)

    def round_(loop, r: Stream) -> Stream:
        return r.spread(loop.enter(structure), _share, operator.add, own=_nothing).select(damp)
    return ranks.iterate(round_, iterations)


def power_iteration(adj: Dict[Hashable, Sequence[Hashable]], iterations: int,
                    damping: float = DAMPING) -> Dict[Hashable, float]:
    """The oracle: the same PageRank as plain Python dicts (``adj`` lists every node)."""
    n = len(adj)
    rank = {u: 1.0 / n for u in adj}
    for _ in range(iterations):
        incoming = {u: 0.0 for u in adj}
        for u, outs in adj.items():
            if outs:
                share = rank[u] / len(outs)
                for v in outs:
                    incoming[v] += share
        rank = {u: (1.0 - damping) / n + damping * s for u, s in incoming.items()}
    return rank


def program(edges: Sequence[Tuple[Hashable, Hashable]], iterations: int, combiner: bool = True,
            invariant: bool = False):
    """A program for ``naiad.execute``: each process supplies its share of the nodes and
    returns the ``(node, rank)`` records that reached it."""
    def run(comp: naiad.Computation) -> List[tuple]:
        nodes, adj = adjacency(edges)
        inp = comp.new_input(name="graph")
        if invariant:
            got = pagerank_invariant(inp.stream, len(nodes), iterations).collect()
        else:
            got = pagerank(inp.stream, len(nodes), iterations, combiner=combiner).collect()
        comp.activate()
        mine = shard(nodes, comp.process_index, comp.processes)
        inp.on_next([(u, adj[u]) for u in mine])
        inp.on_completed()
        comp.join()
        return got.results.get(0, [])
    return run


def run_pagerank(edges: Sequence[Tuple[Hashable, Hashable]], iterations: int,
                 processes: int = 1, workers: int = 1,
                 combiner: bool = True, invariant: bool = False) -> Dict[Hashable, float]:
    """PageRank of ``edges`` on a computation of that shape, merged into one dict."""
    parts = naiad.execute(program(edges, iterations, combiner, invariant), processes=processes,
                          workers=workers)
    return {node: rank for part in parts for node, rank in part}


def main(argv: Iterable[str] = None) -> int:
    parser = sample_parser("pagerank", __doc__)
    parser.add_argument("--rmat", type=rmat_scale, metavar="SCALE",
                        help="an RMAT graph over 2**SCALE node ids (its nodes with an edge) "
                             "instead of the stdlib import graph")
    parser.add_argument("-i", "--iterations", type=positive, default=10)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    parser.add_argument("--no-combiner", action="store_true",
                        help="one group_by per round instead of aggregate + cogroup_by")
    parser.add_argument("--invariant", action="store_true",
                        help="the graph as a loop-invariant input (pagerank_invariant)")
    args = parser.parse_args(argv)
    edges = rmat_edges(args.rmat, seed=1) if args.rmat else stdlib_import_graph()
    t0 = time.perf_counter()
    ranks = run_pagerank(edges, args.iterations, args.processes, args.workers,
                         combiner=not args.no_combiner, invariant=args.invariant)
    took = time.perf_counter() - t0
    want = power_iteration(adjacency(edges)[1], args.iterations)
    err = max_difference(abs(ranks[u] - want[u]) for u in want)
    print(f"PageRank, {args.iterations} iterations, {len(want)} nodes, {len(edges)} edges, "
          f"{args.processes} process(es) x {args.workers} worker(s): {took:.2f} s; "
          f"max difference from the plain power iteration {err:.1e}")
    for node, rank in sorted(ranks.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {rank:.6f}  {node}")
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("pagerank"))
