"""Naiad's command-line flags (-p, -n, -t, -h, --connect-timeout) and the ``naiad`` console script.

The console script is one argparse parser with a subcommand per task; each subcommand is a
:class:`Command` in :data:`COMMANDS` (its arguments and its handler), so adding one is a small,
local change.  Exit codes: 0 success, 2 usage error, 1 the computation failed (its message on
stderr, the traceback only with ``--debug``).

>>> parse_args(["-p", "1", "-n", "2", "-h", "a:1", "b:2"])
ProcessConfig(procid=1, numprocs=2, threads=1, hosts=['a:1', 'b:2'], connect_timeout=None)
>>> main(["sample"])                                    # doctest: +ELLIPSIS
samples (run one with: naiad sample NAME [options]; NAME --help lists its options)
  collatz ...
0
>>> main(["run", "no_such_module:program"])
2
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import pkgutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from naiad.config import ProcessConfig, parse_args, unknown_flags
from naiad.computation import Computation, run_program
from naiad.cli_tools import (UsageError, configure_graph, configure_trace, draw_graph,
                             load_program, trace_command)

__all__ = ["ProcessConfig", "parse_args", "main", "samples", "Command", "COMMANDS"]


# ---- the samples ---------------------------------------------------------------------------------
def samples() -> Dict[str, str]:
    """``{name: one-line description}`` of every runnable sample (a module of ``samples`` with a
    ``main`` function), read from the sources without importing them."""
    spec = importlib.util.find_spec("samples")
    if spec is None or not spec.submodule_search_locations:
        return {}
    where = list(spec.submodule_search_locations)
    found = {}
    for info in pkgutil.iter_modules(where):
        path = Path(where[0]) / f"{info.name}.py"
        if info.name.startswith("_") or not path.exists():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            doc = (ast.get_docstring(tree) or "").split("\n\n")[0]
            found[info.name] = " ".join(doc.replace("``", "").split())
    return dict(sorted(found.items()))


# ---- subcommands -----------------------------------------------------------------------------------
@dataclass
class Command:
    """One subcommand: ``configure(parser)`` adds its arguments, ``handle(args)`` runs it and
    returns the exit code."""

    name: str
    help: str
    example: str
    configure: Callable[[argparse.ArgumentParser], None]
    handle: Callable[[argparse.Namespace], int]


def _configure_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="MODULE:FUNCTION", nargs="?",
                   help="the SPMD program: a function taking the Computation")
    p.add_argument("flags", nargs=argparse.REMAINDER,
                   help="Naiad's flags: -p ID -n N -t T -h HOST:PORT ... (one per process)")


def _run(args: argparse.Namespace) -> int:
    if args.target is None:
        msg = ("run: name the program, MODULE:FUNCTION, then Naiad's flags if any (e.g. "
               "naiad run mymodule:program -p 0 -n 2 -h host0:2101 host1:2101)")
        raise UsageError(msg)
    extra = unknown_flags(args.flags)
    if extra:
        msg = (f"run: unrecognized arguments: {' '.join(extra)} (the flags are -p ID -n N -t T "
               "-h HOST:PORT ...)")
        raise UsageError(msg)
    comp = Computation.from_args(args.flags)
    comp.connect()          # meet the other processes while the program is imported and builds
    try:
        program = load_program(args.target)
    except BaseException as exc:
        comp.shutdown(exc)  # the others hear of it at once, not after their connect_timeout
        raise
    result = run_program(program, comp)
    if result is not None:
        print(result)
    return 0


def _configure_sample(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="the sample; omit it for the list")
    p.add_argument("options", nargs=argparse.REMAINDER,
                   help="the sample's own options (naiad sample NAME --help lists them)")


def _sample(args: argparse.Namespace) -> int:
    known = samples()
    if args.name is None:
        print("samples (run one with: naiad sample NAME [options]; NAME --help lists its options)")
        width = max(map(len, known))
        for name, about in known.items():
            print(f"  {name:<{width}}  {about}")
        return 0
    if args.name not in known:
        msg = f"no sample {args.name!r}; the samples are: {', '.join(known)}"
        raise UsageError(msg)
    module = importlib.import_module(f"samples.{args.name}")
    code = module.main(list(args.options))
    return int(code or 0)


COMMANDS: List[Command] = [
    Command("run", "run an SPMD program function in this process, with Naiad's flags",
            "naiad run samples.hello:program -p 0 -n 1 -t 2", _configure_run, _run),
    Command("sample", "run one of the samples (omit NAME to list them)",
            "naiad sample wordcount --files 20", _configure_sample, _sample),
    Command("graph", "draw a program's dataflow graph (DOT text, or SVG/PNG/PDF with Graphviz)",
            "naiad graph samples.hello:program -o hello.svg", configure_graph, draw_graph),
    Command("trace", "read the event trace a run wrote with execute(trace=PATH)",
            "naiad trace summarize /tmp/naiad-trace", configure_trace, trace_command),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="naiad", description="Timely dataflow in Python: run programs and samples.",
        epilog="examples:\n" + "\n".join(f"  {c.example}" for c in COMMANDS)
        + "\n\nnaiad COMMAND --help describes a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback when a computation fails")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for c in COMMANDS:
        # run and sample pass -h (Naiad's --hosts) on to the program: help is --help only.
        p = sub.add_parser(c.name, help=c.help, description=c.help, add_help=False,
                           epilog=f"example:\n  {c.example}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--help", action="help", help="show this help and exit")
        c.configure(p)
        p.set_defaults(handle=c.handle)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``naiad`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_help()
        return 2
    commands = {c.name for c in COMMANDS}
    before = next((a for a in argv if a in commands or not a.startswith("-")), None)
    stray = [a for a in argv[:argv.index(before) if before else len(argv)]
             if a not in ("--debug", "-h", "--help")]
    if stray:          # argparse would only say that COMMAND is missing
        return _usage(parser, f"unrecognized arguments: {' '.join(stray)} (before the command: "
                              "naiad [--debug] COMMAND ...; naiad --help lists the commands)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:          # --help (0) or a usage error (2), already printed
        return int(exc.code or 0) if not isinstance(exc.code, str) else _usage(parser, exc.code)
    try:
        return args.handle(args)
    except UsageError as exc:
        return _usage(parser, str(exc))
    except SystemExit as exc:          # a sample's or the flags' own usage error
        if isinstance(exc.code, str):
            return _usage(parser, exc.code)
        return int(exc.code or 0)
    except BrokenPipeError:            # output piped into head, say: not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("naiad: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the computation's failure, reported plainly
        if _stdout_closed_under(exc):  # the same, from a vertex or a callback that printed
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if args.debug:
            traceback.print_exc()
        else:
            print(f"naiad: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("naiad: run with --debug for the traceback", file=sys.stderr)
        return 1


def _stdout_closed_under(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure from writing to a standard output whose reader has gone
    (a vertex or a subscriber printing into ``head``, its BrokenPipeError wrapped)."""
    import select
    chain, seen = [], set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    if not any(isinstance(e, BrokenPipeError) or "BrokenPipeError" in str(e) for e in chain):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _usage(parser: argparse.ArgumentParser, message: str) -> int:
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
