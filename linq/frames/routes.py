"""The workers of a key array, remembered: a table read by ownership is not hashed again when
an exchange by the same key receives it.

:func:`linq.frames.share.owners` hashes a table's key column to find each row's worker, and
:func:`~linq.frames.share.share` keeps this process's rows; a program then feeds those rows, and
the first exchange by the same key (the split before ``spread``, ``join``, ``group_by``) would
hash them again, on the worker thread, as the computation starts.  So the routing of a single
key array is remembered here, keyed by the array's memory (the address of every buffer, its
offset, length and type): Arrow arrays are immutable, and the remembered entry holds the array,
so that memory cannot be freed and reused by other values while the entry exists.  A few
entries are kept (the most recent :data:`ENTRIES`), so what stays alive is bounded.

>>> import numpy as np, pyarrow as pa
>>> keys = pa.array(np.arange(5))
>>> remember(keys, 2, np.array([0, 1, 1, 0, 1], np.uint16))
>>> recall(keys, 2).tolist(), recall(keys, 3)
([0, 1, 1, 0, 1], None)
>>> recall(pa.array(np.arange(5)), 2) is None        # equal values, other memory
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional, Tuple

import numpy as np
import pyarrow as pa

__all__ = ["remember", "recall", "forget", "ENTRIES"]

ENTRIES = 8
"""Key arrays remembered at most (the least recently used is forgotten first)."""

_lock = threading.Lock()
_known: "OrderedDict[tuple, Tuple[pa.Array, np.ndarray]]" = OrderedDict()


def _identity(array: pa.Array, workers: int) -> tuple:
    buffers = tuple(0 if b is None else b.address for b in array.buffers())
    return (buffers, array.offset, len(array), str(array.type), workers)


def remember(array: pa.Array, workers: int, dest: np.ndarray) -> None:
    """``dest`` is the worker (among ``workers``) of each value of ``array``."""
    if len(dest) != len(array):
        msg = f"routes: {len(dest)} workers for an array of {len(array)} values"
        raise ValueError(msg)
    key = _identity(array, workers)
    with _lock:
        _known[key] = (array, dest)
        _known.move_to_end(key)
        while len(_known) > ENTRIES:
            _known.popitem(last=False)


def recall(array: pa.Array, workers: int) -> Optional[np.ndarray]:
    """The workers remembered for this very array (the same memory), else None."""
    if not _known:
        return None
    key = _identity(array, workers)
    with _lock:
        entry = _known.get(key)
        if entry is None:
            return None
        _known.move_to_end(key)
    return entry[1]


def forget() -> None:
    """Drop every entry (and the arrays they hold)."""
    with _lock:
        _known.clear()
