"""``comp.checkpoint()``, the checkpoint a program asks for: durable in every process when it
returns, and refused where no consistent cut exists (an input already completed past it)."""

from __future__ import annotations

import pytest

import linq  # noqa: F401 - the fluent methods
import naiad
from naiad.errors import CheckpointMisaligned
from naiad.recovery.store import list_checkpoints


def _committed_on_return(root: str):
    def program(comp):
        inp = comp.new_input(name="a")
        inp.stream.select(lambda x: x + 1).count().collect()
        comp.activate()
        seen = []
        for e in range(10):
            if e in (3, 6, 9):
                comp.checkpoint()
                seen.append((e, list_checkpoints(root)))
            inp.on_next([e, comp.process_index])
        inp.on_completed()
        comp.join(timeout=60)
        return seen
    return program


@pytest.mark.parametrize("processes", [2, 3])
def test_an_on_demand_checkpoint_is_committed_when_it_returns_in_every_process(tmp_path,
                                                                               processes):
    """Processes other than 0 returned once their own part was written, before process 0's
    commit record: a program told "durable" could find no checkpoint at all."""
    for trial in range(2):
        root = str(tmp_path / f"ckpt{trial}")
        parts = naiad.execute(_committed_on_return(root), processes=processes,
                              checkpoint_dir=root)
        for p, seen in enumerate(parts):
            assert [e for e, _ in seen] == [3, 6, 9]
            for e, committed in seen:
                assert e in committed, (trial, p, e, committed)


def _closed_then_checkpoint(comp):
    """Input b fed all its epochs and completed, then input a checkpointed at its epoch 3."""
    a, b = comp.new_input(name="a"), comp.new_input(name="b")
    got = a.stream.concat(b.stream).collect()
    comp.activate()
    for e in range(8):
        b.on_next([1000 + e] if comp.process_index == 0 else [])
    b.on_completed()
    for e in range(8):
        if e == 3:
            comp.checkpoint()
        a.on_next([e * 10 + comp.process_index])
    a.on_completed()
    comp.join(timeout=60)
    return got.results


@pytest.mark.parametrize("processes", [1, 2])
def test_an_on_demand_checkpoint_behind_a_completed_input_is_refused(tmp_path, capfd,
                                                                     processes):
    """Its state would hold b's epochs 3-7 as done under "everything before epoch 3": the run
    finished, but every restart from it failed ("input 'b': epoch 3 arrived while at None")."""
    root = str(tmp_path / "ckpt")
    with pytest.raises(CheckpointMisaligned, match=r"completed input\(s\) 'b' \(fed epochs up "
                       r"to 7\) went past the boundary at epoch 3"):
        naiad.execute(_closed_then_checkpoint, processes=processes, checkpoint_dir=root)
    assert "restart" not in capfd.readouterr().err          # a program error: not retried
    assert list_checkpoints(root) == []
