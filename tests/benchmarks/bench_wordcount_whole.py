"""Word count's whole run against ``Counter``, this tree and a baseline revision alternated.

The word count of ``bench_linq_speed`` (``select_many(str.split).count()`` over 50 MB of the
standard library's sources, each process reading its own byte range), timed from the
``execute()`` call to its return, starting the processes included, on 1 and 2 processes;
``Counter(chain.from_iterable(map(str.split, lines)))`` in one process is measured in the same
rounds.  With ``NAIAD_BENCH_BASELINE=<git revision>`` each round also runs that revision (a
``git archive`` export, as in ``bench_launch``), so before and after come from one run on the
same machine state.  Bytecode caches are written for both trees (``PYTHONDONTWRITEBYTECODE`` is
dropped).  Every result is checked against the Counter's.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from tests.benchmarks.bench_launch import ROOT, _export
from tests.benchmarks.report import table, update_section

ROUNDS = 7
PROCESSES = (1, 2)


def sample() -> Dict[str, float]:
    """One round in this interpreter's tree: seconds of Counter and of each naiad run."""
    from tests.benchmarks import bench_wordcount as wc
    from tests.benchmarks.bench_linq_speed import _wordcount_run
    path = wc.text_file()
    out: Dict[str, float] = {}
    out["counter"], want = wc.counter_baseline(path)
    for p in PROCESSES:
        whole, inner, got = _wordcount_run(path, p)
        assert got == want, f"{p} processes: the counts differ from Counter's"
        out[f"whole{p}"], out[f"inner{p}"] = whole, inner
    return out


def _sample_tree(tree: Path) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_wordcount_whole",
                           "--sample"], cwd=tree, env=env, capture_output=True, text=True,
                          check=True, timeout=900)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """Medians of the seconds, and the median of the per-round ratios to Counter."""
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    for p in PROCESSES:
        med[f"ratio{p}"] = statistics.median(r["counter"] / r[f"whole{p}"] for r in runs)
    return med


def main() -> None:
    baseline = os.environ.get("NAIAD_BENCH_BASELINE")
    tree = _export(baseline) if baseline else None
    if tree is not None:
        here_file = Path(__file__)
        shutil.copy(here_file, tree / "tests" / "benchmarks" / here_file.name)
    here: List[Dict[str, float]] = []
    before: List[Dict[str, float]] = []
    loads = []
    try:
        _sample_tree(ROOT)                   # the text file and the caches; not recorded
        if tree is not None:
            _sample_tree(tree)
        for _ in range(ROUNDS):
            loads.append(os.getloadavg()[0])
            here.append(_sample_tree(ROOT))
            if tree is not None:
                before.append(_sample_tree(tree))
    finally:
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    rows = []
    trees = ([(f"{baseline}", before)] if before else []) + [("this tree", here)]
    for name, runs in trees:
        m = _summary(runs)
        rows.append([name, "`Counter`, 1 process", f"{m['counter']:.2f}", "", "1.00x"])
        for p in PROCESSES:
            rows.append([name, f"LINQ, {p} process{'es' if p > 1 else ''}",
                         f"{m[f'whole{p}']:.2f}", f"{m[f'inner{p}']:.2f}",
                         f"{m[f'ratio{p}']:.2f}x"])
    body = table(["tree", "what", "seconds (whole run)", "seconds (in program)",
                  "speed vs Counter"], rows)
    body += (f"\n\nMedians of {ROUNDS} rounds{', alternated with the baseline' if before else ''}"
             f"; *speed vs Counter* is the median of the per-round ratios (each round measures "
             "Counter too). *whole run*: `execute()` call to return, starting the processes "
             "included; *in program*: the slowest process's time from building the dataflow to "
             f"`join()`, reading included. Load average (1 min) at the rounds: "
             f"{min(loads):.1f}-{max(loads):.1f} on 2 cores.")
    update_section("wordcount-whole", "Word count, whole run: Counter, this tree and a baseline",
                   (f"NAIAD_BENCH_BASELINE={baseline} " if before else "")
                   + "python -m tests.benchmarks wordcount_whole", body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--sample"]:
        print(json.dumps(sample()))
    else:
        main()
