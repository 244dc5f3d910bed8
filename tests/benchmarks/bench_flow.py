"""Flow control: memory when a producer outruns a consumer, and what the bound costs when not.

* memory: process 0 feeds 100 epochs of 1 MB (1,000 records of 1 KB) as fast as it can; every
  record goes to a vertex in process 1 that takes 20 ms per epoch.  Peak RSS of each process
  (``ru_maxrss``) without a bound and with ``max_epochs_in_flight`` = 64 and 16 (the default),
  against a baseline: the same program fed 2 epochs.  Goal: every process under baseline +
  80 MB.
* one epoch: process 0 feeds one epoch of 200,000 records of 1 KB (about 200 MB) into a vertex
  of process 1 that takes 5 ms per batch (about 1 s in all), against a baseline of 1,000
  records.  Goal: the receiver under its baseline + 40 MB (the bound on what the queues and its
  pending batches hold: about 16 + 8 + 4 MB), the sender under its baseline + the epoch it
  built and keeps + 40 MB.
* balanced: 2 processes count 2,000,000 words in 200 epochs (an exchange, no slow stage), best
  of 5 interleaved, without a bound and with the default.  Goal: at most 5% slower.

Run: ``python -m tests.benchmarks flow``.
"""

from __future__ import annotations

import resource
import time
from typing import Dict, List, Optional

import naiad
import stages
from tests.benchmarks import bench_core
from tests.benchmarks.report import table, update_section

COMMAND = "python -m tests.benchmarks flow"
PER_EPOCH = 1000          # records of 1 KB, all different (pickle would share equal objects)


class Slow(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time_):
        if time_ not in self.seen:
            self.seen.add(time_)
            self.notify_at(time_)

    def __init__(self):
        super().__init__()
        self.seen = set()

    def on_notify(self, time_):
        time.sleep(0.02)
        self.seen.discard(time_)


