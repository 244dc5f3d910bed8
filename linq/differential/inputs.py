"""Input collections: a computation's input whose epochs are changes to a collection.

``dd.new_input(comp)`` makes an :class:`InputCollection`.  ``on_next(records)`` adds each record
once and seals the next epoch; ``update(changes)`` applies ``(record, diff)`` pairs and seals
the next epoch; ``on_completed()`` ends it.  As with every input, each process calls them the
same number of times, with its own share of the changes.
"""

from __future__ import annotations

import reprlib
from typing import Any, Iterable, Optional, Tuple

from linq.differential.collection import Collection

__all__ = ["InputCollection", "new_input"]

_repr = reprlib.Repr()
_repr.maxother = 60


class InputCollection:
    """An input whose epochs change a collection; ``.collection`` is that collection."""

    def __init__(self, comp: Any, name: Optional[str] = None):
        self.input = comp.new_input(name=name)
        self.name: str = self.input.name
        self.collection = Collection(self.input.stream)

    def on_next(self, records: Iterable[Any] = ()) -> None:
        """Add each record once (one change ``(record, +1)`` per record) and seal the epoch."""
        if isinstance(records, (str, bytes, dict)) or not _iterable(records):
            msg = (f"input collection {self.name!r}: on_next needs an iterable of records; got "
                   f"{type(records).__name__} {_repr.repr(records)}")
            raise TypeError(msg)
        self.input.on_next([(r, 1) for r in records])

    def update(self, changes: Iterable[Tuple[Any, int]]) -> None:
        """Apply ``(record, diff)`` changes (``diff`` a non-zero int) and seal the epoch."""
        if isinstance(changes, (str, bytes, dict)) or not _iterable(changes):
            msg = (f"input collection {self.name!r}: update needs an iterable of (record, diff) "
                   f"pairs; got {type(changes).__name__} {_repr.repr(changes)}")
            raise TypeError(msg)
        batch = []
        for c in changes:
            if (type(c) is not tuple or len(c) != 2 or type(c[1]) is not int or c[1] == 0):
                msg = (f"input collection {self.name!r}: update needs (record, diff) pairs with "
                       f"diff a non-zero int; got {_repr.repr(c)}")
                raise ValueError(msg) if type(c) is tuple and len(c) == 2 else TypeError(msg)
            batch.append(c)
        self.input.on_next(batch)

    def on_completed(self) -> None:
        """No more epochs."""
        self.input.on_completed()

    def __repr__(self) -> str:
        return f"InputCollection({self.name!r})"


def _iterable(x: Any) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


def new_input(comp: Any, name: Optional[str] = None) -> InputCollection:
    """A new input collection of ``comp`` (call before ``comp.activate()``)."""
    return InputCollection(comp, name)
