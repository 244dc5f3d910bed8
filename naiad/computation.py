"""A computation: builds the logical graph, starts the workers of this process, and joins them."""

from __future__ import annotations

import threading
import time as _time
from typing import Any, Callable, Dict, List, Optional, Sequence

from naiad import partition
from naiad.config import OPTIONS, check_layout, check_options, parse_args
from naiad.console import FrontierProgress, frontier_view
from naiad.errors import ComputationFailed, NaiadError, RemoteFailure
from naiad.recovery.agreement import agree_on_resume
from naiad.recovery.coordinator import Coordinator
from naiad.stall import StallWatch
from naiad.recovery.store import CheckpointStore
from naiad.debug import GlobalView
from naiad.progress.timestamp import Timestamp
from naiad.transport.early import EarlyFabric
from naiad.transport.inproc import LocalFabric
from naiad.transport.protocol import Fabric, FabricHooks
from naiad.transport.wire import explain_decoding, explain_pickling
from naiad.transport.zmq_fabric import ZmqFabric
from naiad.flow import EpochWindow
from naiad.graph import INPUT, LogicalGraph
from naiad.io import Input
from naiad.vertex import Vertex
from naiad.meter import Meter
from naiad.observe import Observer, wanted
from naiad.picture import graph_dot
from naiad.worker import Worker

__all__ = ["Computation", "run_program", "OPTIONS", "check_options"]

