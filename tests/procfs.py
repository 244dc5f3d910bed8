"""Processes seen through /proc, for tests that check nothing outlives a launcher."""

from __future__ import annotations

import os
from typing import List, Optional


def _stat(pid) -> Optional[List[str]]:
    """The fields of /proc/PID/stat after the command name, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def state(pid: int) -> Optional[str]:
    """The state letter of ``pid`` (``R``, ``S``, ``T`` for stopped, ...), or None if gone."""
    fields = _stat(pid)
    return fields[0] if fields is not None else None


def parent(pid: int) -> Optional[int]:
    """The parent of ``pid``, or None if it is gone."""
    fields = _stat(pid)
    return int(fields[1]) if fields is not None else None


def children(pid: int) -> List[int]:
    """The live (non-zombie) children of ``pid``."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            fields = _stat(p)
            if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(p))
    return found
