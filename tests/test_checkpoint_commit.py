"""Committing a checkpoint: process 0 waits for every part, and the input log reopens cleanly.

* Only process 0 waits before the commit record: the others send word that their part is
  written (and where) and go on.  A process whose part is slow to write must still be waited
  for: the commit of a checkpoint is never written before every part is there (it names where
  each part is, with its MAC).
* The input log knows the segments already on disk when a run reopens it: a logged epoch is
  replayed, and new epochs go to a new segment after the existing ones (never appended to an
  old one), all readable afterwards.
* A deferred input log holds its records in memory until ``flush`` (a worker calls it before it
  takes an epoch), which writes every pending record in one system call: afterwards the segment
  holds them byte for byte in the documented format (checked against ``hmac`` and ``struct``),
  readable by another reader at once, even beyond the most pieces one ``writev`` takes.
* Delivery marks, written through a memory map, are in the file at once, and a line torn by a
  kill falls back to the count before it.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import pickle
import random
import struct
import time
import zlib
from typing import Dict, List

import pytest

import naiad
import stages
from naiad.recovery.logs import MAGIC, CheckpointWarning, EpochLog
from naiad.recovery.marks import LINE, MarkFile, read_count
from naiad.recovery.directory import directory_key
from naiad.recovery.journal import COMMIT, journal_files, read_record, scan
from naiad.recovery.store import CheckpointStore, list_checkpoints
from samples.wordcount_vertex import RunningTotal, count_words
from samples.wordcount_vertex import words as words_of

SEED = 20261125


def oracle(epochs: List[List[str]]) -> Dict[int, list]:
    totals: Dict[str, int] = collections.Counter()
    out = {}
    for e, lines in enumerate(epochs):
        counts = collections.Counter(w for line in lines for w in words_of(line))
        totals.update(counts)
        out[e] = sorted((w, totals[w]) for w in counts)
    return out


def _lines(seed: int, count: int) -> List[List[str]]:
    """``count`` epochs of 8 lines of 6 words from a vocabulary of 40."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)]
    return [[" ".join(rng.choice(vocab) for _ in range(6)) for _ in range(8)]
            for _ in range(count)]


def _totals(comp, inp):
    """The running word totals of ``inp``'s lines, collected."""
    return stages.unary(count_words(comp, inp.stream), RunningTotal,
                        partition_by=lambda wc: wc[0], name="totals").collect()


def _slow_disk(epochs, process: int, seconds: float, note, tmp_path=None):
    """The running totals of ``epochs``, with process ``process``'s disk taking ``seconds``
    to write each part; ``note(comp, epoch, noted)`` is asked before each write, and what it
    returns (unless None) is returned beside the results."""
    def program(comp):
        if tmp_path is not None:
            with open(tmp_path / f"starts-{comp.process_index}", "a") as f:
                f.write("start\n")
        inp = comp.new_input(name="lines")
        got = _totals(comp, inp)
        comp.activate()
        noted: List[int] = []
        if comp.process_index == process:
            store = comp.store
            write_part = store.write_part

            def slow_write_part(epoch, *args):
                value = note(comp, epoch, noted)
                if value is not None:
                    noted.append(value)
                time.sleep(seconds)
                return write_part(epoch, *args)
            store.write_part = slow_write_part
        for lines in epochs:
            inp.on_next(lines[comp.process_index::2])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results, noted
    return program


