"""Checkpoints of the engine's own stages and of vertices that hold what cannot be pickled.

A probe (the program's handle, with its lock and its computation) used to make every
checkpoint fail, and the failure was retried ``max_restarts`` times; a vertex whose state
cannot be pickled fails once, naming the vertex and what to do.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import linq  # noqa: F401 - select, collect
import naiad
import stages
from naiad.testing import shard
from tests.test_recovery import assert_delivered_exactly_once, kill_stage, log_deliveries


def _paced(logs: Path, epochs: int, kill=None):
    """Feeds one epoch at a time, waiting on a probe for each, with a subscriber logging every
    delivery; ``kill`` is ``(marker, epoch, victim)``."""
    def program(comp):
        inp = comp.new_input(name="numbers")
        s = inp.stream if kill is None else kill_stage(inp.stream, *kill, deferred=True)
        squares = s.select(lambda x: x * x)
        probe = squares.probe()
        log_deliveries(squares, logs, comp, kill and kill[0])
        comp.activate()
        for e in range(epochs):
            inp.on_next(shard(list(range(10 * e, 10 * e + 10)), comp.process_index,
                              comp.processes))
            probe.wait(e, timeout=60)
        inp.on_completed()
        comp.join(timeout=60)
    return program


@pytest.mark.parametrize("processes", [1, 2])
def test_a_program_paced_by_a_probe_checkpoints_and_recovers(tmp_path, processes):
    logs = tmp_path / "logs"
    logs.mkdir()
    epochs = 8
    # With 2 processes, process 1 is killed at epoch 5 (one process runs in this one: no kill).
    kill = (tmp_path / "killed", 5, 1) if processes == 2 else None
    naiad.execute(_paced(logs, epochs, kill), processes=processes,
                  checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2)
    assert kill is None or (tmp_path / "killed").exists(), "the kill did not happen"
    expected = {e: sorted(x * x for x in range(10 * e, 10 * e + 10)) for e in range(epochs)}
    assert_delivered_exactly_once(logs, processes, expected)


class _HoldsALock(naiad.Vertex):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def on_recv_batch(self, edge, messages, time_):
        self.send_batch_by(0, messages, time_)


def _with_a_lock(comp):
    inp = comp.new_input(name="numbers")
    got = stages.unary(inp.stream, _HoldsALock, name="locked").collect()
    comp.activate()
    for e in range(4):
        inp.on_next([e])
    inp.on_completed()
    comp.join(timeout=60)
    return got.results


@pytest.mark.parametrize("processes", [1, 2])
def test_a_vertex_whose_state_cannot_be_pickled_fails_once_saying_what_to_do(tmp_path, processes):
    t0 = time.monotonic()
    with pytest.raises(naiad.VertexError) as err:
        naiad.execute(_with_a_lock, processes=processes, checkpoint_dir=str(tmp_path / "ck"),
                      checkpoint_every=1, max_restarts=3)
    message = str(err.value)
    assert "stage 'locked'" in message and "failed in checkpoint" in message, message
    assert "cannot be pickled" in message and "checkpoint() and restore()" in message, message
    assert time.monotonic() - t0 < 30
