"""The simulated progress protocol at scale (tests/progress_sim.py) on the samples' graphs.

Every run checks itself against the ground truth (no notification while an event could still
result in it, each exactly once, every view empty at the end); here the traffic figures are
checked against each other, and the checks are shown to catch a broken protocol.
"""

from __future__ import annotations

import pytest

from naiad.progress import ProgressBuffer, Tracker
from samples import components_vertex
from samples import main as pagerank_main
from tests.progress_sim import MODES, graph_of, simulate

GRAPHS = {
    "components": lambda: graph_of(components_vertex.components),
    "pagerank": lambda: graph_of(lambda comp, s: pagerank_main.pagerank(s, 3)),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("processes,workers,per_round", [(3, 2, None), (4, 3, 5)])
def test_every_accumulation_does_the_same_work_with_fewer_messages(name, processes, workers,
                                                                   per_round):
    graph = GRAPHS[name]()
    runs = {mode: simulate(graph, processes, workers, epochs=2, iterations=4, mode=mode,
                           per_round=per_round) for mode in MODES}
    none, worker, process = runs["none"], runs["worker"], runs["process"]
    # The same vertex callbacks and notifications run whatever is broadcast.
    assert len({(t.callbacks, t.notifications) for t in runs.values()}) == 1
    assert none.notifications > 0
    # Without accumulation, one broadcast per callback that changed a count.
    assert none.broadcasts == none.callbacks
    assert none.messages == none.broadcasts * (processes - 1) * workers
    assert worker.messages * 2 < none.messages and worker.bytes < none.bytes
    # Per process: one send to each other process instead of one to each of its workers.
    assert process.broadcasts <= worker.broadcasts
    assert process.messages * workers <= worker.messages
    assert process.bytes < worker.bytes


def test_retirements_are_held_when_a_worker_retires_behind_the_frontier():
    """With a straggler, a worker retires batches at an exchange while batches at the same time
    still wait upstream in the straggler: the engine's rule holds those retirements back."""
    graph = GRAPHS["components"]()
    held = simulate(graph, 2, 2, epochs=2, iterations=3, mode="worker", per_round=1, slow=1)
    unheld = simulate(graph, 2, 2, epochs=2, iterations=3, mode="unheld", per_round=1, slow=1)
    assert unheld.held == 0
    assert held.held > 0 and held.notifications == unheld.notifications


def test_a_single_process_sends_nothing_over_the_network():
    t = simulate(GRAPHS["components"](), 1, 4, epochs=1, iterations=3, mode="worker")
    assert t.broadcasts > 0 and t.messages == 0 and t.bytes == 0


def test_the_oracle_catches_a_view_that_allows_notifications_too_early(monkeypatch):
    # A view that ignores what precedes a pointstamp: only active counts are looked at.
    monkeypatch.setattr(Tracker, "in_frontier", lambda self, loc, time: self.is_active(loc, time))
    with pytest.raises(AssertionError, match="delivered while an event precedes it"):
        simulate(GRAPHS["pagerank"](), 2, 2, epochs=1, iterations=3, mode="worker",
                 per_round=1, max_rounds=1000)


def test_the_oracle_catches_a_buffer_that_loses_positives(monkeypatch):
    real = ProgressBuffer.drain
    monkeypatch.setattr(ProgressBuffer, "drain", lambda self, tracker, hold=True: [
        u for u in real(self, tracker, hold) if u[1] < 0])
    with pytest.raises(AssertionError, match="no quiescence"):
        simulate(GRAPHS["components"](), 2, 2, epochs=1, iterations=3, mode="worker",
                 max_rounds=200)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        simulate(GRAPHS["components"](), 1, 1, mode="sometimes")