STOP_WAIT = 2.0
"""Seconds a computation stopped by its program's error waits for its workers to stop; a
worker still in a vertex callback then is left to end with it (and named in a warning)."""

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
        check_layout(processes, workers, hosts, process_index)
        self.options = check_options(options)
        self.process_index = process_index
        self.processes = processes
        self.workers_per_process = workers
        self.hosts = list(hosts) if hosts is not None else None
        self.graph = LogicalGraph(self)
        self.inputs: List[Any] = []
        self.subscriptions: List[Any] = []
        self.probes: List[Any] = []
        self.epochs_fed = 0
        self.fabric: Any = None
        self._workers: List[Worker] = []
        self._threads: List[threading.Thread] = []
        self._progress: Optional[FrontierProgress] = None     # the default progress line
        self._stall: Optional[StallWatch] = None      # names a callback that does not return
        # Where process 0's default progress goes instead of this process's stderr or logger:
        # set by a launcher whose application logs (naiad._child), None otherwise.
        self.progress_emit: Optional[Callable[[str], None]] = None
        self._state = "building"
        self._failure: Optional[BaseException] = None
        self.failure_origin: Optional[int] = None   # the process it came from, if another
        self._lock = threading.Lock()
        self._running = 0
        self._done = threading.Event()
        # Checkpoints and recovery.
        self.store: Any = None
        self.run_lock_held = False      # execute holds the directory's run lock for this run
        self.restored = None
        self.coordinator: Optional[Coordinator] = None
        self.initial_pointstamps: list = []
        self.checkpoint_stats: List[Dict[str, Any]] = []
        self.observer: Optional[Observer] = Observer(self) if wanted(self.options) else None
        self.window: Optional[EpochWindow] = None      # made at activate (flow control)
        self._early: Optional[EarlyFabric] = None      # connecting since connect()
        self._announce: Optional[Callable[[], None]] = None

    # ---- the contract's properties --------------------------------------------------------
    @property
    def state(self) -> str:
        """``building``, ``active``, ``joined`` or ``stopped``."""
        return self._state

    @property
    def failure(self) -> Optional[BaseException]:
        """The first failure of the computation (in any process), or None."""
        return self._failure

    @property
    def finished(self) -> bool:
        """Whether every worker of this process has stopped."""
        return self._done.is_set()

    @property
    def local_workers(self) -> List[Worker]:
        """This process's workers (thread shells), for diagnostics and tests."""
        return list(self._workers)

    @property
    def workers(self) -> int:
        """Total number of workers over all processes."""
        return self.processes * self.workers_per_process

    @classmethod
    def from_args(cls, argv: Optional[Sequence[str]] = None, **options: Any) -> "Computation":
        """A computation configured by Naiad's flags: -p/--procid, -n/--numprocs, -t/--threads,
        -h/--hosts host:port ..., --connect-timeout S (for processes started by hand or by a
        cluster manager)."""
        cfg = parse_args(argv)
        if cfg.connect_timeout is not None:
            options.setdefault("connect_timeout", cfg.connect_timeout)
        return cls(process_index=cfg.procid, processes=cfg.numprocs, workers=cfg.threads,
                   hosts=cfg.hosts, **options)

    # ---- building --------------------------------------------------------------------------
    def new_input(self, name: Optional[str] = None):
        """An input stage; feed it with ``on_next(records)`` once per epoch after activate()."""
        stage = self.graph.add_stage(name, INPUT, Vertex, self.graph.top, default="input")
        handle = Input(self, stage)
        self.inputs.append(handle)
        return handle

    def graph_dot(self) -> str:
        """The logical graph as Graphviz DOT text: stages by name, connectors labelled with
        their partitioning, loop contexts as clusters (see :mod:`naiad.picture`)."""
        return graph_dot(self.graph)

    # ---- running ----------------------------------------------------------------------------
    def connect(self, announce: Optional[Callable[[], None]] = None) -> None:
        """Start connecting to the other processes now, in the background, while the program
        builds its graph and reads its input (``execute``'s processes do, at their start; see
        :mod:`naiad.transport.early`); ``activate`` then only compares the graphs.
        ``announce`` is called when ``activate`` starts (the launcher watches for processes
        that never activate).  Without this, ``activate`` connects."""
        if self.processes > 1 and self._early is None and self._state == "building":
            self._announce = announce
            self._early = EarlyFabric(lambda: self._new_fabric(None))

    def activate(self) -> None:
        """Freeze the graph, connect to the other processes and start this process's workers."""
        if self._state != "building":
            msg = f"activate() was already called (computation is {self._state})"
            raise NaiadError(msg)
        if self.processes > 1 and self.options["checkpoint_dir"]:
            self.connect()   # so that a directory it cannot resume from fails the others at once
        if self._announce is not None:
            self._announce()
        if self._early is not None:
            # The others check the graph while this process compiles it (an invalid graph
            # fails to compile in every process alike: they all built the same one).
            self._early.offer(self.graph.fingerprint())
        self.graph.prune()
        reach = self.graph.compile()
        self.graph.frozen = True
        try:
            self._prepare_recovery()
        except BaseException as exc:
            # A checkpoint directory that cannot be resumed (another dataflow, another layout,
            # damage): release its lock, or a retry in this process would find it held.
            self._state = "stopped"
            if self.store is not None:
                self.store.close()
            self._abandon_connection(exc)
            raise
        bound = self.options["max_epochs_in_flight"]
        if bound is not None:
            # One place per worker, and one per subscriber thread: epochs fed and not yet
            # delivered count as in flight too, so a slow subscriber holds the inputs back.
            subscribers = [s for s in self.subscriptions if s.threaded]
            for i, sub in enumerate(subscribers):
                sub.slot = self.workers_per_process + i
            self.window = EpochWindow(bound, self.workers_per_process + len(subscribers),
                                      self.epochs_fed)
            for sub in subscribers:
                # Epochs handed out before a restart are not handed out again: they do not
                # hold the inputs back (the checkpoint resumed from may be many epochs older).
                self.window.advance(sub.slot, sub.delivered)
        self.fabric = self._make_fabric()
        if self.coordinator is not None:       # what peers said while there was no coordinator
            self.coordinator.replay(self.fabric.arrived_named("skip-"))
        first = self.process_index * self.workers_per_process
        debug = bool(self.options["debug_progress"])
        self.global_view = None
        if debug and self.processes == 1:
            self.global_view = GlobalView(reach, self.initial_pointstamps)
        try:
            if self.processes > 1:      # the same checkpoint, or none, in every process
                agree_on_resume(self)
            self._workers = [
                Worker(self, first + i, i, self.graph, reach, self.fabric,
                       accumulate=bool(self.options["accumulate"]), debug=debug)
                for i in range(self.workers_per_process)
            ]
        except BaseException as exc:
            # A vertex factory, a restore or the resume point failed: tell the others, now.
            self.fail(exc)
            self._state = "stopped"
            self._close()
            raise
        if self.observer is not None:
            self.observer.start()
        self._state = "active"
        self._running = len(self._workers)
        for w in self._workers:
            t = threading.Thread(target=w.run, name=f"naiad-worker-{w.index}", daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()
        self._stall = StallWatch(self._workers, self.process_index)
        if self.options["progress"] is None and self.process_index == 0:
            if self.progress_emit is not None:        # to the launcher, which logs it
                self._progress = FrontierProgress(lambda: frontier_view(self), emit=self.progress_emit)
            elif FrontierProgress.wanted():
                self._progress = FrontierProgress(lambda: frontier_view(self))

    def _peer_arrived(self, name: str, process: int) -> None:
        """Another process reached barrier ``name`` (on the transport's thread)."""
        if self.coordinator is not None:
            self.coordinator.peer_arrived(name, process)

    def _prepare_recovery(self) -> None:
        """Find the checkpoint to resume from (if any) and Naiad's initial pointstamps."""
        if self.options["checkpoint_dir"]:
            self.store = CheckpointStore(self.options["checkpoint_dir"], self.process_index,
                                         self.processes, self.options["checkpoint_keep"],
                                         workers=self.workers_per_process,
                                         run_held=self.run_lock_held)
            self.restored = self.store.latest(self.graph.fingerprint())
        base = self.restored.epoch if self.restored is not None else 0
        initial = []
        for st in self.graph.stages:
            if st.kind == INPUT:
                n = self.workers if self.restored is None else self.restored.open_inputs.get(st.id, 0)
                if n:
                    initial.append(((st.loc, Timestamp(base)), n))
        if self.restored is not None:
            for _, sid, t in self.restored.notifications:
                initial.append(((self.graph.stages[sid].loc, t), 1))
        self.initial_pointstamps = initial
        self.epochs_fed = base
        if self.store is not None:
            self.coordinator = Coordinator(self, base)
        for inp in self.inputs:
            inp.base_epoch = base
        for sub in self.subscriptions:
            sub.attach(self.store, base)

    # ---- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Take a consistent checkpoint now, at the current epoch boundary (call it in every
        process at the same point of the program, between on_next calls); it is durable when
        this returns."""
        if self.coordinator is None:
            msg = "comp.checkpoint() needs checkpoint_dir=... in execute() or Computation()"
            raise NaiadError(msg)
        self.coordinator.checkpoint_now()

    def before_epoch(self, epoch: int) -> None:
        """An input is about to feed ``epoch``: a checkpoint due at this boundary is cut first."""
        if self.coordinator is not None:
            self.coordinator.before_epoch(epoch)

    def on_quiescent(self, worker, epoch: int) -> None:
        """A worker is quiescent at a checkpoint boundary, about to snapshot (worker shell)."""
        if self.coordinator is not None:
            self.coordinator.on_quiescent(worker, epoch)

    def on_snapshot(self, worker, epoch: int, states, notifications,
                    seconds: float = 0.0) -> None:
        """A worker's vertex states at a checkpoint boundary, pickled in ``seconds`` (from the
        worker shell)."""
        if self.coordinator is not None:
            self.coordinator.on_snapshot(worker, epoch, states, notifications, seconds)

    def meter_for(self, worker: int) -> Optional[Meter]:
        """The meter of a worker of this process (None when neither trace nor monitor is on)."""
        return None if self.observer is None else self.observer.meter_for(worker)

    def _make_fabric(self) -> Fabric:
        if self.processes == 1:
            return LocalFabric(0, 1, self.workers_per_process)
        if self._early is None:
            return self._new_fabric(self.graph.fingerprint())
        early, self._early = self._early, None
        fabric = early.take()
        try:
            # Launched (announce given): a backstop, the launcher names a late process first.
            late = 30.0 if self._announce is not None else 0.0
            fabric.agree(self.graph.fingerprint(), float(self.options["connect_timeout"]) + late)
        except BaseException as exc:
            # The others must hear of it: one still to come would otherwise find this
            # process's fingerprint, go on, and wait for its progress for ever.
            fabric.stop(f"{type(exc).__name__}: {exc}", exc)
            fabric.close(wait=0.0)
            raise
        return fabric

    def _new_fabric(self, fingerprint: Optional[str]) -> ZmqFabric:
        hooks = FabricHooks(fail=self.fail, failure=lambda: self._failure,
                            explain_unpicklable=self._explain_unpicklable,
                            explain_undecodable=self._explain_undecodable,
                            arrived=self._peer_arrived)
        return ZmqFabric(self.process_index, self.processes, self.workers_per_process,
                         self.options, fingerprint, hooks, self.hosts)

    def _explain_unpicklable(self, src: int, items: list) -> None:
        explain_pickling(self.graph, src, items, self.process_index)

    def _explain_undecodable(self, dst: int, src: int, payload: Any, buffers: Any,
                             exc: BaseException) -> None:
        explain_decoding(self.graph, dst, src, payload, buffers, exc, self.process_index)

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
        # One wait, woken by the last worker's exit (or a failure's); a signal still interrupts it.
        if not self._done.wait(timeout):
            msg = (f"the computation did not finish within {timeout} s; process "
                   f"{self.process_index} still sees: {self.describe_progress()}")
            raise TimeoutError(msg)
        self._close()
        if self._failure is not None:
            raise self._failure
        self._state = "joined"

    def describe_progress(self) -> str:
        """What the first live worker still waits for (active pointstamps), and which vertex
        callbacks the workers are in now."""
        busy = [b for b in (w.describe_callback() for w in self._workers if not w.finished) if b]
        for w in self._workers:
            if not w.finished:
                return "; ".join([w.describe_progress()] + busy)
        return "nothing (all workers finished)"

    def halt_subscribers(self, timeout: float) -> None:
        """The process is being stopped (SIGTERM from the launcher): every subscriber finishes
        the call it is in, and its delivery mark, and starts no other (each bounded by
        ``timeout``)."""
        for sub in self.subscriptions:
            sub.halt(timeout)

    def _close(self, wait: float = 5.0) -> None:
        """Release everything, after waiting (``wait`` s in all) for the worker threads: one
        still in a vertex callback then is left to end with it, and named in a warning."""
        deadline = _time.monotonic() + wait
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - _time.monotonic()))
        if self._stall is not None:
            self._stall.stop()
        if self._progress is not None:
            self._progress.stop()       # the last line, when one was shown
            self._progress = None
        stuck = [w.describe_callback() or f"worker {w.index}"
                 for w, t in zip(self._workers, self._threads) if t.is_alive()]
        if stuck:
            import logging      # here: only a stuck run logs
            logging.getLogger("naiad").warning(
                "the computation stopped, but %s; its thread ends when that callback returns",
                "; ".join(stuck))
        partition.release_caches()      # the keys of this run need not outlive it
        for sub in self.subscriptions:
            sub.close()                 # the subscribers finish what they were handed
        if self.coordinator is not None:
            self.coordinator.close()    # the last checkpoint is committed before all closes
        if self.fabric is not None:
            self.fabric.close()
        if self.store is not None:
            self.store.close()          # files, and the lock on the checkpoint directory
        if self.observer is not None:
            self.observer.close()

    # ---- failure handling --------------------------------------------------------------------
    def worker_failed(self, worker: Worker, exc: BaseException) -> None:
        """A worker stopped with ``exc`` (from the worker shell): the computation fails."""
        self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Record the first failure and stop every worker (of every process).

        A :class:`~naiad.RemoteFailure` (reported by the transport) came from another process:
        the error raised there becomes this process's failure too, and it is not relayed back.
        """
        origin = None
        if isinstance(exc, RemoteFailure):
            origin = exc.process
            exc = exc.error if exc.error is not None else exc
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                # Another process was interrupted (Ctrl-C) or exited: not this one.
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                exc = ComputationFailed(f"process {origin} was stopped ({why}); process "
                                        f"{self.process_index} stops")
        with self._lock:
            if self._failure is not None:
                return
            self._failure = exc
            self.failure_origin = origin
        if self.observer is not None:
            self.observer.failed(exc)
        if self.window is not None:
            self.window.wake()
        for p in self.probes:
            p._wake()
        if self.fabric is not None:
            self.fabric.stop(f"{type(exc).__name__}: {exc}", exc if origin is None else None)

    def worker_exited(self, worker: Worker) -> None:
        """A worker's thread ended (from the worker shell)."""
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self._done.set()
            if self.window is not None:
                self.window.wake()
            for p in self.probes:
                p._wake()

    def check_failed(self) -> None:
        """Raise the computation's failure, if there is one (inputs call this)."""
        if self._failure is not None:
            raise self._failure

    def _abandon_connection(self, failure: Optional[BaseException] = None) -> None:
        """The computation ends without having been activated: release its early connection
        (telling the others ``failure``, the error that ends it here)."""
        if self._early is not None:
            self._early.abandon(float(self.options["connect_timeout"]),
                                failure if self._failure is None else None)  # not relayed back
            self._early = None

    def shutdown(self, exc: Optional[BaseException] = None) -> None:
        """Stop the workers without waiting for completion (after the program itself failed
        with ``exc``: that is the computation's failure, and the other processes get it)."""
        self._abandon_connection(exc)
        if self._state == "active":
            if self.coordinator is not None and self._failure is None:
                self.coordinator.settle()   # a checkpoint being written is finished first
            if exc is not None:
                self.fail(exc)
            if self.fabric is not None:
                self.fabric.stop("the program stopped")
            self._done.wait(STOP_WAIT)
            self._close(wait=5.0 if self._done.is_set() else 0.5)
            self._state = "stopped"

    def finish(self) -> None:
        """After the program returns: complete open inputs and join, so nothing is left running."""
        self._abandon_connection()
        if self._state != "active":
            return
        for i in self.inputs:
            if not i.completed:
                i.on_completed()
        self.join()


def run_program(program: Callable[[Computation], Any], comp: Computation) -> Any:
    """Run ``program(comp)``; afterwards nothing of the computation is left running."""
    try:
        result = program(comp)
    except BaseException as exc:
        comp.shutdown(exc)
        if comp._failure is not None and comp._failure is not exc:
            raise comp._failure
        raise
    comp.finish()
    return result
