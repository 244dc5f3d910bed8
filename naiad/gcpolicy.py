"""Garbage collection while workers run: setup frozen, young collections scaled, full ones idle.

CPython's cyclic collector is triggered by allocation counts.  A dataflow allocates millions of
tuples that reference counting frees at once, yet the counts still trigger collections, and a
full collection walks every live object (the input data, the per-time state).  In a PageRank
that was half of the run, and it freed nothing.  So while at least one worker of the process
runs:

* what exists when the first worker starts (the graph, the program's data) is frozen
  (``gc.freeze``): no collection walks it again;
* automatic collection is off: a young collection costs 100-200 ns per surviving object, and
  in a dataflow most objects allocated since the last collection are records in flight that
  reference counting frees anyway;
* a worker that is about to wait for messages (between epochs or iterations, never per batch)
  runs a full collection when the net allocations since the last one reach a quarter of what
  survived it (at least 1,000,000): the threshold scales with the live heap, and cycles made by
  user code are freed.

When the last worker of the process stops, automatic collection comes back and the frozen
objects are collectable again.

>>> import gc
>>> was = gc.isenabled()
>>> enter(); gc.isenabled()
False
>>> exit_(); gc.isenabled() == was
True
"""

from __future__ import annotations

import gc
import threading

__all__ = ["enter", "exit_", "idle"]

_lock = threading.Lock()
_running = 0
_was_enabled = False
_live = 0                     # objects that survived the last full collection (frozen excluded)
_MIN_GROWTH = 1_000_000


def enter() -> None:
    """A worker starts: the first one in the process freezes the heap and turns automatic collection off."""
    global _running, _was_enabled, _live
    with _lock:
        _running += 1
        if _running > 1:
            return
        _was_enabled = gc.isenabled()
        gc.disable()
        gc.freeze()
        _live = 0


def exit_() -> None:
    """A worker stops: the last one unfreezes the heap and turns automatic collection back on."""
    global _running
    with _lock:
        _running -= 1
        if _running > 0:
            return
        gc.unfreeze()
        if _was_enabled:
            gc.enable()


def idle() -> None:
    """A worker is about to wait: a full collection if the heap grew enough since the last."""
    global _live
    if not _running:
        return
    if gc.get_count()[0] >= max(_MIN_GROWTH, _live // 4):
        with _lock:
            gc.collect()
            _live = len(gc.get_objects(2))
