"""Word count by columns: the standard library's sources as Arrow tables, split and counted by Arrow's kernels.

Each process reads its share of the files as one table of lines per epoch; ``map_batches``
splits the lines into a column of words (``utf8_split_whitespace`` + ``list_flatten``) and
``group_by`` counts them, first on each worker, then per word after the exchange.  The result
is checked against ``collections.Counter`` (:func:`samples.wordcount.oracle`).

    python -m samples.frames_wordcount --files 200 -n 2

>>> from samples.textdata import stdlib_text_files
>>> files = stdlib_text_files(limit=3)
>>> run_frames_word_count(files, processes=1, workers=2) == oracle(files)
True
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

import naiad
from linq import frames
from naiad.testing import shard
from samples._options import naiad_sample
from samples.textdata import read_lines, stdlib_text_files
from samples.wordcount import AHEAD, epochs_of, oracle, timed_report, word_count_options

__all__ = ["word_count", "program", "run_frames_word_count", "oracle", "main"]


def _words(table: pa.Table) -> pa.Table:
    words = pc.list_flatten(pc.utf8_split_whitespace(table["line"]))
    return pa.table({"word": words.filter(pc.not_equal(words, ""))})   # as str.split()


def word_count(lines: frames.FrameStream) -> frames.FrameStream:
    """``(word, n)`` tables per epoch from tables with a ``line`` column."""
    return lines.map_batches(_words).group_by("word", n=("word", "count"))


def program(files: Sequence[str], per_epoch: Optional[int] = None):
    """Process ``i`` reads every ``processes``-th file of each epoch's slice; returns
    ``{epoch: {word: n}}`` for the words counted in this process."""
    def run(comp: naiad.Computation) -> Dict[int, Dict[str, int]]:
        inp = comp.new_input(name="lines")
        counts = word_count(frames.of(inp.stream))
        got = counts.collect()
        probe = counts.stream.probe()
        comp.activate()
        for epoch, chunk in enumerate(epochs_of(files, per_epoch)):
            mine = shard(chunk, comp.process_index, comp.processes)
            lines = [line for f in mine for line in read_lines(f)]
            inp.on_next([pa.table({"line": pa.array(lines, pa.string())})])
            if epoch >= AHEAD:
                probe.wait(epoch - AHEAD)     # read no further ahead of the counting
        inp.on_completed()
        comp.join()
        return {e: dict(zip(*pa.concat_tables(ts).select(["word", "n"]).to_pydict().values()))
                for e, ts in got.results.items()}
    return run


def run_frames_word_count(files: Sequence[str], per_epoch: Optional[int] = None,
                          processes: int = 1, workers: int = 1, **options: Any) -> List[Counter]:
    """The counts per epoch, merged over the processes (``options`` go to naiad.execute)."""
    merged = [Counter() for _ in epochs_of(files, per_epoch)]
    for part in naiad.execute(program(files, per_epoch), processes=processes, workers=workers,
                              **options):
        for e, counts in part.items():
            merged[e].update(counts)
    return merged


def main(argv: Iterable[str] = None) -> int:
    args = word_count_options("naiad sample frames_wordcount", __doc__).parse_args(argv)
    return timed_report(run_frames_word_count, stdlib_text_files(limit=args.files), args,
                        how=", by columns")


if __name__ == "__main__":
    sys.exit(naiad_sample("frames_wordcount"))
