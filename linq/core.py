"""The generic vertices every LINQ operator is built from, and errors that name the user function.

Two vertex classes carry the whole LINQ layer:

* :class:`MapVertex` applies a ``records -> records`` function to each batch as it arrives
  (``select``, ``where``, ``select_many``, keying for an exchange).  It keeps no state.
* :class:`PerTimeVertex` keeps one state object per timestamp: each batch updates the state of
  its time and may emit records at once (``distinct``, ``join``, ``intersect``); the
  notification at that time may emit more (``group_by``, ``count``, ``except_``) and always
  drops the state.  State is keyed by the full :class:`~naiad.Timestamp`, loop counters
  included, so records at different times never mix.

Fast paths are list comprehensions over the batch.  When one raises, the operator's
``diagnose(edge, records)`` replays the batch record by record through :func:`call`, which
raises a :class:`UserFunctionError` naming the operator, the user function, the record and what
was expected.  The engine wraps it in :class:`naiad.VertexError` with the stage (named after the
operator, e.g. ``group_by(by_word)``), the vertex and the time.
"""

from __future__ import annotations

import reprlib
from typing import Any, Callable, Iterable, Optional, Sequence

from naiad.errors import NaiadError
from naiad.partition import Explained, key_hash
from naiad.graph import Stream
from naiad.vertex import Vertex

__all__ = ["UserFunctionError", "MapVertex", "PerTimeVertex", "call", "check_each",
           "fn_name", "label", "need_callable", "need_stream", "ITERABLE", "HASHABLE", "TRUTH",
           "check_hashable", "require_hashable", "check_keys", "emit", "LinqVertex", "explained"]

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 6

# Shapes a user function's result must have (checked when a failure is diagnosed).
ITERABLE = "an iterable of output records (a list, tuple, set or generator)"
HASHABLE = "a hashable key (int, str, tuple, ...), since keys are grouped and exchanged by value"
HASHABLE_VALUE = ("a hashable value (int, str, tuple, ...), since a differential operator keeps "
                  "its values as multisets")
TRUTH = "a result with a truth value (a bool, a number, ...), since it decides if a record passes"


class UserFunctionError(NaiadError):
    """A user function of a LINQ operator raised, or returned something of the wrong shape.

    Fields: ``operator`` (e.g. ``"group_by(by_word)"``), ``role`` (``"reducer"``, ``"key"``,
    ...), ``function`` (the callable's name), ``record`` (the argument(s), as a short repr) and
    ``expected`` (the shape wanted, or ``None`` when the function itself raised).
    """

    def __init__(self, operator: str, role: str, function: Any, args: Sequence[Any],
                 problem: str, expected: Optional[str] = None, hint: str = ""):
        self.operator = operator
        self.role = role
        self.function = fn_name(function) if function is not None else None
        self.record = ", ".join(_repr.repr(a) for a in args)
        self.expected = expected
        who = f"the {role} {self.function}" if function is not None else f"a {role}"
        msg = f"{operator}: {who} {problem}"
        if args:
            msg += f" (called with {self.record})"
        if expected is not None:
            msg += f"; expected {expected}"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)

    def __reduce__(self):
        return (_rebuild, (type(self), self.args[0], self.operator, self.role, self.function,
                           self.record, self.expected))


def _rebuild(cls, msg, operator, role, function, record, expected):
    err = Exception.__new__(cls)
    Exception.__init__(err, msg)
    err.operator, err.role, err.function = operator, role, function
    err.record, err.expected = record, expected
    return err


