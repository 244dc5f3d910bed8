"""Every ```python block of README.md and docs/*.md runs, and its assertions hold.

The blocks of one file run in order in one namespace (as a reader would paste them), with
``__name__ == "__main__"`` so that functions defined there travel to worker processes by value.
A block whose first line is ``# not run`` is skipped. New files under docs/ are picked up.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = "# not run"


def documents():
    files = sorted((ROOT / "docs").glob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        files.insert(0, readme)
    return files


def blocks(path: pathlib.Path):
    """``(first line number, source)`` of every python block of ``path``."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start(1)) + 1
        yield line, m.group(1)


def test_blocks_are_found(tmp_path):
    """The extraction itself: fences, line numbers, the skip marker."""
    sample = "intro\n```python\nx = 1\n```\n\n```python\n# not run\nboom()\n```\n```sh\nls\n```\n"
    path = tmp_path / "probe.md"
    path.write_text(sample)
    assert list(blocks(path)) == [(3, "x = 1\n"), (7, "# not run\nboom()\n")]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_document_examples_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)           # examples that write files write them here
    found = list(blocks(path))
    if not found:
        pytest.skip(f"{path.name} has no python blocks")
    namespace = {"__name__": "__main__"}
    ran = 0
    for line, source in found:
        if source.lstrip().startswith(SKIP):
            continue
        code = compile(source, f"{path.relative_to(ROOT)}:{line}", "exec")
        exec(code, namespace)
        ran += 1
    assert ran or all(s.lstrip().startswith(SKIP) for _, s in found)
