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


class _OneConnection:
    """Requests of several tasks sent on one CURVE connection to a fresh two-task server:
    they reach it in the order sent (ZeroMQ keeps a connection's order)."""

    def __init__(self, stage):
        self.secret = random_secret()
        self.served = DriverRendezvous(self.secret, 2)
        self.stage = stage
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        CurveKeys(self.secret).connect_as_client(self.sock)
        self.sock.connect(self.served.endpoint)

    def send(self, task, index, me):
        gather = DriverGather(self.served.endpoint, self.secret, self.stage, task, index, 10.0)
        self.sock.send(gather.request(me))

    def answers(self, n):
        got = []
        for _ in range(n):
            assert self.sock.poll(10_000), "the stage was not answered"
            got.append(json.loads(self.sock.recv()))
        return got

    def close(self):
        self.sock.close(linger=0)
        self.ctx.term()
        self.served.stop()


def test_a_task_that_asks_again_replaces_its_earlier_request():
    """Task 4 (partition 0) asks, gives up and asks again with another endpoint before task 5
    (partition 1) asks: the stage is answered with the second endpoint.  On separate sockets
    the order of arrival would be the machine's choice, and under load task 5's request could
    arrive between the two of task 4."""
    conn = _OneConnection(stage=1)
    try:
        conn.send(4, 0, "tcp://old:1")
        conn.send(4, 0, "tcp://new:1")
        conn.send(5, 1, "tcp://new:2")
        assert conn.answers(2) == [["tcp://new:1", "tcp://new:2"]] * 2   # the waiting two
        assert conn.sock.poll(300) == 0                      # the replaced request got nothing
    finally:
        conn.close()


@pytest.mark.parametrize("answered_first", [False, True])
def test_a_failed_attempts_late_request_does_not_complete_the_rerun(answered_first):
    """Stage 3 failed in its first attempt (tasks 10 and 11) and Spark reruns it (tasks 12 and
    13).  The requests reach the server in the order sent: the rerun's task for partition 0,
    the failed attempt's late request for partition 0, then (or before it) the rerun's
    partition 1.  Told apart by stage and partition only, the late request would replace the
    rerun's, and the stage would be completed with its dead endpoint."""
    conn = _OneConnection(stage=3)
    try:
        order = [(12, 0, "tcp://new:1"), (10, 0, "tcp://dead:1")]
        order.insert(1 if answered_first else 2, (13, 1, "tcp://new:2"))
        for task, index, me in order:
            conn.send(task, index, me)
        assert conn.answers(2) == [["tcp://new:1", "tcp://new:2"]] * 2   # the rerun's two
        conn.send(13, 1, "tcp://new:2")               # the next request is answered alone ...
        assert conn.sock.poll(300) == 0                 # ... when partition 0 asks again
        conn.send(12, 0, "tcp://new:1")
        assert conn.answers(1) == [["tcp://new:1", "tcp://new:2"]]
    finally:
        conn.close()


def test_a_client_without_the_secret_is_not_answered():
    secret = random_secret()
    served = DriverRendezvous(secret, 1)
    try:
        with pytest.raises(ComputationFailed, match="did not reach the driver's rendezvous"):
            DriverGather(served.endpoint, random_secret(), 0, 0, 0, 1.0)("tcp://x:1")
        assert DriverGather(served.endpoint, secret, 0, 0, 0, 10.0)("tcp://x:1") == ["tcp://x:1"]
    finally:
        served.stop()
