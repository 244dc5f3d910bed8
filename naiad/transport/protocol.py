"""The contract between a worker and its transport, written down as a :class:`typing.Protocol`.

A :class:`Fabric` carries the messages of :mod:`naiad.messages` between the workers of a
computation.  Its one promise to the progress protocol: the channel from one worker to another
is FIFO, nothing lost and nothing duplicated, data batches and progress updates alike.  Two
implementations: :class:`naiad.transport.inproc.LocalFabric` (one process: queues, batches by
reference) and :class:`naiad.transport.zmq_fabric.ZmqFabric` (several processes: ZeroMQ, with
its control plane in :mod:`naiad.transport.control`).

A transport never sees the computation: it receives its options and a :class:`FabricHooks`
of callbacks, and reports a failure that came from another process as a
:class:`naiad.RemoteFailure`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Protocol, Tuple

__all__ = ["Fabric", "Inbox", "FabricHooks"]


class Inbox(Protocol):
    """A worker's inbox: a queue that many threads put into and only its worker reads."""

    def put(self, item: tuple) -> None: ...
    def get_nowait(self) -> tuple: ...
    def empty(self) -> bool: ...


class Fabric(Protocol):
    """What the worker shell, the inputs and the checkpoint coordinator need of a transport.

    Worker indices are global (``src``, ``dst``); ``local_index`` is a worker's index within
    this process.
    """

    def inbox(self, local_index: int) -> Inbox:
        """The queue of messages for a local worker (inputs and local workers put there)."""
        ...

    def send(self, src: int, dst: int, conn_id: int, time: Any, records: list) -> None:
        """Send a data batch from worker ``src`` to worker ``dst`` (a ``DATA`` message)."""
        ...

    def broadcast_progress(self, src: int, updates: list) -> None:
        """Send ``src``'s progress updates to every other worker (a ``PROGRESS`` message)."""
        ...

    def flush(self, src: int) -> None:
        """End of ``src``'s step: whatever it buffered for other processes leaves now."""
        ...

    def receive(self, local_index: int) -> Iterable[tuple]:
        """Messages that arrived for the worker outside its inbox, in the order sent."""
        ...

    def wait(self, local_index: int, timeout: float) -> Optional[tuple]:
        """Block until something may have arrived for the worker (at most ``timeout`` s);
        return a message, or None when the worker should look at its inbox again."""
        ...

    def post(self, local_index: int, msg: tuple) -> None:
        """Deliver a control message (input epoch, close, checkpoint) to a local worker."""
        ...

    def barrier(self, name: str, timeout: float, value: Any = None) -> Any:
        """Wait until every process reached ``name`` (bounded); returns process 0's value."""
        ...

    def arrive(self, name: str, value: Any = None) -> None:
        """Reach barrier ``name`` without waiting (``barrier(name, ...)`` then only waits and
        returns process 0's value given here)."""
        ...

    def arrived_named(self, prefix: str) -> List[Tuple[str, int]]:
        """``(name, process)`` of the peers' arrivals so far, not yet awaited, at barriers
        whose name starts with ``prefix`` (for a hook set up after they came)."""
        ...

    def gather(self, name: str, timeout: float, value: Any = None) -> Dict[int, Any]:
        """Process 0 waits until every other process reached ``name`` (bounded) and returns
        their ``value`` by process; the others tell process 0 and return ``{}`` at once (no
        round trip)."""
        ...

    def stop(self, reason: str, relay: Optional[BaseException] = None) -> None:
        """Stop every local worker; tell the other processes ``relay`` (this process's own
        failure) when given."""
        ...

    def close(self) -> None:
        """Say goodbye to the other processes (bounded) and release every resource."""
        ...


def _no_failure() -> Optional[BaseException]:
    return None


def _ignore(exc: BaseException) -> None:
    return None


def _explain_nothing(src: int, items: list) -> None:
    return None


def _not_watched(name: str, process: int) -> None:
    return None


def _decode_unexplained(dst: int, src: int, payload: Any, buffers: Any,
                        exc: BaseException) -> None:
    return None


class FabricHooks(NamedTuple):
    """The callbacks a transport may call, instead of reaching into the computation.

    ``fail(exc)``: the computation must stop with ``exc`` (a :class:`naiad.RemoteFailure` when
    it came from another process); ``failure()``: the computation's failure so far, or None;
    ``explain_unpicklable(src, items)``: raise a clear error naming the batch of ``items`` (sent
    by worker ``src``) that cannot be pickled; ``explain_undecodable(dst, src, payload,
    buffers, exc)``: raise a clear error for a message from worker ``src`` that worker ``dst``
    cannot unpickle; ``arrived(name, process)``: another process reached barrier ``name``
    (called on the transport's thread).
    """

    fail: Callable[[BaseException], None] = _ignore
    failure: Callable[[], Optional[BaseException]] = _no_failure
    explain_unpicklable: Callable[[int, list], None] = _explain_nothing
    explain_undecodable: Callable[[int, int, Any, Any, BaseException], None] = \
        _decode_unexplained
    arrived: Callable[[str, int], None] = _not_watched

    def check_failed(self) -> None:
        """Raise the computation's failure, if there is one."""
        exc = self.failure()
        if exc is not None:
            raise exc
