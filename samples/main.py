"""The main sample: PageRank of a real graph, loaded with Spark, iterated here.

``make run`` runs it on one machine: a local SparkSession (``local[*]``), a real graph written as
a CSV edge list and read with ``spark.read.csv``, 20 iterations of PageRank as a timely dataflow
of 2 processes inside one Spark barrier stage (:func:`naiad.spark.execute`), a progress line per
iteration, and the top 20 nodes shown as a Spark DataFrame, joined in Spark with their in-degree.
The graph is the Debian package dependency graph (``apt-cache dumpavail``: about 64,000 packages
and 283,000 dependencies, see :mod:`samples.debian`) where apt has its lists, and otherwise the
import graph of this Python's standard library (parsed with :mod:`ast`); the sample says which.

The dataflow is iterative MapReduce with a combiner, written as one vertex per worker inside a
loop.  Edges arrive partitioned by source, so each worker owns a set of nodes, their ranks and
their out-edges.  Map: every worker spreads ``rank / out_degree`` along its edges and sums the
shares per destination locally (numpy).  Shuffle: one array of partial sums per owning worker
goes through the loop's feedback edge.  Reduce: on the notification for the iteration, each
owner adds the partial sums of its nodes: ``rank = (1 - d) / N + d * sum``.  The first three
loop iterations set up: who sends which destinations to whom, and the number of nodes ``N``.
Rank reaching a node without out-edges is not passed on, as in :mod:`samples.pagerank` (whose
:func:`~samples.pagerank.power_iteration` is the oracle).

    python -m samples.main                       # Debian's packages (or the import graph)
    python -m samples.main --graph imports       # the stdlib import graph, 2 processes
    python -m samples.main --rmat 14 -n 2        # a Graph500 RMAT graph over 2**14 node ids
    python -m samples.main --monitor 8000        # and watch it on http://127.0.0.1:8000/

>>> from naiad.testing import run
>>> from samples.pagerank import power_iteration
>>> edges = [("a", "b"), ("b", "a"), ("b", "c"), ("d", "a")]
>>> got = dict(run(lambda comp, s: pagerank(s, iterations=5), [edges], workers=2)[0])
>>> want = power_iteration({"a": ["b"], "b": ["a", "c"], "c": [], "d": ["a"]}, 5)
>>> max(abs(got[u] - want[u]) for u in want) < 1e-12
True
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np

import naiad
from samples._options import (max_difference, naiad_sample, port, positive, rmat_scale,
                              sample_parser)
import stages
from naiad.partition import key_hash, route_keys

__all__ = ["DAMPING", "PageRankVertex", "pagerank", "PageRankProgram", "ProgressLine",
           "write_edges_csv", "main"]

DAMPING = 0.85
SETUP = 3
"""Loop iterations spent before the first PageRank step: edges, destinations, node count."""


def _route(message: tuple) -> int:
    return message[0]


def _source(edge: tuple) -> Hashable:
    return edge[0]


class _Graph:
    """One epoch's part of the graph owned by one worker, and its ranks."""

    def __init__(self) -> None:
        self.edges: list = []
        self.inbox: Dict[int, list] = {}
        self.nodes: list = []                   # node ids owned here, by local index
        self.degree = np.zeros(0)
        self.edge_src = np.zeros(0, np.int64)   # local index of each edge's source
        self.edge_slot = np.zeros(0, np.int64)  # slot of each edge's destination
        self.slots = 0
        self.owners: List[Tuple[int, int, int]] = []   # (owner worker, first slot, end slot)
        self.incoming: Dict[int, np.ndarray] = {}      # sender -> local indices of its sums
        self.count = 0
        self.rank = np.zeros(0)