def test_process_0_commits_only_once_every_part_is_written(tmp_path):
    epochs = _lines(SEED, 12)
    ckpt = tmp_path / "ckpt"

    def early(comp, epoch, noted):      # committed before this process wrote its part?
        return epoch if epoch in list_checkpoints(comp.store.root) else None
    program = _slow_disk(epochs, 1, 0.3, early, tmp_path)
    parts = naiad.execute(program, processes=2, checkpoint_dir=str(ckpt), checkpoint_every=3,
                          checkpoint_keep=10)
    assert [(tmp_path / f"starts-{p}").read_text().split() for p in (0, 1)] == [["start"]] * 2
    assert all(not early for _, early in parts)
    merged = {e: sorted(r for results, _ in parts for r in results.get(e, []))
              for e in range(len(epochs))}
    assert merged == oracle(epochs)
    assert list_checkpoints(ckpt) == [3, 6, 9]
    for path in journal_files(ckpt / "journal", "commits"):
        for rec in scan(path):
            manifest = json.loads(read_record(path, rec.offset, directory_key(ckpt), COMMIT,
                                              rec.epoch))
            assert sorted(manifest["parts"]) == ["0", "1"]
            assert all((ckpt / "journal" / where["file"]).exists()
                       for where in manifest["parts"].values())


def test_a_slow_disk_holds_the_inputs_back_instead_of_piling_up_checkpoints(tmp_path):
    """Process 0's disk writes a part in 0.2 s while a checkpoint is cut at every epoch: the
    cuts wait for room, so at most ``PENDING`` checkpoints wait to be written (their states
    held in memory) beside the one being written, and the run's output is complete."""
    from naiad.recovery.committer import PENDING
    epochs = _lines(SEED + 1, 14)

    def behind(comp, epoch, noted):     # checkpoints cut, and not yet written
        return comp.coordinator.taken - len(noted) - 1
    program = _slow_disk(epochs, 0, 0.2, behind)
    parts = naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=1)
    lags = parts[0][1]
    assert len(lags) == len(epochs) - 1
    assert max(lags) <= PENDING, lags
    merged = {e: sorted(r for results, _ in parts for r in results.get(e, []))
              for e in range(len(epochs))}
    assert merged == oracle(epochs)


def test_a_reopened_input_log_replays_and_appends_after_its_segments(tmp_path):
    rng = random.Random(SEED + 1)
    epochs = [[rng.randrange(1000) for _ in range(rng.randrange(1, 20))] for _ in range(9)]
    root = tmp_path / "ckpt"
    first = CheckpointStore(root, 0, 1)
    for e in range(6):
        if e == 3:
            first.rotate_logs()          # a checkpoint boundary: a second segment
        first.log_input("numbers", e, epochs[e])
    first.close()

    second = CheckpointStore(root, 0, 1)
    assert [second.logged_input("numbers", e) for e in range(7)] == epochs[:6] + [None]
    for e in range(6, 9):
        second.log_input("numbers", e, epochs[e])
    second.close()

    segments = sorted(p.name for p in (root / "inputs" / "proc-0" / "numbers").glob("*.log"))
    assert segments == ["000000000.log", "000000001.log", "000000002.log"]
    log = EpochLog(root / "inputs" / "proc-0" / "numbers", second.key)
    assert log.items() == dict(enumerate(epochs))
    assert not log.may_hold(9) and log.may_hold(8)


def _records_of(segment, key: bytes) -> list:
    """The records of a log segment, parsed and authenticated with the standard library alone:
    ``<epoch: int64><length: uint64><HMAC-SHA256 of both and the payload>`` and the payload."""
    data = segment.read_bytes() if segment.exists() else b""
    if not data:
        return []                     # opened at the first append, nothing written yet
    assert data.startswith(MAGIC)
    out, at = [], len(MAGIC)
    while at < len(data):
        epoch, length, mac = struct.unpack_from("<qQ32s", data, at)
        payload = data[at + 48:at + 48 + length]
        assert len(payload) == length
        assert mac == hmac.new(key, struct.pack("<qQ", epoch, length) + payload,
                               hashlib.sha256).digest()
        out.append((epoch, pickle.loads(payload)))
        at += 48 + length
    return out


