"""The paper's section 4.1 example: MapReduce as ``select_many`` + ``group_by``, with results
handed to ``subscribe`` after each of several epochs.

The paper's C#::

    var input = controller.NewInput<string>();
    var result = input.SelectMany(y => map(y)).GroupBy(y => key(y), (k, vs) => reduce(k, vs));
    result.Subscribe(result => { ... });
    input.OnNext(/* 1st epoch data */); input.OnNext(/* 2nd epoch data */); ...
    input.OnCompleted();

Here the data are the standard library's modules, a slice of them per epoch, as
``(module, line)`` records; ``map`` finds function definitions, ``key`` is the function name
and ``reduce`` keeps the names that the epoch's modules define more than once, with where.
Each epoch's answer concerns that epoch's modules alone (per-time semantics).

    python -m samples.mapreduce                      # 4 epochs of 40 modules
    python -m samples.mapreduce --per-epoch 20 -t 2 -n 2

>>> from naiad.testing import run
>>> lines = [("m1", "def f(x):"), ("m2", "def f():"), ("m2", "def g():"), ("m3", "x = 1")]
>>> run(lambda comp, s: map_reduce(s, find_defs, def_name, shared_names), [lines])
{0: [('f', ('m1', 'm2'))]}
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Dict, Hashable, Iterable, List, Sequence, Tuple

import linq  # noqa: F401 - installs the Stream methods
import naiad
from naiad.graph import Stream
from naiad.testing import shard
from samples.textdata import read_lines, stdlib_text_files
from samples._options import naiad_sample, positive, sample_parser

__all__ = ["map_reduce", "find_defs", "def_name", "shared_names", "oracle", "program",
           "run_map_reduce", "main"]

_DEF = re.compile(r"\s*(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)")


def map_reduce(stream: Stream, mapper: Callable[[Any], Iterable[Any]],
               key: Callable[[Any], Hashable],
               reducer: Callable[[Hashable, list], Iterable[Any]]) -> Stream:
    """``stream.select_many(mapper).group_by(key, reducer)``: one MapReduce per epoch."""
    return stream.select_many(mapper).group_by(key, reducer)


def find_defs(record: Tuple[str, str]) -> List[Tuple[str, str]]:
    """map: ``(function name, module)`` for a line that defines a function."""
    module, line = record
    m = _DEF.match(line)
    return [(m.group(1), module)] if m else []


def def_name(pair: Tuple[str, str]) -> str:
    """key: the function name."""
    return pair[0]


def shared_names(name: str, pairs: list) -> List[Tuple[str, Tuple[str, ...]]]:
    """reduce: ``(name, modules)`` when two or more modules define ``name``."""
    modules = tuple(sorted({m for _, m in pairs}))
    return [(name, modules)] if len(modules) > 1 else []


def _module_lines(path: str) -> List[Tuple[str, str]]:
    module = os.path.basename(path)[:-3]
    return [(module, line) for line in read_lines(path)]


def _slices(files: Sequence[str], per_epoch: int) -> List[List[str]]:
    return [list(files[i:i + per_epoch]) for i in range(0, len(files), per_epoch)]


def _epochs(files: Sequence[str], per_epoch: int) -> str:
    """The epochs and the modules each one read, as counted.

    >>> _epochs(["a"], 40), _epochs(list("abcd"), 2), _epochs(list("abcde"), 2)
    ('1 epoch of 1 module', '2 epochs of 2 modules', '3 epochs of 2 modules (the last 1)')
    """
    sizes = [len(chunk) for chunk in _slices(files, per_epoch)]
    if not sizes:
        return "no modules"
    head = (f"{len(sizes)} epoch{'s' if len(sizes) > 1 else ''} of {sizes[0]} "
            f"module{'s' if sizes[0] > 1 else ''}")
    return head + (f" (the last {sizes[-1]})" if sizes[-1] != sizes[0] else "")


def oracle(files: Sequence[str], per_epoch: int) -> Dict[int, list]:
    """The same MapReduce per epoch in plain Python."""
    out = {}
    for e, chunk in enumerate(_slices(files, per_epoch)):
        groups = defaultdict(list)
        for path in chunk:
            for pair in (p for rec in _module_lines(path) for p in find_defs(rec)):
                groups[pair[0]].append(pair)
        out[e] = sorted(r for k, v in groups.items() for r in shared_names(k, v))
    return out


def program(files: Sequence[str], per_epoch: int, show: bool = False):
    """A program for ``naiad.execute``: each epoch, each process supplies the lines of its
    share of the epoch's modules; ``subscribe`` receives each epoch's results as it completes."""
    def run(comp: naiad.Computation) -> Dict[int, list]:
        seen: Dict[int, list] = {}

        def on_epoch(epoch: int, records: list) -> None:
            seen[epoch] = sorted(records)
            if show:
                names = ", ".join(f"{n} ({len(ms)})" for n, ms in sorted(
                    records, key=lambda r: (-len(r[1]), r[0]))[:6])
                print(f"  epoch {epoch}, process {comp.process_index}: {len(records)} shared "
                      f"names; most shared: {names}", flush=True)

        inp = comp.new_input(name="lines")
        map_reduce(inp.stream, find_defs, def_name, shared_names).subscribe(on_epoch)
        comp.activate()
        for chunk in _slices(files, per_epoch):
            mine = shard(chunk, comp.process_index, comp.processes)
            inp.on_next([rec for path in mine for rec in _module_lines(path)])
        inp.on_completed()
        comp.join()
        return seen
    return run


def run_map_reduce(files: Sequence[str], per_epoch: int, processes: int = 1, workers: int = 1,
                   show: bool = False) -> Dict[int, list]:
    """Each epoch's results, merged over the processes."""
    merged: Dict[int, list] = {}
    for part in naiad.execute(program(files, per_epoch, show), processes=processes,
                              workers=workers):
        for e, recs in part.items():
            merged.setdefault(e, []).extend(recs)
    return {e: sorted(recs) for e, recs in sorted(merged.items())}


def main(argv: Iterable[str] = None) -> int:
    parser = sample_parser("mapreduce", __doc__)
    parser.add_argument("--files", type=positive, default=160)
    parser.add_argument("--per-epoch", type=positive, default=40)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    args = parser.parse_args(argv)
    files = stdlib_text_files(limit=args.files)
    t0 = time.perf_counter()
    got = run_map_reduce(files, args.per_epoch, args.processes, args.workers, show=True)
    took = time.perf_counter() - t0
    ok = got == oracle(files, args.per_epoch)
    print(f"{_epochs(files, args.per_epoch)}, {args.processes} process(es) x "
          f"{args.workers} worker(s): {took:.2f} s; "
          f"{'equal to' if ok else 'DIFFERENT from'} the plain-Python MapReduce")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("mapreduce"))
