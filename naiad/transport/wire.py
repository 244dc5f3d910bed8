"""How a step's items cross the wire (:func:`encode`, :func:`decode`), failures relayed between
processes, and the error for records that cannot be pickled (named by stage, connector and
time).

Items are pickled with protocol 5; buffers of 64 KiB or more (numpy arrays, Arrow tables) leave
the pickle out of band and travel as ZeroMQ frames of their own, sent and received without a
copy.  When pyarrow is loaded, tables travel in the Arrow IPC format
(:mod:`naiad.arrowcodec`).

>>> import pyarrow as pa
>>> payload, buffers = encode([("D", 0, (0, ()), [pa.table({"x": list(range(10000))})])])
>>> len(buffers)
1
>>> decode(payload, buffers)[0][3][0]["x"][9999].as_py()
9999
"""

from __future__ import annotations

import io
import pickle
import reprlib
import sys
from typing import Any, Dict, List, Sequence, Tuple

from naiad.errors import ComputationFailed, VertexError
from naiad.messages import DATA
from naiad.optional import importing, pickle_dispatch

__all__ = ["encode", "decode", "prepare", "explain_pickling", "explain_decoding", "dump_failure",
           "load_failure"]

OUT_OF_BAND = 1 << 16        # bytes: smaller buffers stay inside the pickle
_short = reprlib.Repr()      # a record in an error: short even when deeply nested or huge
_short.maxstring = _short.maxother = 200


def encode(items: Any) -> Tuple[bytes, List[pickle.PickleBuffer]]:
    """``(payload, buffers)``: ``items`` pickled, with its large buffers out of band."""
    buffers: List[pickle.PickleBuffer] = []

    def keep_large(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < OUT_OF_BAND:
            return True           # in band
        buffers.append(buf)
        return False

    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5, buffer_callback=keep_large)
    pickler.dispatch_table = pickle_dispatch()
    pickler.dump(items)
    return out.getvalue(), buffers


def prepare() -> None:
    """Pay the codec's first-use costs now (a process calls this while it connects to the
    others): the dispatch table, and with pyarrow loaded one small table encoded and decoded
    (Arrow's IPC writer and reader initialise lazily: ~0.5 ms on the first table, which would
    otherwise fall on the first message of the computation)."""
    if "pyarrow" in sys.modules:
        pickle_dispatch()
        codec = sys.modules["naiad.arrowcodec"]
        payload, buffers = encode([codec.sample_table()])
        decode(payload, buffers)


def decode(payload: Any, buffers: Sequence[Any] = ()) -> Any:
    """The items :func:`encode` made ``(payload, buffers)`` of."""
    with importing():                   # an array may import numpy in this worker thread
        return pickle.loads(payload, buffers=buffers)


def explain_pickling(graph: Any, src: int, items: list, process: int) -> None:
    """Raise a VertexError naming the first batch of ``items`` that neither pickle nor
    cloudpickle can serialise (stage, connector, time and the first bad record)."""
    for item in items:
        if item[0] != DATA:
            continue
        try:
            pickle.dumps(item[3], protocol=5)
        except Exception as exc:
            conn = graph.connectors[item[1]]
            src_stage, dst_stage = graph.stages[conn.src], graph.stages[conn.dst]
            import cloudpickle
            try:
                cloudpickle.dumps(item[3])
            except Exception:
                pass
            else:
                continue        # this batch travels by value; another one is the culprit
            bad = next((r for r in item[3] if not _picklable(r)), None)
            msg = (f"records sent from stage {src_stage.name!r} to stage {dst_stage.name!r} "
                   f"at {item[2]!r} cannot be pickled to reach another process "
                   f"({type(exc).__name__}: {str(exc)[:200]}); the first bad record is "
                   f"{_short.repr(bad)}. "
                   "Records that cross processes must be picklable data")
            raise VertexError(src_stage.name, src, item[2], "sending to another process",
                              TypeError(msg), "", process) from exc


class _Unloadable:
    """Stands for a value that failed to unpickle here (its reduction raised)."""

    def __init__(self, what: str, exc: BaseException):
        self.what, self.exc = what, exc


_PyUnpickler: Any = pickle._Unpickler  # type: ignore[attr-defined]  # its opcodes overridable


