"""The in-process fabric: worker inboxes are queues and batches are handed over by reference.

It implements :class:`naiad.transport.protocol.Fabric` for a computation of one process:
``send`` a data batch to a worker, ``broadcast_progress`` to every other worker, ``flush`` at
the end of a step, ``stop`` all.  Messages from one worker to another are delivered in the
order sent (FIFO per pair).
"""

from __future__ import annotations

import os
import pickle
from queue import Empty, SimpleQueue
from typing import Any, Dict, List, Optional

__all__ = ["LocalFabric"]

from naiad.messages import DATA, PROGRESS, STOP


class LocalFabric:
    """All workers of this process; sending never copies or serialises a batch."""

    def __init__(self, process_index: int, processes: int, workers_per_process: int):
        self.process_index = process_index
        self.processes = processes
        self.workers_per_process = workers_per_process
        self.first = process_index * workers_per_process
        self.inboxes: List[SimpleQueue] = [SimpleQueue() for _ in range(workers_per_process)]
        self.progress_messages = 0
        self.progress_updates = 0
        self.progress_bytes = 0
        # Measuring bytes costs a pickle per broadcast: only for benchmarks.
        self._measure = os.environ.get("NAIAD_PROGRESS_STATS") == "1"
        self._arrived: Dict[str, Any] = {}

    def inbox(self, local_index: int) -> SimpleQueue:
        return self.inboxes[local_index]

    def send(self, src: int, dst: int, conn_id: int, time, records: list) -> None:
        self.inboxes[dst - self.first].put((DATA, conn_id, time, records))

    def broadcast_progress(self, src: int, updates: list) -> None:
        self.progress_messages += 1
        self.progress_updates += len(updates)
        if self._measure:
            self.progress_bytes += len(pickle.dumps(updates, protocol=5))
        msg = (PROGRESS, src, updates)
        me = src - self.first
        for i, q in enumerate(self.inboxes):
            if i != me:
                q.put(msg)

    def flush(self, src: int) -> None:
        """End of a worker's step: nothing is buffered in process."""

    def receive(self, local_index: int) -> tuple:
        """Messages that arrived for this worker outside its inbox (none in process)."""
        return ()

    def wait(self, local_index: int, timeout: float):
        """Block until something arrives for the worker (bounded by ``timeout`` seconds); return
        a message, or None when the worker should look at its inbox and sockets again."""
        try:
            return self.inboxes[local_index].get(timeout=timeout)
        except Empty:
            return None

    def post(self, local_index: int, msg: tuple) -> None:
        """Deliver a control message (input, close, stop) to one local worker."""
        self.inboxes[local_index].put(msg)

    def arrived_named(self, prefix: str) -> list:
        """The peers' arrivals at barriers named ``prefix...`` (there is no peer)."""
        return []

    def arrive(self, name: str, value=None) -> None:
        """Reach barrier ``name`` without waiting (no other process: only ``value`` is kept)."""
        self._arrived[name] = value

    def barrier(self, name: str, timeout: float, value=None):
        """Wait until every process reached ``name``; returns process 0's ``value``."""
        return self._arrived.pop(name, value)

    def gather(self, name: str, timeout: float, value=None) -> Dict[int, Any]:
        """Process 0 waits until every other process reached ``name`` (there is none)."""
        return {}

    def stop(self, reason: str, relay: Optional[BaseException] = None) -> None:
        """Stop every worker (there is no other process to tell about ``relay``)."""
        for q in self.inboxes:
            q.put((STOP, reason))

    def close(self) -> None:
        """Release resources (nothing to release in process)."""
