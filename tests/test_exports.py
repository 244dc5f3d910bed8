"""The public surface is exactly the documented one (as trio checks its exports).

Adding a public name is a decision: add it to the list here and document it in docs/.
"""

from __future__ import annotations

import pathlib
import re
import types

import pytest

import linq
from linq import differential as dd
import naiad
import naiad.spark
import naiad.testing
import stages

ROOT = pathlib.Path(__file__).resolve().parents[1]

EXPORTS = {
    naiad: {
        "Timestamp", "Vertex", "KeyedState", "Stream", "Computation", "LoopContext", "execute",
        "Exchange", "Pipeline", "key_hash",
        "NaiadError", "GraphError", "VertexError", "TimeViolation", "ProgressViolation",
        "ComputationFailed", "RemoteFailure",
        "CheckpointInUse", "CheckpointLayoutError", "LogFormatError", "OutputLost",
        "RecoveryFailed", "CheckpointWarning",
    },
    stages: {
        "unary", "binary", "sink", "new_stage", "Stage", "LoopContext", "Feedback",
        "Exchange", "Pipeline",
    },
    linq: {
        "UserFunctionError", "Loop", "OPERATORS", "select", "where", "select_many",
        "partition_by", "distinct", "union", "intersect", "except_", "count", "group_by",
        "cogroup_by", "join", "min", "max", "aggregate", "spread", "iterate",
        "iterate_and_accumulate",
    },
    dd: {"new_input", "InputCollection", "Collection", "Collected", "Arrangement", "Loop",
         "iterate"},
    naiad.spark: {
        "execute", "local_session", "source", "to_dataframe", "task_slots", "check_java",
        "check_columns", "SparkSource", "EpochSpec", "PartitionRows", "PartitionTables",
        "SparkUnavailable",
        "StageFailed",
    },
    naiad.testing: {"run", "run_unary", "shard", "free_ports", "CONFIGURATIONS", "Cluster"},
}


def public_names(module: types.ModuleType) -> set:
    """Public attributes that are not submodules (submodules appear once imported anywhere)."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
            and getattr(value, "__module__", None) not in ("typing", "__future__")
            and name != "annotations"}


@pytest.mark.parametrize("module", list(EXPORTS), ids=lambda m: m.__name__)
def test_all_is_exactly_the_documented_list(module):
    assert set(module.__all__) == EXPORTS[module]
    assert len(module.__all__) == len(set(module.__all__)), "duplicates in __all__"


@pytest.mark.parametrize("module", list(EXPORTS), ids=lambda m: m.__name__)
def test_nothing_public_beyond_all(module):
    assert public_names(module) - set(module.__all__) == set()


@pytest.mark.parametrize("module", list(EXPORTS), ids=lambda m: m.__name__)
def test_every_export_resolves_and_is_documented(module):
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    for name in module.__all__:
        obj = getattr(module, name)
        assert obj is not None
        if callable(obj):
            assert obj.__doc__, f"{module.__name__}.{name} has no docstring"
        assert re.search(rf"\b{re.escape(module.__name__)}\.{name}\b", text), (
            f"{module.__name__}.{name} is not mentioned in docs/")


def test_shared_names_are_the_same_objects():
    assert stages.LoopContext is naiad.LoopContext
    assert stages.Exchange is naiad.Exchange and stages.Pipeline is naiad.Pipeline


def test_exceptions_form_a_small_vocabulary():
    for name in ("GraphError", "VertexError", "TimeViolation", "ProgressViolation",
                 "ComputationFailed"):
        assert issubclass(getattr(naiad, name), Exception)
    for name in ("VertexError", "TimeViolation", "ProgressViolation", "ComputationFailed",
                 "CheckpointInUse", "RemoteFailure"):
        assert issubclass(getattr(naiad, name), naiad.NaiadError)
