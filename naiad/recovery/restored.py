"""What a process resumes from: a complete checkpoint, and the checks every format shares.

>>> r = Restored(10, None, {"parts": {"0": {"notifications": [[0, 3, 12, []]],
...                                          "open_inputs": {"1": 1}}}})
>>> r.notifications, r.open_inputs
([(0, 3, Timestamp(12))], {1: 1})
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from naiad.errors import NaiadError
from naiad.files import write_atomic, write_failed
from naiad.progress.timestamp import Timestamp

__all__ = ["Restored", "CheckpointLayoutError", "check_manifest", "check_owner"]


class CheckpointLayoutError(NaiadError):
    """A checkpoint was taken by another dataflow, or with another number of processes or
    workers than this run's: a restart cannot cure it, so it is never retried."""


class Restored:
    """What a process restores from a complete checkpoint."""

    def __init__(self, epoch: int, path: Optional[Path], manifest: Dict[str, Any]):
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


def check_manifest(manifest: Dict[str, Any], where: str, root: Path, fingerprint: str,
                   processes: int, workers: int) -> None:
    """Refuse (:class:`CheckpointLayoutError`) a checkpoint of another dataflow or layout."""
    if manifest.get("fingerprint") != fingerprint:
        msg = (f"checkpoint directory {root} holds checkpoints of a different dataflow "
               f"(fingerprint {manifest.get('fingerprint')} != {fingerprint}); use a fresh "
               "directory for a different program")
        raise CheckpointLayoutError(msg)
    layout = (manifest.get("processes"), manifest.get("workers"))
    if layout != (processes, workers):
        msg = (f"checkpoint {where} was taken with {layout[0]} process(es) x {layout[1]} "
               f"worker(s); this run has {processes} x {workers}: vertex state is "
               "partitioned by worker, so resume with the same processes= and workers=, or "
               "start from a fresh checkpoint_dir")
        raise CheckpointLayoutError(msg)


def check_owner(root: Path, key: bytes, process: int, fingerprint: str, processes: int,
                workers: int) -> None:
    """The directory's first run records its dataflow and layout in ``root/RUN`` (written by
    process 0, with an HMAC keyed by the directory's key); every later run is checked against
    it at start, so the input logs and delivery marks of a run that died before its first
    checkpoint are never taken up by another program or layout (CheckpointLayoutError)."""
    path = root / "RUN"
    want = {"fingerprint": fingerprint, "processes": processes, "workers": workers}
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        if process == 0:
            body = json.dumps(want, sort_keys=True).encode()
            mac = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
            try:
                write_atomic(path, body + b"\n" + mac + b"\n")
            except OSError as exc:
                raise write_failed(exc, path, "the checkpoint directory's record") from exc
        return
    body, _, mac = text.rstrip(b"\n").rpartition(b"\n")
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).hexdigest().encode()):
        msg = (f"checkpoint directory {root}: RUN does not carry the HMAC of the directory's "
               "KEY (RUN or KEY was changed, or RUN was copied from another directory): put "
               "back the files from a backup, or use a fresh checkpoint_dir")
        raise CheckpointLayoutError(msg)
    got = json.loads(body)
    if got.get("fingerprint") != fingerprint:
        msg = (f"checkpoint directory {root} belongs to a different dataflow (fingerprint "
               f"{got.get('fingerprint')} != {fingerprint}): its logs are not this program's; "
               "use a fresh directory for a different program")
        raise CheckpointLayoutError(msg)
    if (got.get("processes"), got.get("workers")) != (processes, workers):
        msg = (f"checkpoint directory {root} belongs to a run of {got.get('processes')} "
               f"process(es) x {got.get('workers')} worker(s); this run has {processes} x "
               f"{workers}: its input logs are divided by process, so resume with the same "
               "processes= and workers=, or start from a fresh checkpoint_dir")
        raise CheckpointLayoutError(msg)
