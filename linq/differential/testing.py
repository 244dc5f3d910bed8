"""Run a small differential computation and gather its changes, for tests and examples.

>>> from linq.differential.testing import run_dd
>>> run_dd(lambda c: c.distinct(), ["a", "a", "b"], [[("b", -1)], [("c", 2)]])
{0: [('a', 1), ('b', 1)], 1: [('b', -1)], 2: [('c', 1)]}
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import naiad
from naiad.testing import shard
from linq.differential.collection import Collection
from linq.differential.inputs import new_input

__all__ = ["run_dd", "arrangement_sizes", "Change"]

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


def arrangement_sizes(comp: naiad.Computation) -> List[Tuple[str, int, int]]:
    """``(stage, keys, updates)`` for every trace of this process's differential operators.

    For tests and diagnostics: call it from the program while the workers wait (after a probe
    says an epoch is complete), never while they run.
    """
    out = []
    for w in comp._workers:
        for v in w.vertices:
            traces = getattr(v, "traces", None)
            if callable(traces) and hasattr(v, "_compacted_at"):
                for tr in traces():
                    out.append((v.stage.name, len(tr), tr.updates()))
    return out
