"""Durability of checkpoints: the order of writes and fsyncs that a power cut depends on.

A checkpoint survives a machine crash only if every part of it reaches the disk before the
commit record that declares it complete, and every file holding them is found again: each
journal file's directory entry, and the journal directory's own.  These tests run a real
checkpointing computation in this process, record every ``os.write``, ``os.fsync``,
``os.open`` creating a file and ``os.mkdir`` it makes (the path behind a descriptor is read
from ``/proc/self/fd``), and check, for every commit record found in the journal afterwards:

- each part it names was written, then its file fsynced, before the commit record was written;
- the commit record was fsynced after it was written;
- each journal file it depends on had its directory fsynced after the file was created, and
  the journal directory's parent after the journal directory was created, before the commit;
- every segment of the input log or of collected output holding an epoch of this checkpoint
  (between the previous boundary and this one) was fsynced after the write that completed that
  epoch's record and before the commit (the inputs may run ahead of the commits, so that can
  be long before it), and its directory after the segment was created, before the commit;
  likewise the parent of every directory the run created (the checkpoint directory itself,
  the logs' directories).

A last test makes the disk slow while a checkpoint's logs are sealed: the inputs must go on.
"""

from __future__ import annotations

import json
import os
import random
import struct
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import linq  # noqa: F401 - installs the Stream methods used below
import naiad
import stages
from naiad.recovery.directory import directory_key
from naiad.recovery.coordinator import ROTATE_LOGS
from naiad.recovery.journal import COMMIT, HEADER_SIZE, journal_files, read_record, scan
from naiad.recovery.logs import MAGIC
from naiad.recovery.store import list_checkpoints

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(),
                                reason="needs /proc/self/fd to name fsynced descriptors")

Event = Tuple[str, str, int]          # (kind, path, bytes written or 0)
RECORD = struct.Struct("<qQ32s")


class Recorder:
    """Wraps os.write / os.writev / os.fsync / os.open / os.mkdir, keeping their order across
    threads."""

    def __init__(self, monkeypatch):
        self.events: List[Event] = []
        self._lock = threading.Lock()
        write, writev, fsync, open_, mkdir = os.write, os.writev, os.fsync, os.open, os.mkdir

        def path_of(fd) -> str:
            return os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")

        def rec_write(fd, data):
            n = write(fd, data)
            self._add(("write", path_of(fd), n))
            return n

        def rec_writev(fd, buffers):
            n = writev(fd, buffers)
            self._add(("write", path_of(fd), n))
            return n

        def rec_fsync(fd):
            path = path_of(fd)
            fsync(fd)
            self._add(("fsync", path, 0))

        def rec_open(path, flags, *a, **k):
            fd = open_(path, flags, *a, **k)
            if flags & os.O_CREAT:
                self._add(("create", os.path.abspath(path), 0))
            return fd

        def rec_mkdir(path, *a, **k):
            mkdir(path, *a, **k)
            self._add(("mkdir", os.path.abspath(path), 0))

        monkeypatch.setattr(os, "write", rec_write)
        monkeypatch.setattr(os, "writev", rec_writev)
        monkeypatch.setattr(os, "fsync", rec_fsync)
        monkeypatch.setattr(os, "open", rec_open)
        monkeypatch.setattr(os, "mkdir", rec_mkdir)

    def _add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def written_by(self, path: str, end: int) -> int:
        """The index of the write after which ``path`` holds ``end`` bytes."""
        total = 0
        for i, (kind, p, n) in enumerate(self.events):
            if kind == "write" and p == path:
                total += n
                if total >= end:
                    return i
        raise AssertionError(f"{path} never held {end} bytes")


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


