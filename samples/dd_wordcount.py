"""Incremental word count (differential) over the standard library's sources, files added and removed.

The input collection holds ``(file, line)`` records.  Each epoch adds some files' lines and
removes others'; the counts of only the words in those lines change, and each epoch's output is
just those changes, checked against a ``Counter`` recomputed from scratch over the files then
present.

    python -m samples.dd_wordcount                     # 40 files, then 10 epochs of changes
    python -m samples.dd_wordcount --files 100 -t 2

>>> from linq.differential.testing import run_dd
>>> out = run_dd(word_counts, [("a.py", "to be or"), ("b.py", "not to be")], [[(("b.py", "not to be"), -1)]])
>>> out[1]
[(('be', 1), 1), (('be', 2), -1), (('not', 1), -1), (('to', 1), 1), (('to', 2), -1)]
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from typing import Iterable, List, Optional, Sequence, Tuple

import naiad
from linq import differential as dd
from linq.differential import Collection
from linq.differential.testing import feed_timed, replay
from samples.textdata import read_lines, stdlib_text_files
from samples._options import naiad_sample, positive, sample_parser

__all__ = ["word_counts", "epochs_of_files", "run", "main"]

Line = Tuple[str, str]


def _words(file_line: Line) -> List[str]:
    return file_line[1].split()


def word_counts(lines: Collection) -> Collection:
    """``(word, n)`` over the words of every ``(file, line)`` record."""
    return lines.flat_map(_words).count()


def epochs_of_files(files: Sequence[str], epochs: int, per_epoch: int, seed: int = 0
                    ) -> Tuple[List[Line], List[List[Tuple[Line, int]]]]:
    """The lines of half the files at first, then epochs that each add ``per_epoch`` files and
    remove as many."""
    rng = random.Random(seed)
    files = list(files)
    rng.shuffle(files)
    present = files[: len(files) // 2]
    absent = files[len(files) // 2:]
    lines = {f: [(f, line) for line in read_lines(f)] for f in files}
    initial = [ln for f in present for ln in lines[f]]
    out = []
    for _ in range(epochs):
        changes: List[Tuple[Line, int]] = []
        for _ in range(min(per_epoch, len(absent))):
            f = absent.pop(rng.randrange(len(absent)))
            present.append(f)
            changes += [(ln, 1) for ln in lines[f]]
        for _ in range(min(per_epoch, len(present) - 1)):
            f = present.pop(rng.randrange(len(present)))
            absent.append(f)
            changes += [(ln, -1) for ln in lines[f]]
        out.append(changes)
    return initial, out


def run(initial: Sequence[Line], updates: Sequence[Sequence[Tuple[Line, int]]],
        processes: int = 1, workers: int = 1) -> List[dict]:
    """Each process's collected changes and its per-epoch latencies."""
    def program(comp: naiad.Computation) -> dict:
        inp = dd.new_input(comp, name="lines")
        counts = word_counts(inp.collection)
        got = counts.collect()
        probe = counts.probe()
        comp.activate()
        _, latencies = feed_timed(comp, inp, probe, initial, updates)
        comp.join()
        return {"results": got.results, "latencies": latencies}
    return naiad.execute(program, processes=processes, workers=workers)


def check(initial: Sequence[Line], updates: Sequence[Sequence[Tuple[Line, int]]],
          out: List[dict]) -> None:
    """Raise unless each epoch's counts equal a Counter over the lines present then."""
    for epoch, lines, got in replay(initial, updates, [o["results"] for o in out]):
        want: Counter = Counter()
        for (f, text), n in lines.items():
            for w in text.split():
                want[w] += n
        if got != {(w, n): 1 for w, n in want.items()}:
            msg = f"epoch {epoch}: the counts differ from a Counter recomputed from scratch"
            raise AssertionError(msg)


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = sample_parser("dd_wordcount", __doc__)
    parser.add_argument("--files", type=positive, default=40)
    parser.add_argument("--epochs", type=positive, default=10)
    parser.add_argument("--per-epoch", type=positive, default=1, help="files added and removed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    args = parser.parse_args(list(argv) if argv is not None else None)
    files = stdlib_text_files(limit=args.files)
    initial, updates = epochs_of_files(files, args.epochs, args.per_epoch, args.seed)
    out = run(initial, updates, args.processes, args.workers)
    check(initial, updates, out)
    lat = sorted(out[0]["latencies"])
    median = lat[len(lat) // 2] * 1e3 if lat else float("nan")
    print(f"{len(initial)} lines, then {args.epochs} epochs adding and removing {args.per_epoch} "
          f"file(s): median update {median:.1f} ms; every epoch equal to a Counter from scratch")
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("dd_wordcount"))
