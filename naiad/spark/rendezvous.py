"""The tasks of a barrier stage find each other through the driver, under a local master.

Each task of ``naiad.spark.execute`` binds its endpoint and must learn every other task's
before it connects.  ``BarrierTaskContext.allGather`` does that, but its task side waits for
the driver's answer in steps of one second (a sleep between looks at the reply), so it costs a
second even when every task asks within a millisecond: most of a small computation's time.
Under a local master the driver serves the rendezvous itself instead: :class:`DriverRendezvous`
binds a ZeroMQ ROUTER socket on loopback, CURVE-authenticated with the run's secret (a ZAP
handler admits only the run's client key), and answers each task of a stage attempt with the
list of all endpoints as soon as the last one has asked (tasks are told apart by stage id and
partition; a task that asks again, as in a rerun stage, replaces its earlier request);
:class:`DriverGather` is the picklable task side, the ``rendezvous`` option of the task's
:class:`naiad.Computation`.  The driver serves it while ``execute`` runs the stage.
Other masters keep ``allGather``: the executors may not reach the driver's host on a port of
ours.

>>> from naiad.transport.security import random_secret
>>> secret = random_secret()
>>> served = DriverRendezvous(secret, processes=1)
>>> DriverGather(served.endpoint, secret, stage=0, index=0, timeout=10)("tcp://127.0.0.1:5")
['tcp://127.0.0.1:5']
>>> served.stop()
"""

from __future__ import annotations

import json
import threading
from typing import Dict, List, Tuple

import zmq

from naiad.errors import ComputationFailed
from naiad.transport.security import CurveKeys
from naiad.transport.zap import ZapHandler

__all__ = ["DriverRendezvous", "DriverGather"]

_POLL_MS = 200          # the serving thread looks at its stop flag this often


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
        keys.serve(self.sock)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="naiad-rendezvous",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        waiting: Dict[int, Dict[int, Tuple[bytes, str]]] = {}
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stopping.is_set():
            if not poller.poll(_POLL_MS):
                continue
            ident, body = self.sock.recv_multipart()
            stage, index, endpoint = json.loads(body)
            tasks = waiting.setdefault(int(stage), {})
            tasks[int(index)] = (ident, str(endpoint))
            if len(tasks) == self.processes:
                answer = json.dumps([tasks[i][1] for i in sorted(tasks)]).encode()
                for peer, _ in tasks.values():
                    self.sock.send_multipart([peer, answer])
                del waiting[int(stage)]

    def stop(self) -> None:
        """End the thread and release the socket and context."""
        self._stopping.set()
        self._thread.join()
        self.sock.close(linger=0)
        self.auth.stop()
        self.ctx.term()


class DriverGather:
    """The task's side, a ``rendezvous`` callable: ``(own endpoint) -> every endpoint``."""

    def __init__(self, endpoint: str, secret: str, stage: int, index: int, timeout: float):
        self.endpoint, self.secret = endpoint, secret
        self.stage, self.index, self.timeout = stage, index, timeout

    def __call__(self, me: str) -> List[str]:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        try:
            CurveKeys(self.secret).connect_as_client(sock)
            sock.connect(self.endpoint)
            sock.send(json.dumps([self.stage, self.index, me]).encode())
            if not sock.poll(int(self.timeout * 1000)):
                msg = (f"task {self.index}: the other tasks of the barrier stage did not reach "
                       f"the driver's rendezvous ({self.endpoint}) within {self.timeout:g} s")
                raise ComputationFailed(msg)
            return list(json.loads(sock.recv()))
        finally:
            sock.close(linger=0)
            ctx.term()
