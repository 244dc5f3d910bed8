"""Shared arrangements: three joins and a count reading one arrangement of a graph's edges,
against the same joins and count each keeping its own copy.

The graph is the Debian package graph (the standard library's import graph where apt-cache is
missing).  Three query collections of 2,000 packages each are joined with the edges by source
(the dependencies of each package asked about), and the out-degree of every package is counted:
``private`` joins and count each key, exchange and keep the edges themselves; ``shared``
arranges the edges once (``edges.arrange(key=src)``) and the three joins and the count read
that trace.  Measured, alternated over :data:`ROUNDS` rounds at 1 process (medians),
and once at 2 processes: the initial epoch (edges and queries), the median latency of
:data:`UPDATES` epochs that each rewire 5 edges and swap 5 queried packages, and the bytes held
by all arrangements after the updates (a recursive size, shared objects counted once).  Both
forms' outputs are compared, epoch by epoch.

Run: ``python -m tests.benchmarks arrange``.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from typing import Any, Dict, List, Set

import naiad
from linq import differential as dd
from naiad.testing import shard
from samples.debian import real_graph
from linq.differential.testing import arrangements
from tests.benchmarks.bench_differential import _deep_size
from tests.benchmarks.report import table, update_section

COMMAND = "python -m tests.benchmarks arrange"
QUERIES = 2000
UPDATES = 30
ROUNDS = 3


def _bytes(comp: naiad.Computation) -> int:
    seen: Set[int] = set()
    return sum(_deep_size(tr.index, seen) for _, tr in arrangements(comp))


def _workload(edges, seed: int):
    """The three queries, and per update epoch the edge changes and each query's changes."""
    rng = random.Random(seed)
    nodes = sorted({u for e in edges for u in e})
    queries = [rng.sample(nodes, QUERIES) for _ in range(3)]
    live, asked = set(edges), [set(q) for q in queries]
    pool = [list(edges)] + [list(q) for q in queries]     # candidates for removal
    epochs = []
    for _ in range(UPDATES):
        changes: List[list] = [[], [], [], []]
        for i, now in enumerate([live] + asked):
            for _ in range(5):
                old = pool[i][rng.randrange(len(pool[i]))]
                if old in now:
                    now.discard(old)
                    changes[i].append((old, -1))
                new = (rng.choice(nodes), rng.choice(nodes)) if i == 0 else rng.choice(nodes)
                if new not in now:
                    now.add(new)
                    pool[i].append(new)
                    changes[i].append((new, 1))
        epochs.append((changes[0], changes[1:]))
    return queries, epochs


def run(edges, queries, epochs, shared: bool, processes: int) -> List[Dict[str, Any]]:
    def program(comp):
        e_in = dd.new_input(comp, name="edges")
        q_ins = [dd.new_input(comp, name=f"q{i}") for i in range(3)]
        if shared:
            by_src = e_in.collection.arrange(key=lambda e: e[0])
            outs = [q.collection.join(by_src, key=lambda n: n,
                                      result=lambda n, e, i=i: (i, n, e[1]))
                    for i, q in enumerate(q_ins)]
            outs.append(by_src.count().map(lambda kn: (3,) + kn))
        else:
            outs = [q.collection.join(e_in.collection, key=lambda n: n,
                                      other_key=lambda e: e[0],
                                      result=lambda n, e, i=i: (i, n, e[1]))
                    for i, q in enumerate(q_ins)]
            outs.append(e_in.collection.count(key=lambda e: e[0]).map(lambda kn: (3,) + kn))
        out = outs[0].concat(*outs[1:])
        got = out.collect()
        probe = out.probe()
        comp.activate()
        me, n = comp.process_index, comp.processes
        t0 = time.perf_counter()
        e_in.on_next(shard(edges, me, n))
        for q_in, q in zip(q_ins, queries):
            q_in.on_next(shard(q, me, n))
        probe.wait(0, timeout=3600)
        initial = time.perf_counter() - t0
        latencies = []
        for epoch, (e_changes, q_changes) in enumerate(epochs, start=1):
            t0 = time.perf_counter()
            e_in.update(shard(e_changes, me, n))
            for q_in, changes in zip(q_ins, q_changes):
                q_in.update(shard(changes, me, n))
            probe.wait(epoch, timeout=600)
            latencies.append(time.perf_counter() - t0)
        size = _bytes(comp)
        e_in.on_completed()
        for q_in in q_ins:
            q_in.on_completed()
        comp.join()
        return {"initial": initial, "latencies": latencies, "bytes": size,
                "results": got.results}
    return naiad.execute(program, processes=processes)


