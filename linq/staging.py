"""How a LINQ operator becomes a stage: map stages, fused with the stateless stage before them,
and per-time stages, both over the generic vertices of :mod:`linq.core`.

A :func:`map_stage` given a :class:`~linq.fusion.Step` joins the chain of stateless steps that
made its input, when that input is not exchanged (:mod:`linq.fusion`), and
:func:`fused_diagnose` replays such a chain record by record when it raises.  Every stage made here inherits loop invariance from its inputs
(:func:`linq.invariant.inherit`).
"""

from __future__ import annotations

from typing import Callable, List, Optional

import stages
from naiad.graph import Stream
from linq import fusion
from linq.core import HASHABLE, MapVertex, PerTimeVertex, check_each, explained
from linq.invariant import inherit

__all__ = ["map_stage", "fused_diagnose", "per_time_stage", "key_pairs"]


def map_stage(stream: Stream, op: str, fn: Callable[[list], list],
              diagnose: Optional[Callable[[int, list], None]] = None,
              partition_by: Optional[Callable] = None, step=None) -> Stream:
    """A stage of :class:`MapVertex`; a ``step`` (:class:`linq.fusion.Step`) without
    ``partition_by`` is fused with the stateless stage that made ``stream``, if any."""
    if step is None or partition_by is not None:
        out = stages.unary(stream, lambda: MapVertex(op, fn, diagnose),
                           partition_by=partition_by, name=op)
        return inherit(op, [stream], _pure(out))
    up = fusion.fusable(stream)
    source, steps = (up[0], up[1] + [step]) if up is not None else (stream, [step])
    if len(steps) > 1:
        fn = fusion.list_of(steps)
        diagnose = fused_diagnose(steps)
        op = "+".join(s.op for s in steps)
    out = stages.unary(source, lambda: MapVertex(op, fn, diagnose), name=op)
    return inherit(op, [source], fusion.mark(_pure(out), source, steps))


def _pure(out: Stream) -> Stream:
    """A map stage has no effect but its output: left out of the dataflow if nobody reads it
    (a select fused into the operator after it, say)."""
    out.graph.stages[out.sources[0][0]].pure = True
    return out


def fused_diagnose(steps: list, then: Optional[Callable[[int, list], None]] = None):
    """A diagnosis for a batch function made of fused ``steps`` (and then ``then``)."""
    def diagnose(edge: int, records: list) -> None:
        out = fusion.replay(steps, edge, records)
        if then is not None:
            then(edge, out)
    return diagnose


def per_time_stage(inputs: List[tuple], op: str, new_state, on_batch, on_done=None,
                   diagnose=None) -> Stream:
    """A stage of :class:`PerTimeVertex` over ``inputs``: a list of ``(stream, partition_by)``."""
    st = stages.new_stage(lambda: PerTimeVertex(op, new_state, on_batch, on_done, diagnose),
                          name=op)
    for edge, (s, key) in enumerate(inputs):
        st.new_input(s, key if key is None else explained(key, diagnose, edge))
    return inherit(op, [s for s, _ in inputs], st.new_output())


def key_pairs(stream: Stream, op: str, key: Callable, role: str = "key") -> Stream:
    """``(key(r), r)`` for every record, computed once, before an exchange on the key."""
    def fn(records: list) -> list:
        return [(key(r), r) for r in records]
    diagnose = check_each(op, role, key, HASHABLE)
    return map_stage(stream, f"{op}.key", fn, diagnose, step=fusion.Step("key", key, op, diagnose))
