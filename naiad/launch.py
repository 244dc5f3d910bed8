"""Start the processes of a computation on this machine, watch them, and gather their results.

The program travels by cloudpickle through a private temporary directory (mode 0700, the file
0600, with the run's secret inside).  Each child also gets one end of a private socket pair (an
inherited descriptor: nothing else can connect to it), its *link*: over it the child announces
its ZeroMQ endpoint, the launcher answers with every process's endpoint once all have arrived (the
rendezvous), and the child sends its result before it exits.  The launcher sleeps in
``selectors`` on the links and on the children's pidfds (Linux; elsewhere a link's end of file
stands for the exit), never in a polling loop; a child whose launcher disappears sees its link
close and exits at once.
When one process fails or dies, the others are stopped.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional


from naiad import outcome
from naiad.files import write_atomic
from naiad.link import (ACTIVE, ENDPOINT, ENDPOINTS, OPTIONS, PROGRESS, RESULT, MessageReader,
                        send_message)
from naiad.errors import ComputationFailed, NaiadError, RemoteFailure, VertexError
from naiad.meter import launcher_failure
from naiad.placement import MALLOC_ARENAS, MALLOC_TUNABLES
from naiad.transport.security import random_secret, resolve_secret

__all__ = ["launch_local", "program_payload", "write_atomic", "rendezvous_timeout",
           "loading_program", "refuse_while_loading"]

loading_program: Optional[int] = None
"""This process's index while it loads the program it was started to run (``naiad._child``
imports the program's module then), else None."""


def refuse_while_loading() -> None:
    """Raise if this process is loading its program: a module that starts a computation when
    imported would have every process start processes again, without end."""
    if loading_program is not None:
        msg = (f"naiad.execute was called while process {loading_program} of a computation "
               "was importing the module of its program: that module (or one it imports) "
               "starts a computation when it is imported, so every process would start "
               "processes again, without end; call naiad.execute under "
               "'if __name__ == \"__main__\":' in that module, or define the program in a "
               "module that runs nothing when imported")
        raise RuntimeError(msg)


def rendezvous_timeout(options: Dict[str, Any]) -> float:
    """Seconds the processes may take to join the rendezvous once the first one has: the
    ``connect_timeout`` option (30 s by default)."""
    return float(options.get("connect_timeout", 30))