def _memory_program(epochs: int):
    def program(comp):
        inp = comp.new_input(name="blobs")
        stages.sink(inp.stream, Slow, partition_by=lambda r: 1, name="slow")
        comp.activate()
        for e in range(epochs):
            blobs = [bytes([e % 256, i % 256]) * 512 for i in range(PER_EPOCH)]
            inp.on_next(blobs if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join()
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024    # MB
    return program


def memory() -> List[list]:
    rows = []
    base = naiad.execute(_memory_program(2), processes=2, workers=1)
    rows.append(["baseline: 2 epochs", f"{base[0]:.0f}", f"{base[1]:.0f}", ""])
    for bound in (None, 64, 16):
        t0 = time.perf_counter()
        peak = naiad.execute(_memory_program(100), processes=2, workers=1,
                             max_epochs_in_flight=bound)
        took = time.perf_counter() - t0
        over = max(p - b for p, b in zip(peak, base))
        rows.append([f"100 epochs, max_epochs_in_flight={bound}", f"{peak[0]:.0f}",
                     f"{peak[1]:.0f}", f"+{over:.0f} MB ({took:.1f} s)"])
    return rows


class SlowBatches(naiad.Vertex):
    """5 ms per batch; counts the records and their bytes."""

    def __init__(self):
        super().__init__()
        self.got = [0, 0]

    def on_recv_batch(self, edge, messages, time_):
        time.sleep(0.005)
        self.got[0] += len(messages)
        self.got[1] += sum(map(len, messages))


def _one_epoch_program(records: int, size: int = 1024):
    def program(comp):
        inp = comp.new_input(name="blobs")
        got: list = []
        stages.sink(inp.stream, lambda: _keep(got), partition_by=lambda r: 1, name="slow")
        comp.activate()
        t0 = time.perf_counter()
        if comp.process_index == 0:
            inp.on_next([i.to_bytes(4, "big") * (size // 4) for i in range(records)])
        else:
            inp.on_next([])
        inp.on_completed()
        comp.join()
        took = time.perf_counter() - t0
        total = [sum(g.got[0] for g in got), sum(g.got[1] for g in got)]
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, took, total
    return program


def _keep(into: list) -> "SlowBatches":
    v = SlowBatches()
    into.append(v)
    return v


def one_epoch() -> List[list]:
    base = naiad.execute(_one_epoch_program(1000), processes=2, workers=1)
    rows = [["baseline: 1,000 records", f"{base[0][0]:.0f}", f"{base[1][0]:.0f}", "", ""]]
    took = []
    for size, what in ((1024, "1 KB"), (64 * 1024, "64 KB")):
        n = 200_000 * 1024 // size
        big = naiad.execute(_one_epoch_program(n, size), processes=2, workers=1)
        assert sum(r[2][0] for r in big) == n and sum(r[2][1] for r in big) == n * size
        epoch_mb = n * (size + 33 + 8) / 2**20
        rows.append([f"one epoch of {n:,} records of {what}", f"{big[0][0]:.0f}",
                     f"{big[1][0]:.0f}",
                     f"+{big[0][0] - base[0][0]:.0f} MB (epoch itself: {epoch_mb:.0f} MB)",
                     f"+{big[1][0] - base[1][0]:.0f} MB"])
        took.append(f"{max(r[1] for r in big):.1f}")
    rows.append(["seconds (slowest process)", " and ".join(took), "", "", ""])
    return rows


def _count_program(epochs: List[List[str]]):
    def program(comp):
        inp = comp.new_input()
        counted = stages.unary(inp.stream, bench_core.CountBatch, partition_by=lambda w: w)
        stages.sink(counted, bench_core.Tally)
        comp.activate()
        t0 = time.perf_counter()
        for batch in epochs:
            inp.on_next(batch[comp.process_index::comp.processes])
        inp.on_completed()
        comp.join()
        return time.perf_counter() - t0
    return program


def balanced(repeat: int = 7) -> List[list]:
    words = bench_core.words()
    epochs = [w for batch in words for w in (batch[:5000], batch[5000:])] * 2   # 400 x 5,000
    best: Dict[Optional[int], float] = {}
    for _ in range(repeat):
        for bound in (None, 16):
            t = max(naiad.execute(_count_program(epochs), processes=2, workers=1,
                                  max_epochs_in_flight=bound))
            best[bound] = min(best.get(bound, t), t)
    return [["no bound", f"{best[None]:.3f}", "1.00x"],
            ["max_epochs_in_flight=16 (the default)", f"{best[16]:.3f}",
             f"{best[16] / best[None]:.2f}x"]]


def main() -> None:
    mem = memory()
    one = one_epoch()
    bal = balanced()
    body = (table(["run", "process 0 peak MB", "process 1 peak MB", "over baseline (time)"], mem)
            + "\n\nA producer (process 0) feeds 100 epochs of 1 MB into a vertex of process 1 "
            "that takes 20 ms per epoch. Goal: every process under its baseline + 80 MB.\n\n"
            + table(["within one epoch", "process 0 peak MB", "process 1 peak MB",
                     "process 0 over baseline", "process 1 over baseline"], one)
            + "\n\nProcess 0 feeds one epoch of about 200 MB (records of 1 KB, then of 64 KB) "
            "into a vertex of process 1 that takes 5 ms per batch (about 1 MB). Goal: process 1 under its baseline + 40 MB, "
            "process 0 under its baseline + the epoch it built (and keeps) + 40 MB.\n\n"
            + table(["balanced: 2 processes, 2,000,000 words in 400 epochs", "seconds",
                     "vs no bound"], bal)
            + "\n\nBest of 7, interleaved. Goal: the bound costs at most 5% when the pipeline "
            "keeps up.")
    update_section("flow", "Flow control: memory of an outrun consumer, cost when balanced",
                   COMMAND, body)


if __name__ == "__main__":
    main()
