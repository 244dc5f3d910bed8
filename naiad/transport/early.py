"""A fabric connected in the background while the program builds its graph.

Connecting the processes (binding, the rendezvous, the CURVE handshakes of the control and data
connections, the hello that checks the layout) does not need the dataflow graph: only the check
that every process built the same graph does.  :class:`EarlyFabric` runs the connection on a
thread as soon as the computation exists, so that it overlaps the program's own work before
``activate``; ``activate`` then takes the fabric (:meth:`take`, joining the thread, which makes
its sockets safe to use from the worker threads) and only exchanges the graph's fingerprint
(:meth:`offer` sends it before the graph is compiled,
:meth:`naiad.transport.zmq_fabric.ZmqFabric.agree` compares the others').  An error while connecting is raised by
:meth:`take`, in ``activate``, as it would have been without the thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from naiad.errors import ComputationFailed

__all__ = ["EarlyFabric"]


class EarlyFabric:
    """``make()`` (a fabric without a fingerprint) run on a thread of its own."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._fabric: Any = None
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._abandoned = False
        self._failure: Optional[BaseException] = None   # told to the peers when abandoned
        self._thread = threading.Thread(target=self._run, name="naiad-connect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            fabric = self._make()
        except BaseException as exc:  # noqa: BLE001 - raised again by take()
            self._error = exc
            return
        with self._lock:
            self._fabric = fabric
            abandoned = self._abandoned
        if abandoned:
            self._goodbye(fabric)

    def _goodbye(self, fabric: Any) -> None:
        """Tell the peers this process's failure (if any), say goodbye, release the sockets."""
        failure = self._failure
        if failure is not None:
            said = f"{type(failure).__name__}: {failure}"
            fabric.stop(said, ComputationFailed(f"process {fabric.process_index} failed before "
                                                f"it activated: {said}"))
        fabric.close(wait=0.0)

    def take(self) -> Any:
        """The connected fabric (waiting for the thread), or the error connecting raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._fabric

    def offer(self, fingerprint: str) -> None:
        """Send the graph's fingerprint to the others as soon as it is known (once connected),
        so that they check it while this process compiles its graph."""
        self.take().offer(fingerprint)

    def abandon(self, linger: float = 0.0, failure: Optional[BaseException] = None) -> None:
        """The computation ends without activating: say goodbye to the peers (with ``failure``,
        the error that ends it, which they then raise as this process's) and release the sockets, now or (if
        still connecting) when the thread has connected.  With ``linger``, a thread that is not
        a daemon waits (at most that long) for the connection, so that the goodbye leaves even
        if the program ends at once: the others then fail at once, not after their own connect
        timeout."""
        with self._lock:
            self._abandoned = True
            self._failure = failure
            fabric = self._fabric
        if fabric is not None:
            self._goodbye(fabric)
        elif linger > 0 and self._thread.is_alive():
            threading.Thread(target=self._thread.join, args=(linger,), name="naiad-goodbye",
                             daemon=False).start()
