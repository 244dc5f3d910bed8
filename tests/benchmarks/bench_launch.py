"""Launch cost of ``naiad.execute(program, processes=N)`` against a bare interpreter start.

Measured in the same run: the start of ``python -P -c pass`` (the floor no launcher can beat),
the import of the child's modules (``python -P -c 'import naiad._child, linq'``), the time from
the ``execute()`` call until the program is running in every child, and the whole run of a
trivial program (one epoch of a few records through ``collect``).  Medians.

Both trees are measured with their bytecode caches written (``PYTHONDONTWRITEBYTECODE`` is
dropped and one unrecorded round comes first), as an installed package has them: without them
every child compiles naiad from source, which costs more than everything else it does at start.

With ``NAIAD_BENCH_BASELINE=<git revision>`` the same measurements also run on that revision
(exported with ``git archive`` into a temporary directory), alternating with this tree round by
round, so the before and after figures come from one run on the same machine state.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import naiad
from naiad.launch import _child_env, _python
from tests.benchmarks.report import table, update_section

REPEAT = 5            # samples per row in one measuring process
ROUNDS = 3            # measuring processes per tree, alternated with the baseline's
PROCESSES = (2, 4)
ROOT = Path(__file__).resolve().parents[2]


def trivial(comp: naiad.Computation) -> Tuple[float, List[int]]:
    """Note when the program began (a clock every process on this machine shares), then run one
    epoch of a few records."""
    began = time.monotonic()
    inp = comp.new_input(name="numbers")
    got = inp.stream.collect()
    comp.activate()
    inp.on_next(range(comp.process_index, 8, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return began, sorted(got.results[0])


def _interpreter(code: str) -> float:
    """Seconds to start ``python -P -c code`` and see it exit (the children's environment)."""
    t0 = time.perf_counter()
    subprocess.run([*_python(), "-c", code], env=_child_env(), check=True)
    return time.perf_counter() - t0


def _launch(processes: int) -> Tuple[float, float]:
    """(seconds until the program runs in every child, seconds of the whole run)."""
    t0 = time.monotonic()
    parts = naiad.execute(trivial, processes=processes)
    whole = time.monotonic() - t0
    assert sorted(x for _, got in parts for x in got) == list(range(8)), parts
    return max(began for began, _ in parts) - t0, whole


def samples() -> Dict[str, List[float]]:
    """Seconds of every measured row, ``REPEAT`` samples each, in this interpreter's tree."""
    out: Dict[str, List[float]] = {"bare": [], "imports": []}
    _launch(PROCESSES[0])            # writes the bytecode caches; not recorded
    for _ in range(REPEAT):
        out["bare"].append(_interpreter("pass"))
        out["imports"].append(_interpreter("import naiad._child, linq"))
        for n in PROCESSES:
            started, whole = _launch(n)
            out.setdefault(f"started{n}", []).append(started)
            out.setdefault(f"whole{n}", []).append(whole)
    return out


def _measure_tree(tree: Path) -> Dict[str, List[float]]:
    """Run :func:`samples` in a fresh interpreter whose naiad is ``tree``'s."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_launch", "--samples"],
                          cwd=tree, env=env, capture_output=True, text=True, check=True,
                          timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _export(revision: str) -> Path:
    """``revision`` of this repository in a temporary directory, with this benchmark added."""
    tree = Path(tempfile.mkdtemp(prefix="naiad-baseline-"))
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shutil.copy(__file__, tree / "tests" / "benchmarks" / "bench_launch.py")
    return tree


def _rows(s: Dict[str, List[float]]) -> List[List[str]]:
    med = {k: statistics.median(v) * 1000 for k, v in s.items()}
    bare = med["bare"]
    rows = [["`python -P -c pass`", "1", f"{bare:.0f}", ""],
            ["`python -P -c 'import naiad._child, linq'`", "1", f"{med['imports']:.0f}",
             f"{med['imports'] - bare:.0f}"]]
    for n in PROCESSES:
        rows.append(["execute(trivial): program running in every child", str(n),
                     f"{med[f'started{n}']:.0f}", f"{med[f'started{n}'] - bare:.0f}"])
        rows.append(["execute(trivial): whole run", str(n), f"{med[f'whole{n}']:.0f}",
                     f"{med[f'whole{n}'] - bare:.0f}"])
    return rows


def main() -> None:
    baseline = os.environ.get("NAIAD_BENCH_BASELINE")
    here: Dict[str, List[float]] = {}
    before: Dict[str, List[float]] = {}
    tree = _export(baseline) if baseline else None
    try:
        for _ in range(ROUNDS):
            for k, v in _measure_tree(ROOT).items():
                here.setdefault(k, []).extend(v)
            if tree is not None:
                for k, v in _measure_tree(tree).items():
                    before.setdefault(k, []).extend(v)
    finally:
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    now = _rows(here)
    if before:
        was = _rows(before)
        headers = ["what", "processes", f"ms at {baseline}", "ms now",
                   f"beyond the interpreter at {baseline}", "beyond it now"]
        rows = [[a[0], a[1], b[2], a[2], b[3], a[3]] for a, b in zip(now, was)]
    else:
        headers = ["what", "processes", "ms", "ms beyond the bare interpreter"]
        rows = now
    n = len(here["bare"])
    body = table(headers, rows)
    body += (f"\n\nMedians of {n} samples per row ({ROUNDS} measuring processes"
             f"{' alternated with the baseline' if before else ''}), 2 shared cores. "
             "*program running in every child* is the time from the `execute()` call until the "
             "last child entered the program (a clock all processes share); *whole run* ends "
             "when `execute()` returns the results; *beyond the interpreter* subtracts the "
             "bare `python -P -c pass` of the same tree and run.  The children start in "
             "parallel, so with more processes than cores their starts queue.")
    update_section("launch", "Launch: execute() against a bare interpreter",
                   (f"NAIAD_BENCH_BASELINE={baseline} " if before else "")
                   + "python -m tests.benchmarks launch", body)


if __name__ == "__main__":
    if sys.argv[1:] == ["--samples"]:
        print(json.dumps(samples()))
    else:
        main()
