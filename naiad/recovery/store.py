"""Durable checkpoints: each process appends its part to a journal, process 0 commits last.

Layout under the checkpoint directory::

    journal/proc-0-000000000.jnl        process 0's parts: vertex states, notifications, inputs
    journal/commits-000000000.jnl       process 0's commit records, one per checkpoint
    inputs/proc-0/<input>/<seq>.log     records each input accepted, for replay (EpochLog)
    outputs/proc-0/<name>.delivered     epochs handed to a subscriber (MarkFile)
    outputs/proc-0/<name>/<seq>.log     collected records per epoch (EpochLog)

A checkpoint at boundary ``b`` is one record in every process's journal (its *part*: the
pickled states of its workers, and as JSON its pending notifications and open inputs) and one
*commit* record in process 0's commit journal, appended once every part is durable, naming
the file, offset and HMAC of each part (:mod:`naiad.recovery.journal`).  Each append is one
``write`` and one ``fsync``.  A commit, or a part it names, that is missing, cut short or
fails its HMAC is skipped with a warning naming the file, in favour of the previous complete
checkpoint.  Journal files are deleted whole once every checkpoint they hold is older than
the ``keep`` newest committed ones.  The logs are appended to without fsync (they survive a
killed process) and fsynced at every checkpoint.  Checkpoints written as directories by
earlier releases (``ckpt-<epoch>/``) are still resumed from (:mod:`naiad.recovery.legacy`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple


from naiad.recovery.directory import run_held as was_held
from naiad.recovery.directory import (CheckpointInUse, check_private, directory_key, fault_point,
                                      lock)
from naiad.recovery.journal import (COMMIT, FORMAT, MAGIC, PART, JournalDamage, JournalWriter,
                                    Record, journal_files, read_record, scan, scanned_to)
from naiad.recovery.legacy import committed_directories, directory_epochs, load_directory
from naiad.recovery.marks import MarkFile, read_count
from naiad.recovery.logs import CheckpointWarning, EpochLog, LogFormatError, OutputLost
from naiad.recovery.restored import CheckpointLayoutError, Restored, check_manifest, check_owner
from naiad.files import make_dirs, sync_dir, write_atomic, write_failed
from naiad.recovery import snapshot

__all__ = ["CheckpointStore", "list_checkpoints", "Restored", "EpochLog", "write_atomic", "CheckpointWarning",
           "CheckpointInUse", "CheckpointLayoutError", "LogFormatError", "OutputLost", "FORMAT"]

_META = struct.Struct("<I")          # a part's payload: JSON length, JSON, pickled states


_dumps = snapshot.dumps


def list_checkpoints(directory: str | os.PathLike) -> List[int]:
    """The boundaries of the checkpoints committed in ``directory``, ascending: the headers of
    the commit records, and the directories of earlier releases (nothing is authenticated or
    unpickled: recovery does that, and skips what fails).  Journal files hold several
    checkpoints and are deleted whole, so this may list more than ``checkpoint_keep``."""
    root = Path(directory)
    epochs = set(committed_directories(root, os.listdir(root)))
    for path in journal_files(root / "journal", "commits"):
        try:
            epochs.update(r.epoch for r in scan(path) if r.kind == COMMIT)
        except (OSError, JournalDamage):
            continue
    return sorted(epochs)


class CheckpointStore:
    """One process's view of the checkpoint directory."""

    def __init__(self, directory: str | os.PathLike, process: int, processes: int,
                 keep: int = 3, workers: int = 1, run_held: bool = False):
        self.root = Path(directory)
        self.process = process
        self.processes = processes
        self.workers = workers
        self.keep = max(1, int(keep))
        self._lock_fds: List[int] = []
        try:
            for made in make_dirs(self.root, 0o700):
                sync_dir(made.parent)             # its entry survives a power cut
            check_private(self.root)
            self._lock_fds = lock(self.root, process, run_held or was_held(self.root))
            self.key = directory_key(self.root)
        except BaseException as exc:
            self._release()              # a store that failed to open holds no lock
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise write_failed(exc, self.root, "the checkpoint directory") from exc
            raise
        self.journal = self.root / "journal"
        self._parts = JournalWriter(self.journal, f"proc-{process}", self.key)
        self._commit_log = JournalWriter(self.journal, "commits", self.key) if process == 0 \
            else None
        self._commits: Dict[int, Tuple[Path, Record]] = {}    # epoch -> its commit record
        self._bases: Dict[int, int] = {}      # epoch -> the oldest checkpoint restoring it reads
        self._written: List[int] = []         # the newest ``keep`` parts this run wrote
        self._scanned: Dict[Path, int] = {}                    # commit file -> bytes scanned
        self._part_epochs: Optional[Dict[Path, int]] = None    # own part file -> highest epoch
        self._legacy: List[int] = []          # committed checkpoint directories (format 2)
        self._legacy_dirs: List[int] = []     # every checkpoint directory
        self._logs: Dict[Path, EpochLog] = {}
        self._logs_lock = threading.Lock()
        self._marks: Dict[str, MarkFile] = {}
        self._inputs: Dict[str, EpochLog] = {}

    def _log(self, directory: Path, deferred: bool = False) -> EpochLog:
        with self._logs_lock:
            log = self._logs.get(directory)
            if log is None:
                log = self._logs[directory] = EpochLog(directory, self.key, deferred)
            return log

    # ---- writing a checkpoint ------------------------------------------------------------------
    def rotate_logs(self) -> None:
        """At a boundary, in the inputs' thread: later epochs go to new log segments."""
        with self._logs_lock:
            logs = list(self._logs.values())
        for log in logs:
            log.rotate()

    def ckpt_dir(self, epoch: int) -> Path:
        """The directory of a checkpoint written by an earlier release (format version 2)."""
        return self.root / f"ckpt-{epoch:09d}"

    def write_part(self, epoch: int, fingerprint: str,
                   worker_states: Dict[int, Dict[int, Any]],
                   notifications: List[Tuple[int, int, Any]],
                   open_inputs: Dict[int, int]) -> Tuple[int, Dict[str, Any]]:
        """Append this process's part to its journal; returns its size in bytes and where it
        is (for process 0's commit record).

        First the input logs and collected outputs appended before the boundary are made
        durable, so a committed checkpoint never depends on data that a power cut could lose."""
        with self._logs_lock:
            logs = list(self._logs.values())
        for log in logs:
            log.seal()
        meta = json.dumps({"process": self.process, "epoch": epoch, "fingerprint": fingerprint,
                           "workers": sorted(worker_states),
                           "notifications": [[w, sid, t[0], list(t[1])]
                                             for w, sid, t in notifications],
                           "open_inputs": {str(k): v for k, v in open_inputs.items()}},
                          sort_keys=True).encode()
        payload = _META.pack(len(meta)) + meta + _dumps(worker_states)
        fault_point(self.root, "checkpoint-write", epoch, self.process)
        where = self._parts.append(PART, epoch, payload)
        where["base"] = min([epoch] + [snapshot.base_of(c, epoch) for states in
                                       worker_states.values() for c in states.values()])
        if self._part_epochs is not None:
            self._part_epochs[self.journal / where["file"]] = epoch
        self._written = (self._written + [epoch])[-self.keep:]
        return len(payload), where

    def commit(self, epoch: int, fingerprint: str, parts: Dict[int, Dict[str, Any]]) -> None:
        """Process 0, once every process's part is durable (``parts``: where each is): append
        the commit record (fsynced on return)."""
        fault_point(self.root, "checkpoint-commit", epoch, self.process)
        assert self._commit_log is not None, "only process 0 commits"
        base = min([epoch] + [int(where.get("base", epoch)) for where in parts.values()])
        manifest = {"format": FORMAT, "epoch": epoch, "processes": self.processes,
                    "workers": self.workers, "fingerprint": fingerprint, "base": base,
                    "parts": {str(p): where for p, where in sorted(parts.items())}}
        self._bases[epoch] = base
        data = json.dumps(manifest, sort_keys=True).encode()
        where = self._commit_log.append(COMMIT, epoch, data)
        path = self.journal / where["file"]
        self._commits[epoch] = (path, Record(COMMIT, epoch, where["offset"], where["length"],
                                             bytes.fromhex(where["mac"])))

    # ---- the committed checkpoints ---------------------------------------------------------------
    def _refresh_commits(self) -> Dict[int, Tuple[Path, Record]]:
        """Read the commit records appended since the last call (headers only)."""
        for path in journal_files(self.journal, "commits"):
            start = self._scanned.get(path, 0)
            if start < 0:
                continue                  # unreadable: warned about once
            try:
                records = scan(path, start)
            except FileNotFoundError:
                self._scanned.pop(path, None)     # pruned by process 0 meanwhile
                continue
            except (OSError, JournalDamage) as exc:
                self._warn(path, f"cannot be read ({exc})")
                self._scanned[path] = -1
                continue
            for rec in records:
                if rec.kind == COMMIT:
                    self._commits[rec.epoch] = (path, rec)
            self._scanned[path] = scanned_to(records, max(start, len(MAGIC)))
        return self._commits

    def committed(self) -> List[int]:
        """The boundaries of the committed checkpoints (journalled, or directories written by
        an earlier release), ascending; some may be pruned already, see :meth:`prune`."""
        legacy = committed_directories(self.root, os.listdir(self.root))
        return sorted(set(self._refresh_commits()) | set(legacy))

    def prune(self) -> None:
        """Delete what only checkpoints older than the newest ``keep`` committed ones need:
        this process's journal files whose parts are all older (not the one written to),
        process 0's commit files likewise and directories of earlier releases, and the input
        log segments.  Process 0 knows its commits; the others read the commit records
        appended since their last look (a few small reads)."""
        if self._commit_log is None:
            if not self._prunable():
                return                  # nothing to delete: no need to read the commits
            self._refresh_commits()
        committed = sorted(self._commits)
        if self._legacy:
            committed = sorted(set(committed) | set(self._legacy))
        if len(committed) <= self.keep:
            return
        oldest = committed[-self.keep]
        below = min(oldest, self._base(oldest))   # and what its tables' deltas build on
        if self._part_epochs is None:        # files of earlier runs: their parts, once
            self._part_epochs = {}
            for path in journal_files(self.journal, f"proc-{self.process}"):
                if path != self._parts.path:
                    try:
                        high = max((r.epoch for r in scan(path)), default=-1)
                    except (OSError, JournalDamage):
                        high = -1
                    self._part_epochs[path] = high
        doomed = [p for p, high in self._part_epochs.items()
                  if high < below and p != self._parts.path]
        for path in doomed:
            del self._part_epochs[path]
        highest: Dict[Path, int] = {}           # commit file -> its newest commit
        for e, (p, _) in self._commits.items():
            highest[p] = max(highest.get(p, e), e)
        for e in [e for e in self._commits if e < below]:
            del self._commits[e]                # kept: only what the next prune needs
        for e in [e for e in self._bases if e < below]:
            del self._bases[e]
        if self._commit_log is not None:
            doomed.extend(p for p, high in highest.items()
                          if high < below and p != self._commit_log.path)
            if self._legacy_dirs:
                doomed.extend(self.ckpt_dir(e) for e in self._legacy_dirs if e < below)
                self._legacy_dirs = [e for e in self._legacy_dirs if e >= below]
                self._legacy = [e for e in self._legacy if e >= below]
        for path in doomed:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except OSError:
                    pass          # gone already; a file left behind is pruned by a later run
        self.prune_inputs(oldest)

    def _prunable(self) -> bool:
        """Whether pruning could delete anything of this process: the checkpoints kept are
        among those it wrote a part for, so nothing that its ``keep``-th newest part still
        needs is deleted, and that bound is known without reading a commit."""
        if self._part_epochs is None or len(self._written) < self.keep:
            return True
        bound = self._written[-self.keep]
        if any(high < bound and p != self._parts.path for p, high in self._part_epochs.items()):
            return True
        inputs = self.root / "inputs" / f"proc-{self.process}"
        with self._logs_lock:
            logs = [log for d, log in self._logs.items() if d.parent == inputs]
        return any(log.prunable(bound) for log in logs)

    def _base(self, epoch: int) -> int:
        """The oldest checkpoint that restoring the one at ``epoch`` reads (its commit record
        says; read once)."""
        base = self._bases.get(epoch)
        if base is None:
            base = epoch
            entry = self._commits.get(epoch)
            if entry is not None:
                try:
                    manifest = json.loads(read_record(entry[0], entry[1].offset, self.key,
                                                      COMMIT, epoch, entry[1].length))
                    base = min(epoch, int(manifest.get("base", epoch)))
                except (OSError, JournalDamage, ValueError, TypeError, AttributeError):
                    base = epoch
            self._bases[epoch] = base
        return base

    # ---- finding and loading ---------------------------------------------------------------------
    def latest(self, fingerprint: str) -> Optional[Restored]:
        """The newest complete, intact checkpoint, with this process's states loaded (after
        checking that the directory belongs to this dataflow and layout)."""
        check_owner(self.root, self.key, self.process, fingerprint, self.processes, self.workers)
        journalled = dict(self._refresh_commits())
        names = os.listdir(self.root)
        self._legacy = committed_directories(self.root, names)
        self._legacy_dirs = directory_epochs(names)
        for epoch in reversed(self.committed()):
            if epoch in journalled:
                restored = self._load(epoch, *journalled[epoch], fingerprint)
            else:
                restored = load_directory(self.ckpt_dir(epoch), epoch, fingerprint, self.key,
                                          self.process, self.processes, self.workers,
                                          self._warn)
            if restored is not None:
                return restored
        return None

    def _warn(self, path: Path, why: str, epoch: Optional[int] = None) -> None:
        at = f" at epoch {epoch}" if epoch is not None else ""
        warnings.warn(f"checkpoint file {path}{at} {why}; using an earlier checkpoint",
                      CheckpointWarning, stacklevel=3)

    def _load(self, epoch: int, path: Path, rec: Record, fingerprint: str) -> Optional[Restored]:
        """The journalled checkpoint committed by ``rec``, or None (with a warning)."""
        manifest = self._read_commit(epoch, path, rec)
        if manifest is None:
            return None
        if manifest.get("format") != FORMAT:
            msg = (f"checkpoint {epoch} in {path} is in format version "
                   f"{manifest.get('format')!r}; this release reads format versions 2 and 3")
            raise LogFormatError(msg)
        check_manifest(manifest, f"{epoch} in {path}", self.root, fingerprint, self.processes,
                       self.workers)
        got = self._read_parts(epoch, path, manifest)
        if got is None:
            return None
        restored = Restored(epoch, self.journal, {**manifest, "parts": got[0]})
        restored.states = snapshot.load_states(got[1])
        base = manifest.get("base", epoch)
        if isinstance(base, int) and base < epoch:
            # Deltas of tables build on older checkpoints: every process checks every part
            # back to the base (they must all reject the same checkpoints), and keeps its own.
            older: Dict[int, Any] = {}
            for e in sorted(self._commits):
                if base <= e < epoch:
                    manifest_e = self._read_commit(e, *self._commits[e])
                    got_e = None if manifest_e is None else self._read_parts(e, path, manifest_e)
                    if got_e is None:
                        self._warn(path, f"builds on the checkpoint at epoch {e}, which is "
                                         "damaged", epoch)
                        return None
                    older[e] = got_e[1]

            def states_at(e: int) -> Dict[int, Any]:
                if e not in older:
                    msg = f"the checkpoint at epoch {e} is not committed"
                    raise snapshot.ChainBroken(msg)
                if isinstance(older[e], bytes):
                    older[e] = snapshot.load_states(older[e])
                return older[e]
            try:
                snapshot.resolve_chains(restored.states, states_at)
            except snapshot.ChainBroken as exc:
                self._warn(path, str(exc), epoch)
                return None
        return restored

    def _read_commit(self, epoch: int, path: Path, rec: Record) -> Optional[Dict[str, Any]]:
        """The commit record's manifest, or None (with a warning)."""
        try:
            data = read_record(path, rec.offset, self.key, COMMIT, epoch, rec.length)
            manifest = json.loads(data)
            if not isinstance(manifest, dict):
                raise JournalDamage(f"holds a JSON {type(manifest).__name__}, not an object")
            if not isinstance(manifest.get("format"), int) or \
                    not isinstance(manifest.get("parts"), dict):
                raise JournalDamage("holds no format version or no parts")
        except (JournalDamage, ValueError) as exc:
            self._warn(path, f"(its commit record) {exc}", epoch)
            return None
        return manifest

    def _read_parts(self, epoch: int, path: Path, manifest: Dict[str, Any]
                    ) -> Optional[Tuple[Dict[str, Any], bytes]]:
        """Every process's part of a checkpoint, checked in full (a checkpoint that one process
        rejects must be rejected by all, or they would resume from different ones): their
        metadata, and this process's pickled states; or None (with a warning)."""
        metas: Dict[str, Any] = {}
        own = b""
        for p in range(self.processes):
            where = manifest["parts"].get(str(p))
            if not isinstance(where, dict):
                self._warn(path, f"(its commit record) names no part of process {p}", epoch)
                return None
            ppath = self.journal / Path(str(where.get("file"))).name
            try:
                payload = read_record(ppath, int(where["offset"]), self.key, PART, epoch,
                                      int(where["length"]), str(where["mac"]))
                (n,) = _META.unpack_from(payload)
                meta = json.loads(payload[_META.size:_META.size + n])
            except (JournalDamage, ValueError, KeyError, struct.error) as exc:
                self._warn(ppath, f"(the part of process {p}) {exc}", epoch)
                return None
            metas[str(p)] = meta
            if p == self.process:
                own = payload[_META.size + n:]
        return metas, own

    # ---- input log ---------------------------------------------------------------------------------
    def _input_dir(self, name: str) -> Path:
        return self.root / "inputs" / f"proc-{self.process}" / name

    def _input_log(self, name: str) -> EpochLog:
        log = self._inputs.get(name)
        if log is None:
            log = self._inputs[name] = self._log(self._input_dir(name), deferred=True)
        return log

    def log_input(self, name: str, epoch: int, records: list) -> None:
        """Record the records of one epoch of an input before they are fed: in memory, written
        by :meth:`flush_inputs` before a worker takes the epoch (see EpochLog)."""
        self._input_log(name).append(epoch, _dumps(records))

    def flush_inputs(self) -> None:
        """Write what the input logs hold in memory (a worker is about to take an epoch of
        input: nothing may be computed from a record that a killed process would lose)."""
        for log in tuple(self._inputs.values()):
            log.flush()

    def logged_input(self, name: str, epoch: int) -> Optional[list]:
        """The records logged for ``epoch`` of input ``name``, or None."""
        log = self._input_log(name)
        if not log.may_hold(epoch):
            return None
        ok, records = log.read(epoch)
        return records if ok else None

    def prune_inputs(self, below: int) -> None:
        """Drop this process's input logs below ``below``: the oldest kept checkpoint that is
        committed (a newer one may still fail to commit, if process 0 dies first, and then
        the older one is resumed from and its epochs are replayed from this log)."""
        if below <= 0:
            return
        inputs = self.root / "inputs" / f"proc-{self.process}"
        with self._logs_lock:
            logs = [log for d, log in self._logs.items() if d.parent == inputs]
        for log in logs:
            log.prune(below)

    # ---- outputs -------------------------------------------------------------------------------------
    def _output_dir(self) -> Path:
        return self.root / "outputs" / f"proc-{self.process}"

    def delivered(self, name: str) -> int:
        """How many epochs of subscription ``name`` were handed out (0 if none)."""
        return read_count(self._output_dir() / f"{name}.delivered")

    def open_marks(self, name: str, count: int) -> None:
        """Create the mark file of subscription ``name`` (holding ``count``) before its first
        delivery: creating it at the first mark would come after that delivery's call."""
        if name not in self._marks:
            self._marks[name] = MarkFile(self._output_dir() / f"{name}.delivered", count)

    def mark_delivered(self, name: str, count: int) -> None:
        """Note that ``count`` epochs of ``name`` were handed out (see :mod:`.marks`: no system
        call after the first of a run; not fsynced: after a machine crash at most the epochs
        since the last checkpoint are delivered again)."""
        marks = self._marks.get(name)
        if marks is None:
            self._marks[name] = MarkFile(self._output_dir() / f"{name}.delivered", count)
        else:
            marks.write(count)

    def store_output(self, name: str, epoch: int, records: list) -> None:
        """Keep the records ``collect`` got at ``epoch``; a later call for the same epoch wins."""
        self._log(self._output_dir() / name).append(epoch, _dumps(records))

    def stored_outputs(self, name: str) -> Dict[int, list]:
        return self._log(self.output_path(name)).items()

    def output_path(self, name: str) -> Path:
        """The directory of this process's log of the output ``name``."""
        return self._output_dir() / name

    def _release(self) -> None:
        fds, self._lock_fds = self._lock_fds, []
        for fd in fds:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def close(self) -> None:
        """Release open files (the data is already in the kernel)."""
        with self._logs_lock:
            logs = list(self._logs.values())
        for log in logs:
            log.close()
        for marks in self._marks.values():
            marks.close()
        self._marks.clear()
        self._parts.close()
        if self._commit_log is not None:
            self._commit_log.close()
        self._release()                       # the lock
