"""Naiad: timely dataflow in Python — stateful vertices on a cyclic graph, notified by logical time.

Layers, each importing only those below it: ``naiad.progress`` (pure progress tracking) →
``naiad.graph``/``naiad.vertex`` (the logical graph and the vertex model) → ``naiad.worker``
(scheduling) → ``naiad.transport`` (queues in process, ZeroMQ between processes) →
``naiad.computation``/``naiad.execute`` (what a program calls).  ``stages`` and ``linq`` are
built on top, in that order.
"""

from naiad.progress.timestamp import Timestamp
from naiad.errors import (ComputationFailed, GraphError, NaiadError, ProgressViolation,
                          TimeViolation, VertexError)
from naiad.partition import Exchange, Pipeline, key_hash
from naiad.vertex import Vertex
from naiad.graph import Stream
from naiad.computation import Computation
from naiad.loops import LoopContext
from naiad.execute import execute
from naiad.checkpoint import CheckpointInUse, CheckpointLayoutError, LogFormatError, OutputLost

__all__ = [
    "Timestamp",
    "Vertex",
    "Stream",
    "Computation",
    "LoopContext",
    "execute",
    "Exchange",
    "Pipeline",
    "key_hash",
    "NaiadError",
    "GraphError",
    "VertexError",
    "TimeViolation",
    "ProgressViolation",
    "ComputationFailed",
    "CheckpointInUse",
    "CheckpointLayoutError",
    "LogFormatError",
    "OutputLost",
]

__version__ = "0.1.0"
