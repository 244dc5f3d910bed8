"""Helpers to run a small dataflow and capture its output, used by the tests and by users' tests.

>>> import naiad
>>> from naiad.testing import run
>>> run(lambda comp, s: s, [[3, 1], [2]], workers=2)
{0: [1, 3], 1: [2]}
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import naiad
from naiad.computation import Computation as _Computation
from naiad.graph import Stream as _Stream

__all__ = ["run", "run_unary", "shard", "free_ports", "CONFIGURATIONS", "Cluster"]

# (processes, workers per process) for tests that compare across configurations.
CONFIGURATIONS: List[Tuple[int, int]] = [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (3, 1), (3, 2)]


def shard(records: Sequence[Any], index: int, count: int) -> list:
    """The records process ``index`` of ``count`` supplies (round robin)."""
    return list(records[index::count])


def free_ports(n: int) -> List[int]:
    """``n`` TCP ports on loopback that are free now (for processes started with -h)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _sorted(records: Iterable[Any]) -> list:
    records = list(records)
    try:
        return sorted(records)
    except TypeError:
        return sorted(records, key=repr)


def run(build: Callable[[_Computation, _Stream], _Stream], epochs: Sequence[Sequence[Any]], *,
        processes: int = 1, workers: int = 1, sort: bool = True, timeout: float = 60.0,
        **options: Any) -> Dict[int, list]:
    """Feed ``epochs`` (a list of record lists) through ``build(comp, input_stream)``.

    Each process supplies its round-robin share of every epoch.  Returns ``{epoch: records}``
    merged over all processes (sorted unless ``sort=False``), epochs with no output included.
    """
    epochs = [list(e) for e in epochs]

    def program(comp: _Computation):
        inp = comp.new_input(name="input")
        out = build(comp, inp.stream)
        got = out.collect()
        comp.activate()
        for e in epochs:
            inp.on_next(shard(e, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=timeout)
        return got.results

    merged: Dict[int, list] = {}
    for part in naiad.execute(program, processes=processes, workers=workers, **options):
        for e, recs in part.items():
            merged.setdefault(e, []).extend(recs)
    if sort:
        merged = {e: _sorted(recs) for e, recs in merged.items()}
    return dict(sorted(merged.items()))


def run_unary(factory: Callable[[], naiad.Vertex], epochs: Sequence[Sequence[Any]], *,
              partition_by: Optional[Callable] = None, **kwargs: Any) -> Dict[int, list]:
    """Run one unary stage of ``factory`` over ``epochs`` and return its output per epoch."""
    import stages
    return run(lambda comp, s: stages.unary(s, factory, partition_by=partition_by), epochs,
               **kwargs)


class Cluster:
    """A (processes, workers) configuration, as the ``cluster`` pytest fixture provides it."""

    def __init__(self, processes: int, workers: int):
        self.processes = processes
        self.workers = workers

    def run(self, build, epochs, **kwargs) -> Dict[int, list]:
        return run(build, epochs, processes=self.processes, workers=self.workers, **kwargs)

    def execute(self, program, **options) -> list:
        return naiad.execute(program, processes=self.processes, workers=self.workers, **options)

    def __repr__(self) -> str:
        return f"p{self.processes}w{self.workers}"
