"""Frames with a checkpoint directory: what the input logs and the checkpoints hold, and a
SIGKILL mid-run, on 2 processes x 2 workers, against plain Python.

An Arrow table fed to ``on_next`` is divided among the process's workers as slices of it, and a
pickled slice carries its parent's whole buffers: the input logs and the vertex states pickle
tables in Arrow's IPC form, where a slice holds its own rows only.  A checkpoint holds live state
only: an exchange's routing cache (a whole key column) is not state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

import naiad  # noqa: E402
import stages  # noqa: E402
from linq import frames  # noqa: E402
from tests.test_recovery import kill_stage, merge  # noqa: E402

ROWS = 200_000


def _table(process: int, epoch: int, rows: int) -> Any:
    rng = np.random.default_rng(1000 * process + epoch)
    return pa.table({"k": rng.integers(0, 5000, rows), "x": rng.integers(0, 100, rows)})


def _bytes_under(directory: Path) -> int:
    return sum(os.path.getsize(Path(root) / f) for root, _, files in os.walk(directory)
               for f in files)


def _counted(epochs: int):
    def program(comp: naiad.Computation) -> Dict[str, Any]:
        inp = comp.new_input(name="t")
        counts = frames.of(inp.stream).exchange("k").map_batches(
            lambda t: pa.table({"n": [t.num_rows]})).collect()
        comp.activate()
        for e in range(epochs):
            inp.on_next(_table(comp.process_index, e, ROWS))
        inp.on_completed()
        comp.join(timeout=120)
        rows = {e: sum(t["n"][0].as_py() for t in ts) for e, ts in counts.results.items()}
        return {"rows": rows, "stats": list(comp.checkpoint_stats)}
    return program


def test_input_logs_and_checkpoints_hold_rows_once_and_no_routing_cache(tmp_path):
    """Before, with 2 workers a process logged each epoch's table twice (each worker's slice
    pickled with the whole parent) and every checkpoint held the exchange's last key column
    and routes (3.2 MB here, 18 MB for a million rows)."""
    epochs = 4
    parts = naiad.execute(_counted(epochs), processes=2, workers=2,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    for e in range(epochs):
        assert sum(p["rows"].get(e, 0) for p in parts) == 2 * ROWS
    sizes = [s["bytes"] for p in parts for s in p["stats"]]
    assert sizes and max(sizes) < 64 << 10, sizes
    fed = sum(_table(p, e, ROWS).nbytes for p in range(2) for e in range(epochs))
    logged = _bytes_under(tmp_path / "ckpt" / "inputs")
    assert fed <= logged < 1.1 * fed, (logged, fed)


class KeepSlices(naiad.Vertex):
    """Keeps every table it is given (slices of the fed tables, state across epochs) and sends,
    at each epoch's end, what :meth:`report` says of the tables kept: here the running number
    of rows and sum of ``x``."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: List[Any] = []
        self.pending: Dict[naiad.Timestamp, List[Any]] = {}

    def on_recv_batch(self, edge: int, messages: List[Any], time: naiad.Timestamp) -> None:
        if time not in self.pending:
            self.pending[time] = []
            self.notify_at(time)
        self.pending[time].extend(messages)

    def on_notify(self, time: naiad.Timestamp) -> None:
        self.kept.extend(self.pending.pop(time))
        self.send_by(0, self.report(), time)

    def report(self) -> Any:
        rows = sum(t.num_rows for t in self.kept)
        total = sum(int(np.asarray(t["x"]).sum()) for t in self.kept)
        return (self.index, rows, total)


def _kept(epochs: int, marker: Path, kill_epoch: int, rows: int):
    def program(comp: naiad.Computation) -> Dict[str, Any]:
        inp = comp.new_input(name="t")
        passed = kill_stage(inp.stream, marker, kill_epoch, victim=3)
        got = stages.unary(passed, KeepSlices, name="keep").collect()
        comp.activate()
        for e in range(epochs):
            inp.on_next(_table(comp.process_index, e, rows))
        inp.on_completed()
        comp.join(timeout=120)
        return {"got": got.results, "stats": list(comp.checkpoint_stats)}
    return program


