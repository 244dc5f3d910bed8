"""The Debian package dependency graph, read from ``apt-cache dumpavail``: a real graph of useful size.

Each package is a node; each ``Depends`` or ``Pre-Depends`` clause gives an edge from the package
to the package it names (every alternative of ``a | b`` counts, version constraints and
architecture qualifiers are dropped).  On a Debian machine after ``apt-get update`` this is about
63,000 packages and 280,000 edges.  Elsewhere :func:`debian_edges` returns ``None`` and callers
fall back to another graph (:func:`samples.graphs.stdlib_import_graph`).

>>> text = '''Package: a
... Depends: b (>= 1), c | d:any
...
... Package: b
... Pre-Depends: dpkg
... '''
>>> parse_dumpavail(text)
[('a', 'b'), ('a', 'c'), ('a', 'd'), ('b', 'dpkg')]
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import lru_cache
from typing import List, Optional, Tuple

__all__ = ["parse_dumpavail", "debian_edges", "real_graph"]

Edge = Tuple[str, str]

_NAME = re.compile(r"\s*([^\s(:]+)")


def parse_dumpavail(text: str) -> List[Edge]:
    """``(package, dependency)`` edges of an ``apt-cache dumpavail`` text, deduplicated, sorted."""
    edges = set()
    package = None
    for line in text.splitlines():
        if line.startswith("Package:"):
            package = line[8:].strip()
        elif package and (line.startswith("Depends:") or line.startswith("Pre-Depends:")):
            for clause in line.split(":", 1)[1].split(","):
                for alternative in clause.split("|"):
                    m = _NAME.match(alternative)
                    if m and m.group(1) != package:
                        edges.add((package, m.group(1)))
    return sorted(edges)


@lru_cache(maxsize=1)
def _dumpavail_edges() -> Optional[Tuple[Edge, ...]]:
    if shutil.which("apt-cache") is None:
        return None
    try:
        out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True,
                             timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    edges = parse_dumpavail(out)
    return tuple(edges) if len(edges) > 1000 else None


def debian_edges() -> Optional[List[Edge]]:
    """The dependency edges of every package apt knows, or ``None`` where apt-cache is missing
    or its lists are empty (run ``apt-get update`` first)."""
    edges = _dumpavail_edges()
    return None if edges is None else list(edges)


def real_graph() -> Tuple[List[Edge], str]:
    """``(edges, description)``: the Debian package graph where apt-cache has it, else the
    standard library's import graph; the description names the graph and its size."""
    edges = debian_edges()
    if edges is not None:
        nodes = {u for e in edges for u in e}
        return edges, f"Debian package dependencies ({len(nodes):,} packages, {len(edges):,} edges)"
    from samples.textdata import stdlib_import_graph
    edges = list(stdlib_import_graph())
    nodes = {u for e in edges for u in e}
    return edges, (f"standard library import graph ({len(nodes):,} modules, {len(edges):,} edges;"
                   " apt-cache not available)")
