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


PUBLIC = ["naiad", "stages", "linq", "linq.frames", "linq.differential", "naiad.spark",
          "naiad.testing"]


def test_every_public_name_is_documented():
    """Each name a public module exports, and each public method of the stream, frame and
    collection classes, is named somewhere in docs/ (README.md included)."""
    import importlib

    import linq  # noqa: F401 - installs the Stream methods
    from linq.differential import Collection
    from linq.frames import FrameStream
    from naiad.graph import Stream

    text = "\n".join(p.read_text() for p in documents())
    names = {(m, n) for m in PUBLIC for n in importlib.import_module(m).__all__}
    for cls in (Stream, FrameStream, Collection):
        names |= {(cls.__name__, n) for n, v in vars(cls).items()
                  if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    missing = sorted(f"{m}.{n}" for m, n in names if not re.search(rf"\b{re.escape(n)}\b", text))
    assert not missing, f"not named in docs/: {missing}"
