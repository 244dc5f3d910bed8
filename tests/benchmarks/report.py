"""Benchmark reporting: print a table and keep it in docs/benchmarks.md under its own heading."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Sequence

__all__ = ["timed", "median_of", "table", "update_section", "machine"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
HEADER = ("# Benchmarks\n\nEvery figure below compares against a baseline measured in the same "
          "run, because the machines are shared and noisy. Regenerate with `make bench` (all) "
          "or `python -m tests.benchmarks NAME`.\n")


def timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Median wall-clock seconds over ``repeat`` calls."""
    return statistics.median(timed(fn) for _ in range(repeat))


def table(headers: Sequence[str], rows: List[Sequence[object]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def machine() -> str:
    """One line describing where the figures were taken."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=DOC.parent).stdout.strip()
    except OSError:
        rev = "?"
    return (f"{platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} cores, commit {rev or '?'}, {time.strftime('%Y-%m-%d')}")


def update_section(name: str, title: str, command: str, body: str) -> None:
    """Replace (or append) the section ``name`` of docs/benchmarks.md and print it."""
    section = (f"<!-- bench:{name} -->\n## {title}\n\nCommand: `{command}` ({machine()})\n\n"
               f"{body.strip()}\n<!-- /bench:{name} -->\n")
    print(section)
    DOC.parent.mkdir(exist_ok=True)
    text = DOC.read_text() if DOC.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n",
                         re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)
