"""What recovery unpickles is authenticated; what it cannot use is refused with a clear error.

Attacks and damage go through the real files of a real checkpoint directory: forged log records,
commit records and parts (HMAC-checked with the directory's key before anything is unpickled), a
commit that is not an object, collected outputs lost to damage, a different layout, earlier
formats.
"""

import functools
import hashlib
import json
import pickle
import re
import struct
import time
import warnings
from pathlib import Path

import pytest

import naiad
from naiad.recovery.directory import directory_key
from naiad.recovery.journal import (COMMIT, HEADER_SIZE, PART, JournalWriter, journal_files,
                                    read_record, scan)
from naiad.recovery.store import CheckpointWarning, list_checkpoints
from naiad.recovery.logs import MAGIC


def _program(epochs, stop_after=None):
    """Each process feeds its share; returns the collected records per epoch."""
    def program(comp):
        inp = comp.new_input(name="lines")
        got = inp.stream.collect()
        comp.activate()
        for e, recs in enumerate(epochs):
            if stop_after is not None and e == stop_after:
                raise KeyboardInterrupt("stopping the first run")
            inp.on_next(recs[comp.process_index::comp.processes])
        inp.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}
    return program


EPOCHS = [[f"e{e}-{i}" for i in range(6)] for e in range(8)]


def _first_run(ckpt: Path, workers=1):
    """Stop after 6 epochs, with checkpoints at 2 and 4."""
    with pytest.raises(KeyboardInterrupt):
        naiad.execute(_program(EPOCHS, stop_after=6), workers=workers, checkpoint_dir=str(ckpt),
                      checkpoint_every=2, max_restarts=0)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "owned"))


def test_a_forged_input_log_record_is_never_unpickled(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    marker = tmp_path / "owned"
    payload = pickle.dumps([_Exploit(str(marker))])
    segment = sorted((ckpt / "inputs" / "proc-0" / "lines").glob("*.log"))[-1]
    # A well-formed record for epoch 5 with a made-up MAC (the forger has no key).
    record = struct.pack("<qQ32s", 5, len(payload), hashlib.sha256(payload).digest()) + payload
    with open(segment, "ab") as f:
        f.write(record)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
    assert not marker.exists()
    assert any("fails its HMAC" in str(w.message) for w in caught)


def _newest_commit(ckpt: Path):
    """The path, record and JSON of the newest commit record."""
    path, rec = [(p, r) for p in journal_files(ckpt / "journal", "commits") for r in scan(p)
                 if r.kind == COMMIT][-1]
    data = read_record(path, rec.offset, directory_key(ckpt), COMMIT, rec.epoch)
    return path, rec, json.loads(data)


def test_a_forged_commit_is_refused_and_the_previous_checkpoint_used(tmp_path):
    """A commit record for a later epoch, well formed but with a made-up MAC (the forger has
    no key), appended to the commit journal."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    path, _, manifest = _newest_commit(ckpt)
    manifest["epoch"] = 99
    payload = json.dumps(manifest).encode()
    with open(path, "ab") as f:
        f.write(struct.pack("<BqQ32s", COMMIT, 99, len(payload), hashlib.sha256(payload).digest())
                + payload)
    with pytest.warns(CheckpointWarning, match=f"{path.name} at epoch 99 .*fails its HMAC"):
        result = naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
    assert result[0] == {e: sorted(r) for e, r in enumerate(EPOCHS)}


def test_a_forged_part_is_never_unpickled(tmp_path):
    """The newest part replaced in place (same offset and length) by one whose states are a
    pickle that runs code, with a made-up MAC: the commit names the part's MAC and the MAC
    needs the key, so it is refused before anything is unpickled."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    _, _, manifest = _newest_commit(ckpt)
    where = manifest["parts"]["0"]
    part = ckpt / "journal" / where["file"]
    marker = tmp_path / "owned"
    data = bytearray(part.read_bytes())
    start = where["offset"] + HEADER_SIZE
    old = bytes(data[start:start + where["length"]])
    (n,) = struct.unpack_from("<I", old)
    forged = old[:4 + n] + pickle.dumps({0: _Exploit(str(marker))})
    forged = forged[:where["length"]].ljust(where["length"], b".")
    data[where["offset"]:start + where["length"]] = struct.pack(
        "<BqQ32s", PART, manifest["epoch"], len(forged), hashlib.sha256(forged).digest()) + forged
    part.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match=f"{part.name} at epoch {manifest['epoch']}"):
        result = naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
    assert not marker.exists()
    assert result[0] == {e: sorted(r) for e, r in enumerate(EPOCHS)}


