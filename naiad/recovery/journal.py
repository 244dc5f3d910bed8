"""Checkpoint journals: checkpoints appended to a few files instead of written as many.

Format version 3.  A journal file begins with the 8 bytes ``NAIADJ03``; each record is a header
``<kind: uint8><epoch: int64><length: uint64><HMAC-SHA256: 32 bytes>`` and a payload.  The
HMAC, keyed by the checkpoint directory's key, covers the kind, the epoch, the length and the
payload, so a record that was damaged, or written by someone without the key, is never used.

A :class:`JournalWriter` appends a record with one ``write`` and one ``fsync``: no file is
created, renamed or deleted per checkpoint, which is most of what a checkpoint written as
files costs (each such operation is journalled by the file system, and a deletion may discard
blocks).  A writer starts a new file when the current one is large or holds many records, and
never appends to a file written by an earlier run (whose tail a crash may have cut short): a
journal file is a prefix of records followed, at worst, by one torn record, which a scan stops
at.  A new file's directory entry is fsynced before its first record counts.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> w = JournalWriter(d, "proc-0", key=b"k" * 32)
>>> where = w.append(PART, 10, b"states")
>>> read_record(d / where["file"], where["offset"], b"k" * 32, PART, 10, where["length"])
b'states'
>>> [(r.kind, r.epoch) for r in scan(d / where["file"])]
[(1, 10)]
>>> w.close()
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

from naiad.files import make_dirs, sync_dir, write_failed

__all__ = ["JournalWriter", "Record", "scan", "scanned_to", "read_record", "journal_files",
           "MAGIC", "PART", "COMMIT", "FORMAT", "HEADER_SIZE", "ROTATE_BYTES", "ROTATE_RECORDS", "JournalDamage"]

FORMAT = 3
"""The format version of checkpoints (journalled); directories were version 2."""

MAGIC = b"NAIADJ03"
PART = 1
"""A process's part of a checkpoint: its vertex states, notifications and open inputs."""
COMMIT = 2
"""Process 0's commit record: the checkpoint is complete, and where each part is."""

ROTATE_BYTES = 8 << 20
"""A writer starts a new file once the current one holds this many bytes..."""
ROTATE_RECORDS = 16
"""...or this many records (old checkpoints are pruned a whole file at a time)."""

_HEADER = struct.Struct("<BqQ32s")
HEADER_SIZE = _HEADER.size
"""Bytes of a record's header (its payload follows)."""


class JournalDamage(ValueError):
    """A record is not where its commit says, or fails its HMAC."""


class Record(NamedTuple):
    """A record found by :func:`scan`: its payload is ``length`` bytes at ``offset``."""
    kind: int
    epoch: int
    offset: int
    length: int
    mac: bytes


def _mac(key: bytes, kind: int, epoch: int, payload: bytes) -> bytes:
    h = hmac.new(key, struct.pack("<BqQ", kind, epoch, len(payload)), hashlib.sha256)
    h.update(payload)
    return h.digest()


def journal_files(directory: Path, prefix: str) -> List[Path]:
    """The journal files ``<prefix>-<seq>.jnl`` in ``directory``, in the order written."""
    if not directory.is_dir():
        return []
    out = []
    for p in directory.glob(f"{prefix}-*.jnl"):
        seq = p.stem[len(prefix) + 1:]
        if seq.isdigit():
            out.append((int(seq), p))
    return [p for _, p in sorted(out)]


class JournalWriter:
    """Appends records to ``<directory>/<prefix>-<seq>.jnl`` files (created 0600)."""

    def __init__(self, directory: Path, prefix: str, key: bytes):
        self.dir = directory
        self.prefix = prefix
        self.key = key
        self._fd: Optional[int] = None
        self.path: Optional[Path] = None
        self._size = 0
        self._records = 0
        existing = journal_files(directory, prefix)
        self._next_seq = int(existing[-1].stem[len(prefix) + 1:]) + 1 if existing else 0

    def _open(self) -> None:
        for made in make_dirs(self.dir, 0o700):
            sync_dir(made.parent)
        path = self.dir / f"{self.prefix}-{self._next_seq:09d}.jnl"
        self._next_seq += 1
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._fd, self.path, self._size, self._records = fd, path, 0, 0
        self._write(MAGIC)
        sync_dir(self.dir)          # the new file's entry is durable before any record counts

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            raise write_failed(exc, self.path, "the checkpoint journal") from exc
        self._size += len(data)

    def append(self, kind: int, epoch: int, payload: bytes) -> Dict[str, Any]:
        """Append one record and fsync it; returns where it is: ``file`` (the name),
        ``offset`` (of the record's header), ``length`` (of the payload) and ``mac`` (hex)."""
        if self._fd is None:
            self._open()
        assert self._fd is not None and self.path is not None
        mac = _mac(self.key, kind, epoch, payload)
        offset = self._size
        self._write(_HEADER.pack(kind, epoch, len(payload), mac) + payload)
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise write_failed(exc, self.path, "the checkpoint journal") from exc
        where = {"file": self.path.name, "offset": offset, "length": len(payload),
                 "mac": mac.hex()}
        self._records += 1
        if self._size >= ROTATE_BYTES or self._records >= ROTATE_RECORDS:
            self.close()            # the next record goes to a new file
        return where

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def scan(path: Path, start: int = 0) -> List[Record]:
    """The records of ``path`` from byte ``start`` (0: the whole file, after checking its
    header), by their headers alone; stops at a record cut short.  A file that does not begin
    with :data:`MAGIC` raises :class:`JournalDamage`."""
    out: List[Record] = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if start == 0:
            head = f.read(len(MAGIC))
            if head != MAGIC:
                if len(head) < len(MAGIC) and MAGIC.startswith(head):
                    return out          # created, header cut short: no record
                msg = f"journal {path} does not begin with {MAGIC!r}"
                raise JournalDamage(msg)
            start = len(MAGIC)
        offset = start
        while offset + _HEADER.size <= size:
            f.seek(offset)
            kind, epoch, length, mac = _HEADER.unpack(f.read(_HEADER.size))
            end = offset + _HEADER.size + length
            if end > size:
                break
            out.append(Record(kind, epoch, offset, length, mac))
            offset = end
    return out


def scanned_to(records: List[Record], start: int) -> int:
    """The offset just after the last of ``records`` (``start`` when there is none)."""
    if not records:
        return start
    last = records[-1]
    return last.offset + _HEADER.size + last.length


def read_record(path: Path, offset: int, key: bytes, kind: int, epoch: int,
                length: Optional[int] = None, mac: Optional[str] = None) -> bytes:
    """The payload of the record at ``offset`` of ``path``, checked: its header must say
    ``kind``, ``epoch`` (and ``length``, ``mac`` when given) and its HMAC must hold, or
    :class:`JournalDamage` says why."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            head = f.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise JournalDamage("is cut short before the record")
            k, e, n, stored = _HEADER.unpack(head)
            if (k, e) != (kind, epoch) or (length is not None and n != length):
                raise JournalDamage(f"holds a different record at byte {offset}")
            payload = f.read(n)
    except OSError as exc:
        raise JournalDamage(f"cannot be read ({type(exc).__name__}: {exc})") from None
    if len(payload) != n:
        raise JournalDamage(f"is cut short ({len(payload)} of {n} bytes of the record)")
    if mac is not None and stored.hex() != mac:
        raise JournalDamage("holds a record other than the one committed")
    if not hmac.compare_digest(stored, _mac(key, kind, epoch, payload)):
        raise JournalDamage("fails its HMAC (damaged, or not written with this directory's key)")
    return payload
