"""The exceptions a user of the engine can meet, each naming what failed and what to do."""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "NaiadError",
    "GraphError",
    "VertexError",
    "ComputationFailed",
    "RemoteFailure",
    "ProgressViolation",
    "TimeViolation",
    "CheckpointMisaligned",
]

# The pure progress package defines these so that it stays free of the runtime.
from naiad.progress.errors import NaiadError
from naiad.progress.reachability import GraphError


def format_current() -> str:
    """The traceback of the exception being handled, as text (``traceback`` is imported by the
    first failure, not by every process at start)."""
    import traceback
    return traceback.format_exc()


class TimeViolation(NaiadError):
    """A vertex sent or asked for a notification at a time earlier than the event it handles."""


class CheckpointMisaligned(NaiadError):
    """Processes did not checkpoint at the same epochs (a program error: never retried)."""

    @classmethod
    def at(cls, epoch: int, what: str) -> "CheckpointMisaligned":
        """The error for a boundary ``epoch`` that ``what`` (a process) did not stop at."""
        return cls(f"checkpoint at epoch {epoch}: {what} that did not checkpoint at epoch "
                   f"{epoch}; every process must checkpoint at the same epochs "
                   "(checkpoint_every=, or comp.checkpoint() at the same point of the program "
                   "in every process)")


class ProgressViolation(NaiadError):
    """A message arrived at a time the vertex was already notified about (debug mode only)."""


class VertexError(NaiadError):
    """A user callback raised: names the stage, the vertex index, the time and the callback.

    The original exception is chained as ``__cause__`` (in the failing process) and its
    formatted traceback is kept in :attr:`traceback` so that it survives crossing processes.
    """

    def __init__(self, stage: str, vertex: int, time: Any, callback: str,
                 cause: Optional[BaseException] = None, traceback: str = "",
                 process: Optional[int] = None):
        self.stage = stage
        self.vertex = vertex
        self.time = time
        self.callback = callback
        self.cause_repr = f"{type(cause).__name__}: {cause}" if cause is not None else ""
        self.traceback = traceback
        self.process = process
        super().__init__(_message(stage, vertex, time, callback, self.cause_repr, process))
        if cause is not None:
            self.__cause__ = cause

    def __reduce__(self):
        return (_rebuild_vertex_error, (self.stage, self.vertex, self.time, self.callback,
                                        self.cause_repr, self.traceback, self.process))


def _rebuild_vertex_error(stage, vertex, time, callback, cause_repr, tb, process):
    err = VertexError(stage, vertex, time, callback, None, tb, process)
    err.cause_repr = cause_repr
    err.args = (_message(stage, vertex, time, callback, cause_repr, process),)
    return err


def _message(stage: str, vertex: int, time: Any, callback: str, cause: str,
             process: Optional[int]) -> str:
    """``vertex 1 of stage 'count' in process 1 failed in on_recv at Timestamp(3): ...`` (no
    time for a callback that has none, as the vertex factory)."""
    where = f" in process {process}" if process is not None else ""
    at = f" at {time!r}" if time is not None else ""
    return f"vertex {vertex} of stage {stage!r}{where} failed in {callback}{at}: {cause}"


class ComputationFailed(NaiadError):
    """A process of the computation failed or disappeared; the message says which and why."""


class RemoteFailure(ComputationFailed):
    """The computation failed in another process (``process``), not in this one.

    A transport reports a failure relayed by a peer as ``RemoteFailure(process, error)``, where
    ``error`` is the exception raised there; the computation then raises that ``error`` itself
    (so a :class:`VertexError` of process 1 is a VertexError in process 0 too) and does not relay
    it back.  A peer that vanished without a word is ``RemoteFailure(process, None, message)``,
    and that is what is raised.
    """

    def __init__(self, process: int, error: Optional[BaseException] = None,
                 message: Optional[str] = None):
        self.process = process
        self.error = error
        if message is None:
            message = (f"process {process} failed: {type(error).__name__}: {error}"
                       if error is not None else f"process {process} failed")
        super().__init__(message)

    def __reduce__(self):
        return (RemoteFailure, (self.process, self.error, str(self)))
