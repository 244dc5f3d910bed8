"""Command-line options of the samples that run as one process of an SPMD computation.

Such a sample takes its own options and Naiad's process flags (``-p -n -t -h``, which go to
``naiad.Computation.from_args``); ``--help`` describes both.

>>> parser = spmd_parser("samples.demo", "A demo.")
>>> _ = parser.add_argument("--rounds", type=int, default=3)
>>> args, flags = spmd_args(parser, ["--rounds", "5", "-p", "0", "-n", "1"])
>>> args.rounds, flags
(5, ['-p', '0', '-n', '1'])
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

import naiad.config

__all__ = ["spmd_parser", "spmd_args"]

NAIAD_FLAGS = """Naiad's process flags (this process's part of the computation):
  -p, --procid ID          this process's index (default 0)
  -n, --numprocs N         number of processes (default 1)
  -t, --threads T          worker threads per process (default 1)
  -h, --hosts HOST:PORT .. one host:port per process, in process order

Start one process per index, each with the same -n, -t and -h."""


def spmd_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser for the sample's own options; ``parse_known_args`` leaves Naiad's flags over."""
    parser = argparse.ArgumentParser(prog=prog, description=description, add_help=False,
                                     epilog=NAIAD_FLAGS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--help", action="help", help="show this help and exit")
    return parser


def spmd_args(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]):
    """The sample's options and Naiad's flags; anything neither knows is a usage error
    (exit code 2, naming it)."""
    args, flags = parser.parse_known_args(argv)
    extra = naiad.config.unknown_flags(flags)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args, flags
