"""A computation: builds the logical graph, starts the workers of this process, and joins them."""

from __future__ import annotations

import os
import threading
import time as _time
from typing import Any, Callable, Dict, List, Optional, Sequence

from naiad.errors import ComputationFailed, NaiadError
from naiad.graph import INPUT, LogicalGraph
from naiad.worker import STOP, Worker

__all__ = ["Computation"]

# Options accepted by Computation and naiad.execute, with their defaults.
OPTIONS: Dict[str, Any] = {
    "accumulate": True,          # accumulate progress updates before broadcasting (paper 3.3.2b)
    "debug_progress": False,     # check every progress invariant as the computation runs
    "connect_timeout": 30.0,     # seconds to wait for the other processes at start
    "heartbeat_timeout": 6.0,    # seconds of silence after which a peer counts as dead
    "secret": None,              # shared secret for CURVE authentication between hosts
    "listen": None,              # address to listen on when hosts are not given (loopback)
    "rendezvous": None,          # callable(endpoint) -> all endpoints, for launchers
    "checkpoint_dir": None,
    "checkpoint_every": None,
    "checkpoint_interval": None,
    "checkpoint_keep": 3,
    "max_restarts": 0,
}


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """Fill defaults; reject unknown option names with the list of known ones."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        msg = (f"unknown option(s) {', '.join(unknown)}; known options: "
               f"{', '.join(sorted(OPTIONS))}")
        raise TypeError(msg)
    merged = dict(OPTIONS)
    if os.environ.get("NAIAD_DEBUG_PROGRESS") == "1":
        merged["debug_progress"] = True
    merged.update(options)
    return merged


class Computation:
    """One process's part of a timely dataflow computation (SPMD: every process builds the same graph).

    >>> import naiad
    >>> comp = naiad.Computation()
    >>> inp = comp.new_input(name="numbers")
    >>> got = inp.stream.collect()
    >>> comp.activate()
    >>> inp.on_next([1, 2, 3]); inp.on_next([4]); inp.on_completed()
    >>> comp.join(timeout=10)
    >>> got.results
    {0: [1, 2, 3], 1: [4]}
    """

    def __init__(self, *, process_index: int = 0, processes: int = 1, workers: int = 1,
                 hosts: Optional[Sequence[str]] = None, **options: Any):
        for name, value, low in (("processes", processes, 1), ("workers", workers, 1),
                                 ("process_index", process_index, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                msg = f"{name} must be an integer >= {low}; got {value!r}"
                raise ValueError(msg)
        if process_index >= processes:
            msg = f"process_index {process_index} is out of range for {processes} processes"
            raise ValueError(msg)
        if hosts is not None and len(hosts) != processes:
            msg = (f"hosts lists {len(hosts)} address(es) for {processes} processes; give one "
                   "host:port per process, in process order")
            raise ValueError(msg)
        self.options = check_options(options)
        self.process_index = process_index
        self.processes = processes
        self.workers_per_process = workers
        self.hosts = list(hosts) if hosts is not None else None
        self.graph = LogicalGraph(self)
        self.inputs: List[Any] = []
        self.subscriptions: List[Any] = []
        self.epochs_fed = 0
        self.fabric = None
        self._workers: List[Worker] = []
        self._threads: List[threading.Thread] = []
        self._state = "building"
        self._failure: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._running = 0
        self._done = threading.Event()

    # ---- the contract's properties --------------------------------------------------------
    @property
    def workers(self) -> int:
        """Total number of workers over all processes."""
        return self.processes * self.workers_per_process

    @classmethod
    def from_args(cls, argv: Optional[Sequence[str]] = None, **options: Any) -> "Computation":
        """A computation configured by Naiad's flags: -p/--procid, -n/--numprocs, -t/--threads,
        -h/--hosts host:port ...  (for processes started by hand or by a cluster manager)."""
        from naiad.cli import parse_args
        cfg = parse_args(argv)
        return cls(process_index=cfg.procid, processes=cfg.numprocs, workers=cfg.threads,
                   hosts=cfg.hosts, **options)

    # ---- building --------------------------------------------------------------------------
    def new_input(self, name: Optional[str] = None):
        """An input stage; feed it with ``on_next(records)`` once per epoch after activate()."""
        from naiad.io import Input
        from naiad.vertex import Vertex
        stage = self.graph.add_stage(name, INPUT, Vertex, self.graph.top, default="input")
        handle = Input(self, stage)
        self.inputs.append(handle)
        return handle

    # ---- running ----------------------------------------------------------------------------
    def activate(self) -> None:
        """Freeze the graph, connect to the other processes and start this process's workers."""
        if self._state != "building":
            msg = f"activate() was already called (computation is {self._state})"
            raise NaiadError(msg)
        reach = self.graph.compile()
        self.graph.frozen = True
        self.fabric = self._make_fabric()
        first = self.process_index * self.workers_per_process
        debug = bool(self.options["debug_progress"])
        self._global_view = None
        if debug and self.processes == 1:
            from naiad.debug import GlobalView
            from naiad.progress.timestamp import Timestamp
            self._global_view = GlobalView(reach, [((st.loc, Timestamp(0)), self.workers)
                                                   for st in self.graph.stages
                                                   if st.kind == INPUT])
        self._workers = [
            Worker(self, first + i, i, self.graph, reach, self.fabric,
                   accumulate=bool(self.options["accumulate"]), debug=debug)
            for i in range(self.workers_per_process)
        ]
        self._state = "active"
        self._running = len(self._workers)
        for w in self._workers:
            t = threading.Thread(target=w.run, name=f"naiad-worker-{w.index}", daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def _make_fabric(self):
        if self.processes == 1:
            from naiad.transport.inproc import LocalFabric
            return LocalFabric(0, 1, self.workers_per_process)
        from naiad.transport.zmq_fabric import ZmqFabric
        return ZmqFabric(self)

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait until every worker of this process has finished; raise the first failure.

        All inputs of this process must be completed first, or nothing could ever finish.
        """
        if self._state == "building":
            msg = "join() before activate(): call comp.activate() and feed the inputs first"
            raise NaiadError(msg)
        if self._state == "joined":
            return
        open_inputs = [i.name for i in self.inputs if not i.completed]
        if open_inputs and self._failure is None:
            msg = (f"input(s) {', '.join(map(repr, open_inputs))} still open: call "
                   "on_completed() on every input before comp.join(), or the computation "
                   "can never finish")
            raise NaiadError(msg)
        deadline = None if timeout is None else _time.monotonic() + timeout
        while not self._done.is_set():
            wait = 0.5 if deadline is None else min(0.5, deadline - _time.monotonic())
            if wait <= 0:
                msg = (f"the computation did not finish within {timeout} s; process "
                       f"{self.process_index} still sees: {self.describe_progress()}")
                raise TimeoutError(msg)
            self._done.wait(wait)
        self._close()
        if self._failure is not None:
            raise self._failure
        self._state = "joined"

    def describe_progress(self) -> str:
        """What the first live worker still waits for (active pointstamps)."""
        for w in self._workers:
            if not w.finished:
                return w.describe_progress()
        return "nothing (all workers finished)"

    def _close(self) -> None:
        for t in self._threads:
            t.join(timeout=5.0)
        if self.fabric is not None:
            self.fabric.close()

    # ---- failure handling --------------------------------------------------------------------
    def _worker_failed(self, worker: Worker, exc: BaseException) -> None:
        self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Record the first failure and stop every worker (of every process)."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = exc
        if self.fabric is not None:
            self.fabric.stop(f"{type(exc).__name__}: {exc}")

    def _worker_exited(self, worker: Worker) -> None:
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self._done.set()

    def check_failed(self) -> None:
        """Raise the computation's failure, if there is one (inputs call this)."""
        if self._failure is not None:
            raise self._failure

    def shutdown(self) -> None:
        """Stop the workers without waiting for completion (after the program itself failed)."""
        if self._state == "active":
            if self.fabric is not None:
                self.fabric.stop("the program stopped")
            self._done.wait(10.0)
            self._close()
            self._state = "stopped"

    def finish(self) -> None:
        """After the program returns: complete open inputs and join, so nothing is left running."""
        if self._state != "active":
            return
        for i in self.inputs:
            if not i.completed:
                i.on_completed()
        self.join()
