"""PageRank by columns: ranks iterate as Arrow tables, the graph enters the loop once.

The same PageRank as :mod:`samples.pagerank` (rank that reaches a node without out-edges is not
passed on; ranks start at ``1 / N``), with integer node ids ``0 .. N-1`` (with ``--rmat``, N is
``2**SCALE``, nodes without an edge included, where :mod:`samples.pagerank` takes the nodes
with an edge: their ranks differ by that N):

* ``edges``: a table ``(src, dst, w)`` with ``w = 1 / outdegree(src)``, plus a zero-weight
  self edge ``(v, v, 0.0)`` for every node, so that every node keeps a row in every iteration
  (its rank is then ``(1 - d) / N`` when nothing flows in);
* ``ranks``: a table ``(node, rank)``.

One iteration is ``ranks.spread(loop.enter(edges), on="node", weight="w")`` (each rank sent
along the out-edges of its node, times ``w``, and summed per target) and a ``map_batches``
for the damping.  Each process feeds the edges whose ``src`` its own workers own and the
ranks of its own nodes (:func:`owned_tables`, by ``frames.share``), so no edge crosses
processes; the edges are indexed once per epoch (:mod:`linq.frames.spread`) and only partial
sums of the ranks travel each iteration.
:func:`power_iteration` is the scipy.sparse oracle.

    python -m samples.frames_pagerank                 # the Debian package graph (or stdlib's)
    python -m samples.frames_pagerank --rmat 14 -n 2

>>> import numpy as np
>>> edges = [(0, 1), (1, 0), (1, 2), (3, 2)]
>>> got = run_frames_pagerank(edges, 4, iterations=5, processes=1, workers=2)
>>> bool(np.allclose(got, power_iteration(edges, 4, 5), atol=1e-12))
True
"""

from __future__ import annotations

import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import naiad
from samples._options import naiad_sample, positive, rmat_scale, sample_parser
from linq import frames

__all__ = ["owned_tables", "pagerank", "program", "run_frames_pagerank", "power_iteration",
           "numbered", "spark_program", "spark_pagerank", "main"]

DAMPING = 0.85


def numbered(edges: Iterable[Tuple[object, object]]) -> Tuple[List[Tuple[int, int]], list]:
    """Edges over any hashable nodes as ``(integer edges, sorted node labels)``."""
    edges = list(edges)
    labels = sorted({u for e in edges for u in e}, key=repr)
    ids = {u: i for i, u in enumerate(labels)}
    return [(ids[u], ids[v]) for u, v in edges], labels


def owned_tables(src: np.ndarray, dst: np.ndarray, nodes: int, comp: naiad.Computation
                 ) -> Tuple[pa.Table, pa.Table]:
    """This process's share of the input, read by ownership (``frames.share``): the edges
    ``(src, dst, w)`` whose ``src`` its workers own, with ``w = 1 / outdegree(src)``, the
    zero-weight self edges of the nodes it owns, and their initial ranks ``(node, rank)``.  The
    exchanges by ``src`` and ``node`` inside :func:`pagerank` then keep every row in its
    process, and recall the rows' workers instead of hashing them again."""
    src = np.asarray(src, np.int64)
    ids = np.arange(nodes, dtype=np.int64)
    everything = pa.table({"src": np.concatenate([src, ids]),
                           "dst": np.concatenate([np.asarray(dst, np.int64), ids])})
    kept = frames.share(everything, "src", comp)       # the self edges are the last rows
    selfs = int(np.count_nonzero(frames.owned(pa.table({"node": ids}), "node", comp)))
    degree = np.bincount(src, minlength=nodes).astype(np.float64)
    mine = kept.column("src").to_numpy()[:kept.num_rows - selfs]
    edges = kept.append_column("w", pa.array(np.concatenate([1.0 / degree[mine],
                                                             np.zeros(selfs)])))
    ranks = pa.table({"node": ids, "rank": np.full(nodes, 1.0 / nodes)})
    return edges, frames.share(ranks, "node", comp)


