"""What seeing a computation costs: the core benchmark with the trace on, and with the monitor on.

Each workload runs with neither (the baseline), with ``trace=DIR`` and with ``monitor=0``
(the page served in this process, reports twice a second), interleaved, best of 5:

* throughput: bench_core's 1,000,000 words through a partitioned counting stage, 1 and 2
  workers (goal: trace at most 10% slower, monitor at most 5%);
* empty epochs: 3,000 empty epochs back to back through 3 notified stages (bench_core's
  epoch benchmark), where the per-event costs are largest relative to the work.

Run: ``python -m tests.benchmarks observability``.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from queue import SimpleQueue
from typing import Callable, Dict, List

import naiad
from tests.benchmarks import bench_core
from tests.benchmarks.report import table, timed, update_section

COMMAND = "python -m tests.benchmarks observability"
MODES = ["off", "trace", "monitor"]


def _options(mode: str, tmp: str) -> Dict[str, object]:
    if mode == "trace":
        return {"trace": tmp}
    if mode == "monitor":
        return {"monitor": 0}
    return {}


def _with(mode: str, tmp: str, fn: Callable[[], float]) -> float:
    saved = dict(bench_core.OPTIONS)
    bench_core.OPTIONS.update(_options(mode, tmp))
    try:
        return fn()
    finally:
        bench_core.OPTIONS.clear()
        bench_core.OPTIONS.update(saved)


def _throughput(epochs: List[List[str]], workers: int, expected: int) -> float:
    seconds, n = bench_core.engine(epochs, bench_core.CountBatch, workers)
    assert n == expected, (n, expected)
    return seconds


def _empty_epochs() -> float:
    program = bench_core._epoch_program(bench_core.EPOCHS, SimpleQueue(), True)
    return timed(lambda: naiad.execute(program, **bench_core.OPTIONS))


def main(repeat: int = 9) -> None:
    epochs = bench_core.words()
    expected = bench_core.plain(epochs)
    workloads = {
        "throughput, 1 worker": lambda: _throughput(epochs, 1, expected),
        "throughput, 2 workers": lambda: _throughput(epochs, 2, expected),
        f"{bench_core.EPOCHS:,} empty epochs, 3 notified stages": _empty_epochs,
    }
    best: Dict[tuple, float] = {}
    tmp = tempfile.mkdtemp(prefix="naiad-bench-trace-")
    try:
        for _ in range(repeat):
            for name, run in workloads.items():
                for mode in MODES:
                    gc.collect()
                    t = _with(mode, tmp, run)
                    best[name, mode] = min(best.get((name, mode), t), t)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for name in workloads:
        base = best[name, "off"]
        rows.append([name, f"{base:.3f}",
                     f"{best[name, 'trace']:.3f} ({best[name, 'trace'] / base - 1:+.1%})",
                     f"{best[name, 'monitor']:.3f} ({best[name, 'monitor'] / base - 1:+.1%})"])
    body = (table(["workload", "off (s)", "trace=DIR (s)", "monitor=0 (s)"], rows) + "\n\n"
            "Seconds, best of 9, interleaved; in brackets the cost against `off` in the same run. "
            "Goals: the trace costs at most 10% on the core throughput benchmark, the monitor "
            "at most 5%. With neither, the workers hold no meter at all.")
    update_section("observability", "The cost of the trace and the monitor", COMMAND, body)


if __name__ == "__main__":
    main()
