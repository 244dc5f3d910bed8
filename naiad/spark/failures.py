"""What a failed barrier stage says: the computation's error carried through Spark.

A task of :func:`naiad.spark.execute` that fails raises a ``RuntimeError`` whose text holds the
computation's error between two marks (:func:`task_error`); Spark puts that text in the
exception the driver gets, and :func:`stage_failed` turns it back into :class:`StageFailed`.  A
task whose Python process ended without a word is named too.  When Spark gives up on the stage
for a later reason (a task killed while it waits in ``BarrierTaskContext.allGather`` ends its
executor, and the next attempts miss its shuffle output), :func:`diagnosed` finds the first
failure in Spark's status store.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from typing import List, Optional

from naiad.errors import ComputationFailed, VertexError

__all__ = ["StageFailed", "stage_failed", "task_error", "diagnosed"]

# The task's error travels inside Spark's exception text between these marks.
_BEGIN, _END = "<<naiad>>", "<</naiad>>"
_FOUND = re.compile(re.escape(_BEGIN) + r"(.*?)" + re.escape(_END), re.S)


class StageFailed(ComputationFailed):
    """The barrier stage failed; the message is the computation's error (stage, vertex, time).

    ``__cause__`` is Spark's own exception, with the task's traceback.
    """


_CRASHED = "Python worker exited unexpectedly"


def stage_failed(exc: Exception) -> Optional[StageFailed]:
    """The :class:`StageFailed` that Spark's ``exc`` stands for: the computation's own error,
    or a task whose Python process ended without one; else ``None``.

    >>> stage_failed(RuntimeError("... <<naiad>>stage 'count' failed<</naiad>> ..."))
    StageFailed("naiad.spark.execute: stage 'count' failed")
    >>> stage_failed(RuntimeError("Python worker exited unexpectedly (crashed). ..."))
    StageFailed("naiad.spark.execute: a task's Python process ended without an error ...")
    >>> stage_failed(ValueError("bad plan")) is None
    True
    """
    return _failure_in(str(exc))


def _failure_in(text: str) -> Optional[StageFailed]:
    found = _FOUND.search(text)
    if found is not None:
        return StageFailed(f"naiad.spark.execute: {found.group(1)}")
    if _CRASHED in text:
        return StageFailed("naiad.spark.execute: a task's Python process ended without an error "
                           "(the program called os._exit, or the process was killed, by a "
                           "signal or for want of memory); its executor's log may say which. "
                           f"Spark: {_CRASHED}")
    return None


def task_error(exc: BaseException, process: int) -> str:
    """The text of the RuntimeError a failed task raises: the computation's error between marks
    that :func:`stage_failed` finds in Spark's exception, then the traceback."""
    if isinstance(exc, VertexError):
        summary = str(exc)
        tb = exc.traceback or ""
    else:
        summary = f"process {process}: {type(exc).__name__}: {exc}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{_BEGIN}{summary}{_END}\n{tb}"


_GAVE_UP = re.compile(r"Job aborted due to stage failure: ([^\n]*)")


def diagnosed(spark, exc: Exception, since: int) -> Optional[StageFailed]:
    """:class:`StageFailed` naming the first failure of a barrier stage submitted since ``since``
    (the driver JVM's clock, ms), when Spark gave up on it for a later reason; else ``None``."""
    gave_up = _GAVE_UP.search(str(exc))
    reasons = [r for r in _failure_reasons(spark, since) if "barrier" in r] if gave_up else []
    if gave_up is None or not reasons:
        return None
    first = next(filter(None, map(_failure_in, reasons)), None)
    said = first or "naiad.spark.execute: the barrier stage failed: " + \
        " ".join(reasons[0].strip().split("\n")[:2])
    return StageFailed(f"{said}; then Spark gave up: {gave_up.group(1)} (when later attempts "
                       "miss shuffle output: Spark ends the executor of a task it kills while "
                       "the task waits in BarrierTaskContext.allGather)")


def _failure_reasons(spark, since: int) -> List[str]:
    """Why the stage attempts submitted since ``since`` failed, oldest first, from Spark's
    status store (its internal API through py4j: ``[]`` where it differs)."""
    try:
        jsc = spark.sparkContext._jsc.sc()
        with contextlib.suppress(Exception):   # a busy bus: what is recorded so far
            jsc.listenerBus().waitUntilEmpty(2000)   # the attempts' ends are recorded
        store = jsc.statusStore()
        stages = store.stageList(None, *(getattr(store, f"stageList$default${i}")()
                                         for i in range(2, 6)))
        found = []
        for stage in (stages.apply(i) for i in range(stages.size())):
            submitted, reason = stage.submissionTime(), stage.failureReason()
            if submitted.isDefined() and submitted.get().getTime() >= since and \
                    reason.isDefined():
                found.append((stage.stageId(), stage.attemptId(), str(reason.get())))
        return [reason for *_, reason in sorted(found)]
    except Exception:  # noqa: BLE001 - another Spark version's internals: no diagnosis
        return []