@pytest.mark.parametrize("workers, count, every", [(1, 9, 3), (2, 9, 3), (1, 20, 1)])
def test_checkpoint_parts_reach_the_disk_before_their_commit(tmp_path, monkeypatch, workers,
                                                             count, every):
    """In the last case (20 epochs, a checkpoint at each) the input log starts new segments
    (every ``ROTATE_LOGS`` checkpoints): their entries, too, must be durable before a commit."""
    root = (tmp_path / "ckpt").resolve()
    epochs = [[f"w{e % 3} x{e}"] * 3 for e in range(count)]
    rec = Recorder(monkeypatch)
    results = naiad.execute(program(epochs), workers=workers, checkpoint_dir=str(root),
                            checkpoint_every=every, checkpoint_keep=100)
    monkeypatch.undo()
    assert sorted(results[0][0]) == [("w0", 3), ("x0", 3)]
    events = list(rec.events)
    key = directory_key(root)
    journal = root / "journal"
    commits = [(path, r) for path in journal_files(journal, "commits") for r in scan(path)
               if r.kind == COMMIT]
    assert [r.epoch for _, r in commits] == list_checkpoints(root) == \
        list(range(every, count, every))

    def synced_after(path: str, i: int) -> int:
        return first(events, lambda e: e[0] == "fsync" and e[1] == path, after=i)

    def entry_durable_before(path: str, k: int) -> None:
        made = first(events, lambda e: e[0] in ("create", "mkdir") and e[1] == path)
        assert 0 <= made < k, f"{path} was not created before the commit"
        parent = os.path.dirname(path)
        assert made < synced_after(parent, made) < k, \
            f"{parent} is not fsynced between the creation of {path} and the commit"

    boundary_before = 0
    segments = sorted((root / "inputs").rglob("*.log"))
    assert segments, "no input log was written"
    collected = sorted((root / "outputs").rglob("*.log"))
    assert collected, "no collected output was logged"
    if count > ROTATE_LOGS * every:
        assert len(segments) > 1, "the input log never started a second segment"
    made_dirs = sorted({d for seg in segments + collected for d in seg.parents
                        if root in d.parents} | {root})
    held = {seg: logged_ends(seg) for seg in segments + collected}
    for cpath, crec in commits:
        k = rec.written_by(str(cpath), crec.offset + HEADER_SIZE + crec.length)
        assert synced_after(str(cpath), k) > k, f"commit {crec.epoch} is never fsynced"
        entry_durable_before(str(cpath), k)
        entry_durable_before(str(journal), k)
        for d in made_dirs:              # the checkpoint directory and the logs' own
            entry_durable_before(str(d), k)
        manifest = json.loads(read_record(cpath, crec.offset, key, COMMIT, crec.epoch))
        for where in manifest["parts"].values():
            ppath = str(journal / where["file"])
            i = rec.written_by(ppath, where["offset"] + HEADER_SIZE + where["length"])
            assert i < synced_after(ppath, i) < k, \
                f"the part in {ppath} for {crec.epoch} is not fsynced before its commit"
            entry_durable_before(ppath, k)
        for seg, ends in held.items():
            for e, end in ends.items():
                if boundary_before <= e < crec.epoch:
                    i = rec.written_by(str(seg), end)
                    assert i < synced_after(str(seg), i) < k, \
                        f"log segment {seg} is not fsynced after epoch {e} was written " \
                        f"and before the commit of {crec.epoch}"
                    entry_durable_before(str(seg), k)
        boundary_before = crec.epoch


def logged_ends(segment: Path) -> Dict[int, int]:
    """Where each epoch's record ends in one log segment: its format is ``MAGIC``, then records
    ``<epoch: int64><length: uint64><HMAC-SHA256: 32 bytes>`` each followed by its payload."""
    data = segment.read_bytes()
    assert data.startswith(MAGIC), segment
    ends, at = {}, len(MAGIC)
    while at + RECORD.size <= len(data):
        epoch, length, _ = RECORD.unpack_from(data, at)
        at += RECORD.size + length
        assert at <= len(data), f"{segment} ends inside the record of epoch {epoch}"
        ends[epoch] = at
    return ends


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
                root = Path(comp.options["checkpoint_dir"])
                notes.append((slow.gave_up, boundary in list_checkpoints(root)))
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
    assert list_checkpoints(root) == [4, 8]
    seen: list = []
    [result] = naiad.execute(slow_disk_program(epochs, None, 8, seen), checkpoint_dir=str(root),
                             checkpoint_every=4)
    assert min(seen) == 8, "the second run did not resume from the checkpoint at 8"
    assert result == oracle
