"""Durability of checkpoints: the order of fsync and rename calls that a power cut depends on.

A checkpoint survives a machine crash only if every file it consists of reaches the disk before
the manifest that declares the checkpoint complete, and the manifest's directory entry reaches
the disk too.  These tests run a real checkpointing computation in this process, record every
``os.fsync``, ``os.replace`` and ``os.rename`` it makes (the path behind each fsynced descriptor
is read from ``/proc/self/fd``), and check the order:

- every file of a checkpoint is fsynced before the rename that installs it;
- every such rename precedes the manifest's rename;
- every input-log segment written before the checkpoint is fsynced before the manifest;
- the checkpoint directory is fsynced after the manifest's rename, and its parent after the
  checkpoint directory is created.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

import linq  # noqa: F401 - installs the Stream methods used below
import naiad
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
