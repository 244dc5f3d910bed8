"""An append-only, authenticated log of ``(epoch, records)``: inputs and delivered outputs.

Format version 2.  A segment file begins with the 8 bytes ``NAIADLG2``; each record is a header
``<epoch: int64><length: uint64><HMAC-SHA256: 32 bytes>`` and the pickled payload.  The HMAC,
keyed by the checkpoint directory's key (:func:`naiad.recovery.store.directory_key`), covers the
epoch, the length and the payload, so a record that was damaged or written by someone without
the key is never unpickled.  A segment without the header (format version 1, 32-bit lengths and
a CRC) is refused with :class:`LogFormatError`.

>>> import tempfile, pathlib
>>> log = EpochLog(pathlib.Path(tempfile.mkdtemp()), key=b"k" * 32)
>>> log.append(0, pickle.dumps(["a", "b"]))
>>> log.seal()
>>> log.read(0), log.read(1)
((True, ['a', 'b']), (False, None))
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import struct
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from naiad.errors import NaiadError
from naiad.files import make_dirs, open_private, sync_dir, write_failed

__all__ = ["EpochLog", "CheckpointWarning", "LogFormatError", "OutputLost", "FORMAT", "MAGIC"]

FORMAT = 2
MAGIC = b"NAIADLG2"


class CheckpointWarning(UserWarning):
    """A checkpoint was found damaged or incomplete and is not used."""


class LogFormatError(NaiadError):
    """A log or checkpoint was written in a format this release does not read."""


class OutputLost(NaiadError):
    """Collected outputs of epochs before the checkpoint are damaged and cannot be recomputed."""


_RECORD = struct.Struct("<qQ32s")   # epoch, payload length, HMAC-SHA256
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


_HEAD = struct.Struct("<qQ")          # what the HMAC covers before the payload


class _Mac:
    """HMAC-SHA256 of ``<epoch><length><payload>``: the keyed state is made once and copied
    per record (``hmac.HMAC.copy``), instead of hashing the key again for every record."""

    def __init__(self, key: bytes):
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def __call__(self, epoch: int, payload: bytes) -> bytes:
        h = self._keyed.copy()
        h.update(_HEAD.pack(epoch, len(payload)))
        h.update(payload)
        return h.digest()


class EpochLog:
    """An append-only log of ``(epoch, records)`` in segment files ``<seq>.log``.

    Appending costs one write system call (no file is created per epoch, nothing is fsynced),
    so the log survives the death of the process but not necessarily a power cut.  A
    ``deferred`` log (the input log) keeps appended records in memory until :meth:`flush`,
    which writes all of them in one system call: a worker calls it before it takes an epoch of
    input, so a record is in the kernel before anything computed from it exists, at one write
    per burst of epochs rather than one per epoch.  At a
    checkpoint boundary :meth:`rotate` closes the open segment (the next append opens a new
    one) and :meth:`seal`, when the checkpoint is written, fsyncs the segments closed so far,
    and the directories where segments (or the log's own directories) were created since the
    last seal, so that everything logged before a checkpoint is on disk with it and is found
    there after a power cut.  Segments are numbered in write order, and an epoch logged again
    later (recomputed output) replaces the earlier entry.  A record cut short by a crash ends
    its segment and is ignored; a record that fails its HMAC is reported by :meth:`read` as
    ``None`` with a warning.
    """

    def __init__(self, directory: Path, key: bytes, deferred: bool = False):
        self.dir = directory
        self.key = key
        self._mac = _Mac(key)
        self.deferred = deferred
        self._pending: List[bytes] = []       # headers and payloads appended, not yet written
        self._lock = threading.Lock()
        self._index: Optional[Dict[int, Tuple[Path, int, int, bytes]]] = None
        self._ranges: Dict[Path, Tuple[int, int]] = {}
        self._file: Any = None
        self._end = 0
        self._path: Any = None
        self._unsynced: List[Path] = []      # segments closed by rotate(), not yet fsynced
        self._entries: Set[Path] = set()      # directories with entries made since the last seal
        self._next_seq: Optional[int] = None  # number of the next segment (known after a listing)
        self.high = -1                        # the highest epoch logged (once loaded)

    def _segments(self) -> List[Path]:
        if not self.dir.exists():
            return []
        return sorted(self.dir.glob("*.log"), key=lambda f: (len(f.stem), f.stem))

    def _load(self) -> Dict[int, Tuple[Path, int, int, bytes]]:
        if self._index is None:
            index: Dict[int, Tuple[Path, int, int, bytes]] = {}
            segments = self._segments()
            for seg in segments:
                self._scan(seg, index)
            self._next_seq = int(segments[-1].stem) + 1 if segments else 0
            self.high = max(index, default=-1)
            self._index = index
        return self._index

    def _scan(self, path: Path, index: Dict[int, Tuple[Path, int, int, bytes]]) -> int:
        """Index the complete records of ``path``; returns the length of its intact prefix.

        A segment ends at a record cut short (by a crash, or by damage: the two look alike).
        One whose header is damaged is named in a warning and not used; one without a header
        at all was written by an earlier release, and is refused."""
        size = path.stat().st_size
        offset = len(MAGIC)
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
            if head != MAGIC:
                if len(head) < len(MAGIC) and MAGIC.startswith(head):
                    return 0            # the header itself was cut short: an empty segment
                if sum(a == b for a, b in zip(head, MAGIC)) >= len(MAGIC) // 2:
                    warnings.warn(f"log {path} has a damaged header ({head!r}); its records "
                                  "are not used", CheckpointWarning, stacklevel=4)
                    return 0
                msg = (f"log {path} is not in format version {FORMAT} (it was written by an "
                       "earlier release, in format version 1); this release cannot replay it: "
                       "resume with the release that wrote it, or start from a fresh "
                       "checkpoint_dir")
                raise LogFormatError(msg)
            while offset + _RECORD.size <= size:
                f.seek(offset)
                epoch, length, crc = _RECORD.unpack(f.read(_RECORD.size))
                end = offset + _RECORD.size + length
                if end > size:
                    break
                index[epoch] = (path, offset + _RECORD.size, length, crc)
                low, high = self._ranges.get(path, (epoch, epoch))
                self._ranges[path] = (min(low, epoch), max(high, epoch))
                offset = end
        return offset

    def append(self, epoch: int, payload: bytes) -> None:
        """Log ``payload`` for ``epoch``: one write system call, or none for a deferred log
        (the segment is opened, and its header written with the first record, after a
        :meth:`rotate`).  The payload is not copied: its header and it are written together."""
        mac = self._mac(epoch, payload)
        head = _RECORD.pack(epoch, len(payload), mac)
        with self._lock:
            index = self._load()
            if self._file is None:
                seq = self._next_seq or 0
                self._next_seq = seq + 1
                for made in make_dirs(self.dir, 0o700):
                    self._entries.add(made.parent)
                self._path = self.dir / f"{seq:09d}.log"
                self._file = open_private(self._path)
                self._entries.add(self.dir)
                self._end = 0
                head = MAGIC + head
            path = self._path
            self._pending += (head, payload)
            if not self.deferred:
                self._write_pending()
            self._end += len(head) + len(payload)
            index[epoch] = (path, self._end - len(payload), len(payload), mac)
            if epoch > self.high:
                self.high = epoch
            low, high = self._ranges.get(path, (epoch, epoch))
            self._ranges[path] = (min(low, epoch), max(high, epoch))

    def _write_pending(self) -> None:
        """Write the pending headers and payloads in order, with one ``writev`` system call
        (the lock is held; more only for a short write, or beyond ``IOV_MAX`` pieces).  Each
        system call lets another thread take the GIL, and getting it back from a busy worker
        can take a switch interval (5 ms): hence one per burst of epochs, not one per epoch."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        fd = self._file.fileno()
        try:
            while pending:
                chunk = pending[:_IOV_MAX]
                written = os.writev(fd, chunk)
                if written == sum(map(len, chunk)):
                    del pending[:_IOV_MAX]
                    continue
                rest = b"".join(pending)[written:]  # pragma: no cover - short writes are rare
                while rest:                         # pragma: no cover
                    rest = rest[os.write(fd, rest):]
                return
        except OSError as exc:
            raise write_failed(exc, self._path, "the log") from exc

    def flush(self) -> None:
        """Write the records appended and not yet written (a deferred log), in one system call."""
        if self._pending:
            with self._lock:
                self._write_pending()

    def may_hold(self, epoch: int) -> bool:
        """False when ``epoch`` is surely not logged (above every epoch logged): lets the feeding
        of a fresh input skip :meth:`read`."""
        return self._index is None or epoch <= self.high

    def read(self, epoch: int) -> Tuple[bool, Any]:
        """``(True, records)`` if ``epoch`` is logged intact, else ``(False, None)``."""
        with self._lock:
            self._write_pending()
            entry = self._load().get(epoch)
        if entry is None:
            return False, None
        path, offset, length, crc = entry
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                payload = f.read(length)
            if len(payload) != length or not hmac.compare_digest(self._mac(epoch, payload), crc):
                msg = "fails its HMAC: damaged, or not written with this directory's key"
                raise ValueError(msg)
            return True, pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - a damaged entry is not used
            warnings.warn(f"log {path} is damaged at epoch {epoch} ({exc}); it is not used",
                          CheckpointWarning, stacklevel=3)
            return False, None

    def items(self) -> Dict[int, Any]:
        """Every intact entry, the latest for each epoch."""
        with self._lock:
            epochs = sorted(self._load())
        out = {}
        for epoch in epochs:
            ok, value = self.read(epoch)
            if ok:
                out[epoch] = value
        return out

    def rotate(self) -> None:
        """Start a new segment at the next append (cheap: no fsync).  At a checkpoint boundary
        this keeps the epochs before it in segments of their own, to be pruned together."""
        with self._lock:
            if self._file is not None:
                self._write_pending()
                self._file.close()
                self._unsynced.append(self._path)
                self._file = None

    def seal(self) -> None:
        """Make the segments closed by :meth:`rotate` durable (called when a checkpoint is
        written: everything logged before its boundary is in those); when none was, the open
        segment; then the entries of segments and directories created since the last seal.
        The fsyncs run outside the lock, so appends of later epochs go on meanwhile (a slow
        disk must not make ``on_next`` wait)."""
        with self._lock:
            paths, self._unsynced = self._unsynced, []
            entries, self._entries = self._entries, set()
            if not paths and self._file is not None:
                self._write_pending()
                self._file.flush()
                fd = os.dup(self._file.fileno())
            else:
                fd = -1
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue            # pruned meanwhile
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for directory in sorted(entries, key=lambda d: len(d.parts), reverse=True):
            sync_dir(directory)     # the segments' entries, and new directories' (innermost first)

    def prunable(self, below: int) -> bool:
        """Whether :meth:`prune` with ``below`` would delete a segment."""
        with self._lock:
            self._load()
            return any(high < below and seg != self._path
                       for seg, (_, high) in self._ranges.items())

    def prune(self, below: int) -> None:
        """Delete the segments (other than the open one) whose epochs are all below ``below``.
        They leave the index under the lock and are unlinked after it (a slow disk must not
        make ``append``, that is ``on_next``, wait)."""
        doomed = []
        with self._lock:
            index = self._load()
            for seg, (low, high) in list(self._ranges.items()):
                if high < below and seg != self._path:
                    doomed.append(seg)
                    del self._ranges[seg]
                    for e in range(low, high + 1):
                        entry = index.get(e)
                        if entry is not None and entry[0] == seg:
                            del index[e]
        for seg in doomed:
            try:
                seg.unlink()
            except OSError:
                pass          # gone already; a segment left behind is pruned by a later run

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._write_pending()
                self._file.close()
                self._file = None
