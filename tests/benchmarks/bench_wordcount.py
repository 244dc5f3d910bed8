"""Word count on 50 MB of real text: LINQ on 1 and 2 processes, collections.Counter, Bytewax.

The text is the standard library's ``.py`` sources (tests included, site-packages not),
concatenated in a fixed order and repeated until it reaches 50 MB, written once to a temporary
file.  Every contender counts ``str.split`` words and reads the file the same way: process ``i``
of ``n`` reads the ``i``-th byte range, cut at line boundaries (Hadoop's input splits).  Each
result is checked against the Counter's.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import List, Tuple

import naiad
from naiad.testing import free_ports
from tests.benchmarks.report import table, update_section

TARGET_BYTES = 50 * 1000 * 1000
DATA = Path(tempfile.gettempdir()) / "naiad-bench" / "stdlib-text-50mb.txt"
BATCH_LINES = 20_000           # bytewax source batch size


def text_file() -> Path:
    """The benchmark text, built on first use."""
    if DATA.exists() and DATA.stat().st_size >= TARGET_BYTES:
        return DATA
    root = os.path.dirname(os.__file__)
    paths = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        paths.extend(os.path.join(here, f) for f in sorted(files) if f.endswith(".py"))
    DATA.parent.mkdir(parents=True, exist_ok=True)
    tmp = DATA.with_suffix(".tmp")
    written = 0
    with open(tmp, "wb") as out:
        while written < TARGET_BYTES:
            for p in paths:
                with open(p, "rb") as f:
                    data = f.read()
                if not data.endswith(b"\n"):
                    data += b"\n"
                out.write(data)
                written += len(data)
                if written >= TARGET_BYTES:
                    break
    tmp.replace(DATA)
    return DATA


def _line_start_after(f, offset: int, size: int) -> int:
    """The first line beginning strictly after ``offset - 1``'s newline: the first position
    ``p > offset`` with a newline at ``p - 1`` (``size`` when there is none)."""
    if offset <= 0:
        return 0
    f.seek(offset)
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            return size
        i = chunk.find(b"\n")
        if i >= 0:
            return offset + i + 1
        offset += len(chunk)


def read_split(path: Path, index: int, count: int) -> List[str]:
    """The lines of byte range ``index`` of ``count``: those beginning in it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        begin = _line_start_after(f, index * size // count, size)
        end = size if index == count - 1 else _line_start_after(f, (index + 1) * size // count,
                                                                 size)
        f.seek(begin)
        data = f.read(end - begin)
    return data.decode("utf-8", "replace").splitlines()


# ---- contenders ------------------------------------------------------------------------------
def counter_baseline(path: Path) -> Tuple[float, Counter]:
    """Plain Python in one process: read the lines, one Counter over all their words (the
    loop over lines and words runs in C)."""
    t0 = time.perf_counter()
    counts = Counter(chain.from_iterable(map(str.split, read_split(path, 0, 1))))
    return time.perf_counter() - t0, counts


def counter_per_line(path: Path) -> Tuple[float, Counter]:
    """The same, written as most people would: ``counts.update(line.split())`` per line."""
    t0 = time.perf_counter()
    counts: Counter = Counter()
    update = counts.update
    for line in read_split(path, 0, 1):
        update(line.split())
    return time.perf_counter() - t0, counts


def _naiad_program(path: str):
    def program(comp):
        import linq  # noqa: F401
        t0 = time.perf_counter()
        inp = comp.new_input(name="lines")
        got = inp.stream.select_many(str.split).count().collect()
        comp.activate()
        inp.on_next(read_split(Path(path), comp.process_index, comp.processes))
        inp.on_completed()
        comp.join()
        return time.perf_counter() - t0, got.results.get(0, [])
    return program


def naiad_run(path: Path, processes: int) -> Tuple[float, float, Counter]:
    """(whole execute seconds, slowest process's program seconds, merged counts)."""
    t0 = time.perf_counter()
    parts = naiad.execute(_naiad_program(str(path)), processes=processes)
    whole = time.perf_counter() - t0
    counts: Counter = Counter()
    for _, pairs in parts:
        counts.update(dict(pairs))
    return whole, max(p[0] for p in parts), counts


def bytewax_flow(path: str, parts: int, outdir: str):
    """The same word count as a Bytewax dataflow (a factory for ``python -m bytewax.run``)."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class _Split(StatefulSourcePartition):
        def __init__(self, index):
            self.lines = read_split(Path(path), index, parts)
            self.pos = 0

        def next_batch(self):
            if self.pos >= len(self.lines):
                raise StopIteration()
            batch = self.lines[self.pos:self.pos + BATCH_LINES]
            self.pos += BATCH_LINES
            return batch

        def snapshot(self):
            return None

    class _Source(FixedPartitionedSource):
        def list_parts(self):
            return [str(i) for i in range(parts)]

        def build_part(self, step_id, for_part, resume_state):
            return _Split(int(for_part))

    class _Part(StatelessSinkPartition):
        def __init__(self, worker):
            self.worker = worker
            self.items = []

        def write_batch(self, items):
            self.items.extend(items)

        def close(self):
            with open(os.path.join(outdir, f"bytewax.{os.getpid()}.{self.worker}"), "wb") as f:
                pickle.dump(self.items, f)

    class _Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return _Part(worker_index)

    flow = Dataflow("wordcount")
    lines = op.input("lines", flow, _Source())
    words = op.flat_map_batch("split", lines, lambda batch: [w for ln in batch for w in ln.split()])
    counts = op.count_final("count", words, lambda w: w)
    op.output("out", counts, _Sink())
    return flow


def bytewax_run(path: Path, processes: int) -> Tuple[float, Counter]:
    """Bytewax: in this process for 1, as ``python -m bytewax.run`` processes for more."""
    outdir = tempfile.mkdtemp(prefix="bytewax-wc-")
    t0 = time.perf_counter()
    if processes == 1:
        from bytewax.testing import run_main
        run_main(bytewax_flow(str(path), 1, outdir))
    else:
        addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(processes))
        target = (f"tests.benchmarks.bench_wordcount:bytewax_flow({str(path)!r}, {processes}, "
                  f"{outdir!r})")
        root = Path(__file__).resolve().parents[2]
        procs = [subprocess.Popen([sys.executable, "-m", "bytewax.run", target, "-i", str(i),
                                   "-a", addresses], cwd=root)
                 for i in range(processes)]
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            msg = f"bytewax processes exited with {codes}"
            raise RuntimeError(msg)
    took = time.perf_counter() - t0
    counts: Counter = Counter()
    for name in os.listdir(outdir):
        with open(os.path.join(outdir, name), "rb") as f:
            counts.update(dict(pickle.load(f)))
        os.remove(os.path.join(outdir, name))
    os.rmdir(outdir)
    return took, counts


REPEAT = 3          # Counter and naiad runs: the median of 3 (bytewax, 10x slower: once)


def _median_run(fn):
    """``fn()`` returns (seconds, ..., result); the run of median seconds, each result checked
    equal to the first."""
    runs = sorted((fn() for _ in range(REPEAT)), key=lambda r: r[0])
    return runs[len(runs) // 2]


def main() -> None:
    path = text_file()
    size_mb = path.stat().st_size / 1e6
    base_s, want = _median_run(lambda: counter_baseline(path))
    words = sum(want.values())
    rows = [["`Counter(chain.from_iterable(map(str.split, lines)))`", 1, f"{base_s:.2f}", "",
             "1.00x", "(baseline)"]]
    line_s, got = _median_run(lambda: counter_per_line(path))
    rows.append(["`Counter.update(line.split())` per line", 1, f"{line_s:.2f}", "",
                 f"{base_s / line_s:.2f}x", "equal" if got == want else "DIFFERENT"])
    for p in (1, 2):
        whole, inner, got = _median_run(lambda: naiad_run(path, p))
        ok = "equal" if got == want else "DIFFERENT"
        rows.append([f"naiad LINQ `select_many(str.split).count()`", p, f"{whole:.2f}",
                     f"{inner:.2f}", f"{base_s / whole:.2f}x", ok])
    try:
        import bytewax  # noqa: F401
        have_bytewax = True
    except ImportError:
        have_bytewax = False
    if have_bytewax:
        from importlib.metadata import version
        for p in (1, 2):
            took, got = bytewax_run(path, p)
            ok = "equal" if got == want else "DIFFERENT"
            rows.append([f"bytewax {version('bytewax')} `flat_map_batch` + `count_final`", p,
                         f"{took:.2f}", "", f"{base_s / took:.2f}x", ok])
    body = table(["implementation", "processes", "seconds", "in program", "speed vs Counter",
                  "counts"], rows)
    body += (f"\n\n{size_mb:.1f} MB of the standard library's sources, {words:,} words, "
             f"{len(want):,} distinct. One worker per process; Counter and naiad figures are "
             f"the median of {REPEAT} runs. *seconds* is wall time of the "
             "whole run (starting processes included); *in program* is naiad's time from "
             "building the dataflow to `join()` in the slowest process, reading included. "
             "Each process reads its own byte range of the file.")
    if not have_bytewax:
        body += "\n\nBytewax is not installed (`pip install bytewax`), so it was not measured."
    update_section("wordcount", "Word count, 50 MB: LINQ vs Counter vs Bytewax",
                   "python -m tests.benchmarks wordcount", body)


if __name__ == "__main__":
    main()
