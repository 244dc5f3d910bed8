"""Differential dataflow next to Pathway (the closest Python peer with an incremental engine).

Pathway (``pip install pathway``) pins its own versions of many packages, so it is not a
dependency here: point ``NAIAD_PATHWAY_PYTHON`` at an interpreter that has it (for example a
separate venv: ``python -m venv /tmp/pw && /tmp/pw/bin/pip install pathway``).  Both sides get
the same inputs, pickled to a temporary file:

* word count over 40 of the standard library's files, then 10 epochs each adding one file and
  removing another (Pathway: a table with ``__time__``/``__diff__`` columns, ``groupby().reduce``);
* connected components of the Debian graph (both directions of every edge) by min-label
  propagation to a fixed point (Pathway: ``pw.iterate``).

The figure is the whole computation from the first input to the last output, engine start
included, on each side.  Run: ``NAIAD_PATHWAY_PYTHON=/tmp/pw/bin/python python -m tests.benchmarks pathway``.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import tempfile
import time
from pathlib import Path

from samples import dd_components, dd_wordcount
from samples.debian import real_graph
from samples.textdata import stdlib_text_files
from tests.benchmarks.report import table, update_section

COMMAND = "NAIAD_PATHWAY_PYTHON=/tmp/pw/bin/python python -m tests.benchmarks pathway"

SIDE = '"""Run under an interpreter with pathway: word count and components over pickled inputs."""\nimport pickle, sys, time\nimport pandas as pd\nimport pathway as pw\n\nkind, path = sys.argv[1], sys.argv[2]\ndata = pickle.load(open(path, "rb"))\nt0 = time.perf_counter()\nif kind == "wordcount":\n    initial, updates = data\n    rows = [(w, 0, 1) for f, line in initial for w in line.split()]\n    for e, u in enumerate(updates, start=1):\n        rows += [(w, 2 * e, d) for (f, line), d in u for w in line.split()]\n    t = pw.debug.table_from_pandas(pd.DataFrame(rows, columns=["word", "__time__", "__diff__"]))\n    out = t.groupby(t.word).reduce(t.word, n=pw.reducers.count())\nelse:\n    edges = data\n    df = pd.DataFrame(edges, columns=["u", "v"])\n    e = pw.debug.table_from_pandas(df)\n    nodes = e.groupby(e.u).reduce(node=e.u, label=e.u)\n\n    def step(labels, e):\n        offers = e.join(labels, e.u == labels.node).select(node=e.v, label=labels.label)\n        both = offers.concat_reindex(labels)\n        return dict(labels=both.groupby(both.node).reduce(both.node,\n                                                          label=pw.reducers.min(both.label)))\n    out = pw.iterate(step, labels=pw.iterate_universe(nodes), e=e).labels\nres = pw.debug.table_to_pandas(out)\nprint(f"{time.perf_counter() - t0:.3f} {len(res)}")\n'


def _pathway(python: str, kind: str, data: object, tmp: Path) -> float:
    path = tmp / f"{kind}.pkl"
    path.write_bytes(pickle.dumps(data))
    script = tmp / "side.py"
    script.write_text(SIDE)
    out = subprocess.run([python, str(script), kind, str(path)], capture_output=True,
                         text=True, timeout=3600, check=True)
    return float(out.stdout.split()[0])


def main() -> None:
    python = os.environ.get("NAIAD_PATHWAY_PYTHON")
    if not python:
        print("NAIAD_PATHWAY_PYTHON is not set: nothing to compare (see this module's docstring)")
        return
    initial, updates = dd_wordcount.epochs_of_files(stdlib_text_files(limit=40), 10, 1, seed=1)
    edges, what = real_graph()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        dd_wordcount.run(initial, updates)
        ours = time.perf_counter() - t0
        theirs = _pathway(python, "wordcount", (initial, updates), Path(tmp))
        rows.append(["incremental word count, 11 epochs", f"{ours:.2f} s", f"{theirs:.2f} s",
                     f"{theirs / ours:.1f}x"])
        t0 = time.perf_counter()
        dd_components.run(edges, [])
        ours = time.perf_counter() - t0
        theirs = _pathway(python, "components", dd_components.symmetric(edges), Path(tmp))
        rows.append([f"connected components to a fixed point ({what})", f"{ours:.2f} s",
                     f"{theirs:.2f} s", f"{theirs / ours:.1f}x"])
    update_section("pathway", "Differential dataflow next to Pathway", COMMAND,
                   "One process, one worker each.\n\n"
                   + table(["computation", "naiad differential", "Pathway", "Pathway / naiad"],
                           rows))


if __name__ == "__main__":
    main()
