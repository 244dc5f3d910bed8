"""Naiad's command-line flags (-p, -n, -t, -h) and the ``naiad`` console script."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence

__all__ = ["ProcessConfig", "parse_args", "main"]


@dataclass
class ProcessConfig:
    """Where this process stands in the computation."""

    procid: int = 0
    numprocs: int = 1
    threads: int = 1
    hosts: Optional[List[str]] = None


def _parser(prog: str = "naiad") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, add_help=False,
                                description="Naiad process flags")
    p.add_argument("-p", "--procid", type=int, default=0, help="this process's index")
    p.add_argument("-n", "--numprocs", type=int, default=1, help="number of processes")
    p.add_argument("-t", "--threads", type=int, default=1, help="worker threads per process")
    p.add_argument("-h", "--hosts", nargs="+", default=None, metavar="HOST:PORT",
                   help="one host:port per process, in process order")
    p.add_argument("--help", action="help", help="show this help and exit")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> ProcessConfig:
    """Parse Naiad's flags; unknown arguments are left for the program.

    >>> parse_args(["-p", "1", "-n", "2", "-h", "a:1", "b:2"])
    ProcessConfig(procid=1, numprocs=2, threads=1, hosts=['a:1', 'b:2'])
    """
    args, _ = _parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.numprocs < 1 or not 0 <= args.procid < args.numprocs:
        msg = (f"--procid {args.procid} must be in 0..{args.numprocs - 1} "
               f"(--numprocs {args.numprocs})")
        raise SystemExit(msg)
    if args.threads < 1:
        raise SystemExit(f"--threads must be at least 1; got {args.threads}")
    if args.hosts is not None and len(args.hosts) != args.numprocs:
        msg = (f"--hosts lists {len(args.hosts)} address(es) but --numprocs is "
               f"{args.numprocs}; give one host:port per process")
        raise SystemExit(msg)
    if args.hosts is None and args.numprocs > 1:
        args.hosts = [f"127.0.0.1:{2101 + i}" for i in range(args.numprocs)]
    return ProcessConfig(args.procid, args.numprocs, args.threads, args.hosts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``naiad run module:function [flags]``: run an SPMD program function in this process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("--help", "help"):
        print("usage: naiad run MODULE:FUNCTION [-p ID -n N -t T -h HOST:PORT ...]\n"
              "       naiad sample NAME   (hello, collatz, wordcount, components, pagerank)")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "run" and rest:
        import importlib
        from naiad.computation import Computation
        from naiad.execute import run_program
        module, _, func = rest[0].partition(":")
        program = getattr(importlib.import_module(module), func or "program")
        comp = Computation.from_args(rest[1:])
        result = run_program(program, comp)
        if result is not None:
            print(result)
        return 0
    if cmd == "sample" and rest:
        import runpy
        runpy.run_module(f"samples.{rest[0]}", run_name="__main__")
        return 0
    print(f"unknown command {cmd!r}; try `naiad --help`", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
