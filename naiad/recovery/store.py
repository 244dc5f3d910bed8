"""Durable checkpoints: per-worker vertex state, per-process parts, a manifest committed last.

Layout under the checkpoint directory::

    ckpt-000000010/                  boundary epoch 10: all epochs < 10 are in the state
        proc-0-worker-0.pkl          pickled vertex states of one worker
        proc-0.json                  the process's part: files, sizes, sha256, notifications
        MANIFEST.json                written last, by process 0, once every part is durable
    inputs/proc-0/<input>/<seq>.log     records each input accepted, for replay (EpochLog)
    outputs/proc-0/<name>.delivered     epochs handed to a subscriber, one line per delivery
    outputs/proc-0/<name>/<seq>.log     collected records per epoch (EpochLog)

Checkpoint files are written to a temporary name, fsynced and renamed (checkpoints written by
earlier releases kept the worker files in a ``proc-0/`` directory; the part lists the files by
their path, so those are read too).  A checkpoint whose
manifest, part or file is missing, truncated or fails its checksum is skipped with a warning
naming the file, in favour of the previous complete one.  The logs are appended to without
fsync (they survive a killed process) and fsynced at every checkpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import shutil
import signal
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple


from naiad.recovery.directory import CheckpointInUse, check_private, directory_key, lock
from naiad.recovery.marks import MarkFile, read_count
from naiad.recovery.logs import FORMAT, CheckpointWarning, EpochLog, LogFormatError, OutputLost
from naiad.errors import NaiadError
from naiad.files import sync_dir, write_atomic, write_files
from naiad.recovery import snapshot
from naiad.progress.timestamp import Timestamp

__all__ = ["CheckpointStore", "Restored", "EpochLog", "write_atomic", "CheckpointWarning",
           "CheckpointInUse", "CheckpointLayoutError", "LogFormatError", "OutputLost", "FORMAT"]


def fault_point(root: Path, name: str, epoch: int, process: int) -> None:
    """Fault injection for recovery tests: ``NAIAD_FAULT=name:epoch:process`` kills this
    process (SIGKILL) the first time it reaches that point; a marker file makes it fire once."""
    spec = os.environ.get("NAIAD_FAULT")
    if not spec or spec != f"{name}:{epoch}:{process}":
        return
    marker = root / f".fault-{name}-{epoch}-{process}"
    if marker.exists():
        return
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        import cloudpickle      # classes of __main__, lambdas: by value
        return cloudpickle.dumps(obj)


class Restored:
    """What a process restores from a complete checkpoint."""

    def __init__(self, epoch: int, path: Path, manifest: Dict[str, Any]):
        self.epoch, self.path, self.manifest = epoch, path, manifest
        # worker index -> {stage id -> state}
        self.states: Dict[int, Dict[int, Any]] = {}

    def __repr__(self) -> str:
        return f"Restored(epoch={self.epoch}, path={self.path})"

    @property
    def notifications(self) -> List[Tuple[int, int, Any]]:
        """(worker, stage id, time) for every pending notification request in the computation."""
        out = []
        for part in self.manifest["parts"].values():
            for w, sid, epoch, counters in part["notifications"]:
                out.append((w, sid, Timestamp(epoch, tuple(counters))))
        return out

    @property
    def open_inputs(self) -> Dict[int, int]:
        """input stage id -> number of workers whose input was still open at the checkpoint."""
        counts: Dict[int, int] = {}
        for part in self.manifest["parts"].values():
            for sid, n in part["open_inputs"].items():
                counts[int(sid)] = counts.get(int(sid), 0) + n
        return counts


def _remove_all(paths: List[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


class CheckpointLayoutError(NaiadError):
    """A checkpoint was taken by another dataflow, or with another number of processes or
    workers than this run's: a restart cannot cure it, so it is never retried."""


