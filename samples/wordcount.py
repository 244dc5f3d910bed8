"""Word count in one line of LINQ, over the standard library's own ``.py`` sources as text.

``lines.select_many(str.split).count()``: the split runs where the lines are, ``count`` first
counts each worker's words locally and then exchanges one ``(word, n)`` per distinct word and
worker.  Each process reads only its own share of the files; with ``--per-epoch`` every slice
of files is its own epoch, counted on its own.

    python -m samples.wordcount                      # every top-level stdlib module, one epoch
    python -m samples.wordcount -n 2 -t 2 --per-epoch 40

>>> from naiad.testing import run
>>> run(lambda comp, s: word_count(s), [["to be or", "not to be"]])
{0: [('be', 2), ('not', 1), ('or', 1), ('to', 2)]}
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import linq  # noqa: F401 - installs the Stream methods
import naiad
from naiad.graph import Stream
from naiad.testing import shard
from samples.textdata import read_lines, stdlib_text_files
from samples._options import SampleParser, naiad_sample, port, positive

__all__ = ["word_count", "epochs_of", "oracle", "program", "run_word_count", "main"]


def word_count(lines: Stream) -> Stream:
    """``(word, n)`` per time, words being what ``str.split`` separates."""
    return lines.select_many(str.split).count()


def epochs_of(files: Sequence[str], per_epoch: Optional[int]) -> List[List[str]]:
    """The files in slices of ``per_epoch`` (all in one slice when None)."""
    size = per_epoch or max(len(files), 1)
    return [list(files[i:i + size]) for i in range(0, len(files), size)] or [[]]


def oracle(files: Sequence[str], per_epoch: Optional[int] = None) -> List[Counter]:
    """The counts of each epoch by ``collections.Counter`` in this process."""
    return [Counter(w for f in chunk for line in read_lines(f) for w in line.split())
            for chunk in epochs_of(files, per_epoch)]


AHEAD = 2
"""Epochs read ahead of the last completely counted one (so memory holds at most that many)."""


def program(files: Sequence[str], per_epoch: Optional[int] = None):
    """A program for ``naiad.execute``: process ``i`` reads every ``processes``-th file of each
    epoch's slice and returns ``{epoch: [(word, n), ...]}`` for the words that reached it."""
    def run(comp: naiad.Computation) -> Dict[int, list]:
        inp = comp.new_input(name="lines")
        counts = word_count(inp.stream)
        got = counts.collect()
        probe = counts.probe()
        comp.activate()
        for epoch, chunk in enumerate(epochs_of(files, per_epoch)):
            mine = shard(chunk, comp.process_index, comp.processes)
            inp.on_next([line for f in mine for line in read_lines(f)])
            if epoch >= AHEAD:
                probe.wait(epoch - AHEAD)     # read no further ahead of the counting
        inp.on_completed()
        comp.join()
        return got.results
    return run


def run_word_count(files: Sequence[str], per_epoch: Optional[int] = None, processes: int = 1,
                   workers: int = 1, **options: Any) -> List[Counter]:
    """The counts per epoch, merged over the processes (``options`` go to naiad.execute)."""
    parts = naiad.execute(program(files, per_epoch), processes=processes, workers=workers,
                          **options)
    epochs = len(epochs_of(files, per_epoch))
    merged = [Counter() for _ in range(epochs)]
    for part in parts:
        for e, pairs in part.items():
            for word, n in pairs:
                assert word not in merged[e], f"word {word!r} counted in two processes"
                merged[e][word] = n
    return merged


def main(argv: Iterable[str] = None) -> int:
    args = word_count_options("naiad sample wordcount", __doc__).parse_args(argv)
    return timed_report(run_word_count, stdlib_text_files(limit=args.files), args)


def word_count_options(prog: str, doc: str) -> argparse.ArgumentParser:
    """The options of the word count samples: which files, epochs, processes and workers."""
    parser = SampleParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("--files", type=positive, help="only the first FILES modules")
    parser.add_argument("--per-epoch", type=positive, help="files per epoch (default: one epoch)")
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    parser.add_argument("--trace", metavar="DIR",
                        help="write the event trace there (read it with: naiad trace summarize DIR)")
    parser.add_argument("--monitor", type=port, metavar="PORT",
                        help="serve the live monitoring page on http://127.0.0.1:PORT/")
    parser.add_argument("--progress", action="store_true",
                        help="show epochs completed and records per second on stderr")
    return parser


def timed_report(run: Callable[..., List[Counter]], files: Sequence[str], args: Any,
                 how: str = "") -> int:
    """Run ``run(files, per_epoch, processes, workers)``, print the timing, the check against
    Counter and the top words; 0 when the counts are right."""
    t0 = time.perf_counter()
    watch = {"trace": args.trace, "monitor": args.monitor, "progress": args.progress or None}
    counts = run(files, args.per_epoch, args.processes, args.workers,
                 **{k: v for k, v in watch.items() if v is not None})
    took = time.perf_counter() - t0
    ok = counts == oracle(files, args.per_epoch)
    total = sum(sum(c.values()) for c in counts)
    print(f"{total} words in {len(files)} files, {len(counts)} epoch(s), {args.processes} "
          f"process(es) x {args.workers} worker(s){how}: {took:.2f} s; "
          f"{'equal to' if ok else 'DIFFERENT from'} collections.Counter")
    for word, n in sum(counts, Counter()).most_common(10):
        print(f"  {n:7d}  {word}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("wordcount"))