def pagerank(ranks: frames.FrameStream, edges: frames.FrameStream, nodes: int,
             iterations: int, damping: float = DAMPING) -> frames.FrameStream:
    """``(node, rank)`` after ``iterations`` rounds, from ``(node, rank)`` and edges
    ``(src, dst, w)`` as :func:`owned_tables` makes them."""
    base = (1.0 - damping) / nodes

    def damp(t: pa.Table) -> pa.Table:
        return pa.table({"node": t["node"], "rank": pc.add(pc.multiply(t["rank"], damping), base)})

    def step(loop, r: frames.FrameStream) -> frames.FrameStream:
        return r.spread(loop.enter(edges), on="node", weight="w").map_batches(damp)
    return ranks.iterate(step, iterations)


def program(src: np.ndarray, dst: np.ndarray, nodes: int, iterations: int):
    """A program for ``naiad.execute``: each process feeds the edges and nodes its own
    workers own (:func:`owned_tables`), so that nothing but partial sums crosses processes.
    It returns ``(timings, node ids, ranks)`` of its share, where
    ``timings`` has the seconds from the program's start to ``activate`` returning
    (``"setup"``: its edge table, the graph, the handshake between processes), from the
    inputs being fed to the ranks delivered (``"iterations"``), and from its start to ``join``
    returning (``"program"``); ``"fed_at"`` and ``"done_at"`` are the ``time.perf_counter()``
    of the inputs fed and of the ranks delivered (the machine's monotonic clock: comparable
    between the processes of one machine)."""
    def run(comp: naiad.Computation) -> Tuple[Dict[str, float], np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        marks: Dict[str, float] = {}
        mine, start = owned_tables(src, dst, nodes, comp)
        edges_in, ranks_in = comp.new_input(name="edges"), comp.new_input(name="ranks")
        ranks = pagerank(frames.of(ranks_in.stream), frames.of(edges_in.stream), nodes,
                         iterations)
        got = ranks.collect()
        ranks.subscribe(lambda epoch, tables: marks.setdefault("done", time.perf_counter()))
        comp.activate()
        t1 = time.perf_counter()
        edges_in.on_next([mine])
        ranks_in.on_next([start])
        edges_in.on_completed()
        ranks_in.on_completed()
        comp.join()
        t2 = time.perf_counter()
        done = marks.get("done", t2)
        timings = {"setup": t1 - t0, "iterations": done - t1, "program": t2 - t0,
                   "fed_at": t1, "done_at": done}
        out = pa.concat_tables(got.results.get(0, [])) if got.results.get(0) else None
        if out is None:
            return timings, np.zeros(0, np.int64), np.zeros(0)
        return timings, out["node"].to_numpy(), out["rank"].to_numpy()
    return run


def gather(parts: Sequence[Tuple[Dict[str, float], np.ndarray, np.ndarray]], nodes: int
           ) -> np.ndarray:
    """The ranks of every node, from the parts the processes returned."""
    ranks = np.full(nodes, np.nan)
    for _, ids, values in parts:
        ranks[ids] = values
    return ranks


def run_frames_pagerank(edges: Sequence[Tuple[int, int]], nodes: int, iterations: int = 10,
                        processes: int = 1, workers: int = 1) -> np.ndarray:
    """The ranks of nodes ``0 .. nodes-1`` (an array), computed by ``processes x workers``."""
    pairs = np.asarray(edges, np.int64).reshape(-1, 2)
    parts = naiad.execute(program(pairs[:, 0], pairs[:, 1], nodes, iterations),
                          processes=processes, workers=workers)
    return gather(parts, nodes)


def spark_program(nodes: int, iterations: int, damping: float = DAMPING):
    """A program for ``naiad.spark.execute(edges_df, ..., frames=True)`` over a DataFrame of
    ``(src long, dst long)`` edges with node ids ``0 .. nodes-1``: the out-degrees are counted
    in the dataflow (``group_by``, then a join), every process adds the zero-weight self edges
    and initial ranks of its share of the nodes, and returns its ``(node, rank)`` table."""
    def run(comp: naiad.Computation, tables) -> pa.Table:
        p, n = comp.process_index, comp.processes
        edges_in, selfs_in, ranks_in = (comp.new_input(name=x) for x in ("edges", "self", "ranks"))
        raw = frames.of(edges_in.stream)
        degree = raw.group_by("src", deg=("dst", "count"))
        weighted = raw.join(degree, on="src").map_batches(lambda t: pa.table({
            "src": t["src"], "dst": t["dst"],
            "w": pc.divide(1.0, pc.cast(t["deg"], pa.float64()))}))
        edges = weighted.concat(frames.of(selfs_in.stream))
        got = pagerank(frames.of(ranks_in.stream), edges, nodes, iterations, damping).collect()
        comp.activate()
        mine = [t.select(["src", "dst"]).cast(pa.schema([("src", pa.int64()), ("dst", pa.int64())]))
                for t in tables]
        ids = np.arange(p, nodes, n, dtype=np.int64)
        edges_in.on_next(mine)
        selfs_in.on_next([pa.table({"src": ids, "dst": ids, "w": np.zeros(len(ids))})])
        ranks_in.on_next([pa.table({"node": ids, "rank": np.full(len(ids), 1.0 / nodes)})])
        for inp in (edges_in, selfs_in, ranks_in):
            inp.on_completed()
        comp.join()
        return pa.concat_tables(got.results.get(0, [])) if got.results.get(0) else None
    return run


def spark_pagerank(edges_df, nodes: int, iterations: int = 10, processes: Optional[int] = None):
    """PageRank of a Spark DataFrame of ``(src, dst)`` edges: a DataFrame ``(node, rank)``."""
    import naiad.spark
    return naiad.spark.execute(edges_df, spark_program(nodes, iterations), processes=processes,
                               frames=True, schema="node long, rank double")


def power_iteration(edges: Sequence[Tuple[int, int]], nodes: int, iterations: int,
                    damping: float = DAMPING) -> np.ndarray:
    """The oracle: ``rank = (1 - d) / N + d * M @ rank`` with scipy.sparse (the matrix is built
    here), where ``M[v, u] = 1 / outdegree(u)`` per edge ``u -> v`` (duplicates add up)."""
    from scipy import sparse   # the oracle's own dependency (the test extra), not the sample's
    pairs = np.asarray(edges, np.int64).reshape(-1, 2)
    src, dst = pairs[:, 0], pairs[:, 1]
    degree = np.bincount(src, minlength=nodes).astype(np.float64)
    m = sparse.csr_matrix((1.0 / degree[src], (dst, src)), shape=(nodes, nodes))
    rank = np.full(nodes, 1.0 / nodes)
    for _ in range(iterations):
        rank = (1.0 - damping) / nodes + damping * (m @ rank)
    return rank


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = sample_parser("frames_pagerank", __doc__)
    parser.add_argument("--rmat", type=rmat_scale, metavar="SCALE",
                        help="an RMAT graph of 2**SCALE nodes (those without an edge too) "
                             "instead of the Debian graph")
    parser.add_argument("--iterations", type=positive, default=10)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--threads", type=positive, default=1)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.rmat:
        from samples.graphs import rmat_edges
        edges, nodes, what = rmat_edges(args.rmat), 1 << args.rmat, f"RMAT scale {args.rmat}"
        labels = list(range(nodes))
    else:
        from samples.debian import real_graph
        labelled, what = real_graph()
        edges, labels = numbered(labelled)
        nodes = len(labels)
    t0 = time.perf_counter()
    got = run_frames_pagerank(edges, nodes, args.iterations, args.processes, args.threads)
    took = time.perf_counter() - t0
    err = float(np.max(np.abs(got - power_iteration(edges, nodes, args.iterations))))
    print(f"PageRank by frames, {args.iterations} iterations on {what}: {nodes} nodes, "
          f"{len(edges)} edges, {args.processes} x {args.threads}: {took:.2f} s; "
          f"max diff from scipy {err:.1e}")
    top = np.argsort(-got)[:5]
    print("top:", ", ".join(f"{labels[u]} {got[u]:.5f}" for u in top))
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("frames_pagerank"))
