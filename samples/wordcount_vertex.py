"""Word count with hand-written vertices over the standard library's own sources.

Two stages: ``Tokenize`` splits lines into words where they are (no exchange), ``Count`` is
partitioned by word, keeps a count per word *per timestamp* and sends ``(word, count)`` when
notified that the time is complete.  Each epoch is one slice of the files; its counts are that
slice's alone (per-time semantics: epochs never mix).

    python -m samples.wordcount_vertex                 # all top-level stdlib modules
    python -m samples.wordcount_vertex -t 2 --files 40 --per-epoch 10

>>> from naiad.testing import run
>>> run(count_words, [["a b a"], ["b"]], workers=2)
{0: [('a', 2), ('b', 1)], 1: [('b', 1)]}
"""

from __future__ import annotations

import collections
import functools
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import naiad
import stages
from samples.textdata import read_lines, stdlib_text_files
from samples._options import naiad_sample, positive, spmd_args, spmd_parser

__all__ = ["Tokenize", "Count", "RunningTotal", "words", "count_words", "epochs_of_files",
           "oracle",
           "program", "main"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def words(line: str) -> List[str]:
    """The identifiers and words of a line of Python source."""
    return _WORD.findall(line)


class Tokenize(naiad.Vertex):
    """Lines in, words out, on the same worker."""

    def on_recv_batch(self, edge, messages, time):
        out: List[str] = []
        for line in messages:
            out.extend(_WORD.findall(line))
        self.send_batch_by(0, out, time)


class Count(naiad.Vertex):
    """Counts words per timestamp; emits ``(word, count)`` once the timestamp is complete."""

    def __init__(self):
        super().__init__()
        self.counts: Dict[naiad.Timestamp, Dict[str, int]] = {}

    def on_recv_batch(self, edge, messages, time):
        counts = self.counts.get(time)
        if counts is None:
            counts = self.counts[time] = {}
            self.notify_at(time)
        get = counts.get
        for word in messages:
            counts[word] = get(word, 0) + 1

    def on_notify(self, time):
        self.send_batch_by(0, list(self.counts.pop(time).items()), time)


class RunningTotal(naiad.Vertex):
    """``(word, n)`` per epoch in, ``(word, total over all epochs so far)`` out, for the words of
    each epoch: state that outlives every epoch (what a checkpoint must carry).

    >>> from naiad.testing import run
    >>> run(lambda comp, s: stages.unary(count_words(comp, s), RunningTotal,
    ...                                  partition_by=lambda r: r[0]), [["a b a"], ["a"]])
    {0: [('a', 2), ('b', 1)], 1: [('a', 3)]}
    """

    def __init__(self) -> None:
        super().__init__()
        self.totals: Dict[str, int] = naiad.KeyedState()   # checkpoints hold what changed
        self.pending: Dict[naiad.Timestamp, Dict[str, int]] = {}

    def on_recv_batch(self, edge, messages, time):
        pending = self.pending.get(time)
        if pending is None:
            pending = self.pending[time] = {}
            self.notify_at(time)
        for word, n in messages:
            pending[word] = pending.get(word, 0) + n

    def on_notify(self, time):
        get = self.totals.get
        new = {word: get(word, 0) + n for word, n in self.pending.pop(time).items()}
        self.totals.update(new)            # one batch of changed keys
        self.send_batch_by(0, list(new.items()), time)


def count_words(comp: naiad.Computation, lines: naiad.Stream) -> naiad.Stream:
    """``(word, count)`` per epoch of ``lines`` (the signature suits naiad.testing.run)."""
    tokens = stages.unary(lines, Tokenize, name="tokenize")
    return stages.unary(tokens, Count, partition_by=lambda w: w, name="count")


def epochs_of_files(files: Sequence[str], per_epoch: int) -> List[List[str]]:
    """The lines of ``files``, ``per_epoch`` files to an epoch."""
    return [[line for f in files[i:i + per_epoch] for line in read_lines(f)]
            for i in range(0, len(files), per_epoch)]


def oracle(epochs: Sequence[Sequence[str]]) -> Dict[int, List[Tuple[str, int]]]:
    """Plain Python: the sorted ``(word, count)`` list of every epoch."""
    return {e: sorted(collections.Counter(w for line in lines for w in words(line)).items())
            for e, lines in enumerate(epochs)}


def program(comp: naiad.Computation, epochs: Sequence[Sequence[str]]) -> Dict[int, list]:
    """Count the words of each epoch; each process supplies its share of the lines and returns the
    counts of the words that its workers own."""
    from naiad.testing import shard
    inp = comp.new_input(name="lines")
    got = count_words(comp, inp.stream).collect()
    comp.activate()
    for lines in epochs:
        inp.on_next(shard(lines, comp.process_index, comp.processes))
    inp.on_completed()
    comp.join()
    return got.results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run with Naiad's flags (-p, -n, -t, -h); ``--files N`` and ``--per-epoch K``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = spmd_parser("naiad sample wordcount_vertex", __doc__.split("\n")[0])
    parser.add_argument("--files", type=positive, default=None, help="how many stdlib files")
    parser.add_argument("--per-epoch", type=positive, default=20, help="files per epoch")
    args, naiad_flags = spmd_args(parser, argv)
    comp = naiad.Computation.from_args(naiad_flags)
    epochs = epochs_of_files(stdlib_text_files(args.files), args.per_epoch)
    from naiad.execute import run_program
    results = run_program(functools.partial(program, epochs=epochs), comp)
    for e in sorted(results):
        top = sorted(results[e], key=lambda wc: (-wc[1], wc[0]))[:5]
        print(f"epoch {e}: {len(results[e])} distinct words here; top: "
              + ", ".join(f"{w} {c}" for w, c in top))
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("wordcount_vertex"))
