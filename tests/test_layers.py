"""The layering promised in naiad/__init__.py holds: import-linter checks the contracts of
pyproject.toml ([tool.importlinter]) on the real import graph, function-level imports included."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    proc = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_module_is_over_500_lines():
    big = {str(p.relative_to(ROOT)): n for pkg in ("naiad", "stages", "linq", "samples")
           for p in (ROOT / pkg).rglob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not big, f"split these modules (one concept each): {big}"