@pytest.mark.parametrize("burst", [1, 7, 700])     # 700 records are 1,400 pieces: two writev
def test_a_deferred_input_log_writes_every_pending_record_at_flush(tmp_path, burst):
    rng = random.Random(SEED + burst)
    epochs = [[rng.choice(["a", "bb", "ccc", 7, 2.5, ("t", rng.randrange(99))])
               for _ in range(rng.randrange(0, 3000 if e % 5 == 0 else 30))]
              for e in range(2 * burst + 3)]
    root = tmp_path / "ckpt"
    store = CheckpointStore(root, 0, 1)
    segment = root / "inputs" / "proc-0" / "lines" / "000000000.log"
    written: list = []
    for start in range(0, len(epochs), burst):
        for e in range(start, min(start + burst, len(epochs))):
            store.log_input("lines", e, epochs[e])
        assert _records_of(segment, store.key) == written      # the new ones not yet
        store.flush_inputs()
        written = list(enumerate(epochs[:start + burst]))
        assert _records_of(segment, store.key) == written      # in the file, before any close
    store.close()
    assert EpochLog(segment.parent, store.key).items() == dict(enumerate(epochs))


def test_delivery_marks_survive_a_kill_and_a_torn_line(tmp_path):
    """Marks are written into a memory map: they must be in the file without a close (the
    process may be killed), and a line torn by a kill mid-write leaves the count before it."""
    path = tmp_path / "out.delivered"
    marks = MarkFile(path, 0)
    counts = list(range(1, 1 + random.Random(SEED + 2).randrange(5, 50)))
    for n in counts:
        marks.write(n)
        assert read_count(path) == n              # visible to another reader at once
    data = bytearray(path.read_bytes())
    newest = (counts[-1] % 2) * LINE
    data[newest + 5:newest + 12] = b"9999999"     # torn: half a new count over the old one
    path.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="delivery mark .* is damaged"):
        assert read_count(path) == counts[-1] - 1
    marks.close()
    legacy = tmp_path / "legacy.delivered"        # one line per delivery, an earlier release
    legacy.write_text("".join(f"{n} {zlib.crc32(str(n).encode()):08x}\n" for n in counts))
    assert read_count(legacy) == counts[-1]


def test_a_commit_journal_pruned_while_another_process_looks_is_no_damage(tmp_path, monkeypatch):
    """Process 0 deletes an old commit journal between another process's listing of the
    journal directory and its read of that file: not a damaged file, no warning."""
    import warnings
    from naiad.recovery import store as store_module
    from naiad.recovery.journal import JournalWriter
    root = tmp_path / "ckpt"
    other = CheckpointStore(root, 1, 2)
    writer = JournalWriter(root / "journal", "commits", other.key)
    writer.append(COMMIT, 4, b"{}")
    writer.close()
    [present] = journal_files(root / "journal", "commits")
    gone = present.with_name("commits-000000000.jnl.gone")
    listing = store_module.journal_files

    def listed_then_pruned(directory, prefix):
        paths = listing(directory, prefix)
        if prefix == "commits":
            paths.insert(0, gone)        # listed, then deleted before it is read
        return paths
    monkeypatch.setattr(store_module, "journal_files", listed_then_pruned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        assert other.committed() == [4]
    other.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("processes", [1, 2])
def test_a_program_that_drains_its_subscriber_after_feeding_is_not_held(tmp_path, processes):
    """The subscriber hands each epoch to the program through a queue of 2, which the program
    reads only after feeding every epoch, with a checkpoint at each: a checkpoint's commit
    waits for the subscriber, which waits for the program; the cuts must not wait for those
    commits (the bound on pending checkpoints counts the disk's work only)."""
    import queue

    epochs = 10

    def program(comp):
        inp = comp.new_input(name="n")
        handed: "queue.Queue" = queue.Queue(maxsize=2)
        inp.stream.subscribe(lambda e, recs: handed.put((e, sorted(recs))))
        comp.activate()
        for e in range(epochs):
            inp.on_next([e])
        inp.on_completed()
        got = [handed.get(timeout=30) for _ in range(epochs)]
        comp.join(timeout=30)
        return got

    parts = naiad.execute(program, processes=processes, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=1)
    assert all(got == [(e, [e]) for e in range(epochs)] for got in parts)