# ---- naming and argument checks at graph construction ----------------------------------------
def fn_name(fn: Any) -> str:
    """A short, deterministic name for a user callable (stage names must agree across processes)."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def label(op: str, *fns: Any) -> str:
    """A stage name such as ``group_by(by_word, total)``."""
    return f"{op}({', '.join(fn_name(f) for f in fns)})"


def need_callable(op: str, role: str, fn: Any, signature: str) -> None:
    """Raise a TypeError at graph construction when ``fn`` is not callable."""
    if not callable(fn):
        msg = (f"{op} needs a callable {role} {signature}; got {type(fn).__name__} "
               f"{_repr.repr(fn)}")
        raise TypeError(msg)


def need_stream(op: str, stream: Any, other: Any) -> Stream:
    """Check that ``other`` is a Stream of the same computation and scope as ``stream``."""
    if not isinstance(other, Stream):
        msg = (f"{op} needs a Stream as its other input; got {type(other).__name__} "
               f"{_repr.repr(other)} (did you pass an input handle instead of its .stream?)")
        raise TypeError(msg)
    stream.graph.check_stream(other, op)
    stream.graph.check_same_scope(stream.scope, other.scope, op)
    return other


# ---- calling user functions carefully ----------------------------------------------------------
def call(op: str, role: str, fn: Callable, args: Sequence[Any],
         expect: Optional[str] = None) -> Any:
    """``fn(*args)``, turning an exception or a result of the wrong shape into a clear error."""
    try:
        res = fn(*args)
    except Exception as exc:
        raise UserFunctionError(op, role, fn, args,
                                f"raised {type(exc).__name__}: {exc}") from exc
    if expect is ITERABLE:
        if res is None:
            raise UserFunctionError(op, role, fn, args, "returned None", expect,
                                    "did you forget a return statement?")
        try:
            iter(res)
        except TypeError:
            raise UserFunctionError(op, role, fn, args,
                                    f"returned {type(res).__name__} {_repr.repr(res)}, which is "
                                    "not iterable", expect,
                                    "wrap a single record in a list: [record]") from None
    elif expect is TRUTH:
        try:
            bool(res)
        except Exception as exc:
            raise UserFunctionError(op, role, fn, args,
                                    f"returned {type(res).__name__} {_repr.repr(res)}, whose truth "
                                    f"value raised {type(exc).__name__}: {exc}", expect,
                                    "return a bool: for an array, .any() or .all()") from None
    elif expect is HASHABLE or expect is HASHABLE_VALUE:
        try:
            hash(res)
        except TypeError:
            raise UserFunctionError(op, role, fn, args,
                                    f"returned unhashable {type(res).__name__} "
                                    f"{_repr.repr(res)}", expect,
                                    "convert lists to tuples") from None
    return res


def emit(out: list, op: str, role: str, fn: Callable, args: Sequence[Any]) -> None:
    """Extend ``out`` with the iterable ``fn(*args)`` returns (a reducer), reporting failures."""
    res = call(op, role, fn, args, ITERABLE)
    try:
        out.extend(res)
    except Exception as exc:
        raise UserFunctionError(op, role, fn, args, f"returned an iterable that raised "
                                f"{type(exc).__name__}: {exc} while it was read") from exc


def check_each(op: str, role: str, fn: Callable, expect: Optional[str] = None):
    """A diagnosis: call ``fn`` on every record through :func:`call` (results discarded; an
    iterable result is read, as the operator reads it)."""
    def diagnose(edge: int, records: Iterable[Any]) -> None:
        for r in records:
            if expect is ITERABLE:
                emit([], op, role, fn, (r,))
            else:
                call(op, role, fn, (r,), expect)
    return diagnose


def require_hashable(op: str, role: str, r: Any) -> None:
    """A UserFunctionError naming ``op`` unless ``r`` (a record, a value) is hashable."""
    try:
        hash(r)
    except TypeError:
        raise UserFunctionError(op, role, None, (r,), f"of type {type(r).__name__} is "
                                "unhashable", "hashable records, since they are "
                                "compared by value", "convert lists to tuples") from None


def check_hashable(op: str, role: str = "record"):
    """A diagnosis for operators that put records themselves in sets or dicts."""
    def diagnose(edge: int, records: Iterable[Any]) -> None:
        for r in records:
            require_hashable(op, role, r)
    return diagnose


def check_keys(op: str, *keys: Callable):
    """A diagnosis for stages receiving ``(key, record)`` pairs made by :func:`key_pairs`;
    ``keys[edge]`` is the key function of input ``edge``."""
    def diagnose(edge: int, records: Iterable[Any]) -> None:
        for k, r in records:
            fn = keys[min(edge, len(keys) - 1)]
            try:
                hash(k)
            except TypeError:
                raise UserFunctionError(op, "key", fn, (r,),
                                        f"returned unhashable {type(k).__name__} "
                                        f"{_repr.repr(k)}", HASHABLE,
                                        "convert lists to tuples") from None
            try:
                key_hash(k)     # what the exchange on the key computes
            except (TypeError, ValueError) as exc:
                raise UserFunctionError(op, "key", fn, (r,),
                                        f"returned {type(k).__name__} {_repr.repr(k)}, which "
                                        f"cannot be exchanged ({exc})", HASHABLE) from None
    return diagnose


def explained(key: Callable, diagnose: Optional[Callable[[int, list], None]],
              edge: int) -> Callable:
    """The partition ``key`` of input ``edge`` of a stage with ``diagnose``: when the exchange
    fails on a batch (a key it cannot hash), the diagnosis names the user's function."""
    if diagnose is None:
        return key
    return Explained(key, lambda records: diagnose(edge, records))