def _expected(epochs: int, rows: int) -> Dict[int, List[tuple]]:
    """Worker w of process p keeps the w-th half of each of p's tables."""
    out: Dict[int, List[tuple]] = {}
    seen = {(p, w): [0, 0] for p in range(2) for w in range(2)}
    for e in range(epochs):
        for p in range(2):
            x = np.asarray(_table(p, e, rows)["x"])
            half = -(-rows // 2)
            for w in range(2):
                part = x[w * half:(w + 1) * half]
                seen[(p, w)][0] += len(part)
                seen[(p, w)][1] += int(part.sum())
        out[e] = sorted((2 * p + w, n, s) for (p, w), (n, s) in seen.items())
    return out


@pytest.mark.timeout(120)
def test_tables_kept_as_state_survive_sigkill_exactly_and_are_saved_once(tmp_path):
    """Worker 3 (process 1) is killed at epoch 7; the run restores the checkpoint at 6, whose
    states hold the kept slices in IPC form, and every epoch's totals match plain Python.  Each
    checkpoint holds the kept rows once: before, each worker's slices carried their parent
    tables, the whole of the process's input, twice over at 2 workers."""
    epochs, rows = 10, 20_000
    marker = tmp_path / "killed"
    parts = naiad.execute(_kept(epochs, marker, 7, rows), processes=2, workers=2,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert marker.exists(), "no process was killed"
    assert merge(p["got"] for p in parts) == _expected(epochs, rows)
    for p in parts:
        for s in p["stats"]:
            kept = sum(_table(q, e, rows).nbytes for q in range(2) for e in range(s["epoch"]))
            assert s["bytes"] < 0.6 * kept + (16 << 10), (s, kept)


class Tagged(pa.ExtensionType):
    """A user's extension type, not registered with Arrow (as most are not)."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "naiad-test.tagged")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> "Tagged":
        return cls()


class KeptTypes(KeepSlices):
    """Keeps the tables it is given and sends, at each epoch's end, the column types it holds."""

    def report(self) -> Any:
        return sorted({str(t.schema.field("e").type) for t in self.kept})


def _typed(epochs: int, marker: Path):
    def program(comp: naiad.Computation) -> Dict[int, list]:
        inp = comp.new_input(name="t")
        passed = kill_stage(inp.stream, marker, 5, victim=1)
        got = stages.unary(passed, KeptTypes, name="types").collect()
        comp.activate()
        for e in range(epochs):
            storage = pa.array(np.arange(10) + e)
            inp.on_next(pa.table({"e": pa.ExtensionArray.from_storage(Tagged(), storage)}))
        inp.on_completed()
        comp.join(timeout=120)
        return got.results
    return program


@pytest.mark.timeout(120)
def test_a_table_of_an_extension_type_keeps_it_in_the_logs_and_the_state(tmp_path):
    """Arrow's IPC form rebuilds an extension type only where it is registered: after a
    restart the replayed epochs and the restored state held int64 columns (and a vertex
    held both types). Such tables are pickled as pyarrow pickles them."""
    marker = tmp_path / "killed"
    parts = naiad.execute(_typed(8, marker), processes=2, checkpoint_dir=str(tmp_path / "ck"),
                          checkpoint_every=2)
    assert marker.exists(), "no process was killed"
    seen = {e: types for part in parts for e, types in part.items()}
    assert sorted(seen) == list(range(8))
    assert all(types == [["extension<naiad-test.tagged<Tagged>>"]] for types in seen.values()), \
        seen


@pytest.mark.parametrize("keys", [["k"], ["k", "s"]])
def test_a_key_index_saved_in_a_checkpoint_drops_its_caches_and_answers_the_same(keys):
    """The invariant side of a join (KeyIndex) is saved without its sorted index and last
    answer, which are made again on the next probe: the answers are the same after a restore."""
    import pickle
    from linq.frames.held import KeyIndex
    from naiad.recovery.snapshot import dumps
    rng = np.random.default_rng(5)
    static = pa.table({"k": rng.integers(0, 500, 2000), "s": rng.integers(0, 3, 2000)})
    probe = pa.table({"k": rng.integers(0, 600, 300), "s": rng.integers(0, 3, 300)})
    index = KeyIndex(static, keys)
    before = index.probe(probe, keys)
    restored = pickle.loads(dumps(index))
    assert restored._sorted is None and restored._last is None
    after = restored.probe(probe, keys)
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert (b is None and a is None) or np.array_equal(b, a)
