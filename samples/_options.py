"""Command-line options of the samples that run as one process of an SPMD computation.

Such a sample takes its own options and Naiad's process flags (``-p -n -t -h``, which go to
``naiad.Computation.from_args``); ``--help`` describes both.  Every sample's
``python -m samples.NAME`` runs :func:`naiad_sample`, as ``naiad sample NAME`` would.

>>> parser = spmd_parser("samples.demo", "A demo.")
>>> _ = parser.add_argument("--rounds", type=int, default=3)
>>> args, flags = spmd_args(parser, ["--rounds", "5", "-p", "0", "-n", "1"])
>>> args.rounds, flags
(5, ['-p', '0', '-n', '1'])
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable, Optional, Sequence

import naiad.config

__all__ = ["naiad_sample", "sample_parser", "spmd_parser", "spmd_args", "positive", "at_least",
           "rmat_scale", "port"]

NAIAD_FLAGS = """Naiad's process flags (this process's part of the computation):
  -p, --procid ID          this process's index (default 0)
  -n, --numprocs N         number of processes (default 1)
  -t, --threads T          worker threads per process (default 1)
  -h, --hosts HOST:PORT .. one host:port per process, in process order
  --connect-timeout S      seconds to wait for the other processes (default 30)

Start one process per index, each with the same -n, -t and -h."""


def naiad_sample(name: str, argv: Optional[Sequence[str]] = None) -> int:
    """The exit code of ``naiad sample NAME ARGS`` run in this process, ``ARGS`` being ``argv``
    or this process's arguments: what ``python -m samples.NAME ARGS`` runs, so that it has the
    same options, messages and exit codes (2 a usage error, 1 a failure said in one line, 130
    interrupted; output cut short by a closed pipe is no failure) and no raw tracebacks
    (``naiad --debug sample NAME ARGS`` shows them)."""
    from naiad.cli import main            # here: naiad.cli imports the samples it runs
    return main(["sample", name, *(sys.argv[1:] if argv is None else argv)])


def sample_parser(name: str, doc: str) -> argparse.ArgumentParser:
    """The parser of sample ``name``, its usage line ``naiad sample NAME``, its description
    the first paragraph of the sample's docstring ``doc`` (as ``naiad sample`` lists it).

    >>> parser = sample_parser("demo", "A demo that runs\\nover two lines.\\n\\nMore below.")
    >>> parser.prog, parser.format_usage().strip(), parser.description
    ('naiad sample demo', 'usage: naiad sample demo [-h]', 'A demo that runs over two lines.')
    """
    first = " ".join(doc.split("\n\n")[0].split())
    return SampleParser(prog=f"naiad sample {name}", description=first)


class SampleParser(argparse.ArgumentParser):
    """A sample's parser: its ``-n/--processes`` and ``-t/--workers``, each valid alone, must
    also make a computation together (at most :data:`naiad.config.MAX_WORKERS` workers in
    all), else a usage error naming both.

    >>> parser = SampleParser(prog="demo")
    >>> _ = parser.add_argument("-n", "--processes", type=positive, default=1)
    >>> _ = parser.add_argument("-t", "--workers", type=positive, default=1)
    >>> parser.parse_args(["-n", "2", "-t", "3"])
    Namespace(processes=2, workers=3)
    """

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        processes = getattr(parsed, "processes", 1)
        workers = getattr(parsed, "workers", getattr(parsed, "threads", 1))
        if isinstance(processes, int) and isinstance(workers, int):
            try:
                naiad.config.check_layout(processes, workers)
            except ValueError as exc:
                self.error(f"-n x -t (processes x workers): {exc}")
        return parsed, extra


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


def at_least(low: int):
    """An argparse type: an integer of at least ``low`` (else a usage error naming it).

    >>> at_least(2)("3"), positive("1")
    (3, 1)
    >>> positive("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 0 is not an integer of at least 1
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is not an integer of at least {low}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


positive = at_least(1)


def rmat_scale(text: str) -> int:
    """An argparse type: a Graph500 RMAT scale, 1 to 28 (2**SCALE nodes)."""
    value = at_least(1)(text)
    if value > 28:
        raise argparse.ArgumentTypeError(f"scale {value} means 2**{value} nodes; at most 28")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to 65535)")
    return value


def max_difference(diffs: Iterable[float]) -> float:
    """The largest of ``diffs``, or NaN if one is NaN: ``max`` skips a NaN unless it comes
    first (every comparison with NaN is false), so a self-check ``max(...) < 1e-9`` would pass
    a result holding NaN.

    >>> max_difference([0.0, float("nan"), 1e-12]) != max_difference([0.0])
    True
    >>> max_difference([]), max_difference([2e-15, 1e-15])
    (0.0, 2e-15)
    """
    worst = 0.0
    for d in diffs:
        if d != d:
            return d
        if d > worst:
            worst = d
    return worst