def _outputs(parts) -> Dict[int, list]:
    merged: Dict[int, list] = {}
    for p in parts:
        for e, changes in p["results"].items():
            merged.setdefault(e, []).extend(changes)
    return {e: sorted(c) for e, c in merged.items()}


def main() -> None:
    edges, what = real_graph()
    queries, epochs = _workload(edges, 3)
    load_before = os.getloadavg()[0]
    runs: Dict[bool, List[Dict[str, float]]] = {False: [], True: []}
    outputs = []
    for r in range(ROUNDS):
        for shared in (False, True):
            parts = run(edges, queries, epochs, shared, 1)
            if r == 0:
                outputs.append(_outputs(parts))
            p = parts[0]
            runs[shared].append({"initial": p["initial"],
                                 "latency": statistics.median(p["latencies"]),
                                 "bytes": p["bytes"]})
    same = outputs[0] == outputs[1]
    two = {shared: run(edges, queries, epochs, shared, 2) for shared in (False, True)}
    load_after = os.getloadavg()[0]
    rows = []

    def med(shared: bool, what: str) -> float:
        return statistics.median(x[what] for x in runs[shared])
    for label, key, unit, scale in (("initial epoch", "initial", "s", 1.0),
                                    (f"median of {UPDATES} update epochs", "latency", "ms", 1e3),
                                    ("bytes in all arrangements after the updates", "bytes",
                                     "MB", 1e-6)):
        base, mine = med(False, key), med(True, key)
        rows.append([f"private joins: {label}, 1 process, median of {ROUNDS}",
                     f"{base * scale:.2f} {unit}", "", "baseline; runs " + ", ".join(
                         f"{x[key] * scale:.2f}" for x in runs[False])])
        rows.append([f"shared arrangement: {label}, 1 process, median of {ROUNDS}",
                     f"{mine * scale:.2f} {unit}", f"{mine / base:.2f}x private",
                     "runs " + ", ".join(f"{x[key] * scale:.2f}" for x in runs[True])])
    for shared in (False, True):
        parts = two[shared]
        kind = "shared arrangement" if shared else "private joins"
        rows.append([f"{kind}: initial epoch, 2 processes",
                     f"{max(p['initial'] for p in parts):.2f} s", "", ""])
        lat = [max(p["latencies"][i] for p in parts) for i in range(UPDATES)]
        rows.append([f"{kind}: median update epoch, 2 processes",
                     f"{statistics.median(lat) * 1e3:.2f} ms", "", ""])
    two_same = _outputs(two[False]) == _outputs(two[True])
    body = (f"Graph: {what}. Three collections of {QUERIES:,} queried packages each, joined "
            "with the edges by source, and the out-degree of every package; each update epoch rewires 5 edges and swaps 5 packages "
            "of each query. Outputs of the two forms equal at every epoch: "
            f"{'yes' if same and two_same else 'NO'}. Load average (1 min) {load_before:.1f} "
            f"before, {load_after:.1f} after (2 cores).\n\n"
            + table(["what", "time / size", "ratio", "note"], rows))
    update_section("arrange", "Differential: shared arrangements against private joins and "
                   "reductions",
                   COMMAND, body)


if __name__ == "__main__":
    main()
