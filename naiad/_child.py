"""Entry point of a process started by ``naiad.execute``: run the program, send the result.

The launcher passes the private directory holding the program, this process's place, and the
descriptor of its *link* (one end of a socket pair, see :mod:`naiad.launch`).  One thread reads
the link: the endpoints of the rendezvous, then nothing until the launcher goes away, when the
link reaches end of file and this process exits (no orphan outlives its launcher; one that is
stopped is killed by the kernel when the launcher dies).
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import List, Optional

from naiad import outcome
from naiad.computation import Computation, run_program
from naiad.errors import ComputationFailed, format_current
from naiad import launch
from naiad.launch import RELAY_PROGRESS, rendezvous_timeout
from naiad.link import (ACTIVE, ENDPOINT, ENDPOINTS, OPTIONS, PROGRESS, RESULT, MessageReader,
                        read_first, send_message)
from naiad.placement import bind_cpus


class LinkRendezvous:
    """The rendezvous over the link: send this process's endpoint, wait for everyone's."""

    def __init__(self, link: socket.socket, index: int, timeout: float = 60.0,
                 reader: Optional[MessageReader] = None):
        self.link, self.index, self.timeout = link, index, timeout
        self.endpoints: "queue.Queue[List[str]]" = queue.Queue()
        self._sending = threading.Lock()   # the connecting thread and the main one both send
        self._reader = reader or MessageReader()
        threading.Thread(target=self._read, name="naiad-link", daemon=True).start()

    def _read(self) -> None:
        reader = self._reader
        while True:
            try:
                data = self.link.recv(1 << 16)
            except OSError:
                data = b""
            if not data:               # the launcher is gone (or closed the run): stop now
                os._exit(3)
            for kind, body in reader.feed(data):
                if kind == ENDPOINTS:
                    self.endpoints.put(body.decode().split("\n"))

    def send(self, kind: bytes, body: bytes) -> None:
        """One message to the launcher (whole, whichever thread sends)."""
        with self._sending:
            send_message(self.link, kind, body)

    def activated(self) -> None:
        """Tell the launcher that this process entered ``activate``."""
        self.send(ACTIVE, b"")

    def __call__(self, endpoint: str) -> List[str]:
        self.send(ENDPOINT, endpoint.encode())
        try:
            return self.endpoints.get(timeout=self.timeout)
        except queue.Empty:
            msg = (f"process {self.index}: the launcher did not send the other processes' "
                   f"endpoints within {self.timeout:g} s")
            raise ComputationFailed(msg) from None


HALT_WAIT = 1.0
"""Seconds a process stopped by SIGTERM waits for a subscriber call in progress to return."""


def _stop_on_sigterm(comp: Computation) -> None:
    """SIGTERM (the launcher stopping the survivors of a failure) ends the process between two
    subscriber calls, never between a call's return and its delivery mark: the epoch would be
    handed out again after the restart.  Then it exits at once, like SIGKILL."""
    def on_sigterm(signum, frame) -> None:
        comp.halt_subscribers(HALT_WAIT)
        if comp.observer is not None:
            try:
                comp.observer.stopped("SIGTERM: the launcher stops the run (another process "
                                      "failed, or the launcher was stopped)")
            except Exception:  # noqa: BLE001 - the trace must not keep the process alive
                pass
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)


def _die_with_launcher() -> None:
    """A stopped process (SIGSTOP, a debugger) cannot see its link close: on Linux the kernel
    kills it when the launcher dies (``PR_SET_PDEATHSIG``), whatever state it is in."""
    if not sys.platform.startswith("linux"):
        return
    launcher = os.getppid()
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)        # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl: the link alone
        return
    if os.getppid() != launcher:       # it died before the call: nobody would send it
        os._exit(3)


def main(argv) -> int:
    _die_with_launcher()
    workdir, index, processes, workers, fd = argv
    index, processes, workers = int(index), int(processes), int(workers)
    link = socket.socket(fileno=int(fd))
    link.set_inheritable(False)        # the program's own subprocesses do not hold it open
    # The options (with the run's secret) are the link's first message: the computation
    # connects to the others (on a thread) while this process imports the program's modules.
    reader = MessageReader()
    try:
        kind, body = read_first(link, reader)
    except (OSError, EOFError):
        return 3                       # the launcher is gone
    rendezvous = LinkRendezvous(link, index, reader=reader)   # the launcher's end is watched
    comp: Optional[Computation] = None
    result: tuple
    try:
        if kind != OPTIONS:
            raise ComputationFailed(f"process {index}: the launcher sent {kind!r} first, "
                                    "not the options")
        options = dict(pickle.loads(body))
        relay = options.pop(RELAY_PROGRESS, False)
        # The launcher's own deadline names the late process; this one is a backstop.
        rendezvous.timeout = rendezvous_timeout(options) + 30
        options["rendezvous"] = rendezvous
        if options.get("pin_cpus", True):
            bind_cpus(index, processes, workers)      # before any worker or ZeroMQ thread
        comp = Computation(process_index=index, processes=processes, workers=workers, **options)
        if relay:
            comp.progress_emit = lambda text: rendezvous.send(PROGRESS, text.encode())
        comp.connect(announce=rendezvous.activated)
        _stop_on_sigterm(comp)
        try:
            # ``import linq`` in the parent installed the fluent Stream methods; a program
            # pickled by value does not carry that import, so make it here too.
            import linq  # noqa: F401
        except ImportError:  # pragma: no cover - linq is part of the distribution
            pass
        # pickle reads what cloudpickle wrote, and imports cloudpickle only when the program
        # travelled by value (a function of an importable module travels by name).
        launch.loading_program = index      # an execute at import time is refused
        try:
            program, _ = pickle.loads((Path(workdir) / "program.pkl").read_bytes())
        finally:
            launch.loading_program = None
        result = ("ok", run_program(program, comp), "")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        # Whether this process only relays another's failure (the launcher reports the cause).
        relayed = comp is not None and comp.failure_origin is not None
        result = ("error", exc, format_current(), relayed)
        code = 1
        if comp is not None and comp.state == "building":
            comp.shutdown()             # never activated: its early connection says goodbye
    try:
        data = outcome.encode(result)
    except Exception as exc:  # noqa: BLE001
        err: Exception
        if result[0] == "ok":
            err = TypeError(f"process {index}: the program's return value cannot be pickled: {exc}")
        else:
            err = RuntimeError(f"process {index}: {type(result[1]).__name__}: {result[1]}")
        data = outcome.encode(("error", err, result[2]))
        code = 1
    try:
        rendezvous.send(RESULT, data)
    except OSError:                    # the launcher is gone: nobody to report to
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
