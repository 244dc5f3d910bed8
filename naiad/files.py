"""Files that survive crashes and stay private: atomic, durable writes and owner-only appends.

>>> import tempfile, pathlib, stat
>>> path = pathlib.Path(tempfile.mkdtemp()) / "sub" / "state.bin"
>>> write_atomic(path, b"v1")
>>> path.read_bytes(), oct(stat.S_IMODE(path.stat().st_mode))
(b'v1', '0o600')
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import Any, List

__all__ = ["write_atomic", "make_dirs", "sync_dir", "open_private", "private_dir",
           "write_failed"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def write_atomic(path: Path, data: bytes, sync: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a reader sees the old
    content or the new, never a mix.  With ``sync`` the file and its directory are fsynced too
    (durable across a machine crash); without, the data is in the kernel once this returns, which
    survives the death of the process but maybe not a power cut.  Directories it creates are
    made durable too: the parent of each is fsynced, so the new entries survive a power cut."""
    created = make_dirs(path.parent, 0o700)     # this user's only, whatever the umask
    if sync:
        for d in created:
            _fsync_dir(d.parent)
    # A fresh name, created here (O_EXCL: never a file or link planted under that name).
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)  # this user's only
    with open(fd, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        _fsync_dir(path.parent)


def make_dirs(directory: Path, mode: int = 0o777) -> List[Path]:
    """Create ``directory`` and its missing ancestors, each with ``mode`` (less the umask);
    returns those created, outermost first.  Their entries are durable only once the parent of
    each is fsynced (:func:`sync_dir`): the caller does that before anything depends on them.

    >>> import tempfile, pathlib
    >>> top = pathlib.Path(tempfile.mkdtemp())
    >>> [d.relative_to(top).as_posix() for d in make_dirs(top / "a" / "b", 0o700)]
    ['a', 'a/b']
    >>> make_dirs(top / "a")
    []
    """
    missing: List[Path] = []
    d = directory
    while not d.exists():            # up to the first that exists (not every ancestor)
        missing.append(d)
        d = d.parent
    created: List[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            continue                 # made meanwhile by another thread or process
        created.append(d)
    return created


def sync_dir(directory: str | os.PathLike) -> None:
    """Make the entries of ``directory`` durable: every file renamed into it so far, by any
    process of this machine (one fsync of the directory covers them all)."""
    _fsync_dir(Path(directory))


def _fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` durable (where the platform can fsync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # pragma: no cover - directories cannot be fsynced everywhere
        pass



def open_private(path: Path, buffering: int = 0, truncate: bool = False):
    """``path`` opened for appending (emptied first with ``truncate``), created readable and
    writable by this user only; a symbolic link there is refused (OSError), not followed."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | (os.O_TRUNC if truncate else 0)
    return open(os.open(path, flags, 0o600), "ab", buffering=buffering)


def private_dir(directory: Path, what: str, why: str = "what is read from it is trusted") -> Path:
    """``directory``, created 0700 (with its missing parents) or, when it exists, checked: it
    must belong to this user and be writable by this user only (``why``); a PermissionError
    naming ``what`` says how to fix it otherwise.

    >>> import tempfile, pathlib
    >>> top = pathlib.Path(tempfile.mkdtemp())
    >>> oct(private_dir(top / "trace", "trace directory").stat().st_mode & 0o777)
    '0o700'
    >>> (top / "shared").mkdir(mode=0o777); os.chmod(top / "shared", 0o777)
    >>> private_dir(top / "shared", "trace directory")
    Traceback (most recent call last):
    ...
    PermissionError: trace directory ... mode 0o777; what is read from it is trusted, so it must belong to you and be writable by you only (chmod 700 ...) or use another directory
    """
    directory = Path(directory)
    make_dirs(directory, 0o700)
    if directory.is_symlink() or not directory.is_dir():
        msg = f"{what} {directory} is not a directory (a symbolic link is not taken either)"
        raise PermissionError(msg)
    st = directory.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        msg = (f"{what} {directory} belongs to uid {st.st_uid} with mode "
               f"{oct(st.st_mode & 0o777)}; {why}, so it must belong to you and be writable "
               f"by you only (chmod 700 {directory}) or use another directory")
        raise PermissionError(msg)
    return directory


def write_failed(exc: OSError, path: Any, what: str) -> OSError:
    """``exc`` (a write to ``path`` failed) as an OSError of the same errno that names ``what``
    and the file, and says what to do when the disk is full.

    >>> import errno
    >>> str(write_failed(OSError(errno.ENOSPC, "No space left on device"), "/c/x.log",
    ...                  "the input log"))  # doctest: +ELLIPSIS
    '[Errno 28] No space left on device: writing the input log /c/x.log; free space on its file system...'
    """
    msg = f"{exc.strerror or exc}: writing {what} {path}"
    if exc.errno == errno.ENOSPC:
        msg += ("; free space on its file system (or use a directory on another one), then run "
                "the program again: it resumes from its last checkpoint")
    return OSError(exc.errno, msg)
