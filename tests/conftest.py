"""Test configuration: progress invariants are checked everywhere; graphs run in several shapes."""

import os

os.environ.setdefault("NAIAD_DEBUG_PROGRESS", "1")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pytest  # noqa: E402

from naiad.testing import CONFIGURATIONS, Cluster  # noqa: E402


@pytest.fixture(params=CONFIGURATIONS, ids=lambda c: f"p{c[0]}w{c[1]}")
def cluster(request) -> Cluster:
    """Each test using it runs once per (processes, workers) configuration."""
    processes, workers = request.param
    return Cluster(processes, workers)
