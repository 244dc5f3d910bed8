"""PageRank, 10 iterations, on a Graph500 RMAT graph of scale 16: LINQ against plain dicts.

The graph: 2**16 nodes and 16 * 2**16 = 1,048,576 directed edges from the seeded RMAT generator
of ``samples.graphs`` (a=0.57, b=0.19, c=0.19, labels permuted, duplicates kept).  The LINQ
program is ``samples.pagerank`` (the Hadoop form: each node's adjacency is carried through the
iterations), with and without its combiner; the baseline is
``samples.pagerank.power_iteration``, the same computation with dicts in one process.
"""

from __future__ import annotations

import time

import naiad
from samples.graphs import adjacency, rmat_edges
from samples.pagerank import pagerank, power_iteration
from naiad.testing import shard
from tests.benchmarks.report import table, update_section

SCALE = 16
ITERATIONS = 10
SEED = 1


def _program(scale: int, iterations: int, combiner: bool):
    def program(comp):
        t_build = time.perf_counter()
        edges = rmat_edges(scale, seed=SEED)           # every process makes the same graph
        nodes, adj = adjacency(edges, nodes=range(1 << scale))
        inp = comp.new_input(name="graph")
        got = pagerank(inp.stream, len(nodes), iterations, combiner=combiner).collect()
        comp.activate()
        t0 = time.perf_counter()
        inp.on_next([(u, adj[u]) for u in shard(nodes, comp.process_index, comp.processes)])
        inp.on_completed()
        comp.join()
        t1 = time.perf_counter()
        return t1 - t0, t0 - t_build, got.results.get(0, [])
    return program


def _vertex_program(scale: int, iterations: int):
    """The same computation with the hand-written PageRank vertex of samples/main.py (adjacency
    kept in the vertex across iterations, shares summed per destination with numpy)."""
    def program(comp):
        from samples.main import pagerank as vertex_pagerank
        edges = rmat_edges(scale, seed=SEED)
        inp = comp.new_input(name="edges")
        got = vertex_pagerank(inp.stream, iterations).collect()
        comp.activate()
        t0 = time.perf_counter()
        inp.on_next(shard(edges, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join()
        return time.perf_counter() - t0, 0.0, got.results.get(0, [])
    return program


def naiad_run(processes: int, workers: int = 1, combiner: bool = True, vertex: bool = False):
    t0 = time.perf_counter()
    program = (_vertex_program(SCALE, ITERATIONS) if vertex
               else _program(SCALE, ITERATIONS, combiner))
    parts = naiad.execute(program, processes=processes, workers=workers)
    whole = time.perf_counter() - t0
    ranks = {u: r for part in parts for u, r in part[2]}
    return whole, max(p[0] for p in parts), ranks


def main() -> None:
    edges = rmat_edges(SCALE, seed=SEED)
    nodes, adj = adjacency(edges, nodes=range(1 << SCALE))
    t0 = time.perf_counter()
    want = power_iteration(adj, ITERATIONS)
    base_s = time.perf_counter() - t0
    rows = [["plain Python dicts (`power_iteration`)", "1 x 1", f"{base_s:.2f}", f"{base_s:.2f}",
             "1.00x", "(baseline)"]]
    for combiner, label in ((True, "`select_many` + `aggregate` (combiner) + `cogroup_by`"),
                            (False, "`select_many` + `group_by` (no combiner)")):
        for processes, workers in ((1, 1), (2, 1)):
            whole, compute, got = naiad_run(processes, workers, combiner)
            err = max(abs(got[u] - want[u]) for u in want)
            rows.append([f"naiad LINQ, iterate over {label}", f"{processes} x {workers}",
                         f"{whole:.2f}", f"{compute:.2f}", f"{base_s / compute:.2f}x",
                         f"max diff {err:.1e}"])
    # An edge list carries no isolated nodes: compare with the dict power iteration over the
    # nodes that appear in edges.
    _, edge_adj = adjacency(edges)
    want_edges = power_iteration(edge_adj, ITERATIONS)
    for processes in (1, 2):
        whole, compute, got = naiad_run(processes, vertex=True)
        err = max(abs(got.get(u, 0.0) - want_edges[u]) for u in want_edges)
        rows.append(["naiad, hand-written PageRank vertex (samples/main.py)", f"{processes} x 1",
                     f"{whole:.2f}", f"{compute:.2f}", f"{base_s / compute:.2f}x",
                     f"max diff {err:.1e}"])
    body = table(["implementation", "processes x workers", "seconds (whole run)",
                  "seconds (iterations)", "speed vs dicts", "ranks"], rows)
    body += (f"\n\nRMAT scale {SCALE}: {len(nodes):,} nodes, {len(edges):,} edges, "
             f"{ITERATIONS} iterations. *seconds (iterations)* is from the first `on_next` to "
             "`join()` in the slowest process (the graph generation, which every process "
             "repeats, is excluded); *whole run* includes it and starting processes. The "
             "dict baseline's figure is the power iteration alone. The hand-written vertex reads the "
             "edge list, which has no isolated nodes, so its ranks are checked against the dict "
             "power iteration over the nodes that occur in edges.")
    update_section("pagerank", "PageRank, RMAT scale 16, 10 iterations: LINQ vs dicts",
                   "python -m tests.benchmarks pagerank", body)


if __name__ == "__main__":
    main()
