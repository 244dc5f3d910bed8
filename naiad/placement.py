"""Where a process started by ``naiad.execute`` runs: its CPUs, and its threads' malloc arena.

The launcher (:mod:`naiad.launch`) gives its children :data:`MALLOC_ARENAS` and
:data:`MALLOC_TUNABLES` in their environment; each child (:mod:`naiad._child`) calls :func:`bind_cpus` before it starts any
thread, unless the program's options say ``pin_cpus=False``.
"""

from __future__ import annotations

import os
from typing import List, Optional

__all__ = ["MALLOC_ARENAS", "MALLOC_TUNABLES", "bind_cpus"]

MALLOC_ARENAS = "1"
"""glibc's ``MALLOC_ARENA_MAX`` for the children, unless the environment sets it.  glibc gives
each new thread its own malloc arena, so a worker thread's first numpy arrays all come from
fresh pages (a page fault per 4 KB), while the memory the program's main thread used and freed
to read its input sits unused in the main arena.  Building the first index of a PageRank's
edges took 3.8 ms of CPU in a new thread against 1.4 ms with one arena (its first spread 2.2
against 0.9 ms).  Python allocates under the GIL and numpy's large arrays are few, so the one
arena's lock is not contended; Arrow's buffers come from its own allocator."""

MALLOC_TUNABLES = "glibc.malloc.hugetlb=1"
"""glibc's ``GLIBC_TUNABLES`` for the children, unless the environment sets it: malloc asks
for transparent huge pages (``madvise(MADV_HUGEPAGE)``, where the kernel's THP mode is
``madvise``, the common default) for the heap, which then grows by 2 MB, and for blocks of
more than 2 MB.  A fresh process touches every page of its first arrays once, a page fault per
4 KB: reading a process's share of the Debian graph (a few arrays of 1-3 MB, and their copies)
took 11-12 ms of CPU in a new child against 7-8 ms with huge pages.  Blocks under 2 MB keep
ordinary pages, so small programs use no more memory; glibc before 2.35 ignores the tunable."""


def bind_cpus(index: int, processes: int, workers: int) -> Optional[List[int]]:
    """Bind process ``index`` (the calling thread, and the threads it starts from now on: its
    workers, ZeroMQ's I/O threads) to CPUs of its own, ``workers`` of the CPUs this process may
    use, when there are enough for every worker of every process; returns them, or None when
    it leaves the binding alone.

    Two processes that exchange a message at every iteration wake each other up, and Linux
    tends to wake a thread on the CPU of the thread that woke it: the processes' workers then
    often share one CPU and take turns while the other CPU idles (a PageRank iteration of the
    Debian graph between 2 processes: 2.0 ms on two CPUs, 4.0-4.4 ms on one; medians of 15
    runs 45 ms unbound, 27 ms bound).  Bound, they cannot be moved either, so a CPU busy with
    another program slows its process down: ``execute(..., pin_cpus=False)`` leaves the
    placement to the scheduler."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:                      # not on Linux
        return None
    cpus = sorted(get(0))
    if processes * workers > len(cpus):
        return None
    mine = cpus[index * workers:(index + 1) * workers]
    try:
        os.sched_setaffinity(0, mine)
    except OSError:                      # not allowed here (a restricted container): leave it
        return None
    return mine
