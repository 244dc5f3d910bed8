"""What crosses the wire besides batches: failures relayed between processes, and the error for
records that cannot be pickled (named by stage, connector and time)."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from naiad.errors import ComputationFailed, VertexError
from naiad.messages import DATA

__all__ = ["explain_pickling", "dump_failure", "load_failure"]


def explain_pickling(graph: Any, src: int, items: list, process: int) -> None:
    """Raise a VertexError naming the first batch of ``items`` that neither pickle nor
    cloudpickle can serialise (stage, connector, time and the first bad record)."""
    for item in items:
        if item[0] != DATA:
            continue
        try:
            pickle.dumps(item[3], protocol=5)
        except Exception as exc:
            conn = graph.connectors[item[1]]
            src_stage, dst_stage = graph.stages[conn.src], graph.stages[conn.dst]
            try:
                cloudpickle.dumps(item[3])
            except Exception:
                pass
            else:
                continue        # this batch travels by value; another one is the culprit
            bad = next((r for r in item[3] if not _picklable(r)), None)
            msg = (f"records sent from stage {src_stage.name!r} to stage {dst_stage.name!r} "
                   f"at {item[2]!r} cannot be pickled to reach another process "
                   f"({type(exc).__name__}: {exc}); the first bad record is {bad!r:.200}. "
                   "Records that cross processes must be picklable data")
            raise VertexError(src_stage.name, src, item[2], "sending to another process",
                              TypeError(msg), "", process) from exc


def _picklable(record: Any) -> bool:
    try:
        pickle.dumps(record, protocol=5)
        return True
    except Exception:
        return False


def dump_failure(exc: BaseException, proc: int) -> bytes:
    try:
        return pickle.dumps(exc, protocol=5)
    except Exception:
        return pickle.dumps(ComputationFailed(f"process {proc} failed: {type(exc).__name__}: {exc}"))


def load_failure(payload: bytes, proc: int) -> BaseException:
    try:
        exc = pickle.loads(payload)
    except Exception:
        exc = ComputationFailed(f"process {proc} failed (its error could not be decoded)")
    if not isinstance(exc, BaseException):
        exc = ComputationFailed(f"process {proc} failed: {exc!r}")
    return exc
