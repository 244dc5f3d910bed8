"""Declarative queries against plain Python: word count, PageRank and components, 2 processes.

Same-run ratios, medians of ``REPEAT`` runs each (for PageRank and components, the baseline
and the forms run in turn, ``REPEAT`` rounds):

* word count over 50 MB of the standard library's sources (``bench_wordcount``'s text and
  reader): ``select_many(str.split).count()`` on 1 and 2 processes, whole run (starting
  processes included), against ``Counter(chain.from_iterable(map(str.split, lines)))`` in one
  process;
* PageRank, 10 iterations, on the real Debian package graph (``samples.debian.real_graph()``;
  WordNet is not available offline) and on RMAT scale 16: the loop-invariant form with
  ``spread`` (``pagerank_spread``, 1 and 2 processes) and with join + select_many +
  aggregate (``pagerank_invariant``), and the Hadoop form (``pagerank``, combiner on),
  2 processes, against ``power_iteration`` (dicts) in one process;
* connected components by label propagation on the Debian graph with invariant edges
  (``components_spread`` and ``components_invariant``, 1 and 2 processes) and in the Hadoop
  form, against ``label_propagation`` (dicts), the same number of rounds.

Every result is checked against its baseline.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import naiad
from naiad.testing import shard
from samples.components import (components, components_invariant, components_spread,
                                label_propagation, undirected_records)
from samples.debian import real_graph
from samples.graphs import adjacency, rmat_edges
from samples.pagerank import pagerank, pagerank_invariant, pagerank_spread, power_iteration
from tests.benchmarks import bench_wordcount as wc
from tests.benchmarks.report import table, update_section

REPEAT = 3
ITERATIONS = 10
PROCESSES = 2
RMAT_SCALE = 16
CC_ROUNDS = 10


def _median(runs):
    """The run of median seconds among ``runs`` (tuples whose first item is seconds)."""
    runs = sorted(runs, key=lambda r: r[0])
    return runs[len(runs) // 2]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# ---- word count ------------------------------------------------------------------------------
def wordcount_rows():
    path = wc.text_file()
    base, want = _median([wc.counter_baseline(path) for _ in range(REPEAT)])
    rows = [["word count: `Counter` over all words", "1", f"{base:.2f}", "", "1.00x", "baseline"]]
    for p in (1, PROCESSES):
        whole, inner, got = _median([_wordcount_run(path, p) for _ in range(REPEAT)])
        rows.append([f"word count: LINQ `select_many(str.split).count()`", f"{p}",
                     f"{whole:.2f}", f"{inner:.2f}", f"{base / whole:.2f}x",
                     "equal" if got == want else "DIFFERENT"])
    return rows


def _wordcount_run(path, processes):
    """``naiad.execute`` timed alone (the Counter baseline is not timed building a dict
    either); the per-process ``(word, n)`` lists are merged for the check afterwards."""
    whole, parts = _timed(lambda: naiad.execute(wc._naiad_program(str(path)),
                                                processes=processes))
    counts = Counter()
    for _, pairs in parts:
        counts.update(dict(pairs))
    return whole, max(p[0] for p in parts), counts


# ---- PageRank --------------------------------------------------------------------------------
def _pagerank_program(edges, nodes, form):
    def program(comp):
        names, adj = adjacency(edges, nodes=nodes)
        inp = comp.new_input(name="graph")
        build = {"spread": pagerank_spread, "invariant": pagerank_invariant,
                 "hadoop": pagerank}[form]
        got = build(inp.stream, len(names), ITERATIONS).collect()
        comp.activate()
        t0 = time.perf_counter()
        inp.on_next([(u, adj[u]) for u in shard(names, comp.process_index, comp.processes)])
        inp.on_completed()
        comp.join()
        return time.perf_counter() - t0, got.results.get(0, [])
    return program


def _pagerank_run(edges, nodes, form, processes):
    whole, parts = _timed(lambda: naiad.execute(_pagerank_program(edges, nodes, form),
                                                processes=processes))
    compute = max(p[0] for p in parts)
    return compute, whole, {u: r for p in parts for u, r in p[1]}


def pagerank_rows(name, edges, nodes=None):
    """Rounds of the baseline and every form in turn (``REPEAT`` of them), medians of each."""
    _, adj = adjacency(edges, nodes=nodes)
    forms = (("spread", 1), ("spread", PROCESSES), ("invariant", PROCESSES),
             ("hadoop", PROCESSES))
    bases, runs = [], {f: [] for f in forms}
    for _ in range(REPEAT):
        bases.append(_timed(lambda: power_iteration(adj, ITERATIONS)))
        for form, p in forms:
            runs[form, p].append(_pagerank_run(edges, nodes, form, p))
    base, want = _median(bases)
    rows = [[f"PageRank {name}: dicts (`power_iteration`)", "1", f"{base:.2f}", "", "1.00x",
             "baseline"]]
    for form, p in forms:
        compute, whole, got = _median(runs[form, p])
        err = max(abs(got[u] - want[u]) for u in want)
        what = {"spread": "invariant form, `spread`", "invariant": "invariant form, join",
                "hadoop": "Hadoop form"}[form]
        rows.append([f"PageRank {name}: LINQ, {what}", f"{p}", f"{whole:.2f}",
                     f"{compute:.2f}", f"{base / compute:.2f}x", f"max diff {err:.1e}"])
    return rows


# ---- components ------------------------------------------------------------------------------
def _cc_program(records, form):
    def program(comp):
        inp = comp.new_input(name="graph")
        build = {"spread": components_spread, "invariant": components_invariant,
                 "hadoop": components}[form]
        got = build(inp.stream, CC_ROUNDS).collect()
        comp.activate()
        t0 = time.perf_counter()
        inp.on_next(shard(records, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join()
        return time.perf_counter() - t0, got.results.get(0, [])
    return program


def components_rows(name, edges):
    """Rounds of the baseline and every form in turn (``REPEAT`` of them), medians of each."""
    records = undirected_records(edges)
    forms = (("spread", 1), ("spread", PROCESSES), ("invariant", 1),
             ("invariant", PROCESSES), ("hadoop", PROCESSES))
    bases, runs = [], {f: [] for f in forms}
    for _ in range(REPEAT):
        bases.append(_timed(lambda: label_propagation(records, CC_ROUNDS)))
        for form, p in forms:
            whole, parts = _timed(lambda: naiad.execute(_cc_program(records, form),
                                                        processes=p))
            runs[form, p].append((max(q[0] for q in parts), whole,
                                  dict(x for q in parts for x in q[1])))
    base, want = _median(bases)
    rows = [[f"components {name}: dicts (`label_propagation`)", "1", f"{base:.2f}", "",
             "1.00x", "baseline"]]
    for form, p in forms:
        compute, whole, got = _median(runs[form, p])
        what = {"spread": "invariant edges, `spread`", "invariant": "invariant edges, join",
                "hadoop": "Hadoop form"}[form]
        rows.append([f"components {name}: LINQ, {what}", f"{p}", f"{whole:.2f}",
                     f"{compute:.2f}", f"{base / compute:.2f}x",
                     "equal" if got == want else "DIFFERENT"])
    return rows


def main() -> None:
    load_before = os.getloadavg()[0]
    debian, description = real_graph()
    rows = wordcount_rows()
    rows += pagerank_rows("Debian", debian)
    rows += pagerank_rows(f"RMAT {RMAT_SCALE}", rmat_edges(RMAT_SCALE, seed=1),
                          nodes=range(1 << RMAT_SCALE))
    rows += components_rows("Debian", debian)
    body = table(["what", "processes", "seconds (whole run)", "seconds (computation)",
                  "speed vs baseline", "result"], rows)
    body += (f"\n\nMedians of {REPEAT} runs, one worker per process. Word count's ratio is on "
             "the whole run (starting processes included); PageRank's and components' on the "
             "computation (first `on_next` to `join()` in the slowest process), the baseline "
             f"being the dict loop alone. PageRank: {ITERATIONS} iterations; components: "
             f"{CC_ROUNDS} rounds. Real graph: {description} (WordNet is not available "
             f"offline). RMAT scale {RMAT_SCALE}: {1 << RMAT_SCALE:,} nodes, "
             f"{16 << RMAT_SCALE:,} edges. Load average (1 min) on 2 cores: {load_before:.1f} "
             f"before the runs, {os.getloadavg()[0]:.1f} after.")
    update_section("linq_speed", "LINQ against plain Python: word count, PageRank, components",
                   "python -m tests.benchmarks linq_speed", body)


if __name__ == "__main__":
    main()
