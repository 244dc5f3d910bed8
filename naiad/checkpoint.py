"""Durable checkpoints: per-worker vertex state, per-process parts, a manifest committed last.

Layout under the checkpoint directory::

    ckpt-000000010/                  boundary epoch 10: all epochs < 10 are in the state
        proc-0/worker-0.pkl          pickled vertex states of one worker
        proc-0.json                  the process's part: files, sizes, sha256, notifications
        MANIFEST.json                written last, by process 0, once every part is durable
    inputs/proc-0/<input>/<epoch>.pkl   records each input accepted, for replay
    outputs/proc-0/<name>.delivered     last epoch handed to a subscriber
    outputs/proc-0/<name>/<epoch>.pkl   collected records per epoch

Every file is written to a temporary name, fsynced and renamed.  A checkpoint whose manifest,
part or file is missing, truncated or fails its checksum is skipped with a warning naming the
file, in favour of the previous complete one.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import cloudpickle

__all__ = ["CheckpointStore", "Restored", "write_atomic", "CheckpointWarning"]


class CheckpointWarning(UserWarning):
    """A checkpoint was found damaged or incomplete and is not used."""


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - directories cannot be fsynced everywhere
        pass


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
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        return cloudpickle.dumps(obj)


@dataclass
class Restored:
    """What a process restores from a complete checkpoint."""

    epoch: int
    path: Path
    manifest: Dict[str, Any]
    # worker index -> {stage id -> state}
    states: Dict[int, Dict[int, Any]] = field(default_factory=dict)

    @property
    def notifications(self) -> List[Tuple[int, int, Any]]:
        """(worker, stage id, time) for every pending notification request in the computation."""
        from naiad.progress.timestamp import Timestamp
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


class CheckpointStore:
    """One process's view of the checkpoint directory."""

    def __init__(self, directory: str | os.PathLike, process: int, processes: int,
                 keep: int = 3):
        self.root = Path(directory)
        self.process = process
        self.processes = processes
        self.keep = max(1, int(keep))
        self.root.mkdir(parents=True, exist_ok=True)

    # ---- writing a checkpoint ------------------------------------------------------------------
    def ckpt_dir(self, epoch: int) -> Path:
        return self.root / f"ckpt-{epoch:09d}"

    def write_part(self, epoch: int, fingerprint: str,
                   worker_states: Dict[int, Dict[int, Any]],
                   notifications: List[Tuple[int, int, Any]],
                   open_inputs: Dict[int, int]) -> int:
        """Write this process's vertex states and part manifest; returns bytes written."""
        base = self.ckpt_dir(epoch)
        files = {}
        total = 0
        for w, states in sorted(worker_states.items()):
            data = _dumps(states)
            rel = f"proc-{self.process}/worker-{w}.pkl"
            write_atomic(base / rel, data)
            files[rel] = {"sha256": _sha(data), "size": len(data)}
            total += len(data)
            fault_point(self.root, "checkpoint-write", epoch, self.process)
        part = {"process": self.process, "epoch": epoch, "fingerprint": fingerprint,
                "files": files,
                "notifications": [[w, sid, t[0], list(t[1])] for w, sid, t in notifications],
                "open_inputs": {str(k): v for k, v in open_inputs.items()}}
        data = json.dumps(part, sort_keys=True).encode()
        write_atomic(base / f"proc-{self.process}.json", data)
        return total + len(data)

    def commit(self, epoch: int, fingerprint: str) -> None:
        """Process 0, once every part is durable: write the manifest, then prune old ones."""
        base = self.ckpt_dir(epoch)
        parts = {}
        for p in range(self.processes):
            data = (base / f"proc-{p}.json").read_bytes()
            parts[str(p)] = {"sha256": _sha(data)}
        manifest = {"epoch": epoch, "processes": self.processes, "fingerprint": fingerprint,
                    "parts": parts}
        write_atomic(base / "MANIFEST.json", json.dumps(manifest, sort_keys=True).encode())
        self.prune()

    def prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints and drop older inputs logs."""
        complete = [e for e in self.epochs() if (self.ckpt_dir(e) / "MANIFEST.json").exists()]
        if len(complete) <= self.keep:
            return
        oldest_kept = complete[-self.keep]
        for e in self.epochs():
            if e < oldest_kept:
                shutil.rmtree(self.ckpt_dir(e), ignore_errors=True)

    def epochs(self) -> List[int]:
        out = []
        for d in self.root.glob("ckpt-*"):
            try:
                out.append(int(d.name[5:]))
            except ValueError:
                continue
        return sorted(out)

    # ---- finding and loading ---------------------------------------------------------------------
    def latest(self, fingerprint: str) -> Optional[Restored]:
        """The newest complete, intact checkpoint, with this process's states loaded."""
        for epoch in reversed(self.epochs()):
            restored = self._load(epoch, fingerprint)
            if restored is not None:
                return restored
        return None

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
        except (OSError, ValueError) as exc:
            self._warn(mpath, f"cannot be read ({exc})")
            return None
        if manifest.get("fingerprint") != fingerprint:
            from naiad.errors import NaiadError
            msg = (f"checkpoint directory {self.root} holds checkpoints of a different dataflow "
                   f"(fingerprint {manifest.get('fingerprint')} != {fingerprint}); use a fresh "
                   "directory for a different program")
            raise NaiadError(msg)
        if manifest.get("processes") != self.processes:
            from naiad.errors import NaiadError
            msg = (f"checkpoint {base} was taken with {manifest.get('processes')} processes; "
                   f"this run has {self.processes}")
            raise NaiadError(msg)
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
        mine = parts[str(self.process)]
        for rel, meta in mine["files"].items():
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
            worker = int(rel.rsplit("-", 1)[1].split(".")[0])
            restored.states[worker] = pickle.loads(data)
        # Other processes' files must be intact too, or they could not restore.
        for p, part in parts.items():
            if p == str(self.process):
                continue
            for rel, meta in part["files"].items():
                fpath = base / rel
                try:
                    size = fpath.stat().st_size
                except OSError:
                    self._warn(fpath, "is missing")
                    return None
                if size != meta["size"]:
                    self._warn(fpath, f"is truncated ({size} of {meta['size']} bytes)")
                    return None
        return restored

    # ---- input log ---------------------------------------------------------------------------------
    def _input_dir(self, name: str) -> Path:
        return self.root / "inputs" / f"proc-{self.process}" / name

    def log_input(self, name: str, epoch: int, records: list) -> None:
        """Durably record the records of one epoch of an input before they are fed."""
        write_atomic(self._input_dir(name) / f"{epoch:09d}.pkl", _dumps(records))

    def logged_input(self, name: str, epoch: int) -> Optional[list]:
        path = self._input_dir(name) / f"{epoch:09d}.pkl"
        try:
            return pickle.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - a damaged log entry is not replayed
            warnings.warn(f"input log {path} is damaged ({exc}); the program's records are used",
                          CheckpointWarning, stacklevel=2)
            return None

    def prune_inputs(self, name: str, below: int) -> None:
        d = self._input_dir(name)
        if not d.exists():
            return
        for f in d.glob("*.pkl"):
            try:
                if int(f.stem) < below:
                    f.unlink()
            except (ValueError, OSError):
                continue

    # ---- outputs -------------------------------------------------------------------------------------
    def _output_dir(self) -> Path:
        return self.root / "outputs" / f"proc-{self.process}"

    def delivered(self, name: str) -> int:
        """How many epochs of subscription ``name`` were handed out (0 if none)."""
        try:
            return int((self._output_dir() / f"{name}.delivered").read_text())
        except (OSError, ValueError):
            return 0

    def mark_delivered(self, name: str, count: int) -> None:
        write_atomic(self._output_dir() / f"{name}.delivered", str(count).encode())

    def store_output(self, name: str, epoch: int, records: list) -> None:
        write_atomic(self._output_dir() / name / f"{epoch:09d}.pkl", _dumps(records))

    def stored_outputs(self, name: str) -> Dict[int, list]:
        d = self._output_dir() / name
        out: Dict[int, list] = {}
        if d.exists():
            for f in sorted(d.glob("*.pkl")):
                try:
                    out[int(f.stem)] = pickle.loads(f.read_bytes())
                except Exception as exc:  # noqa: BLE001
                    warnings.warn(f"collected output {f} is damaged ({exc}); it is recomputed",
                                  CheckpointWarning, stacklevel=2)
        return out
