"""Incremental connected components (differential): a fixed point, then one rewired edge per epoch.

Every node starts labelled by itself; each iteration a node takes the least label among its own
and its neighbours' (``join`` with the entered edges, ``concat`` the entered nodes, ``min``).
The loop stops by itself at the fixed point.  Each later epoch removes one random edge and adds
another, as Naiad's ConnectedComponents example does; only the labels that change flow, so an
update takes milliseconds where recomputing takes seconds.  The graph is Debian's package
dependencies (``apt-cache dumpavail``), or the standard library's import graph without apt.

From the command line the loop is prioritized, as Naiad's ConnectedComponents example is
(``--plain`` turns it off; :func:`run` takes ``prioritized``): the loop starts with no label and
node ``n``'s own label enters at
iteration ``priority(n)``, the least labels first (as the Rust differential dataflow's
``propagate_at`` lets labels enter by a priority): most nodes then adopt their final label at once instead of a
few smaller ones in turn: on the Debian graph the loop changes about a quarter as many labels,
and its join makes a fifth as many offers, on the way to the same fixed point.

    python -m samples.dd_components                  # Debian graph, 20 rewirings
    python -m samples.dd_components --plain          # every label from the first iteration
    python -m samples.dd_components --updates 50 -t 2
    python -m samples.dd_components --random 2000    # a seeded random graph

>>> from linq.differential.testing import run_dd
>>> edges = [(1, 2), (2, 3), (7, 8)]
>>> out = run_dd(components, symmetric(edges), [[((2, 3), -1), ((3, 2), -1)]])
>>> sorted(r for r, d in out[0]), sorted(out[1])
([(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)], [((3, 1), -1)])
>>> prio = run_dd(lambda c: components(c, priorities(symmetric(edges))), symmetric(edges))
>>> sorted(r for r, d in prio[0])
[(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)]
"""

from __future__ import annotations

import random
import sys
from operator import itemgetter
from typing import Callable, Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

import naiad
from linq import differential as dd
from linq.differential import Collection
from linq.differential.testing import feed_timed, replay
from samples.debian import real_graph
from samples.graphs import free_edge, random_edges
from samples._options import at_least, naiad_sample, positive, sample_parser

__all__ = ["components", "priorities", "symmetric", "oracle", "rewirings", "run", "main"]

Edge = Tuple[Hashable, Hashable]


_first = itemgetter(0)      # C-speed key and value functions: called once per offer
_second = itemgetter(1)


def _self_label(node: Hashable) -> tuple:
    return (node, node)


def _offer(node_label: tuple, edge: tuple) -> tuple:
    return (edge[1], node_label[1])


def _no_label(node_label: tuple) -> bool:
    return False


def components(edges: Collection, priority: Optional[Callable[[Hashable], int]] = None
               ) -> Collection:
    """``(node, least node of its component)`` for the symmetric ``edges`` collection.

    With ``priority``, node ``n``'s own label enters the loop at iteration ``priority(n)``
    (:func:`priorities`: the least labels first) and the loop starts with no label: a node
    adopts the least label that reached it so far, and labels entering later rarely beat it,
    so far fewer labels change (and are retracted) on the way to the same fixed point.
    """
    nodes = edges.map(_first).distinct().map(_self_label)
    if priority is None:
        return nodes.iterate(lambda loop, labels: (
            labels.join(loop.enter(edges), key=_first, other_key=_first, result=_offer)
                  .concat(loop.enter(nodes))
                  .min(key=_first, value=_second)), name="components")
    at = _at(priority)
    return nodes.filter(_no_label).iterate(lambda loop, labels: (
        labels.join(loop.enter(edges), key=_first, other_key=_first, result=_offer)
              .concat(loop.enter_at(nodes, at))
              .min(key=_first, value=_second)), name="components")


def _at(priority: Callable[[Hashable], int]) -> Callable[[tuple], int]:
    def at(node_label: tuple) -> int:
        return priority(node_label[0])
    return at


