"""Delivery marks: how many epochs a subscription handed out, noted without a system call.

A mark file holds two lines of 32 bytes, each a count and the CRC-32 of its digits.  A run
creates it at its first mark (both lines equal) and then maps it into memory: count *n* is
written into line ``n % 2``, so the line written last is the larger count and the other one
the count before it.  A write into a shared mapping is in the kernel's page cache at once: it
outlives the death of the process as a ``write`` would, but costs no system call, so the
subscriber's thread does not give up the GIL for it (each time it does, a busy worker can keep
it for a switch interval).  Like the logs between checkpoints, marks are not fsynced.

A process killed while it writes a line leaves that line damaged: its CRC fails and the other
line, one epoch less, holds, so that epoch is handed out again and none is skipped.  Files of
earlier releases (one line appended per delivery) are read the same way: the largest intact
count holds.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "out.delivered"
>>> marks = MarkFile(path, 3)
>>> marks.write(4); marks.write(5); marks.close()
>>> read_count(path)
5
"""

from __future__ import annotations

import mmap
import os
import warnings
import zlib
from pathlib import Path
from typing import Optional

from naiad.files import write_atomic, write_failed
from naiad.recovery.logs import CheckpointWarning

__all__ = ["MarkFile", "read_count", "LINE"]

LINE = 32
"""Bytes per mark line: the count right-aligned in 22 digits, a space, 8 hex digits, a newline."""


def _line(count: int) -> bytes:
    return f"{count:>22} {zlib.crc32(str(count).encode()):08x}\n".encode()


def _parse(line: str) -> Optional[int]:
    """The count of an intact mark line, else None."""
    digits, _, crc = line.strip().partition(" ")
    if not digits.isdigit() or crc != f"{zlib.crc32(digits.encode()):08x}":
        return None
    return int(digits)


class MarkFile:
    """One subscription's mark file, mapped into memory for the rest of the run."""

    def __init__(self, path: Path, count: int):
        try:
            write_atomic(path, _line(count) * 2, sync=False)     # 0600, replaces an older file
        except OSError as exc:
            raise write_failed(exc, path, "the delivery mark") from exc
        fd = os.open(path, os.O_RDWR)
        try:
            self._map: Optional[mmap.mmap] = mmap.mmap(fd, 2 * LINE)
        finally:
            os.close(fd)

    def write(self, count: int) -> None:
        """Note that ``count`` epochs were handed out."""
        if self._map is None:
            msg = "delivery mark written after its file was closed"
            raise ValueError(msg)
        at = (count % 2) * LINE
        self._map[at:at + LINE] = _line(count)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def read_count(path: Path) -> int:
    """The count a mark file holds: its largest intact line (0 if none, or no file).  A
    damaged line is reported with a :class:`CheckpointWarning` (a flipped digit fails its
    CRC, so it can never claim epochs that were not handed out)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return 0
    best = 0
    for n, line in enumerate(text.split("\n")[:-1], 1):      # complete lines only
        count = _parse(line)
        if count is None:
            warnings.warn(f"delivery mark {path}:{n} is damaged ({line.strip()[:40]!r}); using "
                          "the largest intact one", CheckpointWarning, stacklevel=3)
        elif count > best:
            best = count
    return best
