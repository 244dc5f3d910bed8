"""Durability of checkpoints: the order of fsync and rename calls that a power cut depends on.

A checkpoint survives a machine crash only if every file it consists of reaches the disk before
the manifest that declares the checkpoint complete, and the manifest's directory entry reaches
the disk too.  These tests run a real checkpointing computation in this process, record every
``os.fsync``, ``os.replace`` and ``os.rename`` it makes (the path behind each fsynced descriptor
is read from ``/proc/self/fd``), and check the order:

- every file of a checkpoint is fsynced before the rename that installs it;
- every such rename precedes the manifest's rename, and the checkpoint directory is fsynced
  between the last of them and the manifest's rename;
- every input-log segment written before the checkpoint is fsynced before the manifest;
- the checkpoint directory is fsynced after the manifest's rename, and its parent after the
  checkpoint directory is created.

A last test makes the disk slow while a checkpoint's logs are sealed: the inputs must go on.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

import linq  # noqa: F401 - installs the Stream methods used below
import naiad
import stages
from naiad.recovery.store import EpochLog
from naiad.recovery.directory import directory_key

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(),
                                reason="needs /proc/self/fd to name fsynced descriptors")

Event = Tuple[str, str, str]          # (kind, path, destination or "")


class Recorder:
    """Wraps os.fsync / os.replace / os.rename, keeping their order across threads."""

    def __init__(self, monkeypatch):
        self.events: List[Event] = []
        self._lock = threading.Lock()
        fsync, replace, rename = os.fsync, os.replace, os.rename

        def rec_fsync(fd):
            path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
            fsync(fd)
            self._add(("fsync", path, ""))

        def rec_replace(src, dst, *a, **k):
            replace(src, dst, *a, **k)
            self._add(("rename", os.path.abspath(src), os.path.abspath(dst)))

        def rec_rename(src, dst, *a, **k):
            rename(src, dst, *a, **k)
            self._add(("rename", os.path.abspath(src), os.path.abspath(dst)))

        monkeypatch.setattr(os, "fsync", rec_fsync)
        monkeypatch.setattr(os, "replace", rec_replace)
        monkeypatch.setattr(os, "rename", rec_rename)

    def _add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)


def program(epochs):
    def run(comp):
        inp = comp.new_input(name="lines")
        got = inp.stream.select_many(str.split).count().collect()
        comp.activate()
        for lines in epochs:
            inp.on_next(lines)
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return run


def first(events: List[Event], pred, after: int = -1) -> int:
    for i, e in enumerate(events):
        if i > after and pred(e):
            return i
    return -1


@pytest.mark.parametrize("workers", [1, 2])
def test_checkpoint_files_reach_the_disk_before_the_manifest(tmp_path, monkeypatch, workers):
    root = (tmp_path / "ckpt").resolve()
    epochs = [[f"w{e % 3} x{e}"] * 3 for e in range(9)]
    rec = Recorder(monkeypatch)
    results = naiad.execute(program(epochs), workers=workers, checkpoint_dir=str(root),
                            checkpoint_every=3, checkpoint_keep=10)
    monkeypatch.undo()
    assert sorted(results[0][0]) == [("w0", 3), ("x0", 3)]
    events = list(rec.events)
    manifests = [i for i, e in enumerate(events)
                 if e[0] == "rename" and e[2].endswith("/MANIFEST.json")]
    committed = sorted(d for d in root.glob("ckpt-*") if (d / "MANIFEST.json").exists())
    assert len(manifests) == len(committed) >= 2, (manifests, committed)

    for m in manifests:
        base = os.path.dirname(events[m][2])
        before = events[:m]
        # Every file installed into this checkpoint: fsynced (under its temporary name) first.
        installs = [(i, e) for i, e in enumerate(before)
                    if e[0] == "rename" and e[2].startswith(base + "/")]
        on_disk = {os.path.relpath(str(p), base) for p in Path(base).rglob("*") if p.is_file()}
        installed = {os.path.relpath(e[2], base) for _, e in installs} | {"MANIFEST.json"}
        assert on_disk <= installed, f"files of {base} not installed by a rename: " \
                                     f"{sorted(on_disk - installed)}"
        for i, (_, src, dst) in installs:
            synced = first(before, lambda e, s=src: e[0] == "fsync" and e[1] == s)
            assert 0 <= synced < i, f"{dst} renamed into place before its data was fsynced"
        manifest_src = events[m][1]
        assert first(before, lambda e: e[0] == "fsync" and e[1] == manifest_src) >= 0, \
            "the manifest is renamed into place before its data was fsynced"
        # The checkpoint directory's own entry: its parent fsynced before the manifest.
        assert first(before, lambda e: e[0] == "fsync" and e[1] == str(root)) >= 0, \
            f"{root} is not fsynced after {base} is created"
        # The parts' directory entries (written without a directory fsync of their own): the
        # checkpoint directory fsynced after the last of them and before the manifest.
        last_install = max(i for i, _ in installs)
        assert first(before, lambda e: e[0] == "fsync" and e[1] == base,
                     after=last_install) > last_install, \
            f"{base} is not fsynced between its parts' renames and its manifest's"
        # The manifest's directory entry: the checkpoint directory fsynced after the rename.
        after = first(events, lambda e: e[0] == "fsync" and e[1] == base, after=m)
        assert after > m, f"{base} is not fsynced after its manifest is renamed into place"

    # Every input-log segment holding an epoch that a checkpoint covers (an epoch below its
    # boundary) is fsynced before that checkpoint's manifest.
    segments = sorted((root / "inputs").rglob("*.log"))
    assert segments, "no input log was written"
    lowest = {seg: min(logged_epochs(seg, tmp_path)) for seg in segments}
    for m in manifests:
        boundary = int(Path(events[m][2]).parent.name[5:])
        for seg in segments:
            if lowest[seg] < boundary:
                synced = first(events, lambda e, s=str(seg): e[0] == "fsync" and e[1] == s)
                assert 0 <= synced < m, \
                    f"input log {seg.name} is not fsynced before the manifest of ckpt {boundary}"


def logged_epochs(segment: Path, scratch: Path) -> List[int]:
    """The epochs one log segment holds, read through EpochLog from a copy of it alone."""
    alone = scratch / f"alone-{segment.parent.name}-{segment.name}"
    alone.mkdir()
    (alone / segment.name).write_bytes(segment.read_bytes())
    return sorted(EpochLog(alone, directory_key(segment.parents[3])).items())


# ---- a slow disk while a checkpoint is written ----------------------------------------------------
class SlowLogFsync:
    """Wraps os.fsync: the first fsync of an input-log segment after ``armed`` is set waits until
    ``released`` (at most ``bound`` seconds, then notes that it gave up): a disk that takes its
    time while the writer thread seals the logs of a checkpoint."""

    def __init__(self, monkeypatch, bound: float = 20.0):
        self.armed, self.entered, self.released = (threading.Event(), threading.Event(),
                                                   threading.Event())
        self.gave_up = False
        fsync = os.fsync

        def slow(fd):
            path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
            if self.armed.is_set() and "/inputs/" in path and not self.entered.is_set():
                self.entered.set()
                if not self.released.wait(bound):
                    self.gave_up = True
            fsync(fd)

        monkeypatch.setattr(os, "fsync", slow)


class Seen(naiad.Vertex):
    """Passes records on and notes the epochs it processes (where a run resumed)."""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def on_recv_batch(self, edge, messages, time):
        self.seen.append(time.epoch)
        self.send_batch_by(0, messages, time)

    def checkpoint(self):
        return None

    def restore(self, state):
        pass


def slow_disk_program(epochs, slow, boundary, seen, stop_after=None, notes=None):
    def run(comp):
        inp = comp.new_input(name="numbers")
        got = stages.unary(inp.stream, lambda: Seen(seen), name="seen").select(
            lambda n: n + 1).collect()
        comp.activate()
        for e, recs in enumerate(epochs):
            if e == stop_after:
                raise KeyboardInterrupt("the first run stops here")
            if slow is not None and e == boundary:
                slow.armed.set()                 # the checkpoint at ``boundary`` is cut now
            inp.on_next(recs)
            if slow is not None and e == boundary:
                assert slow.entered.wait(20), "the checkpoint's logs were never sealed"
            if slow is not None and e == boundary + 3:
                # Three epochs accepted while the writer thread waits for the disk.
                manifest = Path(comp.options["checkpoint_dir"]) / f"ckpt-{boundary:09d}"
                notes.append((slow.gave_up, (manifest / "MANIFEST.json").exists()))
                slow.released.set()
        inp.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}
    return run


@pytest.mark.timeout(120)
def test_inputs_go_on_while_the_disk_is_slow_to_seal_a_checkpoint(tmp_path, monkeypatch):
    """The writer thread fsyncs the logs of a checkpoint while the inputs append to them: the
    fsync must not hold the log, or ``on_next`` would wait for the disk.  The checkpoint commits
    once the disk is done, and a second run resumes from it and matches the oracle."""
    rng = random.Random(20240611)
    epochs = [[rng.randrange(1000) for _ in range(rng.randrange(1, 6))] for _ in range(16)]
    oracle = {e: sorted(n + 1 for n in recs) for e, recs in enumerate(epochs)}
    root = tmp_path / "ckpt"
    slow = SlowLogFsync(monkeypatch)
    notes: list = []
    with pytest.raises(KeyboardInterrupt):
        naiad.execute(slow_disk_program(epochs, slow, 8, [], stop_after=12, notes=notes),
                      checkpoint_dir=str(root), checkpoint_every=4, checkpoint_keep=10,
                      max_restarts=0)
    monkeypatch.undo()
    assert notes == [(False, False)], \
        "on_next waited for the disk (or the checkpoint committed before its logs were durable)"
    assert sorted(int(d.name[5:]) for d in root.glob("ckpt-*")
                  if (d / "MANIFEST.json").exists()) == [4, 8]
    seen: list = []
    [result] = naiad.execute(slow_disk_program(epochs, None, 8, seen), checkpoint_dir=str(root),
                             checkpoint_every=4)
    assert min(seen) == 8, "the second run did not resume from the checkpoint at 8"
    assert result == oracle
