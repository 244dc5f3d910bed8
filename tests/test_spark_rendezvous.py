"""The driver's rendezvous of naiad.spark.execute under a local master: every task gets every
endpoint in partition order once all have asked, a rerun task replaces its earlier request,
and a client without the run's secret gets nothing."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("zmq")

from naiad.errors import ComputationFailed  # noqa: E402
from naiad.spark.rendezvous import DriverGather, DriverRendezvous  # noqa: E402
from naiad.transport.security import random_secret  # noqa: E402


def _ask_all(served, secret, stage, endpoints, timeout=20.0):
    got = {}

    def ask(i, me):
        got[i] = DriverGather(served.endpoint, secret, stage, i, timeout)(me)
    threads = [threading.Thread(target=ask, args=(i, me)) for i, me in endpoints.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


@pytest.mark.parametrize("processes", [1, 3, 8])
def test_every_task_gets_every_endpoint_in_partition_order(processes):
    secret = random_secret()
    served = DriverRendezvous(secret, processes)
    try:
        want = [f"tcp://127.0.0.1:{7000 + i}" for i in range(processes)]
        for stage in (4, 5):                     # two stages in a row on one server
            got = _ask_all(served, secret, stage, dict(reversed(list(enumerate(want)))))
            assert got == {i: want for i in range(processes)}
    finally:
        served.stop()


def test_a_rerun_task_replaces_its_earlier_request():
    secret = random_secret()
    served = DriverRendezvous(secret, 2)
    try:
        # Task 0 asks, then gives up (its stage failed). It waits long enough for its request
        # to have reached the server even on a loaded machine: a request still in flight when
        # the new ones arrive could complete the stage in their place (at 0.5 s it did once).
        stale = threading.Thread(target=lambda: pytest.raises(
            ComputationFailed, DriverGather(served.endpoint, secret, 1, 0, 3.0), "tcp://old:1"))
        stale.start()
        stale.join()
        got = _ask_all(served, secret, 1, {0: "tcp://new:1", 1: "tcp://new:2"})
        assert got[0] == got[1] == ["tcp://new:1", "tcp://new:2"]
    finally:
        served.stop()


def test_a_client_without_the_secret_is_not_answered():
    secret = random_secret()
    served = DriverRendezvous(secret, 1)
    try:
        with pytest.raises(ComputationFailed, match="did not reach the driver's rendezvous"):
            DriverGather(served.endpoint, random_secret(), 0, 0, 1.0)("tcp://x:1")
        assert DriverGather(served.endpoint, secret, 0, 0, 10.0)("tcp://x:1") == ["tcp://x:1"]
    finally:
        served.stop()
