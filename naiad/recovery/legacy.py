"""Checkpoints written as directories (format version 2), read so that a run can resume them.

Releases before the checkpoint journals (:mod:`naiad.recovery.journal`) wrote each checkpoint
as a directory ``ckpt-<epoch>/`` of files: a pickle of each worker's vertex states, a part per
process (``proc-<p>.json``: the files' sizes and hashes, notifications, open inputs) and
``MANIFEST.json``, written last by process 0, with the parts' hashes and an HMAC keyed by the
directory's key.  A run still resumes from the newest such checkpoint when it is newer than
every journalled one; new checkpoints are always journalled, and the directories are pruned
like journalled checkpoints.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from naiad.recovery import snapshot
from naiad.recovery.logs import LogFormatError
from naiad.recovery.restored import Restored, check_manifest

__all__ = ["FORMAT", "directory_epochs", "committed_directories", "load_directory"]

FORMAT = 2
"""The format version of checkpoint directories."""


def directory_epochs(names: List[str]) -> List[int]:
    """The boundaries of the checkpoint directories among ``names`` (a listing of the
    checkpoint directory), committed or not, ascending."""
    out = []
    for name in names:
        if name.startswith("ckpt-"):
            try:
                out.append(int(name[5:]))
            except ValueError:
                continue
    return sorted(out)


def committed_directories(root: Path, names: List[str]) -> List[int]:
    """The boundaries of the checkpoint directories whose manifest is written, ascending."""
    return [e for e in directory_epochs(names)
            if os.path.exists(os.path.join(str(root), f"ckpt-{e:09d}", "MANIFEST.json"))]


def _mac(key: bytes, manifest: Dict[str, Any]) -> str:
    data = json.dumps(manifest, sort_keys=True).encode()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_directory(base: Path, epoch: int, fingerprint: str, key: bytes, process: int,
                   processes: int, workers: int,
                   warn: Callable[[Path, str], None]) -> Optional[Restored]:
    """The checkpoint in directory ``base`` with this process's states loaded, or None (with
    ``warn(path, why)``) when any of its files is missing, cut short or fails its check."""
    mpath = base / "MANIFEST.json"
    if not mpath.exists():
        return None   # never committed: an interrupted checkpoint, not damage
    try:
        manifest = json.loads(mpath.read_bytes())
        if not isinstance(manifest, dict):
            raise ValueError(f"it holds a JSON {type(manifest).__name__}, not an object")
    except (OSError, ValueError) as exc:
        warn(mpath, f"cannot be read ({type(exc).__name__}: {exc})")
        return None
    if manifest.get("format") != FORMAT and "sha256" in manifest and "hmac" not in manifest:
        msg = (f"checkpoint {base} is in format version 1 (written by an earlier release); "
               "this release reads format versions 2 and 3: resume it with the release "
               "that wrote it, or start from a fresh checkpoint_dir")
        raise LogFormatError(msg)
    own = manifest.pop("hmac", None)
    if not isinstance(own, str) or not hmac.compare_digest(own, _mac(key, manifest)):
        warn(mpath, "fails its HMAC (damaged, or not written with this directory's key)")
        return None
    if manifest.get("format") != FORMAT:
        msg = (f"checkpoint {base} is in format version {manifest.get('format')!r}; this "
               "release reads format versions 2 and 3")
        raise LogFormatError(msg)
    check_manifest(manifest, str(base), base.parent, fingerprint, processes, workers)
    parts = {}
    for p, meta in manifest["parts"].items():
        ppath = base / f"proc-{p}.json"
        try:
            data = ppath.read_bytes()
        except OSError:
            warn(ppath, "is missing")
            return None
        if _sha(data) != meta["sha256"]:
            warn(ppath, "fails its checksum")
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
                warn(fpath, "is missing")
                return None
            if len(data) != meta["size"]:
                warn(fpath, f"is truncated ({len(data)} of {meta['size']} bytes)")
                return None
            if _sha(data) != meta["sha256"]:
                warn(fpath, "fails its checksum")
                return None
            if p == str(process):
                worker = int(rel.rsplit("-", 1)[1].split(".")[0])
                restored.states[worker] = snapshot.load_states(data)
    return restored
