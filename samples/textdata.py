"""Real data for the samples, taken from this Python's own standard library.

Two small, stable functions: the standard library's ``.py`` files (text for word counts) and
its import graph (module -> imported module, parsed with :mod:`ast`), both in a deterministic
order so that every process of a computation sees the same data.

>>> files = stdlib_text_files(limit=3)
>>> len(files) == 3 and all(f.endswith(".py") for f in files)
True
>>> edges = stdlib_import_graph()
>>> ("json.decoder", "re") in edges
True
"""

from __future__ import annotations

import ast
import functools
import os
from typing import Iterator, List, Optional, Set, Tuple

__all__ = ["STDLIB", "stdlib_text_files", "stdlib_import_graph", "read_lines"]

STDLIB = os.path.dirname(os.__file__)
"""The directory of the standard library's Python sources."""

# Directories that are not part of the library proper (tests, installed packages, tools).
_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__",
                   "lib-dynload", "turtledemo", "__phello__"})


def _walk(root: str) -> Iterator[str]:
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("config-")
                         and os.path.exists(os.path.join(here, d, "__init__.py")))
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(here, name)


def stdlib_text_files(limit: Optional[int] = None) -> List[str]:
    """Paths of the standard library's top-level ``.py`` files, sorted; the first ``limit`` only."""
    names = sorted(n for n in os.listdir(STDLIB) if n.endswith(".py"))
    paths = [os.path.join(STDLIB, n) for n in names]
    return paths if limit is None else paths[:limit]


def read_lines(path: str) -> List[str]:
    """The lines of a source file (UTF-8, undecodable bytes replaced), without line ends."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, STDLIB)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path: str, module: str, known: Set[str]) -> List[str]:
    """The modules ``path`` imports; ``from package import name`` names the submodule when
    ``package.name`` is a module of ``known``, else the package."""
    with open(path, "rb") as f:
        source = f.read()
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    is_package = path.endswith("__init__.py")
    found = []
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                if keep < 0:
                    continue
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(sub if sub in known else base)
    return found


def _statements(body: list) -> Iterator[ast.stmt]:
    """Every statement, nested ones included; expressions are skipped (imports are statements)."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, field, None)
            if inner:
                stack.extend(reversed(inner))


@functools.lru_cache(maxsize=1)
def _graph() -> Tuple[Tuple[str, str], ...]:
    paths = list(_walk(STDLIB))
    known = {_module_name(p) for p in paths}
    edges = set()
    for path in paths:
        module = _module_name(path)
        for imported in _imports(path, module, known):
            if imported != module:
                edges.add((module, imported))
    return tuple(sorted(edges))


def stdlib_import_graph() -> List[Tuple[str, str]]:
    """``(module, imported_module)`` pairs of the standard library (packages included), sorted.

    Imports anywhere in a module count, also inside functions; relative imports are resolved,
    and ``from email import utils`` counts as importing ``email.utils``.
    Parsed once per process (a few seconds), then cached.
    """
    return list(_graph())
