"""The checkpoint directory itself: who may use it, one run at a time, and its key.

Recovery unpickles what the directory holds, so it must belong to the user and be writable by
the user only (:func:`check_private`); two runs sharing it would mix their data, so each process
of a run holds an exclusive lock on it (:func:`lock`), and ``execute`` holds the run's lock
across its restarts (:func:`hold_run`); and everything that is unpickled from it
is first authenticated with an HMAC keyed by the directory's key, a random 32-byte file ``KEY``
(mode 0600) made when the directory is first used (:func:`directory_key`).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import socket
from pathlib import Path

from typing import List

from naiad.errors import NaiadError
from naiad.files import make_dirs, private_dir, sync_dir

__all__ = ["CheckpointInUse", "CheckpointDamaged", "check_private", "lock", "hold_run",
           "release_run", "run_held", "directory_key", "fault_point", "RUN_LOCK", "HELD"]


class CheckpointInUse(NaiadError):
    """Another run holds the checkpoint directory."""


class CheckpointDamaged(NaiadError):
    """The checkpoint directory is damaged beyond what a restart can cure (its key)."""


def check_private(root: Path) -> None:
    """Refuse a directory someone else could write (PermissionError saying how to fix it)."""
    private_dir(root, "checkpoint directory", "recovery unpickles what it holds")


RUN_LOCK = ".lock-run"
"""The run's lock file: held exclusively by ``execute`` across its restarts (:func:`hold_run`),
shared by every process of a run started otherwise (:func:`lock`)."""

HELD = "NAIAD_RUN_LOCKED"
"""In the environment of the processes ``execute`` starts while it holds the run lock: the
directory whose run lock is held for them (they take only their own locks)."""


def _flock(path: Path, how: int, root: Path, whose: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "the processes"
        os.close(fd)
        msg = (f"checkpoint directory {root} is in use by {holder} ({whose} another run); two "
               "runs must not share a checkpoint directory: wait for it to end or give this "
               "run another checkpoint_dir")
        raise CheckpointInUse(msg) from None
    return fd


def _sign(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)


def hold_run(root: Path) -> int:
    """The run lock on the directory, exclusive, for ``execute``: held across its restarts,
    so that no other run can take the directory while one restarts (release it with
    :func:`release_run`).  The directory is created (0700) or checked first."""
    for made in make_dirs(root, 0o700):
        sync_dir(made.parent)
    check_private(root)
    fd = _flock(root / RUN_LOCK, fcntl.LOCK_EX, root, "a process of")
    _sign(fd)
    return fd


def release_run(fd: int) -> None:
    """Give up the run lock (its holder's name is erased first)."""
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def run_held(root: Path) -> bool:
    """Whether ``execute`` started this process holding the run lock on ``root`` for it."""
    return os.environ.get(HELD) == str(root.resolve())


def lock(root: Path, process: int, run_held: bool = False) -> List[int]:
    """The locks process ``process`` of a run holds on the directory until the descriptors
    are closed (or the process dies): its own, exclusive, and the run lock, shared, unless
    ``execute`` holds that for it (``run_held``); a second run fails at once, naming the
    holder."""
    fds: List[int] = []
    try:
        if not run_held:
            fds.append(_flock(root / RUN_LOCK, fcntl.LOCK_SH, root, "a process of"))
        fd = _flock(root / f".lock-{process}", fcntl.LOCK_EX, root, f"process {process} of")
        fds.append(fd)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    _sign(fd)
    return fds


def directory_key(root: Path) -> bytes:
    """The directory's HMAC key, made on first use (atomically: concurrent processes of a run
    all get the one that was linked into place first)."""
    path = root / "KEY"
    if not path.exists():
        if (root / "RUN").exists():
            # RUN is written with the key: a directory that has it had a KEY, now gone.
            msg = (f"checkpoint directory {root} has no KEY, though a run has used it: without "
                   "its key nothing in it can be authenticated; put the KEY back (from a "
                   "backup), or use a fresh checkpoint_dir")
            raise CheckpointDamaged(msg)
        tmp = root / f".KEY-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)          # fails if another process made it first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        msg = (f"checkpoint key {path} must belong to you and be readable by you only "
               f"(chmod 600 {path}); its mode is {oct(st.st_mode & 0o777)}")
        raise PermissionError(msg)
    key = path.read_bytes()
    if len(key) != 32:
        msg = f"checkpoint key {path} is damaged ({len(key)} bytes, not 32): use a fresh directory"
        raise CheckpointDamaged(msg)
    return key


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
