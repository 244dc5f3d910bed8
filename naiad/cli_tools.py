"""The ``naiad graph`` and ``naiad trace`` subcommands, and loading ``MODULE:FUNCTION`` targets.

``naiad graph MODULE:FUNCTION -o graph.svg`` runs the program's graph building only: the
program is called with a computation whose ``activate()`` stops it, so no input is fed and
nothing runs.  The graph is written as DOT text (``.dot`` or ``-o -``) or rendered by Graphviz
(any other suffix is the output format: ``.svg``, ``.png``, ``.pdf``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

from naiad.computation import Computation
from naiad.picture import render
from naiad.tracing import read_trace, summarize

__all__ = ["UsageError", "load_program", "configure_graph", "draw_graph",
           "configure_trace", "trace_command"]


_PICTURES = ("svg", "png", "pdf", "dot", "gv", "")
"""The extensions `naiad graph -o` writes: Graphviz renders the first three."""


class UsageError(Exception):
    """A command was given arguments it cannot use (exit code 2)."""


def load_program(target: str) -> Callable[..., Any]:
    """The function named by ``MODULE:FUNCTION`` (``FUNCTION`` defaults to ``program``)."""
    module_name, _, func = target.partition(":")
    # Modules of the current directory are found as with `python -m`, but after everything
    # installed, so a stray file there cannot stand in for a library the program imports.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    if not module_name or module_name.startswith(".") or module_name.endswith("."):
        msg = (f"{target!r} does not name a module; give MODULE:FUNCTION with an absolute "
               "module name, e.g. samples.hello:program")
        raise UsageError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import {module_name!r} ({exc}); give MODULE:FUNCTION of an importable module"
        raise UsageError(msg) from exc
    program = getattr(module, func or "program", None)
    if not callable(program):
        msg = f"{module_name!r} has no function {func or 'program'!r}"
        raise UsageError(msg)
    return program


class _Built(Exception):
    """Raised by a drawing computation's activate(): the graph is complete."""


class _Drawing(Computation):
    """A computation that stops its program at activate(), once the graph is built."""

    def activate(self) -> None:
        self.graph.prune()
        self.graph.compile()           # the same checks as a real run
        raise _Built


def configure_graph(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="MODULE:FUNCTION",
                   help="the program: a function taking the Computation (it is stopped at "
                        "activate(), so nothing runs)")
    p.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="graph.svg/.png/.pdf (rendered by Graphviz), graph.dot, or - for DOT "
                        "text on stdout (the default)")


def draw_graph(args: argparse.Namespace) -> int:
    program = load_program(args.target)
    comp = _Drawing()
    try:
        program(comp)
    except _Built:
        pass
    else:
        if not comp.graph.stages:
            msg = f"{args.target} built no stage; is it a program taking the Computation?"
            raise UsageError(msg)
    dot = comp.graph_dot()
    out = args.output
    if out == "-":
        sys.stdout.write(dot)
        return 0
    path = Path(out)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in _PICTURES:
        msg = (f"graph -o {path}: cannot draw a .{fmt} file; give a name ending in "
               f"{', '.join('.' + f for f in _PICTURES if f)} (or no extension, for DOT)")
        raise UsageError(msg)
    if fmt in ("dot", "gv", ""):
        path.write_text(dot, encoding="utf-8")
    else:
        path.write_bytes(render(dot, fmt))
    print(f"wrote {path} ({len(comp.graph.stages)} stages, {len(comp.graph.connectors)} "
          "connectors)", file=sys.stderr)
    return 0


def configure_trace(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["summarize"], help="what to do with the trace")
    p.add_argument("path", metavar="PATH", help="the trace directory given as execute(trace=PATH)")
    p.add_argument("--slowest", type=_count, default=5, metavar="N",
                   help="how many of the slowest epochs to list (default 5)")


def _count(text: str) -> int:
    """An argparse type: an integer of at least 0 (else a usage error naming it)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a count (an integer of at least 0)")
    return n


def trace_command(args: argparse.Namespace) -> int:
    try:
        events = read_trace(args.path)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    print(summarize(events, slowest=args.slowest))
    return 0