def _child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The children import exactly what this process can: its sys.path, in order (an entry ''
    is this process's working directory, resolved now), and nothing else: they start with -P,
    so the launcher's working directory is not put first (a stray cloudpickle.py there would
    otherwise be imported by every child).  They share one malloc arena between their threads
    (:data:`MALLOC_ARENAS`) unless ``MALLOC_ARENA_MAX`` is set, and ask for huge pages
    (:data:`MALLOC_TUNABLES`) unless ``GLIBC_TUNABLES`` is set."""
    env = dict(os.environ)
    paths = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)
    env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
    env.update(extra or {})
    return env


def _python() -> List[str]:
    return [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]


def program_payload(program: Callable[[Any], Any],
                    options: Optional[Dict[str, Any]] = None) -> bytes:
    """The bytes every child of ``execute(program, processes=N)`` reads: ``(program, options)``
    by cloudpickle.  A function of an importable module travels as its name (a few dozen
    bytes, whatever data the module holds); one defined in ``__main__`` or a closure travels by
    value, with every object it refers to (see docs/launch.md)."""
    import cloudpickle
    try:
        return cloudpickle.dumps((program, options or {}))
    except Exception as exc:
        msg = (f"the program cannot be sent to worker processes: {type(exc).__name__}: "
               f"{exc}; it must be picklable by cloudpickle (no open files, sockets, "
               "locks or live Spark objects in its closure)")
        raise NaiadError(msg) from exc


def _options_payload(options: Dict[str, Any]) -> bytes:
    """The options alone, as the children read them before the program (by cloudpickle, as
    in :func:`program_payload`: they are plain values, but nothing forbids others), and
    whether process 0 sends its default progress here to be logged (:data:`RELAY_PROGRESS`)."""
    import cloudpickle
    from naiad.console import FrontierProgress
    relay = (options.get("progress") is None and not sys.stderr.isatty()
             and FrontierProgress.wanted())
    return cloudpickle.dumps(dict(options, **{RELAY_PROGRESS: relay}))


RELAY_PROGRESS = "_relay_progress"
"""The key, among the options a child receives, that asks process 0 to send the lines of the
default progress to the launcher: where stderr is not a terminal, they are records of the
launcher's ``naiad.progress`` logger, which the application configured in the launcher only
(on a terminal, process 0 draws the live line on the stderr it shares with the launcher)."""


def launch_local(program: Callable[[Any], Any], *, processes: int, workers: int,
                 options: Dict[str, Any], env: Optional[Dict[str, str]] = None) -> List[Any]:
    """Run ``program`` in ``processes`` new local processes (``env`` added to their
    environment); return their results in order."""
    workdir = Path(tempfile.mkdtemp(prefix="naiad-"))      # mode 0700: this user's only
    if resolve_secret(options.get("secret")) is None:
        # A random secret per run, handed to the children inside the private program file
        # (never in argv or the environment): every socket of the run is CURVE-authenticated.
        # It is key material already, so the children skip the slow derivation.
        options = dict(options, secret=random_secret())
    restore: Callable[[], None] = lambda: None
    links: List[socket.socket] = []
    try:
        # Not fsynced: the file lives as long as this run, a machine crash ends both.  It
        # holds the program only: the options, with the run's secret, go to each child over
        # its private link, first, so that it connects to the others while it imports the
        # program's modules (and a launcher killed with SIGKILL leaves no secret on disk).
        write_atomic(workdir / "program.pkl", program_payload(program), sync=False)
        opts = _options_payload(options)
        restore = _terminate_as_exit()
        procs = []
        for i in range(processes):
            mine, theirs = socket.socketpair()
            links.append(mine)
            with theirs:
                cmd = [*_python(), "-m", "naiad._child", str(workdir), str(i), str(processes),
                       str(workers), str(theirs.fileno())]
                procs.append(subprocess.Popen(cmd, env=_child_env(env), stdin=subprocess.DEVNULL,
                                              pass_fds=(theirs.fileno(),)))
            try:
                send_message(mine, OPTIONS, opts)
            except OSError:
                pass        # the child is gone already: the supervisor reports its exit
        return _Supervisor(procs, links, rendezvous_timeout(options),
                           float(options.get("heartbeat_timeout") or 6.0)).run()
    except BaseException as exc:
        if options.get("trace"):
            _record_failure(os.fspath(options["trace"]), exc)
        raise
    finally:
        for link in links:
            link.close()
        shutil.rmtree(workdir, ignore_errors=True)     # the secret goes with it
        restore()


def _record_failure(trace: str, exc: BaseException) -> None:
    """Put the run's failure, as the launcher saw it, in its trace: a process killed by a
    signal records nothing itself."""
    try:
        launcher_failure(trace, f"{type(exc).__name__}: {exc}")
    except OSError:
        pass                # the trace is a diagnostic: the run's own error is what matters


def _terminate_as_exit() -> Callable[[], None]:
    """While the run lasts, SIGTERM or SIGHUP (its terminal closed) to the launcher ends it like
    an exception: the children are killed and the private directory (with the run's secret) is
    removed on the way out.  Only the main thread can install a handler, and only over the
    default one (a SIGHUP ignored by ``nohup`` stays ignored); the returned function puts the
    previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    mine = [s for s in _ENDING_SIGNALS if signal.getsignal(s) is signal.SIG_DFL]
    for s in mine:
        signal.signal(s, _on_sigterm)

    def restore() -> None:
        for s in mine:
            signal.signal(s, signal.SIG_DFL)
    return restore


_ENDING_SIGNALS = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


_GRACE = 3.0
"""Seconds the launcher waits, after a process failed, for the others to end on their own."""

_STOP_WAIT = 2.0
"""Seconds a process stopped with SIGTERM may take to end (then it is killed)."""

_EXIT_WAIT = 5.0
"""Seconds a process may take to exit once it closed its link (then it is killed)."""


class _Supervisor:
    """Waits on the children's links with ``selectors``: relays the rendezvous, collects the
    results, notices exits (a link at end of file), and stops everyone after a failure."""

    def __init__(self, procs: List[subprocess.Popen], links: List[socket.socket],
                 rendezvous_timeout: float, heartbeat_timeout: float = 6.0):
        self.procs, self.links = procs, links
        self.readers = [MessageReader() for _ in procs]
        self.endpoints: Dict[int, str] = {}
        self.activated: set = set()         # processes that entered activate
        self.results: Dict[int, Any] = {}   # read as soon as they arrive, while others run
        self.outcome: Dict[int, Any] = {}
        self.order: List[int] = []          # processes in the order their failure was seen
        self.stopped: Dict[int, str] = {}   # processes this launcher killed, and why
        self.first_failure_at: Optional[float] = None
        self.rendezvous_deadline: Optional[float] = None    # set when the first one joins
        self.rendezvous_timeout = rendezvous_timeout
        self.launcher_failure: Optional[ComputationFailed] = None
        self.pidfds: Dict[int, int] = {}    # a descriptor readable when process i exits
        # Once a process has ended, the peers' heartbeats no longer watch the others: the
        # launcher looks at their scheduler state itself, every half heartbeat_timeout.
        self.heartbeat_timeout = heartbeat_timeout
        self.halted_since: Dict[int, float] = {}
        self.next_look: Optional[float] = None

    def run(self) -> List[Any]:
        """Supervise until every process ended; their results in order, or the root failure.

        A process's exit is seen on its pidfd where the platform has them (Linux): a link may
        stay open after its process died, held by a process the program forked.  Elsewhere
        the link's end of file is the exit."""
        sel = selectors.DefaultSelector()
        for i, (p, link) in enumerate(zip(self.procs, self.links)):
            sel.register(link, selectors.EVENT_READ, ("link", i))
            pidfd = _pidfd(p.pid)
            if pidfd is not None:
                self.pidfds[i] = pidfd
                sel.register(pidfd, selectors.EVENT_READ, ("exit", i))
        try:
            while len(self.outcome) < len(self.procs):
                for key, _ in sel.select(self._wait()):
                    if sel.get_map().get(key.fd) is not key:
                        continue    # unregistered (and maybe closed) by an earlier event
                                    # of this same batch: an exit seen before its link's EOF
                    what, i = key.data
                    if what == "exit":
                        sel.unregister(key.fileobj)
                        self._drain(i)
                        if _registered(sel, i):
                            sel.unregister(self.links[i])
                        self._ended(i)
                        continue
                    try:
                        data = self.links[i].recv(1 << 20)
                    except ConnectionResetError:
                        # It exited with the endpoints unread (it never activated): its
                        # result, sent before, was read first.
                        data = b""
                    if not data:
                        sel.unregister(self.links[i])
                        if i not in self.pidfds:
                            self._ended(i)
                        continue
                    for kind, body in self.readers[i].feed(data):
                        self._message(i, kind, body)
                self._check_deadlines()
        finally:
            sel.close()
            for fd in self.pidfds.values():
                os.close(fd)
            self._kill("the launcher stopped")
            for i, p in enumerate(self.procs):
                try:
                    p.wait(timeout=_EXIT_WAIT)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
                    print(f"naiad: process {i} (pid {p.pid}) did not exit after SIGKILL",
                          file=sys.stderr)
        if self.launcher_failure is not None:
            raise self.launcher_failure
        if self.order:
            raise _root_cause([(i, self.outcome[i]) for i in self.order])
        return [self.outcome[i][1] for i in range(len(self.procs))]

    def _drain(self, i: int) -> None:
        """Process ``i`` exited: read what it sent before, without waiting for more."""
        link = self.links[i]
        link.setblocking(False)
        while True:
            try:
                data = link.recv(1 << 20)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            for kind, body in self.readers[i].feed(data):
                self._message(i, kind, body)

    def _wait(self) -> Optional[float]:
        """How long the next select may sleep: until the next deadline, if any."""
        now = time.monotonic()
        deadlines = [d for d in (self.rendezvous_deadline,
                                 None if self.first_failure_at is None
                                 else self.first_failure_at + _GRACE,
                                 self.next_look) if d is not None]
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _message(self, i: int, kind: bytes, body: bytes) -> None:
        if kind == ACTIVE:
            if not self.activated:
                self.rendezvous_deadline = time.monotonic() + self.rendezvous_timeout
            self.activated.add(i)
            self._check_absent()
            if len(self.activated) == len(self.procs):
                self.rendezvous_deadline = None
        elif kind == ENDPOINT:
            self.endpoints[i] = body.decode()
            if len(self.endpoints) == len(self.procs):
                everyone = "\n".join(self.endpoints[j] for j in range(len(self.procs))).encode()
                for j, link in enumerate(self.links):
                    if j not in self.outcome:
                        try:
                            send_message(link, ENDPOINTS, everyone)
                        except OSError:       # it died meanwhile: its end of file tells
                            pass
        elif kind == RESULT:
            self.results[i] = self._load_result(i, body)
        elif kind == PROGRESS:
            import logging
            logging.getLogger("naiad.progress").info("naiad: %s", body.decode())

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self.rendezvous_deadline is not None and now >= self.rendezvous_deadline:
            missing = [i for i in range(len(self.procs)) if i not in self.activated]
            who = ", ".join(f"process {i} (pid {self.procs[i].pid})" for i in missing)
            why = (f"{who} did not join the rendezvous (call comp.activate()) within "
                   f"{self.rendezvous_timeout:g} s of the first process (the connect_timeout "
                   "option)")
            self._fail_all(why)
            self.rendezvous_deadline = None
        # The others report their own errors within a second of a failure (that is how the
        # root cause is found); one that does not is stopped or hung: kill it.
        if self.first_failure_at is not None and now - self.first_failure_at >= _GRACE:
            first = ("the launcher" if self.launcher_failure is not None
                     else f"process {self.order[0]}")
            self._kill(f"{first} failed {_GRACE:g} s earlier")
        if self.next_look is not None and now >= self.next_look:
            self._look_for_halted(now)

    def _look_for_halted(self, now: float) -> None:
        """After a process ended, kill those of the others that stay stopped (SIGSTOP) for
        heartbeat_timeout: the peers that would have noticed are gone.  A process held by a
        debugger (state ``t``) is left alone."""
        self.next_look = now + self.heartbeat_timeout / 2
        for i, p in enumerate(self.procs):
            if i in self.outcome or p.poll() is not None:
                continue
            if _scheduler_state(p.pid) != "T":
                self.halted_since.pop(i, None)
                continue
            since = self.halted_since.setdefault(i, now)
            if now - since >= self.heartbeat_timeout:
                ended = ", ".join(f"process {j}" for j in sorted(self.outcome))
                self._kill_one(i, f"it stayed stopped (SIGSTOP) for "
                                  f"{self.heartbeat_timeout:g} s (the heartbeat_timeout "
                                  f"option) after {ended} ended")

    def _fail_all(self, why: str) -> None:
        """A launcher-side failure (the rendezvous timed out): it is the root cause."""
        self.launcher_failure = ComputationFailed(why)
        self.first_failure_at = time.monotonic()
        self._kill(why)

    def _ended(self, i: int) -> None:
        """Process ``i`` closed its link: it exited or died.  Record how."""
        p = self.procs[i]
        try:
            p.wait(timeout=_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            # It closed the link but lingers (a stuck interpreter shutdown): kill it.
            self.stopped.setdefault(i, f"it did not exit within {_EXIT_WAIT:g} s of closing "
                                       "its link to the launcher")
            p.kill()
            p.wait(timeout=_EXIT_WAIT)
        res = self._result(i)
        if res is None and i in self.stopped:
            exc = ComputationFailed(f"process {i} was stopped: {self.stopped[i]}")
            res = ("error", exc, "", True)      # a consequence, not the cause
        elif res is None:
            sig = -p.returncode if p.returncode < 0 else None
            how = (f"was killed by {signal.Signals(sig).name}" if sig
                   else f"exited with code {p.returncode} without a result")
            res = ("error", ComputationFailed(f"process {i} (pid {p.pid}) {how}"), "")
            self._kill(f"process {i} {how}")   # nobody else can finish
        self.outcome[i] = res
        if res[0] == "error":
            self.order.append(i)
            if self.first_failure_at is None:
                self.first_failure_at = time.monotonic()
            gone = res[1]
            if isinstance(gone, RemoteFailure) and gone.error is None:
                # Process i found that peer unresponsive (or vanished): it will not report a
                # cause of its own, so there is no point in the grace period for it.
                self._kill_one(gone.process, f"process {i} found it gone: {gone}")
        if len(self.outcome) < len(self.procs) and self.next_look is None:
            self.next_look = time.monotonic()
        self._check_absent()

    def _check_absent(self) -> None:
        """Fail the run when processes wait in the rendezvous for one that returned without
        joining it (in whichever order the two were seen)."""
        if not self.activated or self.launcher_failure is not None:
            return
        for i, res in sorted(self.outcome.items()):
            if res[0] == "ok" and i not in self.activated:
                self._fail_all(f"process {i} (pid {self.procs[i].pid}) returned without "
                               "calling comp.activate(), while the other processes wait for "
                               "it in the rendezvous: every process must activate the "
                               "computation")
                return

    def _result(self, i: int):
        return self.results.get(i)

    @staticmethod
    def _load_result(i: int, data: bytes):
        try:
            return outcome.decode(data)
        except Exception as exc:  # noqa: BLE001
            return ("error",
                    ComputationFailed(f"process {i}: its result could not be read: {exc}"), "")

    def _kill(self, why: str) -> None:
        """Stop every process still running: SIGTERM first (a process ends between two
        subscriber calls, see naiad._child), SIGKILL for those still there after
        :data:`_STOP_WAIT` seconds (a stopped or stuck one)."""
        alive = [i for i, p in enumerate(self.procs) if p.poll() is None]
        for i in alive:
            self.stopped.setdefault(i, why)
            self.procs[i].terminate()
        deadline = time.monotonic() + _STOP_WAIT
        for i in alive:
            try:
                self.procs[i].wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.procs[i].kill()

    def _kill_one(self, i: int, why: str) -> None:
        if 0 <= i < len(self.procs) and self.procs[i].poll() is None:
            self.stopped.setdefault(i, why)
            self.procs[i].kill()


def _scheduler_state(pid: int) -> str:
    """The state letter of ``/proc/<pid>/stat`` (``T``: stopped), or ``?`` where there is no
    /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "?"
    return stat[stat.rfind(b")") + 2:][:1].decode()


def _pidfd(pid: int) -> Optional[int]:
    """A descriptor that becomes readable when process ``pid`` exits, where there are any."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _registered(sel: selectors.BaseSelector, i: int) -> bool:
    return any(key.data == ("link", i) for key in sel.get_map().values())


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