# ---- the vertices -----------------------------------------------------------------------------
class LinqVertex(Vertex):
    """Shared behaviour: failure diagnosis, and a checkpoint of the per-time state only."""

    op: str
    diagnose: Optional[Callable[[int, list], None]]
    state: dict

    def _fail(self, exc: Exception, edge: int, records: list):
        if isinstance(exc, UserFunctionError):
            raise exc
        if self.diagnose is not None:
            self.diagnose(edge, records)      # raises the precise error when it finds it
        msg = (f"{self.op} failed on a batch of {len(records)} record(s): "
               f"{type(exc).__name__}: {exc}")
        raise RuntimeError(msg) from exc

    def checkpoint(self) -> Any:
        """Only the per-time state (the engine pickles it at once); the user functions come
        back with the factory, so they need not be picklable."""
        return getattr(self, "state", None)

    def restore(self, state: Any) -> None:
        if state is not None:
            self.state = state


class MapVertex(LinqVertex):
    """Stateless: each batch becomes ``fn(records)``, sent at the same time on output 0."""

    def __init__(self, op: str, fn: Callable[[list], list],
                 diagnose: Optional[Callable[[int, list], None]] = None):
        super().__init__()
        self.op = op
        self.fn = fn
        self.diagnose = diagnose

    def on_recv_batch(self, edge: int, records: list, time) -> None:
        if not self._stagedef.outputs[0]:
            return                  # fused into a later stage: nobody reads this output
        try:
            out = self.fn(records)
        except Exception as exc:
            self._fail(exc, edge, records)
        if out:
            self.send_batch_by(0, out, time)

    def checkpoint(self) -> Any:
        return None


class PerTimeVertex(LinqVertex):
    """One state per time: ``on_batch(state, edge, records)`` may return records to send now;
    at the notification ``on_done(state)`` may return records to send, and the state is dropped.

    ``new_state()`` makes the state of a time the first time a record at that time arrives.
    """

    def __init__(self, op: str, new_state: Callable[[], Any],
                 on_batch: Callable[[Any, int, list], Optional[list]],
                 on_done: Optional[Callable[[Any], Optional[list]]] = None,
                 diagnose: Optional[Callable[[int, list], None]] = None):
        super().__init__()
        self.op = op
        self.new_state = new_state
        self.on_batch = on_batch
        self.on_done = on_done
        self.diagnose = diagnose
        self.state: dict = {}

    def on_recv_batch(self, edge: int, records: list, time) -> None:
        st = self.state.get(time)
        if st is None:
            st = self.state[time] = self.new_state()
            self.notify_at(time)
        try:
            out = self.on_batch(st, edge, records)
        except Exception as exc:
            self._fail(exc, edge, records)
        if out:
            self.send_batch_by(0, out, time)

    def on_notify(self, time) -> None:
        st = self.state.pop(time)
        if self.on_done is not None:
            try:
                out = self.on_done(st)
            except UserFunctionError:
                raise
            except Exception as exc:
                msg = f"{self.op} failed at the end of {time!r}: {type(exc).__name__}: {exc}"
                raise RuntimeError(msg) from exc
            if out:
                self.send_batch_by(0, out, time)
