"""Checkpoints written by earlier code still resume, with their state, to the right result.

``tests/fixtures/ckpt-v1`` is a checkpoint directory written by :func:`write_fixture` with the
vertex states in the versioned container of :mod:`naiad.recovery.snapshot` (format 1);
``tests/fixtures/ckpt-legacy`` was written by the same function before that container existed
(each state pickled as a call of ``naiad.worker._unpickled``).  Each holds the running totals
after epochs 0 and 1 of :data:`EPOCHS` (a checkpoint at epoch 2).  The test copies one, makes
it private as a checkpoint directory must be, feeds all of :data:`EPOCHS` and compares with the
oracle: the totals of epochs 2 and 3 are right only if the state of epochs 0 and 1 was restored.

Regenerate a fixture (only after a deliberate format change, keeping the old ones)::

    .venv/bin/python -m tests.test_checkpoint_fixture tests/fixtures/ckpt-vN
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import pytest

import naiad
import stages
from naiad.progress.timestamp import Timestamp

FIXTURES = Path(__file__).parent / "fixtures"
EPOCHS = [[("a", 1), ("b", 2)], [("a", 3)], [("b", 4), ("c", 5)], [("a", 6), ("c", 1)]]
SECRET_KEY_MODE = 0o600


class Totals(naiad.Vertex):
    """A running total per key; at each epoch's notification, the totals of the keys it saw.

    The amounts of an epoch wait in ``seen`` until its notification: records of a later epoch
    may arrive before an earlier epoch is notified, and must not count in its totals.
    """

    def __init__(self):
        super().__init__()
        self.totals: Dict[str, int] = {}
        self.seen: Dict[Timestamp, Dict[str, int]] = {}

    def on_recv(self, edge, message, time):
        key, n = message
        if time not in self.seen:
            self.seen[time] = {}
            self.notify_at(time)
        self.seen[time][key] = self.seen[time].get(key, 0) + n

    def on_notify(self, time):
        for key, n in sorted(self.seen.pop(time).items()):
            self.totals[key] = self.totals.get(key, 0) + n
            self.send_by(0, (key, self.totals[key]), time)

    def checkpoint(self):
        return {"totals": dict(self.totals), "seen": dict(self.seen)}

    def restore(self, state):
        self.totals = dict(state["totals"])
        self.seen = dict(state["seen"])


def _key(kv):
    return kv[0]


def program(epochs: List[list], checkpoint_at_end: bool):
    def run(comp):
        inp = comp.new_input(name="numbers")
        got = stages.unary(inp.stream, Totals, partition_by=_key, name="totals").collect()
        comp.activate()
        for e in epochs:
            inp.on_next(e)
        if checkpoint_at_end:
            comp.checkpoint()
        inp.on_completed()
        comp.join(timeout=60)
        return {e: sorted(recs) for e, recs in got.results.items()}
    return run


def oracle(epochs: List[list]) -> Dict[int, list]:
    totals: Dict[str, int] = {}
    out = {}
    for e, recs in enumerate(epochs):
        for k, n in recs:
            totals[k] = totals.get(k, 0) + n
        out[e] = sorted((k, totals[k]) for k in {k for k, _ in recs})
    return out


def write_fixture(path: Path) -> None:
    """Run epochs 0 and 1 with a checkpoint at epoch 2 into ``path`` (a new directory)."""
    naiad.execute(program(EPOCHS[:2], True), checkpoint_dir=str(path))
    for lock in path.glob(".lock-*"):
        lock.unlink()


def private_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        os.chmod(root, 0o700)
        for f in files:
            os.chmod(Path(root) / f, SECRET_KEY_MODE)
    return dst


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fixture", ["ckpt-v1", "ckpt-legacy"])
def test_a_checkpoint_of_earlier_code_resumes_with_its_state(tmp_path, fixture):
    ckpt = private_copy(FIXTURES / fixture, tmp_path / "ckpt")
    [got] = naiad.execute(program(EPOCHS, False), checkpoint_dir=str(ckpt))
    want = oracle(EPOCHS)
    assert got[2] == want[2] == [("b", 6), ("c", 5)]
    assert got[3] == want[3] == [("a", 10), ("c", 6)]
    assert got == want


def test_the_fixtures_are_what_their_names_say():
    from naiad.recovery.snapshot import load_states
    v1 = load_states((FIXTURES / "ckpt-v1" / "ckpt-000000002" / "proc-0" /
                      "worker-0.pkl").read_bytes())
    assert all(v == {"format": 1, "state": v["state"]} for k, v in v1.items() if k != "__naiad__")
    legacy = (FIXTURES / "ckpt-legacy" / "ckpt-000000002" / "proc-0" / "worker-0.pkl")
    assert b"_unpickled" in legacy.read_bytes()


if __name__ == "__main__":
    # Through the module's own name: the graph's fingerprint names the vertex factory by it.
    from tests.test_checkpoint_fixture import write_fixture as _write
    _write(Path(sys.argv[1]))
