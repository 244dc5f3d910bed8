"""Hello, timely dataflow: numbers exchanged between workers by value, each worker saying what it sees.

The first program of the timely dataflow book (``examples/hello.rs``): one input, an exchange
by the record's value, and an inspecting vertex that prints ``worker W:\\thello X``.  Process 0
introduces one number per round; each round is one epoch.

Run it like any Naiad program, with Naiad's flags::

    python -m samples.hello                  # one worker
    python -m samples.hello -t 2             # two worker threads
    NAIAD_SECRET=same-in-both python -m samples.hello -n 2 -p 0 &   # two processes, by hand
    NAIAD_SECRET=same-in-both python -m samples.hello -n 2 -p 1

Processes started by hand must share a secret (``NAIAD_SECRET``, or ``NAIAD_SECRET_FILE``
naming a file only you can read), as docs/cli.md says: without one they refuse to start.

>>> import naiad
>>> [seen] = naiad.execute(program, workers=2)
>>> sorted(x for _, x in seen)
[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
"""

from __future__ import annotations

import functools
import sys
from typing import List, Optional, Sequence, Tuple

import naiad
import stages
from samples._options import naiad_sample, positive, spmd_args, spmd_parser

__all__ = ["Inspect", "hello", "program", "main"]


class Inspect(naiad.Vertex):
    """Passes each record on as ``(worker index, record)``, printing it first if asked to."""

    def __init__(self, verbose: bool = False):
        super().__init__()
        self.verbose = verbose

    def on_recv(self, edge, message, time):
        if self.verbose:
            # one write per line: worker threads print concurrently
            sys.stdout.write(f"worker {self.index}:\thello {message}\n")
            sys.stdout.flush()
        self.send_by(0, (self.index, message), time)


def hello(stream: naiad.Stream, verbose: bool = False) -> naiad.Stream:
    """Exchange ``stream`` by value and inspect it: a stream of ``(worker, record)``."""
    return stages.unary(stream, functools.partial(Inspect, verbose), partition_by=lambda x: x,
                        name="hello")


def program(comp: naiad.Computation, rounds: int = 10,
            verbose: bool = False) -> List[Tuple[int, int]]:
    """Process 0 sends ``round`` in epoch ``round``; returns the ``(worker, number)`` pairs seen here."""
    inp = comp.new_input(name="numbers")
    seen = hello(inp.stream, verbose).collect()
    comp.activate()
    for r in range(rounds):
        inp.on_next([r] if comp.process_index == 0 else [])
    inp.on_completed()
    comp.join()
    return [pair for epoch in sorted(seen.results) for pair in seen.results[epoch]]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run with Naiad's flags (-p, -n, -t, -h); ``--rounds N`` sets the number of rounds."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = spmd_parser("naiad sample hello", __doc__.split("\n")[0])
    parser.add_argument("--rounds", type=positive, default=10)
    args, naiad_flags = spmd_args(parser, argv)
    comp = naiad.Computation.from_args(naiad_flags)
    from naiad.execute import run_program
    run_program(functools.partial(program, rounds=args.rounds, verbose=True), comp)
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("hello"))