class PageRankVertex(naiad.Vertex):
    """Input 0: edges ``(src, dst)`` at loop iteration 0, partitioned by ``src``.  Input 1: the
    messages of the previous iteration (from the feedback).  Output 0: messages for the next
    iteration ``(route key, kind, sender, payload)``.  Output 1: ``(node, rank)`` after the last
    iteration.  Output 2: ``(route key of worker 0, iteration, L1 change of this worker)``."""

    def __init__(self, iterations: int, damping: float, routes: List[int]):
        super().__init__()
        self.iterations = iterations
        self.damping = damping
        self.routes = routes
        self.epochs: Dict[int, _Graph] = {}

    # ---- events ------------------------------------------------------------------------------
    def on_recv_batch(self, edge: int, messages: list, time: naiad.Timestamp) -> None:
        g = self.epochs.get(time.epoch)
        if g is None:
            g = self.epochs[time.epoch] = _Graph()
            # Every later iteration must run here, whether or not messages arrive for it.
            outer, now = time.counters[:-1], time.counters[-1]
            for c in range(now, SETUP + self.iterations):
                self.notify_at(naiad.Timestamp(time.epoch, outer + (c,)))
        if edge == 0:
            g.edges.extend(messages)
        else:
            g.inbox.setdefault(time.counters[-1], []).extend(messages)

    def on_notify(self, time: naiad.Timestamp) -> None:
        g = self.epochs[time.epoch]
        c = time.counters[-1]
        messages = g.inbox.pop(c, [])
        if c == 0:
            self._own_edges(g, time)
        elif c == 1:
            self._own_nodes(g, messages, time)
        elif c == 2:
            g.count = sum(m[3] for m in messages)
            g.rank = np.full(len(g.nodes), 1.0 / g.count)
            self._spread(g, time)
        else:
            self._step(g, messages, time, c - SETUP + 1)

    # ---- setup -------------------------------------------------------------------------------
    def _own_edges(self, g: _Graph, time) -> None:
        """Index the edges of the nodes owned here; tell each owner of a destination which
        destinations this worker will send sums for, in slot order."""
        if not g.edges:
            return
        src, dst = zip(*g.edges)
        g.edges = []
        sources, g.edge_src = np.unique(np.asarray(src), return_inverse=True)
        g.nodes = sources.tolist()
        g.degree = np.bincount(g.edge_src, minlength=len(g.nodes)).astype(float)
        dests, dest_of_edge = np.unique(np.asarray(dst), return_inverse=True)
        dest_ids = dests.tolist()
        workers = len(self.routes)
        owner = np.fromiter((key_hash(d) % workers for d in dest_ids), np.int64, len(dest_ids))
        order = np.argsort(owner, kind="stable")
        slot_of = np.empty_like(order)
        slot_of[order] = np.arange(len(order))
        g.edge_slot = slot_of[dest_of_edge]
        g.slots = len(order)
        owned_sorted = owner[order]
        for w in np.unique(owned_sorted).tolist():
            lo, hi = np.searchsorted(owned_sorted, [w, w + 1]).tolist()
            g.owners.append((w, lo, hi))
            ids = [dest_ids[i] for i in order[lo:hi].tolist()]
            self.send_by(0, (self.routes[w], "dst", self.index, ids), time)

    def _own_nodes(self, g: _Graph, messages: list, time) -> None:
        """Add the destinations owned here; remember where each sender's sums go; tell everyone
        how many nodes this worker owns."""
        index = {u: i for i, u in enumerate(g.nodes)}
        for _, _, sender, ids in messages:
            local = []
            for u in ids:
                i = index.get(u)
                if i is None:
                    i = index[u] = len(g.nodes)
                    g.nodes.append(u)
                local.append(i)
            g.incoming[sender] = np.asarray(local, np.int64)
        g.degree = np.concatenate([g.degree, np.zeros(len(g.nodes) - len(g.degree))])
        for key in self.routes:
            self.send_by(0, (key, "n", self.index, len(g.nodes)), time)

    # ---- iterations ------------------------------------------------------------------------------
    def _spread(self, g: _Graph, time) -> None:
        """Map and combine: per destination slot, the sum of rank / degree over local edges."""
        if not g.slots:
            return
        share = np.divide(g.rank, g.degree, out=np.zeros_like(g.rank), where=g.degree > 0)
        sums = np.bincount(g.edge_slot, weights=share[g.edge_src], minlength=g.slots)
        for w, lo, hi in g.owners:
            self.send_by(0, (self.routes[w], "sum", self.index, sums[lo:hi]), time)

    def _step(self, g: _Graph, messages: list, time, iteration: int) -> None:
        """Reduce: the new rank of every node owned here."""
        total = np.zeros(len(g.nodes))
        for _, _, sender, sums in messages:
            total[g.incoming[sender]] += sums
        rank = (1.0 - self.damping) / g.count + self.damping * total
        change = float(np.abs(rank - g.rank).sum())
        g.rank = rank
        self.send_by(2, (self.routes[0], iteration, change), time)
        if iteration < self.iterations:
            self._spread(g, time)
        else:
            self.send_batch_by(1, list(zip(g.nodes, rank.tolist())), time)
            del self.epochs[time.epoch]


