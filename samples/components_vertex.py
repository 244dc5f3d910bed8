"""Connected components by min-label propagation: hand-written vertices in a loop context.

Each epoch is an undirected graph given as an edge list.  ``Symmetrize`` sends every edge both
ways; inside the loop ``Propagate`` (partitioned by node) keeps the adjacency and the current
label of its nodes.  Proposals ``(node, label)`` that arrive during an iteration are only
gathered; when the iteration is complete (``on_notify``) every node whose label dropped tells
its neighbours, through the feedback edge, in the next iteration.  Labels start as the node's
own name, so each node ends with the least node of its component.  The loop stops by itself
when an iteration changes nothing.

How does a vertex learn that the whole loop is done for an epoch?  It asks for a notification
at ``Timestamp(epoch, (END,))`` with an iteration counter larger than any the loop reaches: that
notification can only be delivered once nothing at or before it can arrive, that is once
every iteration of the epoch has drained.  Then it sends its nodes' final labels out of the loop
and forgets the epoch.

    python -m samples.components_vertex             # the standard library's import graph
    python -m samples.components_vertex -t 2 --random 10000 --seed 1

>>> from naiad.testing import run
>>> run(components, [[(1, 2), (2, 3), (7, 8)], [("b", "a")]], workers=2)
{0: [(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)], 1: [('a', 'a'), ('b', 'a')]}
"""

from __future__ import annotations

import collections
import functools
import random
import sys
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

import naiad
import stages
from samples._options import naiad_sample, positive, spmd_args, spmd_parser

__all__ = ["END", "Symmetrize", "Propagate", "components", "random_graph", "oracle",
           "program", "main"]

END = 1 << 62
"""An iteration counter no loop reaches: a notification there means "the epoch's loop is done"."""

Edge = Tuple[Hashable, Hashable]


class Symmetrize(naiad.Vertex):
    """``(a, b)`` becomes ``(a, b)`` and ``(b, a)``."""

    def on_recv_batch(self, edge, messages, time):
        out = []
        for a, b in messages:
            out.append((a, b))
            out.append((b, a))
        self.send_batch_by(0, out, time)


class _Epoch:
    """One epoch's graph as far as this vertex owns it."""

    __slots__ = ("adjacency", "labels", "proposals")

    def __init__(self):
        self.adjacency: Dict[Hashable, List[Hashable]] = collections.defaultdict(list)
        self.labels: Dict[Hashable, Hashable] = {}
        self.proposals: Dict[naiad.Timestamp, Dict[Hashable, Hashable]] = {}


class Propagate(naiad.Vertex):
    """Input 0: directed edges ``(node, neighbour)`` at iteration 0.  Input 1: label proposals
    ``(node, label)``.  Output 0: proposals for the next iteration (to the feedback).  Output 1:
    the final ``(node, label)`` of every node, once the epoch's loop has drained."""

    def __init__(self):
        super().__init__()
        self.epochs: Dict[int, _Epoch] = {}

    def _epoch(self, time: naiad.Timestamp) -> _Epoch:
        state = self.epochs.get(time.epoch)
        if state is None:
            state = self.epochs[time.epoch] = _Epoch()
            self.notify_at(naiad.Timestamp(time.epoch, time.counters[:-1] + (END,)))
        return state

    def on_recv_batch(self, edge, messages, time):
        state = self._epoch(time)
        if edge == 0:
            adjacency = state.adjacency
            for node, neighbour in messages:
                adjacency[node].append(neighbour)
            if time not in state.proposals:
                state.proposals[time] = {}
                self.notify_at(time)
            return
        proposals = state.proposals.get(time)
        if proposals is None:
            proposals = state.proposals[time] = {}
            self.notify_at(time)
        for node, label in messages:
            best = proposals.get(node)
            if best is None or label < best:
                proposals[node] = label

    def on_notify(self, time):
        state = self.epochs.get(time.epoch)
        if time.counters[-1] == END:
            del self.epochs[time.epoch]
            self.send_batch_by(1, list(state.labels.items()), time)
            return
        proposals = state.proposals.pop(time)
        labels, adjacency = state.labels, state.adjacency
        if time.counters[-1] == 0:         # every edge has arrived: start with the nodes' names
            proposals = {node: min(node, proposals.get(node, node)) for node in adjacency}
        out = []
        for node, label in proposals.items():
            current = labels.get(node)
            if current is None or label < current:
                labels[node] = label
                out.extend((neighbour, label) for neighbour in adjacency[node])
        self.send_batch_by(0, out, time)


def components(comp: naiad.Computation, edges: naiad.Stream) -> naiad.Stream:
    """``(node, least node of its component)`` for every node of each epoch's graph."""
    both_ways = stages.unary(edges, Symmetrize, name="symmetrize")
    loop = stages.LoopContext(comp, name="components")
    inner = loop.enter(both_ways)
    fb = loop.feedback()
    prop = stages.new_stage(Propagate, name="propagate")
    prop.new_input(inner, partition_by=lambda e: e[0])
    prop.new_input(fb.stream, partition_by=lambda p: p[0])
    proposals, final = prop.new_output(), prop.new_output()
    fb.connect(proposals)
    return loop.exit(final)


def random_graph(nodes: int, edges: int, seed: int) -> List[Tuple[int, int]]:
    """``edges`` random undirected edges between ``nodes`` nodes (seeded; self-loops dropped)."""
    rng = random.Random(seed)
    out = []
    for _ in range(edges):
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            out.append((a, b))
    return out


def oracle(edges: Sequence[Edge]) -> List[Tuple[Any, Any]]:
    """Plain Python (union-find): the sorted ``(node, least node of its component)`` list."""
    parent: Dict[Hashable, Hashable] = {}

    def find(x):
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in edges:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            parent[rb] = ra
    return sorted((node, find(node)) for node in parent)


def program(comp: naiad.Computation, graphs: Sequence[Sequence[Edge]]) -> Dict[int, list]:
    """One epoch per graph; each process supplies its share of the edges and returns the labels
    of the nodes its workers own."""
    from naiad.testing import shard
    inp = comp.new_input(name="edges")
    got = components(comp, inp.stream).collect()
    comp.activate()
    for edges in graphs:
        inp.on_next(shard(edges, comp.process_index, comp.processes))
    inp.on_completed()
    comp.join()
    return got.results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run with Naiad's flags (-p, -n, -t, -h); ``--random N`` uses a random graph of N nodes."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = spmd_parser("naiad sample components_vertex", __doc__.split("\n")[0])
    parser.add_argument("--random", type=positive, default=None, metavar="NODES")
    parser.add_argument("--seed", type=int, default=0)
    args, naiad_flags = spmd_args(parser, argv)
    comp = naiad.Computation.from_args(naiad_flags)
    if args.random:
        graph: Sequence[Edge] = random_graph(args.random, args.random, args.seed)
        what = f"a random graph ({args.random} nodes, seed {args.seed})"
    else:
        from samples.textdata import stdlib_import_graph
        graph = stdlib_import_graph()
        what = "the standard library's import graph"
    from naiad.execute import run_program
    results = run_program(functools.partial(program, graphs=[graph]), comp)
    labels = results.get(0, [])
    sizes: Dict[Any, int] = collections.Counter(label for _, label in labels)
    print(f"{what}: process {comp.process_index} holds {len(labels)} nodes in {len(sizes)} "
          "component(s); the largest here:")
    for label, size in sorted(sizes.items(), key=lambda kv: (-kv[1], str(kv[0])))[:5]:
        print(f"  {size:6d} nodes labelled {label!r}")
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("components_vertex"))
