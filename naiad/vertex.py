"""The paper's vertex: user code receives timestamped batches and notifications, and sends."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Dict, Iterable, List

from naiad.errors import TimeViolation
from naiad.progress.timestamp import Timestamp

__all__ = ["Vertex"]

# Attributes the engine keeps on every vertex; excluded from the default checkpoint.
_ENGINE_ATTRS = frozenset({"_out", "_now", "_notify", "_worker", "index", "stage", "_stagedef"})


class Vertex:
    """Subclass and override :meth:`on_recv` (or :meth:`on_recv_batch`) and :meth:`on_notify`.

    Inside a callback handling an event at time ``t``, :meth:`send_by` and :meth:`notify_at`
    accept times ``u`` with ``t.less_equal(u)``; anything earlier raises :class:`TimeViolation`.
    Sends are buffered per (output port, time) and leave as one batch per destination vertex
    when the callback returns.  Received batches are shared, not copied: treat them as read-only.

    >>> class Double(Vertex):
    ...     def on_recv(self, edge, message, time):
    ...         self.send_by(0, 2 * message, time)
    >>> from naiad.testing import run_unary
    >>> run_unary(Double, [[1, 2], [3]])
    {0: [2, 4], 1: [6]}
    """

    index: int
    stage: "StageInfo"
    # Set by the worker that owns the vertex (naiad.worker), never by user code:
    _out: List[Dict[Any, list]]          # per output port: time -> records sent in a callback
    _stagedef: Any                       # the StageDef (ports, connectors)
    _now: Any                            # the time of the callback running, or None
    _notify: Callable[..., None]         # the worker's notify_at
    _worker: Any                         # the Worker

    def __init__(self) -> None:
        pass

    # ---- callbacks a subclass overrides -------------------------------------------------
    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        """One record ``message`` arrived on input port ``edge`` at ``time``."""
        msg = (f"stage {self.stage.name!r}: {type(self).__name__} received a record but "
               "overrides neither on_recv nor on_recv_batch")
        raise NotImplementedError(msg)

    def on_recv_batch(self, edge: int, messages: List[Any], time: Timestamp) -> None:
        """A batch arrived on input port ``edge`` at ``time``; the default calls on_recv per record."""
        on_recv = self.on_recv
        for m in messages:
            on_recv(edge, m, time)

    def on_notify(self, time: Timestamp) -> None:
        """No more messages at times ``<= time`` can arrive at this vertex."""

    def checkpoint(self) -> Any:
        """State to persist; the default is the vertex's own attributes, pickled.

        Callables (user functions given to the factory) and modules are configuration, not
        state: the factory recreates them, so they are left out.
        """
        return {k: v for k, v in self.__dict__.items()
                if k not in _ENGINE_ATTRS and not callable(v) and not isinstance(v, ModuleType)}

    def restore(self, state: Any) -> None:
        """Restore what :meth:`checkpoint` returned."""
        self.__dict__.update(state)

    # ---- calls available inside callbacks -----------------------------------------------
    def send_by(self, edge: int, message: Any, time: Timestamp) -> None:
        """Send one record on output port ``edge`` at ``time`` (buffered until the callback ends)."""
        try:
            if edge < 0:
                raise IndexError(edge)
            buf = self._out[edge]
        except (IndexError, TypeError, AttributeError):
            self._bad_port(edge)
        lst = buf.get(time)
        if lst is None:
            self._check_time(time, "send_by")
            lst = buf[time] = []
        lst.append(message)

    def send_batch_by(self, edge: int, messages: Iterable[Any], time: Timestamp) -> None:
        """Send many records on output port ``edge`` at ``time``."""
        try:
            if edge < 0:
                raise IndexError(edge)
            buf = self._out[edge]
        except (IndexError, TypeError, AttributeError):
            self._bad_port(edge)
        lst = buf.get(time)
        if lst is None:
            self._check_time(time, "send_batch_by")
            lst = buf[time] = []
        lst.extend(messages)
        if not lst:
            del buf[time]

    def notify_at(self, time: Timestamp) -> None:
        """Ask for :meth:`on_notify` at ``time`` once no message at ``<= time`` can arrive."""
        self._check_time(time, "notify_at")
        self._notify(self, time)

    # ---- engine internals ---------------------------------------------------------------
    def _check_time(self, time: Any, what: str) -> None:
        now = getattr(self, "_now", None)
        stage = getattr(self, "stage", None)
        name = stage.name if stage is not None else type(self).__name__
        if now is None:
            msg = (f"stage {name!r} vertex {getattr(self, 'index', '?')}: {what} called outside "
                   "on_recv/on_notify; a vertex may only send or request notifications while it "
                   "handles an event")
            raise TimeViolation(msg)
        if type(time) is not Timestamp:
            msg = (f"stage {name!r} vertex {self.index}: {what} needs a naiad.Timestamp, got "
                   f"{type(time).__name__} {time!r}; pass on the time your callback received")
            raise TypeError(msg)
        if len(time[1]) != len(now[1]) or not now.less_equal(time):
            msg = (f"stage {name!r} vertex {self.index}: {what} at {time!r} is earlier than or "
                   f"incomparable with the event being handled at {now!r}; a vertex may only act "
                   "at times at or after the current one")
            raise TimeViolation(msg)

    def _bad_port(self, edge: Any):
        stage = getattr(self, "stage", None)
        if stage is None:
            msg = (f"{type(self).__name__}: send_by called before the vertex was placed in a "
                   "stage; send only from on_recv/on_notify")
            raise TimeViolation(msg)
        msg = (f"stage {stage.name!r} vertex {self.index}: no output port {edge!r}; the stage "
               f"has {stage.outputs} output(s) numbered from 0")
        raise ValueError(msg)


class StageInfo:
    """What a vertex may know of its stage: name, id, and the number of ports."""

    __slots__ = ("name", "id", "inputs", "outputs")

    def __init__(self, name: str, id: int, inputs: int, outputs: int):
        self.name = name
        self.id = id
        self.inputs = inputs
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"StageInfo({self.name!r}, id={self.id})"