@pytest.mark.parametrize("content", ["[]", "null", "42", '"text"', "{", '{"parts": 7}'])
def test_a_commit_that_is_not_an_object_is_damage_not_a_crash(tmp_path, content):
    """Authenticated (written with the key, as a bug might) but not a commit: a warning, the
    previous checkpoint is used, no TypeError or KeyError escapes."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    writer = JournalWriter(ckpt / "journal", "commits", directory_key(ckpt))
    writer.append(COMMIT, 99, content.encode())
    writer.close()
    with pytest.warns(CheckpointWarning, match="at epoch 99"):
        result = naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
    assert result[0] == {e: sorted(r) for e, r in enumerate(EPOCHS)}


def test_damaged_collected_outputs_are_named_not_silently_dropped(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    segment = sorted((ckpt / "outputs" / "proc-0").glob("collect*/*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[len(MAGIC) + 60] ^= 0xFF                       # inside the first record: epoch 0
    segment.write_bytes(bytes(data))
    t0 = time.monotonic()
    with pytest.raises(naiad.OutputLost, match=r"epoch\(s\) 0 are missing or damaged in /"), \
            pytest.warns(naiad.CheckpointWarning, match=r"damaged at epoch 0 \(fails its HMAC"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)
    assert time.monotonic() - t0 < 20                  # not retried


@pytest.mark.parametrize("log", ["inputs", "outputs"])
def test_a_log_segment_with_a_damaged_header_is_named_not_taken_for_an_old_release(tmp_path, log):
    """One flipped byte in a segment's header was reported as a log of format version 1,
    written by an earlier release, and ended the resume.  It is damage: named in a warning,
    its records unused.  The inputs after the checkpoint are fed again by the program; the
    collected outputs before it cannot be recomputed and are named with the directory."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    segments = sorted((ckpt / log / "proc-0").glob("*/*.log"))
    segment = segments[-1] if log == "inputs" else segments[0]
    data = bytearray(segment.read_bytes())
    data[1] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.warns(naiad.CheckpointWarning, match=f"{segment.name} has a damaged header"):
        if log == "inputs":
            [got] = naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
            assert got == {e: sorted(recs) for e, recs in enumerate(EPOCHS)}
        else:
            with pytest.raises(naiad.OutputLost,
                               match=r"epoch\(s\) 0-\d are missing or damaged in "
                                     + re.escape(str(ckpt))):
                naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)


def test_resuming_with_another_layout_is_refused_naming_both(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt, workers=2)
    t0 = time.monotonic()
    with pytest.raises(naiad.CheckpointLayoutError,
                       match=r"1 process\(es\) x 2 worker\(s\); this run has 1 x 1"):
        naiad.execute(_program(EPOCHS), workers=1, checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)
    assert time.monotonic() - t0 < 20


def test_a_run_that_died_before_its_first_checkpoint_binds_the_directory(tmp_path):
    """Input logs and delivery marks are written from the first epoch: a run that stopped
    before any checkpoint committed leaves them, and another layout or program must not take
    them up (3 processes replayed the logs of 2 and counted records twice; another program
    skipped the epochs the first had delivered).  The same run resumes them."""
    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        naiad.execute(_program(EPOCHS, stop_after=6), processes=2, checkpoint_dir=str(ckpt),
                      checkpoint_every=100, max_restarts=0)
    assert not list_checkpoints(ckpt)
    for processes, workers in ((3, 1), (1, 1), (2, 2)):
        with pytest.raises(naiad.CheckpointLayoutError,
                           match=r"belongs to a run of 2 process\(es\) x 1 worker\(s\)"):
            naiad.execute(_program(EPOCHS), processes=processes, workers=workers,
                          checkpoint_dir=str(ckpt), checkpoint_every=100, max_restarts=3)

    def other(comp):                  # another dataflow: a select before the collect
        inp = comp.new_input(name="lines")
        stages_out = inp.stream.concat(inp.stream).collect()
        comp.activate()
        inp.on_completed()
        comp.join(timeout=60)
        return stages_out.results
    with pytest.raises(naiad.CheckpointLayoutError, match="belongs to a different dataflow"):
        naiad.execute(other, processes=2, checkpoint_dir=str(ckpt), checkpoint_every=100)
    parts = naiad.execute(_program(EPOCHS), processes=2, checkpoint_dir=str(ckpt),
                          checkpoint_every=100)
    merged = {e: sorted(r for p in parts for r in p.get(e, [])) for e in range(len(EPOCHS))}
    assert merged == {e: sorted(recs) for e, recs in enumerate(EPOCHS)}


def test_a_checkpoint_of_format_version_1_is_refused_naming_the_version(tmp_path):
    """A checkpoint directory newer than every journalled checkpoint, as the release before
    format version 2 wrote it (no format field, a bare sha256 of the content)."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    old = ckpt / "ckpt-000000006"
    old.mkdir(mode=0o700)
    body = {"epoch": 6, "processes": 1, "fingerprint": "f", "parts": {}}
    body["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    (old / "MANIFEST.json").write_text(json.dumps(body))
    with pytest.raises(naiad.LogFormatError, match="format version 1"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)


def test_a_journalled_checkpoint_of_an_unknown_format_is_refused_naming_it(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    _, _, manifest = _newest_commit(ckpt)
    manifest["format"], manifest["epoch"] = 7, 99
    writer = JournalWriter(ckpt / "journal", "commits", directory_key(ckpt))
    writer.append(COMMIT, 99, json.dumps(manifest).encode())
    writer.close()
    with pytest.raises(naiad.LogFormatError, match="format version 7"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)


def test_an_input_log_of_format_version_1_is_refused(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    for segment in (ckpt / "inputs").rglob("*.log"):
        segment.write_bytes(segment.read_bytes()[len(MAGIC):])     # the old layout: no header
    with pytest.raises(naiad.LogFormatError, match="format version 1"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)


def test_the_directory_key_is_private(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    key = ckpt / "KEY"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    key.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)


def test_damage_a_restart_cannot_cure_is_not_retried(tmp_path):
    """A key of the wrong length, or a file where the journal directory belongs, fails the
    first attempt with an error naming it, not max_restarts attempts later."""
    from naiad.recovery.directory import CheckpointDamaged
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    key = ckpt / "KEY"
    good = key.read_bytes()
    key.write_bytes(b"abc")
    with pytest.raises(CheckpointDamaged, match=r"KEY is damaged \(3 bytes, not 32\)"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)
    key.write_bytes(good)
    journal = ckpt / "journal"
    for f in journal.iterdir():
        f.unlink()
    journal.rmdir()
    journal.write_bytes(b"not a directory")
    with pytest.raises(NotADirectoryError, match="journal"):
        naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=3)


def test_log_record_lengths_are_64_bit(tmp_path):
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    segment = sorted((ckpt / "inputs" / "proc-0" / "lines").glob("*.log"))[0]
    data = segment.read_bytes()
    assert data[:len(MAGIC)] == MAGIC
    epoch, length = struct.unpack_from("<qQ", data, len(MAGIC))
    record = data[len(MAGIC) + 48:len(MAGIC) + 48 + length]
    assert pickle.loads(record) == EPOCHS[epoch]


def test_processes_checkpointing_at_different_epochs_fail_fast(tmp_path):
    """Process 0 checkpoints at epoch 2, process 1 at epoch 3: the run fails at once naming
    boundary 2 and how far the input was fed. Two checks can find it first, depending on when
    process 0's arrival at boundary 2 reaches process 1, and each says so in its own words
    (the test expected only the first, and failed the suite once)."""
    def program(comp):
        inp = comp.new_input(name="lines")
        inp.stream.collect()
        comp.activate()
        for e in range(6):
            if e == 2 + comp.process_index:          # process 1 is one epoch late
                comp.checkpoint()
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=60)

    t0 = time.monotonic()
    with pytest.raises(naiad.NaiadError,
                       match="checkpoint at epoch 2: input 'lines' has already been fed epoch 3"
                             "|process 0 checkpoints at epoch 2, but process 1 feeds epoch 2 "
                             "without a checkpoint at epoch 2"):
        naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                      max_restarts=0)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("late", [False, True])
def test_a_checkpoint_only_one_process_takes_fails_fast_and_is_not_retried(tmp_path, late):
    """Process 0 calls comp.checkpoint() at epoch 3; process 1 never does, and feeds (and
    closes) its input first, or only after process 0 is already waiting: either way the run
    fails at once naming both processes and the epoch (it waited 630 s at the barrier, then
    restarted into the same wait)."""
    def program(comp):
        import time as clock
        inp = comp.new_input(name="lines")
        inp.stream.collect()
        comp.activate()
        if late and comp.process_index == 1:
            clock.sleep(1.0)
        for e in range(6):
            if e == 3 and comp.process_index == 0:
                comp.checkpoint()
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=60)

    t0 = time.monotonic()
    # Found by the peers' barrier arrivals, or, when process 1's records reach process 0 first,
    # by the quiescence check: both name the epoch and the input or the process.
    with pytest.raises(naiad.NaiadError, match=r"process 0 checkpoints at epoch 3, but process 1 "
                                               r"feeds epoch \d without a checkpoint at epoch 3|"
                                               r"checkpoint at epoch 3: input 'lines' has already "
                                               r"been fed epoch \d in another process that did "
                                               r"not checkpoint at epoch 3"):
        naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"))
    assert time.monotonic() - t0 < 20


def _noting(seen: Path, stop_after=None):
    """A program whose subscriber notes each epoch it is handed in ``seen``; with
    ``stop_after``, it stops (KeyboardInterrupt) before feeding that epoch."""
    def run(comp):
        inp = comp.new_input(name="lines")

        def note(epoch, records):
            with open(seen, "a") as f:
                f.write(f"{epoch}\n")
        inp.stream.subscribe(note)
        comp.activate()
        for e, recs in enumerate(EPOCHS):
            if stop_after is not None and e == stop_after:
                raise KeyboardInterrupt("stopping the first run")
            inp.on_next(recs)
        inp.on_completed()
        comp.join(timeout=60)
    return run


class _Delay(naiad.Vertex):
    """Sends each record on at epoch + 3 (a later time, as a vertex may)."""

    def on_recv(self, edge, message, time):
        self.send_by(0, message, naiad.Timestamp(time.epoch + 3))


def test_records_sent_to_a_later_epoch_do_not_look_like_a_misaligned_checkpoint(tmp_path):
    """Records in flight at an epoch past the boundary are legitimate when a vertex sent
    them there: the checkpoints wait for them, and the results are right."""
    import stages

    def program(comp):
        inp = comp.new_input(name="lines")
        got = stages.unary(inp.stream, _Delay, partition_by=hash, name="delay").collect()
        comp.activate()
        for e in range(8):
            inp.on_next([e * 10 + comp.process_index])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results

    parts = naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=2)
    merged = {}
    for part in parts:
        for e, recs in part.items():
            merged.setdefault(e, []).extend(recs)
    assert {e: sorted(r) for e, r in merged.items() if r} == {
        e + 3: [e * 10, e * 10 + 1] for e in range(8)}


def test_a_program_that_raises_lets_the_checkpoints_it_passed_commit(tmp_path):
    """The program raises right after feeding past boundaries 2, 4 and 6 (checkpoints are
    committed behind, once a slow subscriber has handed out their epochs): every one it
    passed is committed before the run stops, so a rerun resumes from 6."""
    import time as clock
    ckpt = tmp_path / "ckpt"

    def program(comp):
        inp = comp.new_input(name="lines")
        inp.stream.subscribe(lambda epoch, records: clock.sleep(0.05))
        comp.activate()
        for e, recs in enumerate(EPOCHS):
            if e == 7:
                raise KeyboardInterrupt("stopping the run")
            inp.on_next(recs)

    with pytest.raises(KeyboardInterrupt):
        naiad.execute(program, checkpoint_dir=str(ckpt), checkpoint_every=2, max_restarts=0)
    assert list_checkpoints(ckpt)[-1] == 6


def test_a_damaged_delivery_mark_never_skips_an_epoch(tmp_path):
    """Subscribers' marks say how many epochs were handed out; a flipped digit (claiming more)
    in the newest mark must fall back to the one before it: an epoch may come again, none may
    be skipped."""
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.txt"
    program = functools.partial(_noting, seen)

    with pytest.raises(KeyboardInterrupt):
        naiad.execute(program(stop_after=6), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=0)
    first = [int(x) for x in seen.read_text().split()]
    mark = next((ckpt / "outputs" / "proc-0").glob("*.delivered"))
    lines = mark.read_text().splitlines()
    newest = max(range(len(lines)), key=lambda i: int(lines[i].split()[0]))
    count, crc = lines[newest].split()
    lines[newest] = f"{int(count) + 9:>22} {crc}"         # a flipped digit: claims 9 more
    mark.write_text("\n".join(lines) + "\n")
    with pytest.warns(CheckpointWarning, match="delivery mark .* is damaged"):
        naiad.execute(program(), checkpoint_dir=str(ckpt), checkpoint_every=2)
    delivered = [int(x) for x in seen.read_text().split()]
    assert set(delivered) == set(range(len(EPOCHS)))     # nothing skipped
    assert delivered[:len(first)] == first


@pytest.mark.parametrize("damage", ["delete", "empty", "garbage"])
def test_a_lost_delivery_mark_is_named_when_epochs_may_come_again(tmp_path, damage):
    """A mark deleted, emptied or overwritten cannot say how far past the checkpoint the
    subscriber got: those epochs come again (none is skipped), and a warning says so."""
    import os
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.txt"
    program = functools.partial(_noting, seen)

    with pytest.raises(KeyboardInterrupt):
        naiad.execute(program(stop_after=7), checkpoint_dir=str(ckpt), checkpoint_every=2,
                      max_restarts=0)
    mark = next((ckpt / "outputs" / "proc-0").glob("*.delivered"))
    {"delete": mark.unlink, "empty": lambda: mark.write_bytes(b""),
     "garbage": lambda: mark.write_bytes(os.urandom(64).replace(b"\n", b"x"))}[damage]()
    with pytest.warns(CheckpointWarning, match=r"delivery mark .* missing or damaged \(it holds "
                                               r"0, the checkpoint is at epoch [46]\)"):
        naiad.execute(program(), checkpoint_dir=str(ckpt), checkpoint_every=2)
    delivered = [int(x) for x in seen.read_text().split()]
    assert set(delivered) == set(range(len(EPOCHS)))
    assert all(delivered.count(e) == 1 for e in range(4))     # before the checkpoint: once


def test_a_commit_journal_with_a_damaged_header_is_named_and_the_run_starts_over(tmp_path):
    """Every checkpoint of that journal is lost: the run starts from the beginning (no state
    restored), with a warning naming the file, and still delivers the right results."""
    ckpt = tmp_path / "ckpt"
    _first_run(ckpt)
    [commits] = journal_files(ckpt / "journal", "commits")
    data = bytearray(commits.read_bytes())
    data[3] ^= 0xFF                                     # inside NAIADJ03
    commits.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match=f"{commits.name} cannot be read"):
        result = naiad.execute(_program(EPOCHS), checkpoint_dir=str(ckpt), checkpoint_every=2)
    assert result[0] == {e: sorted(r) for e, r in enumerate(EPOCHS)}
