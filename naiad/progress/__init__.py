"""Progress tracking for timely dataflow: pure and I/O-free, it imports nothing from transport or workers."""

from naiad.progress.buffer import ProgressBuffer
from naiad.progress.reachability import GraphBuilder, GraphError, Reachability
from naiad.progress.summary import PathSummary
from naiad.progress.timestamp import Timestamp
from naiad.progress.tracker import Tracker

__all__ = [
    "GraphBuilder",
    "GraphError",
    "PathSummary",
    "ProgressBuffer",
    "Reachability",
    "Timestamp",
    "Tracker",
]
