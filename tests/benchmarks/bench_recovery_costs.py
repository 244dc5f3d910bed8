"""Where recovery's time goes: the word count of ``bench_recovery`` (200 x 500 lines), CPU by thread.

Policies alternate in one run, ``ROUNDS`` runs each, medians shown: no checkpoint directory;
a directory but no boundary ever reached (``checkpoint_every=10**9``: the input log and the
delivery marks alone, what recovery costs per epoch); a checkpoint every 10 epochs; the same
with ``os.fsync`` made a no-op in the processes (an ablation: what the fsyncs cost, not a
setting); and a checkpoint every 0.25 s.  For each: the time to feed and drain the epochs (the
slower process), the CPU both processes used, and the CPU of each thread of a process, summed
over both processes: the feeding (main) thread, the worker, the subscriber's thread, the
checkpoint writer, the control plane's thread.  Printed, not written into benchmarks.md: the
section "What recovery costs, item by item" there quotes a run of it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import naiad
import stages
from samples.wordcount_vertex import count_words
from tests.benchmarks.bench_recovery import RunningTotal, _lines

EPOCHS, LINES = 200, 500
ROUNDS = 9
POLICIES: Dict[str, Dict[str, Any]] = {
    "none": {},
    "log only": {"checkpoint_every": 10 ** 9},
    "every 10": {"checkpoint_every": 10},
    "every 10, no fsync": {"checkpoint_every": 10, "no_fsync": True},
    "every 0.25 s": {"checkpoint_interval": 0.25},
}


def _program(no_fsync: bool):
    def program(comp) -> Dict[str, Any]:
        if no_fsync:
            os.fsync = lambda fd: None           # the ablation, in this process only
        cpu: Dict[str, float] = {}
        run = threading.Thread.run

        def timed_run(thread):                   # each thread's CPU, noted as it ends
            try:
                run(thread)
            finally:
                name = thread.name.rsplit("-", 1)[0] if thread.name[-1].isdigit() else thread.name
                cpu[name] = cpu.get(name, 0.0) + time.thread_time()
        threading.Thread.run = timed_run         # type: ignore[method-assign]
        lines = _lines(EPOCHS * LINES)
        mine = [lines[e * LINES:(e + 1) * LINES][comp.process_index::comp.processes]
                for e in range(EPOCHS)]
        inp = comp.new_input(name="lines")
        totals = stages.unary(count_words(comp, inp.stream), RunningTotal,
                              partition_by=lambda wc: wc[0], name="totals")
        totals.subscribe(lambda e, recs: None)
        comp.activate()
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        for records in mine:
            inp.on_next(records)
        inp.on_completed()
        comp.join()
        cpu["main"] = time.thread_time() - m0
        threading.Thread.run = run               # type: ignore[method-assign]
        return {"elapsed": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                "threads": cpu, "taken": len(comp.checkpoint_stats)}
    return program


def _run(root: Path, policy: Dict[str, Any]) -> Dict[str, Any]:
    options = dict(policy)
    no_fsync = bool(options.pop("no_fsync", False))
    if options:
        shutil.rmtree(root / "ckpt", ignore_errors=True)
        options["checkpoint_dir"] = str(root / "ckpt")
    parts = naiad.execute(_program(no_fsync), processes=2, **options)
    threads: Dict[str, float] = {}
    for p in parts:
        for name, t in p["threads"].items():
            threads[name] = threads.get(name, 0.0) + t
    return {"elapsed": max(p["elapsed"] for p in parts), "cpu": sum(p["cpu"] for p in parts),
            "threads": threads, "taken": parts[0]["taken"]}


def measure(rounds: int = ROUNDS) -> Dict[str, List[Dict[str, Any]]]:
    """``rounds`` runs of every policy, alternated: policy name -> runs."""
    root = Path(tempfile.mkdtemp(prefix="naiad-bench-recovery-costs-"))
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in POLICIES}
    try:
        for _ in range(rounds):
            for name, policy in POLICIES.items():
                runs[name].append(_run(root, policy))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return runs


def report(runs: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """One line per policy: medians of time, ratio to "none" (per round), CPU, CPU by thread."""
    med = statistics.median
    base = runs["none"]
    lines = []
    for name, rs in runs.items():
        ratio = med(r["elapsed"] / b["elapsed"] - 1 for r, b in zip(rs, base)) * 100
        names = sorted({n for r in rs for n in r["threads"]})
        threads = ", ".join(f"{n.replace('naiad-', '')} "
                            f"{med(r['threads'].get(n, 0.0) for r in rs) * 1e3:.0f}"
                            for n in names)
        lines.append(f"{name:>20}: {med(r['elapsed'] for r in rs):.3f} s ({ratio:+.1f}%), "
                     f"{med(r['taken'] for r in rs):.0f} checkpoints, CPU "
                     f"{med(r['cpu'] for r in rs):.3f} s (ms: {threads})")
    return lines


def main() -> None:
    load = os.getloadavg()
    runs = measure()
    print(f"{EPOCHS} x {LINES} lines, 2 processes x 1 worker, {ROUNDS} rounds; load "
          f"{load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print("\n".join(report(runs)))


if __name__ == "__main__":
    main()