class _Progress(naiad.Vertex):
    """Sums the per-worker L1 changes of each iteration; calls ``fn(iteration, change)``."""

    def __init__(self, fn: Callable[[int, float], Any]):
        super().__init__()
        self.fn = fn
        self.changes: Dict[naiad.Timestamp, list] = {}

    def on_recv_batch(self, edge, messages, time):
        if time not in self.changes:
            self.changes[time] = [messages[0][1], 0.0]
            self.notify_at(time)
        self.changes[time][1] += sum(m[2] for m in messages)

    def on_notify(self, time):
        iteration, change = self.changes.pop(time)
        self.fn(iteration, change)


def pagerank(edges: naiad.Stream, iterations: int, damping: float = DAMPING,
             on_iteration: Optional[Callable[[int, float], Any]] = None) -> naiad.Stream:
    """``(node, rank)`` of every node after ``iterations`` steps, from ``(src, dst)`` edges
    (each epoch is one graph).  ``on_iteration(iteration, l1_change)`` runs in process 0 after
    each step."""
    comp = edges.computation
    routes = route_keys(comp.workers)
    loop = stages.LoopContext(comp, name="pagerank")
    inner = loop.enter(edges)
    fb = loop.feedback(partition_by=_route, max_iterations=SETUP + iterations)
    stage = stages.new_stage(lambda: PageRankVertex(iterations, damping, routes), "pagerank")
    stage.new_input(inner, _source)
    stage.new_input(fb.stream)
    fb.connect(stage.new_output())
    ranks = stage.new_output()
    changes = stage.new_output()
    if on_iteration is not None:
        stages.sink(changes, lambda: _Progress(on_iteration), partition_by=_route,
                    name="pagerank.progress")
    return loop.exit(ranks)


class ProgressLine:
    """Prints ``iteration k/n  L1 change ...  seconds since the previous line`` (the first line
    counts from the start of the program, setup included)."""

    def __init__(self, iterations: int):
        self.iterations = iterations
        self.last = time.perf_counter()

    def __call__(self, iteration: int, change: float) -> None:
        now = time.perf_counter()
        took, self.last = now - self.last, now
        print(f"  iteration {iteration:3d}/{self.iterations}  L1 change {change:.3e}  "
              f"{took:6.3f} s", flush=True)


class PageRankProgram:
    """``program(comp, rows)`` for :func:`naiad.spark.execute`: rows are ``(src, dst)`` edges of
    this task's partition; returns this process's ``(node, rank)`` rows."""

    def __init__(self, iterations: int, damping: float = DAMPING, progress: bool = True):
        self.iterations = iterations
        self.damping = damping
        self.progress = progress

    def __call__(self, comp: naiad.Computation, rows) -> List[tuple]:
        inp = comp.new_input(name="edges")
        show = ProgressLine(self.iterations) if self.progress else None
        got = pagerank(inp.stream, self.iterations, self.damping, show).collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return got.records()


