"""Breadth-first distances (differential), as in the seed: from roots, then edges inserted and removed.

``dists`` starts as the roots at distance 0; each iteration joins the distances with the edges,
adds one, puts the current distances back in and keeps the least per node.  After the fixed
point, each epoch changes a few edges and only the distances that change are recomputed.

    python -m samples.dd_bfs                      # a seeded random graph, 10 epochs of changes
    python -m samples.dd_bfs --nodes 5000 -t 2

>>> from linq.differential.testing import run_dd
>>> def build(edges):
...     return distances(edges.filter(lambda e: e[0] == "root").map(lambda e: e[1]),
...                      edges.filter(lambda e: e[0] != "root"))
>>> out = run_dd(build, [("root", 0), (0, 1), (1, 2)], [[((0, 2), 1)], [((1, 2), -1)]])
>>> out[0], out[1], out[2]
([((0, 0), 1), ((1, 1), 1), ((2, 2), 1)], [((2, 1), 1), ((2, 2), -1)], [])
"""

from __future__ import annotations

import random
import sys
import time
from operator import itemgetter
from collections import deque
from typing import Dict, Hashable, Iterable, List, Optional, Sequence, Set, Tuple

import naiad
from samples._options import at_least, naiad_sample, positive, sample_parser
from samples.graphs import free_edge
from linq import differential as dd
from linq.differential import Collection
from linq.differential.testing import replay

__all__ = ["distances", "oracle", "changes", "run", "main"]

Edge = Tuple[Hashable, Hashable]


_first = itemgetter(0)
_second = itemgetter(1)


def _at_zero(node: Hashable) -> tuple:
    return (node, 0)


def _step(node_dist: tuple, edge: tuple) -> tuple:
    return (edge[1], node_dist[1] + 1)


def distances(roots: Collection, edges: Collection) -> Collection:
    """``(node, distance from the nearest root)`` for every node reachable from ``roots``."""
    return roots.map(_at_zero).iterate(lambda loop, d: (
        d.join(loop.enter(edges), key=_first, other_key=_first, result=_step)
         .concat(d)
         .min(key=_first, value=_second)), name="bfs")


def oracle(roots: Iterable[Hashable], edges: Iterable[Edge]) -> Dict[Hashable, int]:
    """Distances by a plain breadth-first search."""
    adj: Dict[Hashable, List[Hashable]] = {}
    for u, v in edges:
        adj.setdefault(u, []).append(v)
    dist = {r: 0 for r in roots}
    queue = deque(dist)
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def changes(nodes: int, edges: int, epochs: int, per_epoch: int, seed: int = 0
            ) -> Tuple[List[Edge], List[List[Tuple[Edge, int]]]]:
    """A random directed graph of ``edges`` distinct edges (self-loops included: at most
    ``nodes ** 2``) and ``epochs`` epochs, each rewiring ``per_epoch`` of them: removing one
    and adding one that is not there.  A complete graph has nowhere to rewire to: its
    rewirings are skipped (the epochs have no changes).

    >>> changes(2, 4, epochs=2, per_epoch=3)
    ([(0, 0), (0, 1), (1, 0), (1, 1)], [[], []])
    >>> changes(2, 5, epochs=1, per_epoch=1)
    Traceback (most recent call last):
    ...
    ValueError: 5 edges are more than the 4 that 2 nodes allow
    """
    possible = nodes * nodes
    if edges > possible:
        raise ValueError(f"{edges} edges are more than the {possible} that {nodes} nodes allow")
    rng = random.Random(seed)
    present: Set[Edge] = set()
    if 2 * edges <= possible:           # sparse: at most two draws per edge on average
        while len(present) < edges:
            present.add((rng.randrange(nodes), rng.randrange(nodes)))
    else:                               # dense: drawing until all are there could take long
        present = {divmod(i, nodes) for i in rng.sample(range(possible), edges)}
    initial = sorted(present)

    def draw() -> Edge:
        return (rng.randrange(nodes), rng.randrange(nodes))

    def every() -> Iterable[Edge]:
        return ((u, v) for u in range(nodes) for v in range(nodes))
    out = []
    for _ in range(epochs):
        epoch: List[Tuple[Edge, int]] = []
        for _ in range(per_epoch):
            if len(present) == possible:
                continue                # complete: no edge to rewire to
            gone = rng.choice(sorted(present))
            present.discard(gone)
            new = free_edge(rng, draw, lambda e: e not in present and e != gone, every)
            assert new is not None      # the graph was not complete
            present.add(new)
            epoch += [(gone, -1), (new, 1)]
        out.append(epoch)
    return initial, out


def run(roots: Sequence[Hashable], edges: Sequence[Edge],
        updates: Sequence[Sequence[Tuple[Edge, int]]], processes: int = 1, workers: int = 1
        ) -> List[Dict[int, list]]:
    """Distances at every epoch; each process returns its collected changes."""
    def program(comp: naiad.Computation) -> Dict[int, list]:
        e_in = dd.new_input(comp, name="edges")
        r_in = dd.new_input(comp, name="roots")
        got = distances(r_in.collection, e_in.collection).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        e_in.on_next(list(edges)[me::n])
        r_in.on_next(list(roots)[me::n])
        for u in updates:
            e_in.update(list(u)[me::n])
            r_in.on_next()
        e_in.on_completed()
        r_in.on_completed()
        comp.join()
        return got.results
    return naiad.execute(program, processes=processes, workers=workers)


def check(roots: Sequence[Hashable], edges: Sequence[Edge],
          updates: Sequence[Sequence[Tuple[Edge, int]]], results: List[Dict[int, list]]) -> None:
    """Raise unless every epoch's distances equal the breadth-first search from scratch."""
    for epoch, current, got in replay(edges, updates, results):
        if got != {(v, d): 1 for v, d in oracle(roots, current).items()}:
            msg = f"epoch {epoch}: distances differ from the breadth-first search"
            raise AssertionError(msg)


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = sample_parser("dd_bfs", __doc__)
    parser.add_argument("--nodes", type=positive, default=2000)
    parser.add_argument("--edges", type=positive, default=4000)
    parser.add_argument("--epochs", type=positive, default=10)
    parser.add_argument("--changes", type=at_least(0), default=5, help="edges rewired per epoch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.edges > args.nodes ** 2:
        parser.error(f"--edges {args.edges} is more than the {args.nodes ** 2} edges --nodes "
                     f"{args.nodes} allows (one per ordered pair of nodes, self-loops included)")
    edges, updates = changes(args.nodes, args.edges, args.epochs, args.changes, args.seed)
    roots = [0]
    t0 = time.perf_counter()
    results = run(roots, edges, updates, args.processes, args.workers)
    took = time.perf_counter() - t0
    check(roots, edges, updates, results)
    reached = len(oracle(roots, edges))
    skipped = args.epochs * args.changes - sum(len(u) for u in updates) // 2
    why = (f" ({skipped} rewirings skipped: the graph has every possible edge, none is free to "
           "rewire to)" if skipped else "")
    print(f"{reached} nodes reached from {roots} over {len(edges)} edges, then {args.epochs} "
          f"epochs of {args.changes} rewired edges{why}: {took:.2f} s; every epoch equal to a "
          "breadth-first search from scratch")
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("dd_bfs"))
