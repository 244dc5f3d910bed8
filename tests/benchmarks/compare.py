"""Same-run comparison of two source trees on the core, exchange and barrier benchmarks.

Run from the newer tree, with the older one checked out beside it::

    git worktree add /tmp/base <older commit>
    python -m tests.benchmarks.compare /tmp/base . --rounds 7

Each round runs every benchmark in both trees, in alternating order (a noisy moment hits both),
each in a fresh interpreter importing that tree's code; the figures are the best of the rounds
(least time), printed with the ratio new/base.  The benchmarks are the functions of
:mod:`tests.benchmarks.bench_core` and :mod:`tests.benchmarks.bench_distributed`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Dict

PARTS = ("core", "exchange", "barrier")


def measure(part: str) -> Dict[str, float]:
    """One run of ``part`` in this interpreter (the tree it imports is the one measured)."""
    import naiad
    import tests.benchmarks.bench_core as core
    import tests.benchmarks.bench_distributed as dist
    if part == "core":
        epochs = core.words()
        lat, per_epoch = core.epoch_latency()
        return {"throughput 1 worker (s)": core.engine(epochs, core.CountBatch, 1)[0],
                "throughput 2 workers (s)": core.engine(epochs, core.CountBatch, 2)[0],
                "epoch latency median (us)": core._stats(lat)[0],
                "epochs back to back (us/epoch)": per_epoch * 1e6,
                "loop iteration median (us)": core._stats(core.loop_latency())[0]}
    if part == "exchange":
        runs = naiad.execute(dist._exchange_program, processes=2)
        return {"exchange, 2 processes (s)": max(r[0] for r in runs)}
    one = naiad.execute(dist._barrier_program)[0]
    two = naiad.execute(dist._barrier_program, processes=2)[0]
    return {"barrier, 1 process median (us)": statistics.median(sorted(one[10:])) * 1e6,
            "barrier, 2 processes median (us)": statistics.median(sorted(two[10:])) * 1e6}


def run_in(tree: str, part: str) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    env.pop("NAIAD_DEBUG_PROGRESS", None)
    # This file measures; the tree on PYTHONPATH (and the cwd) supplies naiad and the benchmarks.
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", part],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        msg = f"{part} in {tree} failed:\n{out.stderr[-2000:]}"
        raise RuntimeError(msg)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(prog="compare")
    parser.add_argument("base", nargs="?")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--measure", choices=PARTS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    best: Dict[str, Dict[str, float]] = {}
    for r in range(args.rounds):
        order = [("base", args.base), ("new", args.new)]
        if r % 2:
            order.reverse()
        for part in PARTS:
            for label, tree in order:
                for key, value in run_in(tree, part).items():
                    slot = best.setdefault(key, {})
                    slot[label] = min(slot.get(label, value), value)
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print("| benchmark | base | new | new / base |\n|---|---|---|---|")
    for key, slot in best.items():
        print(f"| {key} | {slot['base']:.4g} | {slot['new']:.4g} | "
              f"{slot['new'] / slot['base']:.3f} |")


if __name__ == "__main__":
    main()
