"""Run a program with recovery: after a failure, restart every process from the last checkpoint."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from naiad.computation import Computation, run_program
from naiad.launch import launch_local
from naiad.recovery.directory import HELD, CheckpointDamaged, hold_run, release_run
from naiad.recovery.store import CheckpointInUse, CheckpointLayoutError, LogFormatError
from naiad.recovery.logs import OutputLost
from naiad.errors import CheckpointMisaligned, GraphError, NaiadError, VertexError
from naiad.tracing import keep_attempt

__all__ = ["execute_with_recovery", "RecoveryFailed", "permanent"]


class RecoveryFailed(NaiadError):
    """The computation kept failing after the allowed number of restarts."""


def permanent(exc: BaseException) -> bool:
    """A failure that a restart cannot cure: the program's own graph building or arguments
    (GraphError, or a bare TypeError or ValueError: failures inside vertices arrive wrapped in
    a VertexError), a checkpoint directory that is not private, or one another run holds, or
    checkpoints of another layout or format, a damaged key or a file where the directory needs
    a directory, processes that checkpoint at different epochs, and a vertex whose checkpoint
    fails (its state, unpicklable say, is the same at that boundary on every restart)."""
    return (isinstance(exc, (GraphError, PermissionError, CheckpointInUse, CheckpointLayoutError,
                             LogFormatError, OutputLost, CheckpointMisaligned, CheckpointDamaged,
                             NotADirectoryError, IsADirectoryError))
            or type(exc) in (TypeError, ValueError)
            or (isinstance(exc, VertexError) and exc.callback == "checkpoint"))


def execute_with_recovery(program: Callable[[Any], Any], *, processes: int, workers: int,
                          options: Dict[str, Any],
                          restarted: Optional[Callable[[BaseException], None]] = None
                          ) -> List[Any]:
    """``naiad.execute`` with ``checkpoint_dir``: restart on failure, up to ``max_restarts``
    (telling ``restarted`` each failure that a restart follows)."""
    restarts = options.get("max_restarts")
    restarts = 3 if restarts is None else int(restarts)
    root = Path(os.fspath(options["checkpoint_dir"]))
    held = hold_run(root)        # no other run takes the directory while this one restarts
    try:
        return _attempts(program, processes, workers, options, restarts, restarted)
    finally:
        release_run(held)


def _attempts(program: Callable[[Any], Any], processes: int, workers: int,
              options: Dict[str, Any], restarts: int,
              restarted: Optional[Callable[[BaseException], None]]) -> List[Any]:
    attempt = 0
    while True:
        try:
            if processes == 1:
                comp = Computation(process_index=0, processes=1, workers=workers, **options)
                comp.run_lock_held = True
                return [run_program(program, comp)]
            held = {HELD: str(Path(os.fspath(options["checkpoint_dir"])).resolve())}
            return launch_local(program, processes=processes, workers=workers, options=options,
                                env=held)
        except Exception as exc:  # noqa: BLE001 - every failure is a reason to roll back
            if permanent(exc):
                raise
            if attempt >= restarts:
                if restarts == 0:
                    raise
                msg = (f"the computation failed {attempt + 1} times (max_restarts={restarts}); "
                       f"last failure: {type(exc).__name__}: {exc}")
                raise RecoveryFailed(msg) from exc
            attempt += 1
            if options.get("trace"):      # the failed attempt's trace stays readable
                keep_attempt(options["trace"], attempt)
            if restarted is not None:
                restarted(exc)
            import logging      # here: only a run that restarts logs
            logging.getLogger("naiad.recovery").warning("computation failed (%s: %s); restart %d of %d from the last checkpoint "
                        "in %s", type(exc).__name__, exc, attempt, restarts,
                        options.get("checkpoint_dir"))
            time.sleep(0.1)