def priorities(edges: Iterable[Edge]) -> Callable[[Hashable], int]:
    """``priority(node)`` for :func:`components`: ``floor(log4(rank + 1))`` of the node in
    sorted order (0 for the least node, 1 for the next three, 2 for the next twelve, ...;
    0 for a node not among ``edges``), so that the least labels spread first."""
    nodes = sorted({u for e in edges for u in e})
    table = {n: ((i + 1).bit_length() - 1) // 2 for i, n in enumerate(nodes)}
    get = table.get
    return lambda node: get(node, 0)


def symmetric(edges: Iterable[Edge]) -> List[Edge]:
    """Both directions of every edge, without self-loops."""
    return [e for u, v in edges if u != v for e in ((u, v), (v, u))]


def oracle(edges: Iterable[Edge]) -> Dict[Hashable, Hashable]:
    """The least node of each node's component, by union-find."""
    parent: Dict[Hashable, Hashable] = {}

    def find(x: Hashable) -> Hashable:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for u, v in edges:
        parent.setdefault(u, u)
        parent.setdefault(v, v)
        a, b = find(u), find(v)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {x: find(x) for x in parent}


def rewirings(edges: Sequence[Edge], count: int, seed: int = 0) -> List[List[Tuple[Edge, int]]]:
    """``count`` epochs of changes, each removing one present edge and adding a new one.

    Self-loops do not count (:func:`symmetric` drops them).  When no edge can move (there is
    none, or every edge between the graph's nodes is there), the epoch has no changes.

    >>> rewirings([(1, 1), (2, 2)], 2)
    [[], []]
    >>> rewirings([(1, 2)], 1)
    [[]]
    """
    rng = random.Random(seed)
    present = {(min(u, v), max(u, v)) for u, v in edges if u != v}
    nodes = sorted({u for e in present for u in e})
    order = sorted(present)

    def draw() -> Edge:
        a, b = rng.sample(nodes, 2)
        return (min(a, b), max(a, b))

    def every() -> Iterable[Edge]:
        return ((a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:])
    out: List[List[Tuple[Edge, int]]] = []
    for _ in range(count):
        if not order:
            out.append([])              # no edge between two different nodes
            continue
        at = rng.randrange(len(order))
        gone = order.pop(at)
        present.discard(gone)
        new = free_edge(rng, draw, lambda e: e not in present and e != gone, every)
        if new is None:                 # every edge between the nodes is there
            present.add(gone)
            order.insert(at, gone)
            out.append([])
            continue
        present.add(new)
        order.append(new)
        out.append([(e, -1) for e in symmetric([gone])] + [(e, 1) for e in symmetric([new])])
    return out


def run(edges: Sequence[Edge], updates: Sequence[Sequence[Tuple[Edge, int]]],
        processes: int = 1, workers: int = 1, check: bool = False, echo: bool = False,
        prioritized: bool = False) -> List[dict]:
    """The computation; returns per process ``{"initial": s, "latencies": [s], "results": ...}``
    (``results`` as collected: ``{epoch: [(label, diff), ...]}``).

    With ``check``, each epoch's labels are compared with :func:`oracle` recomputed from scratch.
    With ``prioritized``, the labels enter by :func:`priorities` of ``edges``.
    """
    sym = symmetric(edges)
    priority = priorities(sym) if prioritized else None

    def program(comp: naiad.Computation) -> dict:
        inp = dd.new_input(comp, name="edges")
        labels = components(inp.collection, priority)
        got = labels.collect()
        probe = labels.probe()
        comp.activate()
        show = _echo if echo and comp.process_index == 0 else None
        initial, latencies = feed_timed(comp, inp, probe, sym, updates, show)
        comp.join()
        return {"initial": initial, "latencies": latencies, "results": got.results}

    out = naiad.execute(program, processes=processes, workers=workers)
    if check:
        results = [o["results"] for o in out]
        for epoch, current, got in replay(sym, updates, results):
            if got != {label: 1 for label in oracle(current).items()}:
                msg = f"epoch {epoch}: the labels differ from the oracle"
                raise AssertionError(msg)
    return out


def _echo(epoch: int, changes: int, seconds: float) -> None:
    print(f"epoch {epoch}: {changes} changes, {seconds * 1e3:.1f} ms")


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = sample_parser("dd_components", __doc__)
    parser.add_argument("--random", type=at_least(2), metavar="NODES",
                        help="a seeded random graph with NODES nodes and as many edges")
    parser.add_argument("--updates", type=positive, default=20, help="rewired edges, one per epoch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="compare every epoch with union-find")
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    parser.add_argument("--plain", action="store_true",
                        help="every label enters at the first iteration (by default the least "
                             "labels enter first, by components' priority)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.random:
        edges: List[Edge] = random_edges(args.random, args.random, seed=args.seed)
        what = f"random graph ({args.random} nodes)"
    else:
        edges, what = real_graph()
    print(f"connected components of the {what}")
    updates = rewirings(edges, args.updates, args.seed)
    skipped = sum(1 for u in updates if not u)
    if skipped:
        print(f"{skipped} of the {args.updates} epochs rewire no edge: no edge between two "
              "different nodes can move to a free place (self-loops do not count)")
    out = run(edges, updates, args.processes, args.workers, check=args.check, echo=True,
              prioritized=not args.plain)
    lat = sorted(out[0]["latencies"])
    median = lat[len(lat) // 2] * 1e3 if lat else float("nan")
    print(f"initial fixed point {out[0]['initial']:.2f} s; median update latency {median:.1f} ms"
          + ("; every epoch equal to union-find" if args.check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("dd_components"))
