"""Naiad: timely dataflow in Python — stateful vertices on a cyclic graph, notified by logical time.

Layers, each importing only those below it (checked by import-linter: the contracts are in
pyproject.toml and tests/test_layers.py runs them): ``naiad.config`` (options and flags) →
``naiad.progress`` (pure progress tracking) → ``naiad.errors`` → ``naiad.partition`` →
``naiad.graph``/``naiad.vertex`` (the logical graph and the vertex model) →
``naiad.worker_state`` (the worker's protocol, sans-I/O) → ``naiad.worker`` (its thread shell)
→ ``naiad.transport`` (the Fabric protocol; queues in process, ZeroMQ between processes) →
sinks, probes, the checkpoint store, the monitor → ``naiad.computation`` →
``naiad.recovery.restart`` (the restart loop; the rest of ``naiad.recovery`` sits lower) →
``naiad.execute`` → the command line, ``naiad.spark`` and ``naiad.testing``.
``stages`` and ``linq`` are built on top, in that order.
"""

from naiad.progress.timestamp import Timestamp
from naiad.errors import (ComputationFailed, GraphError, NaiadError, ProgressViolation,
                          RemoteFailure, TimeViolation, VertexError)
from naiad.partition import Exchange, Pipeline, key_hash
from naiad.vertex import Vertex
from naiad.state import KeyedState
from naiad.graph import Stream
from naiad.computation import Computation
from naiad.loops import LoopContext
from naiad.execute import execute
from naiad import io as _io, probe as _probe     # noqa: F401 - Stream.collect/subscribe/probe
from naiad.recovery.store import (CheckpointInUse, CheckpointLayoutError, CheckpointWarning,
                              LogFormatError, OutputLost)
from naiad.recovery.restart import RecoveryFailed

__all__ = [
    "Timestamp",
    "Vertex",
    "KeyedState",
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
    "RemoteFailure",
    "CheckpointInUse",
    "CheckpointLayoutError",
    "LogFormatError",
    "OutputLost",
    "RecoveryFailed",
    "CheckpointWarning",
]

__version__ = "0.1.0"
