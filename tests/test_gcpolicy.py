"""Garbage collection while workers run: off during the dataflow, restored after, cycles freed
when a worker waits."""

from __future__ import annotations

import gc
import weakref

import linq  # noqa: F401 - installs the Stream methods
from naiad import gcpolicy
from naiad.testing import run


class Node:
    def __init__(self):
        self.me = self            # a reference cycle: only the cyclic collector frees it


def test_collector_restored_after_a_computation():
    was = gc.isenabled()
    seen = []

    def build(comp, s):
        return s.select(lambda r: (r, gc.isenabled(), seen.append(gc.isenabled()))[0])
    got = run(build, [[1, 2, 3], [4]], workers=2)
    assert got == {0: [1, 2, 3], 1: [4]}
    assert seen and not any(seen)                    # off while the dataflow ran
    assert gc.isenabled() == was and gc.get_freeze_count() == 0


def test_idle_worker_frees_cycles_once_the_heap_grew():
    gcpolicy.enter()
    try:
        junk = [Node() for _ in range(gcpolicy._MIN_GROWTH + 10)]
        probe = weakref.ref(junk[0])
        del junk
        assert probe() is not None                   # nothing collected automatically
        gcpolicy.idle()
        assert probe() is None                       # the idle collection freed the cycles
    finally:
        gcpolicy.exit_()
    assert gc.get_freeze_count() == 0
