"""Keyed vertex state whose checkpoints hold only the keys written since the previous one.

A :class:`KeyedState` is a ``dict`` (reads run at the speed of a dict) that notes which keys
its mutating methods touch while checkpoints are being taken.  When a vertex's
:meth:`~naiad.Vertex.checkpoint` returns state holding one (the default returns the vertex's
attributes, so an attribute is enough), the checkpoint stores the table apart from the rest of
the state: in full the first time, then as a *delta* (the keys written since the previous
checkpoint, with their values, and the keys deleted), until the deltas since the last full copy
add up to as many keys as the table holds, or :data:`MAX_DELTAS` of them are chained; then in
full again.  Restoring reads the chain back from the last full copy.  A checkpoint of a table
of a million keys of which a thousand changed costs a thousand keys, not a million.

Writes by item (``t[k] = v``) run a little Python per call; :meth:`KeyedState.update` with a
dict notes a whole batch of keys at the speed of C, so it is the way to apply many changes.
Mutating the values in place (``t[k].append(x)``) is not seen: store a new value instead, or
use a plain dict (checkpointed in full every time).

>>> t = KeyedState(a=1)
>>> t.update({"b": 2, "c": 3}); del t["a"]
>>> sorted(t.items()), isinstance(t, dict)
([('b', 2), ('c', 3)], True)
>>> import pickle; pickle.loads(pickle.dumps(t)) == t       # a record like any other
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, List, NamedTuple, Optional, Set

__all__ = ["KeyedState", "Chain", "MAX_DELTAS", "capture"]

MAX_DELTAS = 16
"""Deltas chained after a full copy before the next checkpoint writes the table in full."""


class Chain(NamedTuple):
    """Where a table's checkpoints stand: its id, the checkpoint it was last written at, the
    checkpoint holding its last full copy, and the deltas and keys written since that copy."""
    id: str
    epoch: int
    base: int
    deltas: int
    changes: int


_capture = threading.local()


class KeyedState(dict):
    """A dict whose checkpoints hold only what changed (see the module's documentation)."""

    __slots__ = ("_changed", "_chain")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        self._changed: Set[Any] = set()
        self._chain: Optional[Chain] = None    # None: the next checkpoint writes it in full

    # ---- tracked mutations ---------------------------------------------------------------
    def _note(self, key: Any) -> None:
        self._changed.add(key)
        self._bound()

    def _bound(self) -> None:
        if len(self._changed) > len(self) + 16:
            self._chain = None                 # a full copy is smaller: stop tracking
            self._changed.clear()

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        if self._chain is not None:
            self._note(key)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        if self._chain is not None:
            self._note(key)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        """``dict.update``; with a dict, the keys are noted in one C call."""
        if self._chain is None:
            dict.update(self, other, **kwargs)
            return
        if not isinstance(other, Mapping):
            other = dict(other)
        dict.update(self, other, **kwargs)
        self._changed.update(other.keys())
        self._changed.update(kwargs)
        self._bound()

    def __ior__(self, other: Any) -> "KeyedState":  # type: ignore[override, misc]
        self.update(other)
        return self

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return dict.__getitem__(self, key)
        self[key] = default
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if self._chain is not None and key in self:
            self._note(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> Any:
        item = dict.popitem(self)
        if self._chain is not None:
            self._note(item[0])
        return item

    def clear(self) -> None:
        dict.clear(self)
        self._chain = None
        self._changed.clear()

    def copy(self) -> "KeyedState":
        """A new table with the same items (its first checkpoint is in full)."""
        return KeyedState(self)

    def __repr__(self) -> str:
        return f"KeyedState({dict.__repr__(self)})"

    # ---- pickling -------------------------------------------------------------------------
    def __reduce_ex__(self, protocol: Any) -> Any:
        tables = getattr(_capture, "tables", None)
        if tables is None:                     # an ordinary pickle: the items
            return (KeyedState, (dict(self),))
        tables.append(self)                    # a checkpoint: stored apart, see capture()
        return (_stored, (len(tables) - 1,))


def _stored(index: int) -> Any:
    msg = ("a KeyedState of a checkpoint can only be read back by the checkpoint code "
           "(naiad.recovery.snapshot.decode)")
    raise RuntimeError(msg)


class capture:
    """While active in a thread, pickling a :class:`KeyedState` records it in :attr:`tables`
    and writes a reference to it instead of its items.

    >>> import pickle
    >>> with capture() as tables:
    ...     data = pickle.dumps({"t": KeyedState(a=1)})
    >>> len(tables), b"_stored" in data
    (1, True)
    """

    def __enter__(self) -> List[KeyedState]:
        self.tables: List[KeyedState] = []
        _capture.tables = self.tables
        return self.tables

    def __exit__(self, *exc: Any) -> None:
        _capture.tables = None


def new_id() -> str:
    """A table id: random, so tables made after a restore never take a restored one's."""
    return os.urandom(8).hex()
