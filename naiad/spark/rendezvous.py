"""How the tasks of a barrier stage find each other: through the driver under a local master,
through ``BarrierTaskContext.allGather`` (bounded) under the others.

Each task of ``naiad.spark.execute`` binds its endpoint and must learn every other task's
before it connects.  ``BarrierTaskContext.allGather`` does that, but its task side waits for
the driver's answer in steps of one second (a sleep between looks at the reply), so it costs a
second even when every task asks within a millisecond: most of a small computation's time.
Under a local master the driver serves the rendezvous itself instead: :class:`DriverRendezvous`
binds a ZeroMQ ROUTER socket on loopback, CURVE-authenticated with the run's secret (a ZAP
handler admits only the run's client key), and answers each task of a stage attempt with the
list of all endpoints as soon as the last one has asked.  Tasks are told apart by stage id and
partition, and ordered by their task attempt id (``TaskContext.taskAttemptId()``, unique in the
SparkContext and increasing): every task of a rerun of a barrier stage is launched after the
failed attempt's tasks, so its id is larger, and a request with a smaller id than one already
seen for its partition is a failed attempt's late request, which is dropped instead of
completing the rerun in the place of the rerun's task.  (PySpark does not give a task its
stage attempt number, ``stageAttemptNumber()``, which would also tell apart a failed attempt's
request that arrives before the rerun's request for the same partition; such a request can
still fill that place, and the rerun then fails when its tasks cannot connect.)  A task that
asks again replaces its earlier request.  :class:`DriverGather` is the picklable task side, the
``rendezvous`` option of the task's :class:`naiad.Computation`.  The driver serves it while
``execute`` runs the stage; :meth:`DriverRendezvous.stop` wakes its thread through a pipe, so
it returns at once.
Other masters keep ``allGather``: the executors may not reach the driver's host on a port of
ours.  :class:`BarrierGather` is that task side.  ``allGather`` has no timeout: a task whose
process ends or hangs before it asks (its program fails to unpickle, an import calls
``os._exit``, it is killed) would keep the others waiting for ever, so the call runs in a daemon
thread and the task waits for it at most ``connect_timeout``, then fails with an error that says
so.  (Spark ends an executor whose task it kills while the task waits in ``allGather``: its
shuffle output is lost, and the stage's next attempts fail to fetch it; the driver names the
first failure from Spark's status store, :mod:`naiad.spark.failures`.)

>>> from naiad.transport.security import random_secret
>>> secret = random_secret()
>>> served = DriverRendezvous(secret, processes=1)
>>> DriverGather(served.endpoint, secret, stage=0, task=7, index=0, timeout=10)("tcp://127.0.0.1:5")
['tcp://127.0.0.1:5']
>>> served.stop()
>>> class Alone:                      # a BarrierTaskContext whose other tasks never arrive
...     def allGather(self, me): threading.Event().wait(5)
>>> BarrierGather(Alone(), 3, 9, 0, 2, timeout=0.1)("tcp://h:1")  # doctest: +ELLIPSIS
Traceback (most recent call last):
naiad.errors.ComputationFailed: task 0 of 2 (stage 3, task id 9) waited 0.1 s at the rendezvous ...
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Tuple

import zmq

from naiad.errors import ComputationFailed
from naiad.transport.pieces import bound
from naiad.transport.security import CurveKeys
from naiad.transport.zap import ZapHandler

__all__ = ["DriverRendezvous", "DriverGather", "BarrierGather"]


class DriverRendezvous:
    """The driver's side: serves the endpoints of ``processes`` tasks per stage on ``host``
    until :meth:`stop`."""

    def __init__(self, secret: str, processes: int, host: str = "127.0.0.1"):
        self.processes = processes
        self.ctx = zmq.Context()
        keys = CurveKeys(secret)
        self.auth = ZapHandler(self.ctx, [keys.client_public])
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        bound(self.sock, 1 << 16)         # a request is a line of JSON
        keys.serve(self.sock)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="naiad-rendezvous",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        waiting: Dict[int, Dict[int, Tuple[bytes, str]]] = {}   # stage -> index -> request
        newest: Dict[Tuple[int, int], int] = {}     # (stage, index) -> its newest task id
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if self._wake_r in ready:
                return
            ident, body = self.sock.recv_multipart()
            stage, task, index, endpoint = json.loads(body)
            place = (int(stage), int(index))
            if int(task) < newest.get(place, int(task)):
                continue                  # a failed attempt's late request
            newest[place] = int(task)
            tasks = waiting.setdefault(place[0], {})
            tasks[place[1]] = (ident, str(endpoint))
            if len(tasks) == self.processes:
                answer = json.dumps([tasks[i][1] for i in sorted(tasks)]).encode()
                for peer, _ in tasks.values():
                    self.sock.send_multipart([peer, answer])
                del waiting[place[0]]

    def stop(self) -> None:
        """End the thread (woken through its pipe) and release the socket and context."""
        os.write(self._wake_w, b"!")
        self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.sock.close(linger=0)
        self.auth.stop()
        self.ctx.term()


class DriverGather:
    """The task's side, a ``rendezvous`` callable: ``(own endpoint) -> every endpoint``."""

    def __init__(self, endpoint: str, secret: str, stage: int, task: int, index: int,
                 timeout: float):
        self.endpoint, self.secret = endpoint, secret
        self.stage, self.task, self.index, self.timeout = stage, task, index, timeout

    def request(self, me: str) -> bytes:
        """The request this task sends: its stage, task attempt id, partition and endpoint."""
        return json.dumps([self.stage, self.task, self.index, me]).encode()

    def __call__(self, me: str) -> List[str]:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        try:
            CurveKeys(self.secret).connect_as_client(sock)
            sock.connect(self.endpoint)
            sock.send(self.request(me))
            if not sock.poll(int(self.timeout * 1000)):
                msg = (f"task {self.index} (stage {self.stage}, task id {self.task}): the "
                       f"other tasks of the barrier stage did not reach "
                       f"the driver's rendezvous ({self.endpoint}) within {self.timeout:g} s")
                raise ComputationFailed(msg)
            return list(json.loads(sock.recv()))
        finally:
            sock.close(linger=0)
            ctx.term()


class BarrierGather:
    """The task's side under other masters: ``ctx.allGather`` (``ctx`` the task's
    ``BarrierTaskContext``), waited for at most ``timeout`` seconds."""

    def __init__(self, ctx: Any, stage: int, task: int, index: int, processes: int,
                 timeout: float):
        self.ctx, self.stage, self.task, self.index = ctx, stage, task, index
        self.processes, self.timeout = processes, timeout

    def __call__(self, me: str) -> List[str]:
        got: List[Any] = []

        def gather() -> None:
            try:
                got.append(list(self.ctx.allGather(me)))
            except BaseException as exc:  # noqa: BLE001 - raised in the task's thread
                got.append(exc)
        waiter = threading.Thread(target=gather, name="naiad-allgather", daemon=True)
        waiter.start()
        waiter.join(self.timeout)
        if not got:
            msg = (f"task {self.index} of {self.processes} (stage {self.stage}, task id "
                   f"{self.task}) waited {self.timeout:g} s at the rendezvous "
                   "(BarrierTaskContext.allGather) for the other tasks of the barrier stage: "
                   "another task probably failed or hung before it reached the rendezvous (its "
                   "Python process ended, or it is stuck unpickling the program or importing "
                   "its modules); look at the executors' logs (stderr) for that task, or raise "
                   "connect_timeout if the tasks start slowly")
            raise ComputationFailed(msg)
        if isinstance(got[0], BaseException):
            raise got[0]
        return list(got[0])
