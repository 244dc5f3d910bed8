"""The driver's rendezvous of naiad.spark.execute under a local master: every task gets every
endpoint in partition order once all have asked, a task that asks again replaces its earlier
request, a failed attempt's late request never completes a rerun of its stage, and a client
without the run's secret gets nothing."""

from __future__ import annotations

import json
import threading

import pytest

zmq = pytest.importorskip("zmq")

from naiad.errors import ComputationFailed  # noqa: E402
from naiad.spark.rendezvous import DriverGather, DriverRendezvous  # noqa: E402
from naiad.transport.security import CurveKeys, random_secret  # noqa: E402


def _ask_all(served, secret, stage, endpoints, timeout=20.0, attempt=0):
    got = {}

    def ask(i, me):
        got[i] = DriverGather(served.endpoint, secret, stage, attempt, i, timeout)(me)
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


def test_a_task_that_asks_again_replaces_its_earlier_request():
    """Task 4 (partition 0) asks, gives up and asks again with another endpoint before task 5
    (partition 1) asks: the stage is answered with the second endpoint.  The three requests
    travel on one connection, so they reach the server in the order sent (ZeroMQ keeps a
    connection's order); from separate sockets, the order of arrival would be the machine's
    choice, and under load task 5's request could arrive between the two of task 4."""
    secret = random_secret()
    served = DriverRendezvous(secret, 2)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        CurveKeys(secret).connect_as_client(sock)
        sock.connect(served.endpoint)

        def request(task, index, me):
            return DriverGather(served.endpoint, secret, 1, task, index, 10.0).request(me)
        for body in (request(4, 0, "tcp://old:1"), request(4, 0, "tcp://new:1"),
                     request(5, 1, "tcp://new:2")):
            sock.send(body)
        answers = []
        for _ in range(2):          # one answer for each request that is still waiting
            assert sock.poll(10_000), "the stage was not answered"
            answers.append(json.loads(sock.recv()))
        assert answers == [["tcp://new:1", "tcp://new:2"]] * 2
        assert sock.poll(300) == 0                      # the replaced request got nothing
    finally:
        sock.close(linger=0)
        ctx.term()
        served.stop()


@pytest.mark.parametrize("answered_first", [False, True])
def test_a_failed_attempts_late_request_does_not_complete_the_rerun(answered_first):
    """Stage 3 failed in its first attempt (tasks 10 and 11) and Spark reruns it (tasks 12 and
    13).  The requests travel on one connection, so they reach the server in the order sent
    (ZeroMQ keeps a connection's order): the rerun's task for partition 0, the failed
    attempt's late request for partition 0, then (or before it) the rerun's partition 1.  Told
    apart by stage and partition only, the late request would replace the rerun's, and the
    stage would be completed with its dead endpoint."""
    secret = random_secret()
    served = DriverRendezvous(secret, 2)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        CurveKeys(secret).connect_as_client(sock)
        sock.connect(served.endpoint)

        def request(task, index, me):
            return DriverGather(served.endpoint, secret, 3, task, index, 10.0).request(me)
        order = [request(12, 0, "tcp://new:1"), request(10, 0, "tcp://dead:1")]
        order.insert(1 if answered_first else 2, request(13, 1, "tcp://new:2"))
        for body in order:
            sock.send(body)
        answers = []
        for _ in range(2):          # one answer per request of the rerun
            assert sock.poll(10_000), "the rerun was not answered"
            answers.append(json.loads(sock.recv()))
        assert answers == [["tcp://new:1", "tcp://new:2"]] * 2
        sock.send(request(13, 1, "tcp://new:2"))      # the next request is answered alone ...
        assert sock.poll(300) == 0                      # ... when partition 0 asks again
        sock.send(request(12, 0, "tcp://new:1"))
        assert sock.poll(10_000)
        assert json.loads(sock.recv()) == ["tcp://new:1", "tcp://new:2"]
    finally:
        sock.close(linger=0)
        ctx.term()
        served.stop()


def test_a_client_without_the_secret_is_not_answered():
    secret = random_secret()
    served = DriverRendezvous(secret, 1)
    try:
        with pytest.raises(ComputationFailed, match="did not reach the driver's rendezvous"):
            DriverGather(served.endpoint, random_secret(), 0, 0, 0, 1.0)("tcp://x:1")
        assert DriverGather(served.endpoint, secret, 0, 0, 0, 10.0)("tcp://x:1") == ["tcp://x:1"]
    finally:
        served.stop()
