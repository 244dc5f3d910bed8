"""Start the processes of a computation on this machine, watch them, and gather their results.

The program travels by cloudpickle through a private temporary directory; the processes find
each other's ZeroMQ endpoints through files there (a rendezvous), run the program, and write
their results back atomically.  When one process fails or dies, the others are stopped.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import cloudpickle

from naiad.files import write_atomic
from naiad.errors import ComputationFailed, NaiadError, VertexError
from naiad.observe import watch
from naiad.transport.security import resolve_secret

__all__ = ["launch_local", "FileRendezvous", "write_atomic"]


class FileRendezvous:
    """Processes publish their endpoints as files in a shared directory and read everyone's."""

    def __init__(self, directory: str, index: int, count: int, timeout: float = 60.0):
        self.directory = Path(directory)
        self.index = index
        self.count = count
        self.timeout = timeout

    def __call__(self, endpoint: str) -> List[str]:
        write_atomic(self.directory / f"endpoint.{self.index}", endpoint.encode())
        deadline = time.monotonic() + self.timeout
        while True:
            found = {}
            for i in range(self.count):
                p = self.directory / f"endpoint.{i}"
                if p.exists():
                    found[i] = p.read_text()
            if len(found) == self.count:
                return [found[i] for i in range(self.count)]
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.count)) - set(found))
                msg = f"processes {missing} did not publish their endpoints within {self.timeout} s"
                raise ComputationFailed(msg)
            time.sleep(0.01)


def _child_env() -> Dict[str, str]:
    """The children import exactly what this process can: its sys.path, in order (an entry ''
    is this process's working directory, resolved now), and nothing else: they start with -P,
    so the launcher's working directory is not put first (a stray cloudpickle.py there would
    otherwise be imported by every child)."""
    env = dict(os.environ)
    paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _python() -> List[str]:
    return [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]


def launch_local(program: Callable[[Any], Any], *, processes: int, workers: int,
                 options: Dict[str, Any]) -> List[Any]:
    """Run ``program`` in ``processes`` new local processes; return their results in order."""
    workdir = Path(tempfile.mkdtemp(prefix="naiad-"))      # mode 0700: this user's only
    if resolve_secret(options.get("secret")) is None:
        # A random secret per run, handed to the children inside the private program file
        # (never in argv or the environment): every socket of the run is CURVE-authenticated.
        options = dict(options, secret=secrets.token_hex(32))
    # The monitor page and terminal progress live here; the children report over loopback.
    options, watching = watch(options, options["secret"], in_process=False)
    restore: Callable[[], None] = lambda: None
    try:
        try:
            payload = cloudpickle.dumps((program, options))
        except Exception as exc:
            msg = (f"the program cannot be sent to worker processes: {type(exc).__name__}: "
                   f"{exc}; it must be picklable by cloudpickle (no open files, sockets, "
                   "locks or live Spark objects in its closure)")
            raise NaiadError(msg) from exc
        write_atomic(workdir / "program.pkl", payload)
        restore = _terminate_as_exit()
        procs = []
        for i in range(processes):
            cmd = [*_python(), "-m", "naiad._child", str(workdir), str(i), str(processes),
                   str(workers), str(os.getpid())]
            procs.append(subprocess.Popen(cmd, env=_child_env(), stdin=subprocess.DEVNULL))
        return _supervise(procs, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)     # the secret goes with it
        restore()
        if watching is not None:
            watching.stop()


def _terminate_as_exit() -> Callable[[], None]:
    """While the run lasts, SIGTERM to the launcher ends it like an exception: the children are
    killed and the private directory (with the run's secret) is removed on the way out.  Only
    the main thread can install a handler, and only over the default one; the returned function
    puts the previous handler back."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return lambda: None
    signal.signal(signal.SIGTERM, _on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return restore


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


_GRACE = 3.0
"""Seconds the launcher waits, after a process failed, for the others to end on their own."""


def _read_result(workdir: Path, i: int):
    path = workdir / f"result.{i}"
    if not path.exists():
        return None
    try:
        return cloudpickle.loads(path.read_bytes())
    except Exception as exc:  # noqa: BLE001
        return ("error", ComputationFailed(f"process {i}: its result could not be read: {exc}"),
                "")


def _supervise(procs: List[subprocess.Popen], workdir: Path) -> List[Any]:
    outcome: Dict[int, Any] = {}
    order: List[int] = []            # processes in the order their failure was seen
    stopped: Dict[int, str] = {}      # processes this launcher killed, and why
    first_failure_at: Optional[float] = None
    try:
        while len(outcome) < len(procs):
            for i, p in enumerate(procs):
                if i in outcome or p.poll() is None:
                    continue
                res = _read_result(workdir, i)
                if res is None and i in stopped:
                    exc = ComputationFailed(f"process {i} was stopped: {stopped[i]}")
                    res = ("error", exc, "", True)      # a consequence, not the cause
                elif res is None:
                    sig = -p.returncode if p.returncode < 0 else None
                    how = (f"was killed by {signal.Signals(sig).name}" if sig
                           else f"exited with code {p.returncode} without a result")
                    res = ("error", ComputationFailed(f"process {i} (pid {p.pid}) {how}"), "")
                    _kill(procs, stopped, f"process {i} {how}")   # nobody else can finish
                outcome[i] = res
                if res[0] == "error":
                    order.append(i)
                    if first_failure_at is None:
                        first_failure_at = time.monotonic()
            # The others report their own errors within a second of a failure (that is how
            # the root cause is found); one that does not is stopped or hung: kill it.
            if first_failure_at is not None and time.monotonic() - first_failure_at > _GRACE:
                _kill(procs, stopped, f"process {order[0]} failed {_GRACE:g} s earlier")
            time.sleep(0.02)
    finally:
        _kill(procs, stopped, "the launcher stopped")
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
    if order:
        raise _root_cause([(i, outcome[i]) for i in order])
    return [outcome[i][1] for i in range(len(procs))]


def _kill(procs: List[subprocess.Popen], stopped: Dict[int, str], why: str) -> None:
    for i, p in enumerate(procs):
        if p.poll() is None:
            stopped.setdefault(i, why)
            p.kill()


def _root_cause(failures) -> BaseException:
    """The error that started it: a vertex's own failure beats 'a peer went silent'."""
    def rank(pos_item):
        pos, (_, res) = pos_item
        relayed = len(res) > 3 and bool(res[3])   # the process reported another's failure
        return (relayed, isinstance(res[1], ComputationFailed), pos)
    _, (i, res) = min(enumerate(failures), key=rank)
    exc, tb = res[1], res[2]
    if tb and isinstance(exc, BaseException) and not isinstance(exc, VertexError):
        exc.add_note(f"traceback in process {i}:\n{tb}") if hasattr(exc, "add_note") else None
    return exc
