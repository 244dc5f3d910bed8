"""Run a small differential computation and gather its changes, for tests and examples.

>>> from linq.differential.testing import run_dd
>>> run_dd(lambda c: c.distinct(), ["a", "a", "b"], [[("b", -1)], [("c", 2)]])
{0: [('a', 1), ('b', 1)], 1: [('b', -1)], 2: [('c', 1)]}
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import naiad
from naiad.testing import shard
from linq.differential.collection import Collection
from linq.differential.inputs import new_input
from linq.differential.operators import Arranged
from linq.differential.trace import Trace

__all__ = ["run_dd", "arrangements", "arrangement_sizes", "replay", "feed_timed", "Change"]

Change = Tuple[Any, int]


def run_dd(build: Callable[[Collection], Collection], records: Sequence[Any],
           updates: Sequence[Sequence[Change]] = (), *, processes: int = 1, workers: int = 1,
           **options: Any) -> Dict[int, List[Change]]:
    """``build(collection)`` over an input holding ``records`` at epoch 0, then each of
    ``updates`` (lists of ``(record, diff)``) as one epoch.  Returns every epoch's consolidated
    output changes, merged over the processes and sorted."""
    records = list(records)
    updates = [list(u) for u in updates]

    def program(comp: naiad.Computation) -> Dict[int, list]:
        inp = new_input(comp, name="input")
        got = build(inp.collection).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        inp.on_next(shard(records, me, n))
        for u in updates:
            inp.update(shard(u, me, n))
        inp.on_completed()
        comp.join()
        return got.results

    merged: Dict[int, List[Change]] = {e: [] for e in range(1 + len(updates))}
    for res in naiad.execute(program, processes=processes, workers=workers, **options):
        for e, changes in res.items():
            merged.setdefault(e, []).extend(changes)
    return {e: _sorted(c) for e, c in merged.items()}


def _sorted(changes: List[Change]) -> List[Change]:
    try:
        return sorted(changes)
    except TypeError:
        return sorted(changes, key=repr)


def arrangements(comp: naiad.Computation) -> Iterator[Tuple[str, Trace]]:
    """``(stage, trace)`` for every trace of this process's differential operators.

    For tests and diagnostics: call it from the program while the workers wait (after a probe
    says an epoch is complete), never while they run.
    """
    for w in comp.local_workers:
        for v in w.vertices:
            if isinstance(v, Arranged):
                for tr in v.traces():
                    yield v.stage.name, tr


def arrangement_sizes(comp: naiad.Computation) -> List[Tuple[str, int, int]]:
    """``(stage, keys, updates)`` for every trace of :func:`arrangements`."""
    return [(stage, len(tr), tr.updates()) for stage, tr in arrangements(comp)]


def replay(initial: Iterable[Any], updates: Sequence[Sequence[Change]],
           results: Sequence[Dict[int, List[Change]]]
           ) -> Iterator[Tuple[int, Counter, Dict[Any, int]]]:
    """``(epoch, input, output)`` for every epoch, to compare with an oracle from scratch.

    ``input`` is the input collection at that epoch (a Counter: ``initial`` with the
    ``updates`` of the epochs up to it applied); ``output`` is the collection the computation
    produced, accumulated from every process's collected changes (``results[p][epoch]``).

    >>> [(e, dict(i), o) for e, i, o in replay(["a"], [[("a", -1), ("b", 1)]],
    ...                                            [{0: [("A", 1)], 1: [("A", -1), ("B", 1)]}])]
    [(0, {'a': 1}, {'A': 1}), (1, {'b': 1}, {'B': 1})]
    """
    current: Counter = Counter(initial)
    acc: Dict[Any, int] = {}
    for epoch in range(len(updates) + 1):
        if epoch:
            for r, d in updates[epoch - 1]:
                current[r] += d
            current = +current
        for res in results:
            for r, d in res.get(epoch, []):
                acc[r] = acc.get(r, 0) + d
        acc = {r: n for r, n in acc.items() if n}
        yield epoch, current, dict(acc)


def feed_timed(comp: naiad.Computation, inp: Any, probe: Any, initial: Sequence[Any],
               updates: Sequence[Sequence[Change]],
               echo: Optional[Callable[[int, int, float], Any]] = None
               ) -> Tuple[float, List[float]]:
    """Feed this process's share of ``initial`` (epoch 0) and of each of ``updates`` (one epoch
    each) into the input collection ``inp``, waiting at ``probe`` for every epoch.

    Returns the seconds the initial epoch took and each update's latency (``update`` to the
    epoch complete at the probe); ``echo(epoch, changes, seconds)`` is called after each update.
    The input is completed at the end.
    """
    me, n = comp.process_index, comp.processes
    t0 = time.perf_counter()
    inp.on_next(list(initial)[me::n])
    probe.wait(0)
    first = time.perf_counter() - t0
    latencies = []
    for epoch, changes in enumerate(updates, start=1):
        t0 = time.perf_counter()
        inp.update(list(changes)[me::n])
        probe.wait(epoch)
        latencies.append(time.perf_counter() - t0)
        if echo is not None:
            echo(epoch, len(changes), latencies[-1])
    inp.on_completed()
    return first, latencies
