"""Progress traffic at 64 processes x 8 workers, simulated with the real protocol (no sockets).

The logical graphs are the ones the samples build (connected components from
samples/components_vertex.py, PageRank from samples/main.py); tests/progress_sim.py expands them
over the simulated workers and runs the real Tracker and ProgressBuffer.
"""

from __future__ import annotations

import time

from samples import components_vertex
from samples import main as pagerank_main
from tests.benchmarks.report import table, update_section
from tests.progress_sim import MODES, graph_of, simulate

PROCESSES, WORKERS, EPOCHS = 64, 8, 2
PER_ROUND = 64
SHAPES = {
    "components": (lambda: graph_of(components_vertex.components), 5),
    "PageRank": (lambda: graph_of(lambda comp, s: pagerank_main.pagerank(s, 5)), 8),
}
LABELS = {
    "none": "none: every callback broadcasts",
    "unheld": "per worker, per round",
    "worker": "per worker, retirements held (the engine)",
    "process": "per process (Naiad)",
}


SLOW = PROCESSES * WORKERS // 8
SCHEDULES = {"in step": 0, "1 in 8 workers slow": SLOW}


def main() -> None:
    rows = []
    for name, (build, iterations) in SHAPES.items():
        graph = build()
        for schedule, slow in SCHEDULES.items():
            base = None
            for mode in MODES:
                t0 = time.perf_counter()
                t = simulate(graph, PROCESSES, WORKERS, epochs=EPOCHS, iterations=iterations,
                             mode=mode, per_round=PER_ROUND, slow=slow)
                secs = time.perf_counter() - t0
                if base is None:
                    base = t
                rows.append(_row(name, schedule, mode, t, base, secs))
                print(rows[-1], flush=True)
    body = table(["dataflow", "workers", "accumulation", "broadcasts / epoch",
                  "messages / epoch", "MB / epoch", "fewer messages", "fewer bytes",
                  "drains that held", "sim. seconds"], rows)
    body += TEXT.format(P=PROCESSES, W=WORKERS, PW=PROCESSES * WORKERS, E=EPOCHS,
                        R=PER_ROUND, RW=(PROCESSES - 1) * WORKERS, RP=PROCESSES - 1,
                        SLOW=SLOW, WW=WORKERS * WORKERS)
    update_section("progress-scale", "Progress traffic at 64 processes x 8 workers (simulated)",
                   "python -m tests.benchmarks progress_scale", body)


def _row(name, schedule, mode, t, base, secs) -> list:
    return [name, schedule, LABELS[mode], f"{t.broadcasts // EPOCHS:,}",
            f"{t.messages // EPOCHS:,}", f"{t.bytes // EPOCHS / 1e6:,.1f}",
            f"{base.messages / t.messages:,.0f}x", f"{base.bytes / t.bytes:,.0f}x",
            f"{t.held:,}", f"{secs:.1f}"]


TEXT = """

{P} simulated processes x {W} workers ({PW} workers), {E} epochs, components with 5 loop
iterations and PageRank with 8 (the sample's 3 set-up steps and 5 rank steps), on the logical
graphs the samples build. The simulation (tests/progress_sim.py) runs the real `Tracker` and
`ProgressBuffer` in synchronous rounds: every exchange carries a batch from every worker to
every worker, a worker handles at most {R} batches per round, and every broadcast of a round
reaches every view before the next. *In step*: every worker acts in every round; *1 in 8
workers slow*: the first {SLOW} workers act only every other round. A *message* is one network
send: a worker's broadcast goes to each of the {RW} remote workers, a process's to each of the
{RP} other processes. Bytes are the pickled update lists.

The paper (§3.3.2) reports that accumulation cuts progress traffic by one to two orders of
magnitude. Accumulating per worker, as the engine does, cuts messages and bytes by the factors
in the *fewer* columns, within that range: without it every one of the {PW} batches a worker
receives at an exchange is a broadcast of its own. Holding retirements back (the engine's rule:
a retirement waits while another pointstamp of the frontier precedes it) never applies when
the workers are in step (*drains that held* is 0: nothing upstream of an exchange is still
active when its batches are retired); with stragglers it does, and cuts messages further
(compare the two per-worker rows of the slow schedule: retirements made while a straggler still
holds batches upstream are merged into one later broadcast instead of one per round). What
remains is that each worker broadcasts on its own: accumulating per process, as Naiad does,
sends {W} times fewer updates and {WW} times fewer network messages (one to each remote
process, not to each of its workers). The engine does not do that yet; it needs a
process-level buffer shared by a process's workers in naiad/worker.py. The simulation bounds
real batching from above: real batches arrive spread over time, and a real worker broadcasts
whenever its queue runs dry.
"""


if __name__ == "__main__":
    main()
