"""A worker's part in a checkpoint: seeing the computation paused at a boundary, and pickling.

The coordinator (:mod:`naiad.recovery.coordinator`) pauses the inputs at a boundary epoch and
asks every worker to quiesce; :func:`quiescent` tells, from the worker's own view of the
progress protocol, when nothing is in flight any more, and :func:`snapshot` then pickles every
vertex's state (:mod:`naiad.recovery.snapshot`) with the pending notification requests.  Both
take the worker's :class:`~naiad.worker_state.WorkerState`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from naiad.errors import CheckpointMisaligned
from naiad.progress.timestamp import Timestamp
from naiad.recovery import snapshot as states

__all__ = ["quiescent", "snapshot"]


def quiescent(ws: Any, epoch: int) -> bool:
    """Whether the view of worker state ``ws`` shows the whole computation paused at ``epoch``.

    Nothing but input capabilities at ``epoch`` and notification requests at later epochs
    may be active.  By the protocol's safety property every message still in flight is
    covered, in every worker's view, by an active pointstamp of its causal chain (at an
    earlier epoch, or on a connector), so this view proves that no message is in flight.
    """
    if ws.pending or ws.buffer:
        return False
    boundary = Timestamp(epoch)
    inputs = ws._input_locs
    stage_at = ws._stage_at_loc
    for (loc, time), count in ws.tracker.active().items():
        if count <= 0:
            continue
        if loc in inputs:
            if time[0] > epoch:
                # Some process fed past this boundary without stopping at it: the others
                # would wait for ever.  Fail, naming the boundary and the input.
                name = ws.stages[stage_at[loc]].name
                raise CheckpointMisaligned.at(epoch, f"input {name!r} has already been fed epoch "
                                                     f"{time[0]} in another process")
            if time != boundary:
                return False
        elif loc not in stage_at or time[0] < epoch:
            return False
    return True


def snapshot(ws: Any, epoch: int) -> Tuple[Dict[Any, Any], List[Tuple[int, int, Any]]]:
    """Every vertex's checkpoint() and the engine's own state, and the pending notification
    requests ``(worker, stage id, time)``: called by the shell for a CHECKPOINT action,
    before the worker handles anything else."""
    if ws.observers:
        ws.observe()
    out: Dict[Any, Any] = {}
    for st, v in zip(ws.stages, ws.vertices):
        v._now = None
        try:
            out[st.id] = states.encode(v.checkpoint(), epoch)
        except (Exception, SystemExit) as exc:
            ws._raise_vertex_error(v, Timestamp(epoch), "checkpoint", exc)
    out["__naiad__"] = {"inputs": dict(ws.input_epoch)}
    notifications = [(ws.index, sid, t) for (sid, t) in ws.notifications]
    return out, notifications