class CheckpointStore:
    """One process's view of the checkpoint directory."""

    def __init__(self, directory: str | os.PathLike, process: int, processes: int,
                 keep: int = 3, workers: int = 1):
        self.root = Path(directory)
        self.process = process
        self.processes = processes
        self.workers = workers
        self.keep = max(1, int(keep))
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_private(self.root)
        self._lock_fd: Optional[int] = lock(self.root, process)
        self.key = directory_key(self.root)
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
        return self.root / f"ckpt-{epoch:09d}"

    def write_part(self, epoch: int, fingerprint: str,
                   worker_states: Dict[int, Dict[int, Any]],
                   notifications: List[Tuple[int, int, Any]],
                   open_inputs: Dict[int, int]) -> int:
        """Write this process's vertex states and part manifest; returns bytes written.

        First the input logs and collected outputs appended before the boundary are made
        durable, so a committed checkpoint never depends on data that a power cut could lose.
        The files go into the checkpoint's directory in one :func:`write_files`, each fsynced
        before its rename; the directory itself is fsynced once for every process's files, by
        process 0 in :meth:`commit`, before the manifest."""
        with self._logs_lock:
            logs = list(self._logs.values())
        for log in logs:
            log.seal()
        base = str(self.ckpt_dir(epoch))
        out: Dict[str, bytes] = {}
        files = {}
        total = 0
        for w, states in sorted(worker_states.items()):
            data = _dumps(states)
            rel = f"proc-{self.process}-worker-{w}.pkl"
            out[rel] = data
            files[rel] = {"sha256": _sha(data), "size": len(data)}
            total += len(data)
        part = {"process": self.process, "epoch": epoch, "fingerprint": fingerprint,
                "files": files,
                "notifications": [[w, sid, t[0], list(t[1])] for w, sid, t in notifications],
                "open_inputs": {str(k): v for k, v in open_inputs.items()}}
        data = json.dumps(part, sort_keys=True).encode()
        out[f"proc-{self.process}.json"] = data     # last: it names the files before it
        fault_point(self.root, "checkpoint-write", epoch, self.process)
        write_files(base, out, sync_dir=False)
        return total + len(data)

    def commit(self, epoch: int, fingerprint: str) -> None:
        """Process 0, once every process has written its part: make the parts' directory
        entries durable, write the manifest, then prune old checkpoints."""
        fault_point(self.root, "checkpoint-commit", epoch, self.process)
        base = self.ckpt_dir(epoch)
        sync_dir(base)       # every part's rename is durable before the manifest names it
        parts = {}
        for p in range(self.processes):
            data = (base / f"proc-{p}.json").read_bytes()
            parts[str(p)] = {"sha256": _sha(data)}
        manifest = {"format": FORMAT, "epoch": epoch, "processes": self.processes,
                    "workers": self.workers, "fingerprint": fingerprint, "parts": parts}
        manifest["hmac"] = self._mac(manifest)
        write_files(str(base), {"MANIFEST.json": json.dumps(manifest, sort_keys=True).encode()})
        self.prune()

    def prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints.  Older ones are renamed out of the way
        at once (``epochs()`` no longer sees them) and deleted, with what an earlier process
        left half deleted."""
        names = os.listdir(self.root)
        complete = self.committed(names)
        if len(complete) > self.keep:
            oldest_kept = complete[-self.keep]
            for e in self.epochs(names):
                if e < oldest_kept:
                    doomed = self.root / f".pruned-{e:09d}-{os.getpid()}"
                    try:
                        os.rename(self.ckpt_dir(e), doomed)
                    except OSError:
                        shutil.rmtree(self.ckpt_dir(e), ignore_errors=True)
                    else:
                        names.append(doomed.name)
        doomed_all = [self.root / n for n in names if n.startswith(".pruned-")]
        if doomed_all:
            _remove_all(doomed_all)

    def epochs(self, names: Optional[List[str]] = None) -> List[int]:
        """The boundaries of the checkpoint directories present (``names``: a listing of the
        root already made), committed or not."""
        out = []
        for name in os.listdir(self.root) if names is None else names:
            if name.startswith("ckpt-"):
                try:
                    out.append(int(name[5:]))
                except ValueError:
                    continue
        return sorted(out)

    def committed(self, names: Optional[List[str]] = None) -> List[int]:
        """The boundaries of the checkpoints whose manifest is written, ascending."""
        root = str(self.root)
        return [e for e in self.epochs(names)
                if os.path.exists(os.path.join(root, f"ckpt-{e:09d}", "MANIFEST.json"))]

    # ---- finding and loading ---------------------------------------------------------------------
    def latest(self, fingerprint: str) -> Optional[Restored]:
        """The newest complete, intact checkpoint, with this process's states loaded."""
        for epoch in reversed(self.epochs()):
            restored = self._load(epoch, fingerprint)
            if restored is not None:
                return restored
        return None

    def _mac(self, manifest: Dict[str, Any]) -> str:
        """The manifest's HMAC: it lists the parts' hashes, which list the files' hashes, so it
        authenticates every file of the checkpoint before anything is unpickled."""
        data = json.dumps(manifest, sort_keys=True).encode()
        return hmac.new(self.key, data, hashlib.sha256).hexdigest()

    def _warn(self, path: Path, why: str) -> None:
        warnings.warn(f"checkpoint file {path} {why}; using an earlier checkpoint",
                      CheckpointWarning, stacklevel=3)

    def _load(self, epoch: int, fingerprint: str) -> Optional[Restored]:
        base = self.ckpt_dir(epoch)
        mpath = base / "MANIFEST.json"
        if not mpath.exists():
            return None   # never committed: an interrupted checkpoint, not damage
        try:
            manifest = json.loads(mpath.read_bytes())
            if not isinstance(manifest, dict):
                raise ValueError(f"it holds a JSON {type(manifest).__name__}, not an object")
        except (OSError, ValueError) as exc:
            self._warn(mpath, f"cannot be read ({type(exc).__name__}: {exc})")
            return None
        if manifest.get("format") != FORMAT and "sha256" in manifest and "hmac" not in manifest:
            msg = (f"checkpoint {base} is in format version 1 (written by an earlier release); "
                   f"this release reads format version {FORMAT}: resume it with the release "
                   "that wrote it, or start from a fresh checkpoint_dir")
            raise LogFormatError(msg)
        own = manifest.pop("hmac", None)
        if not isinstance(own, str) or not hmac.compare_digest(own, self._mac(manifest)):
            self._warn(mpath, "fails its HMAC (damaged, or not written with this directory's key)")
            return None
        if manifest.get("format") != FORMAT:
            msg = (f"checkpoint {base} is in format version {manifest.get('format')!r}; this "
                   f"release reads format version {FORMAT}")
            raise LogFormatError(msg)
        if manifest.get("fingerprint") != fingerprint:
            msg = (f"checkpoint directory {self.root} holds checkpoints of a different dataflow "
                   f"(fingerprint {manifest.get('fingerprint')} != {fingerprint}); use a fresh "
                   "directory for a different program")
            raise CheckpointLayoutError(msg)
        layout = (manifest.get("processes"), manifest.get("workers"))
        if layout != (self.processes, self.workers):
            msg = (f"checkpoint {base} was taken with {layout[0]} process(es) x {layout[1]} "
                   f"worker(s); this run has {self.processes} x {self.workers}: vertex state is "
                   "partitioned by worker, so resume with the same processes= and workers=, or "
                   "start from a fresh checkpoint_dir")
            raise CheckpointLayoutError(msg)
        parts = {}
        for p, meta in manifest["parts"].items():
            ppath = base / f"proc-{p}.json"
            try:
                data = ppath.read_bytes()
            except OSError:
                self._warn(ppath, "is missing")
                return None
            if _sha(data) != meta["sha256"]:
                self._warn(ppath, "fails its checksum")
                return None
            parts[p] = json.loads(data)
        manifest["parts"] = parts
        restored = Restored(epoch, base, manifest)
        # Every process checks every file, its own and the others', in full: a checkpoint that
        # one process rejects must be rejected by all, or they would resume from different ones.
        for p, part in sorted(parts.items()):
            for rel, meta in sorted(part["files"].items()):
                fpath = base / rel
                try:
                    data = fpath.read_bytes()
                except OSError:
                    self._warn(fpath, "is missing")
                    return None
                if len(data) != meta["size"]:
                    self._warn(fpath, f"is truncated ({len(data)} of {meta['size']} bytes)")
                    return None
                if _sha(data) != meta["sha256"]:
                    self._warn(fpath, "fails its checksum")
                    return None
                if p == str(self.process):
                    worker = int(rel.rsplit("-", 1)[1].split(".")[0])
                    restored.states[worker] = snapshot.load_states(data)
        return restored

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
        """Drop this process's input logs below ``below``, but never below the oldest kept
        checkpoint that is committed: a newer one may still fail to commit (process 0 dies
        first), and then the older one is resumed from and its epochs are replayed from this
        log."""
        committed = self.committed()
        below = min(below, committed[-self.keep] if len(committed) >= self.keep
                    else (committed[0] if committed else 0))
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
        return self._log(self._output_dir() / name).items()

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
        if self._lock_fd is not None:
            os.close(self._lock_fd)           # releases the lock
            self._lock_fd = None
