"""Graphs for the graph samples: the standard library's import graph, Graph500 RMAT, random graphs.

Every generator is seeded and deterministic, so each process of a computation can build the
same graph and supply its own share of it.

>>> edges = rmat_edges(scale=4, edge_factor=2, seed=1)
>>> len(edges), all(0 <= u < 16 and 0 <= v < 16 for u, v in edges)
(32, True)
>>> edges == rmat_edges(scale=4, edge_factor=2, seed=1)
True
>>> nodes, adj = adjacency([("a", "b"), ("a", "c"), ("c", "a")], nodes=["d"])
>>> nodes, adj["a"], adj["b"], adj["d"]
(['a', 'b', 'c', 'd'], ('b', 'c'), (), ())
"""

from __future__ import annotations

import random
from typing import Callable, Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

from samples.textdata import stdlib_import_graph

__all__ = ["stdlib_import_graph", "rmat_edges", "random_edges", "free_edge", "adjacency",
           "undirected"]

Edge = Tuple[Hashable, Hashable]


def rmat_edges(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19,
               c: float = 0.19, seed: int = 0, permute: bool = True) -> List[Tuple[int, int]]:
    """A Graph500 RMAT (Kronecker) edge list: ``edge_factor * 2**scale`` directed edges over
    ``2**scale`` nodes, each edge placed by ``scale`` recursive choices among the quadrants of the
    adjacency matrix with probabilities ``a, b, c`` and ``1 - a - b - c``.

    Node labels are shuffled (as Graph500 does) so that the heavy nodes are not all near 0.
    Duplicate edges and self loops are kept, as the generator makes them.  Uses numpy when it is
    installed (the same seed then gives a different, equally valid graph than without it).
    """
    n_edges = edge_factor << scale
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is usually there
        return _rmat_python(scale, n_edges, a, b, c, seed, permute)
    rng = np.random.default_rng(seed)
    src = np.zeros(n_edges, dtype=np.int64)
    dst = np.zeros(n_edges, dtype=np.int64)
    ab, abc = a + b, a + b + c
    for level in range(scale):
        r = rng.random(n_edges)
        bit = np.int64(1 << level)
        src += bit * (r >= ab)                            # quadrants c and d: lower half
        dst += bit * (((r >= a) & (r < ab)) | (r >= abc))  # quadrants b and d: right half
    if permute:
        perm = rng.permutation(1 << scale)
        src, dst = perm[src], perm[dst]
    return list(zip(src.tolist(), dst.tolist()))


def _rmat_python(scale, n_edges, a, b, c, seed, permute):
    rng = random.Random(seed)
    ab, abc = a + b, a + b + c
    edges = []
    for _ in range(n_edges):
        u = v = 0
        for level in range(scale):
            r = rng.random()
            if r >= ab:
                u |= 1 << level
            if a <= r < ab or r >= abc:
                v |= 1 << level
        edges.append((u, v))
    if permute:
        perm = list(range(1 << scale))
        rng.shuffle(perm)
        edges = [(perm[u], perm[v]) for u, v in edges]
    return edges


def random_edges(nodes: int, edges: int, seed: int = 0) -> List[Tuple[int, int]]:
    """``edges`` directed edges between uniformly random nodes ``0 .. nodes-1`` (seeded)."""
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]


def free_edge(rng: random.Random, draw: Callable[[], Edge], free: Callable[[Edge], bool],
              every: Callable[[], Iterable[Edge]], tries: int = 64) -> Optional[Edge]:
    """A random edge for which ``free`` holds, or None when no edge of ``every()`` is free.

    Up to ``tries`` edges come from ``draw`` (the first free one is taken, so a sparse graph's
    rewirings draw as many numbers as a plain draw-until-free loop); after that the edge is a
    uniform choice among the free ones of ``every()``, so a dense or complete graph costs one
    pass over its possible edges instead of a loop that may never end.

    >>> rng = random.Random(1)
    >>> taken = {(0, 0), (0, 1), (1, 0)}
    >>> def draw(): return (rng.randrange(2), rng.randrange(2))
    >>> every = lambda: [(u, v) for u in range(2) for v in range(2)]
    >>> free_edge(rng, draw, lambda e: e not in taken, every)
    (1, 1)
    >>> print(free_edge(rng, draw, lambda e: e not in taken and e != (1, 1), every))
    None
    """
    for _ in range(tries):
        edge = draw()
        if free(edge):
            return edge
    left = [e for e in every() if free(e)]
    return rng.choice(left) if left else None


def adjacency(edges: Iterable[Edge], nodes: Optional[Sequence[Hashable]] = None
              ) -> Tuple[list, Dict[Hashable, tuple]]:
    """``(sorted nodes, {node: tuple of out-neighbours})``; every endpoint and every node of
    ``nodes`` appears, nodes without out-edges with ``()``.  Neighbours keep the edge order."""
    adj: Dict[Hashable, list] = {}
    for u, v in edges:
        adj.setdefault(u, []).append(v)
        adj.setdefault(v, [])
    for u in nodes or ():
        adj.setdefault(u, [])
    order = sorted(adj, key=lambda x: (type(x).__name__, x))
    return order, {u: tuple(adj[u]) for u in order}


def undirected(edges: Iterable[Edge]) -> List[Edge]:
    """Each edge in both directions, self loops dropped, duplicates removed, sorted."""
    both = set()
    for u, v in edges:
        if u != v:
            both.add((u, v))
            both.add((v, u))
    return sorted(both, key=lambda e: ((type(e[0]).__name__, e[0]), (type(e[1]).__name__, e[1])))