def write_edges_csv(edges: Sequence[Tuple[Any, Any]], path: str) -> str:
    """``edges`` as a CSV file with a ``src,dst`` header."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["src", "dst"])
        out.writerows(edges)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = sample_parser("main", __doc__)
    parser.add_argument("-i", "--iterations", type=positive, default=20)
    parser.add_argument("-n", "--processes", type=positive, default=2)
    parser.add_argument("--top", type=positive, default=20)
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--graph", choices=["auto", "debian", "imports"], default="auto",
                        help="Debian's package dependencies (auto: when apt-cache has them) or "
                             "the standard library's import graph")
    parser.add_argument("--rmat", type=rmat_scale, metavar="SCALE",
                        help="a Graph500 RMAT graph over 2**SCALE node ids (its nodes with an "
                             "edge) instead")
    parser.add_argument("--monitor", type=port, metavar="PORT",
                        help="serve the live monitoring page on http://127.0.0.1:PORT/")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    try:
        import naiad.spark
        print(f"Starting a SparkSession ({args.master or 'local'}) ...", flush=True)
        spark = naiad.spark.local_session(args.master, processes=args.processes)
    except (ImportError, naiad.NaiadError) as exc:   # no PySpark, or no Java
        print(f"Cannot run the Spark sample: {exc}", file=sys.stderr)
        return 2
    from pyspark.sql import functions as F
    from samples.graphs import rmat_edges, stdlib_import_graph

    with tempfile.TemporaryDirectory(prefix="naiad-main-") as tmp:
        if args.rmat:
            edges = rmat_edges(args.rmat, seed=1)
            what = f"Graph500 RMAT graph of scale {args.rmat}"
            kind = "long"
        else:
            edges, what, kind = None, "", "string"
            if args.graph in ("auto", "debian"):
                from samples.debian import debian_edges
                edges = debian_edges()
                what = "Debian package dependency graph (apt-cache dumpavail)"
                if edges is None and args.graph == "debian":
                    print("apt-cache has no package lists here: run apt-get update, or use "
                          "--graph imports", file=sys.stderr)
                    return 2
            if edges is None:
                edges = stdlib_import_graph()
                what = f"import graph of the Python {sys.version.split()[0]} standard library"
                if args.graph == "auto":
                    what += " (apt-cache has no package lists here)"
        path = write_edges_csv(edges, os.path.join(tmp, "edges.csv"))
        nodes = len({u for e in edges for u in e})
        print(f"The {what}: {len(edges)} edges among {nodes} nodes, written to {path}")
        edges_df = spark.read.csv(path, header=True, schema=f"src {kind}, dst {kind}")
        print(f"PageRank, {args.iterations} iterations, as a timely dataflow of {args.processes} "
              f"processes in one Spark barrier stage ({spark.sparkContext.master}):", flush=True)
        t0 = time.perf_counter()
        try:
            ranks = naiad.spark.execute(edges_df, PageRankProgram(args.iterations),
                                        processes=args.processes, progress=True,
                                        monitor=args.monitor,
                                        schema=f"node {kind}, rank double")
        except naiad.spark.StageFailed as exc:
            print(f"The computation failed: {exc}", file=sys.stderr)
            return 1
        took = time.perf_counter() - t0
        print(f"The computation took {took:.2f} s. Back in Spark, the top {args.top} by rank, "
              "with their in-degree:")
        indegree = (edges_df.groupBy(F.col("dst").alias("node"))
                    .agg(F.count("*").alias("in_degree")))
        top = (ranks.join(indegree, "node", "left").fillna(0, ["in_degree"])
               .orderBy(F.desc("rank"), "node").limit(args.top))
        top.show(args.top, truncate=False)
        from samples.graphs import adjacency
        from samples.pagerank import power_iteration
        want = power_iteration(adjacency(edges)[1], args.iterations)
        got = dict(ranks.collect())
        err = max_difference(abs(got[u] - want[u]) for u in want)
        print(f"Checked against a plain power iteration: max difference {err:.1e}")
    print(f"Total time {time.perf_counter() - start:.1f} s (Spark start-up included)")
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("main"))