class _Lenient(_PyUnpickler):
    """The pure-Python unpickler, its reductions (a ``__reduce__``'s call) and builds (a
    ``__setstate__``) giving an :class:`_Unloadable` instead of raising, so that the rest of a
    message (the connector and time of each batch) can be read to name the one that failed."""

    dispatch: Dict[int, Any] = dict(_PyUnpickler.dispatch)

    def load_reduce(self) -> None:
        stack = self.stack
        args = stack.pop()
        func = stack[-1]
        try:
            stack[-1] = func(*args)
        except Exception as exc:  # noqa: BLE001 - named in the error
            stack[-1] = _Unloadable(getattr(func, "__qualname__", type(func).__name__), exc)

    def load_build(self) -> None:
        try:
            super().load_build()
        except Exception as exc:  # noqa: BLE001 - named in the error
            inst = self.stack[-1]
            self.stack[-1] = _Unloadable(f"{type(inst).__qualname__}.__setstate__", exc)

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.BUILD[0]] = load_build


def _bad_in(value: Any, depth: int = 3) -> Any:
    if isinstance(value, _Unloadable):
        return value
    if depth and isinstance(value, (list, tuple)):
        return next((b for b in map(lambda v: _bad_in(v, depth - 1), value) if b is not None),
                    None)
    return None


def explain_decoding(graph: Any, dst: int, src: int, payload: Any, buffers: Sequence[Any],
                     exc: BaseException, process: int) -> None:
    """Raise the error for a message from worker ``src`` that worker ``dst`` cannot unpickle
    (``exc``): a VertexError naming the receiving stage, the connector and the time when the
    message, read again leniently, tells which batch failed; else one naming both workers."""
    advice = ("records that cross processes must unpickle where they arrive: a class whose "
              "reduction raises there, or whose module that process cannot import, cannot be "
              "sent; send plain data (tuples, numbers, strings), or fix the class")
    try:
        with importing():
            items = _Lenient(io.BytesIO(bytes(payload)), buffers=buffers).load()
    except Exception:  # noqa: BLE001 - the plain error below then
        items = []
    for item in items:
        bad = _bad_in(item[3]) if item[0] == DATA else None
        if bad is None:
            continue
        conn = graph.connectors[item[1]]
        src_stage, dst_stage = graph.stages[conn.src], graph.stages[conn.dst]
        msg = (f"records sent from stage {src_stage.name!r} (worker {src}) to stage "
               f"{dst_stage.name!r} at {item[2]!r} cannot be unpickled here ({bad.what} "
               f"raised {type(bad.exc).__name__}: {bad.exc}); {advice}")
        raise VertexError(dst_stage.name, dst, item[2], "receiving from another process",
                          TypeError(msg), "", process) from exc
    msg = (f"worker {dst} cannot unpickle a message from worker {src} "
           f"({type(exc).__name__}: {exc}); {advice}")
    raise ComputationFailed(msg) from exc


def _picklable(record: Any) -> bool:
    try:
        pickle.dumps(record, protocol=5)
        return True
    except Exception:
        return False


_FAILURE_TEXT = 1 << 12      # characters of an oversized error's message that cross


def dump_failure(exc: BaseException, proc: int, limit: int = 1 << 24) -> bytes:
    """``exc`` pickled for the other processes; as a :class:`ComputationFailed` quoting it if
    it cannot be pickled, and with its message shortened if it pickles to more than ``limit``
    bytes (a message quoting a huge record: the other processes accept frames up to a bound)."""
    try:
        payload = pickle.dumps(exc, protocol=5)
    except Exception:
        payload = pickle.dumps(ComputationFailed(f"process {proc} failed: {type(exc).__name__}: "
                                                 f"{exc}"))
    if len(payload) <= limit:
        return payload
    text = str(exc)
    short = text[:_FAILURE_TEXT] + f"... [{len(text) - _FAILURE_TEXT} more characters]"
    return pickle.dumps(ComputationFailed(
        f"process {proc} failed: {type(exc).__name__}: {short} (its error, {len(payload)} bytes "
        f"pickled, is shortened here; process {proc} reports it whole)"))


def load_failure(payload: bytes, proc: int) -> BaseException:
    try:
        exc = pickle.loads(payload)
    except Exception:
        exc = ComputationFailed(f"process {proc} failed (its error could not be decoded)")
    if not isinstance(exc, BaseException):
        exc = ComputationFailed(f"process {proc} failed: {exc!r}")
    return exc
