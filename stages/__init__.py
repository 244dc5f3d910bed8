"""The stage layer: build logical stages from vertex factories, connect them, and loop.

``unary``, ``binary`` and ``sink`` cover the common shapes; ``new_stage`` is Naiad's general
``NewStage``; ``LoopContext`` gives ingress, egress and feedback for cyclic subgraphs.
"""

from naiad.loops import Feedback, LoopContext
from naiad.partition import Exchange, Pipeline
from stages.builders import Stage, binary, new_stage, sink, unary

__all__ = ["unary", "binary", "sink", "new_stage", "Stage", "LoopContext", "Feedback",
           "Exchange", "Pipeline"]
