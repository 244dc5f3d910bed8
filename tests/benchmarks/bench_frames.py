"""Columnar frames: PageRank, word count, tables on the wire and Spark, each against baselines
measured in the same run.

* ``pagerank``: samples/frames_pagerank.py, 10 iterations, 2 processes, on the Debian package
  graph (the standard library's import graph where apt-cache is missing; WordNet is not
  available offline) and on RMAT scale 16, against a scipy.sparse power iteration (matrix
  construction included) and the dict loop of samples/pagerank.py.
* ``wordcount``: 50 MB of the standard library's sources (the file of bench_wordcount), counted
  by frames at 1 process, against ``collections.Counter``.
* ``wire``: a table through the wire codec (Arrow IPC, out-of-band buffers) against the same
  rows pickled as tuples.

PageRank from a Spark DataFrame with ``frames=True`` is ``bench_frames_spark.py``.

    python -m tests.benchmarks frames                       # all three
    python -m tests.benchmarks.bench_frames pagerank wire   # some
"""

from __future__ import annotations

import os
import pickle
import statistics
import sys
import time
from collections import Counter
from itertools import chain
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import naiad
from linq.words import WIDE_SPACES
from linq import frames
from naiad.transport.wire import decode, encode
from samples import frames_pagerank as fpr
from samples.graphs import rmat_edges
from samples.pagerank import power_iteration as dict_power_iteration
from tests.benchmarks.report import table, update_section

ITERATIONS = 10
SCALE = 16
PIECES = 64                # 64 KB pieces of text per table in the word count


def _median(fn: Callable[[], float], repeat: int) -> Tuple[float, List[float]]:
    runs = [fn() for _ in range(repeat)]
    return statistics.median(runs), runs


# ---- PageRank ----------------------------------------------------------------------------------
def _pagerank_program(src: np.ndarray, dst: np.ndarray, nodes: int, iterations: int):
    """samples.frames_pagerank.program after a warm-up of pyarrow's lazy first-use
    initialisation (it imports pandas: a per-process cost, like the interpreter's start)."""
    inner = fpr.program(src, dst, nodes, iterations)

    def run(comp):
        pa.array(np.zeros(1))
        start = time.perf_counter()
        timings, ids, ranks = inner(comp)
        return dict(timings, start=start, end=time.perf_counter()), ids, ranks
    return run


def _frames_pagerank(edges: np.ndarray, nodes: int, processes: int
                     ) -> Tuple[Dict[str, float], np.ndarray]:
    """The timings, and the ranks.  perf_counter is the machine's monotonic clock, the same in
    every process.  ``program`` runs from the start of the last process to start its program
    to the end of the last one: the processes start at different times (up to 0.3 s apart here
    under load), and the first one waits in ``activate`` for the others.  ``iterations`` runs
    from the moment the last process has fed its inputs to the moment the last one has its
    ranks: the processes return from ``activate`` 0-7 ms apart under load (the handshake's
    last message reaches one after the other), and until the later one has fed, the dataflow
    cannot complete anything.  ``own`` is the former measure, each process from its own feed
    to its own ranks, the slowest process's (it counts the wait for the other's feed)."""
    parts = naiad.execute(_pagerank_program(edges[:, 0].copy(), edges[:, 1].copy(), nodes,
                                            ITERATIONS), processes=processes)
    timings = {"setup": max(p[0]["setup"] for p in parts),
               "own": max(p[0]["iterations"] for p in parts),
               "iterations": (max(p[0]["done_at"] for p in parts)
                              - max(p[0]["fed_at"] for p in parts))}
    timings["program"] = max(p[0]["end"] for p in parts) - max(p[0]["start"] for p in parts)
    return timings, fpr.gather(parts, nodes)


def _scipy(edges: np.ndarray, nodes: int) -> Tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    ranks = fpr.power_iteration(edges, nodes, ITERATIONS)
    return time.perf_counter() - t0, ranks


def _dict_adjacency(edges: Sequence[Tuple[int, int]], nodes: int) -> Dict[int, tuple]:
    """The dict loop's own input, built from the edge list the plainest fast way: each node's
    out-neighbours in edge order, as tuples (the dict loop runs faster over tuples than over
    lists), every node present.  The same dicts as ``samples.graphs.adjacency(edges,
    range(nodes))``, without its sort of arbitrary node labels (these are ``0 .. nodes-1``),
    so that the baseline is not slowed by work a plain program would not do."""
    lists: Dict[int, list] = {u: [] for u in range(nodes)}
    for u, v in edges:
        lists[u].append(v)
    return {u: tuple(vs) for u, vs in lists.items()}


def pagerank_rows(name: str, labelled: Sequence[Tuple[object, object]], repeat: int) -> list:
    edges_list, labels = fpr.numbered(labelled)
    nodes = len(labels)
    edges = np.asarray(edges_list, np.int64)
    want = _scipy(edges, nodes)[1]
    runs: List[Dict[str, float]] = []
    runs_scipy: List[float] = []
    runs_dict: List[float] = []
    runs_build: List[float] = []
    ranks = np.zeros(0)
    dict_ranks: Dict[int, float] = {}
    for _ in range(repeat):           # the three alternate, so that each sees the same load
        runs_scipy.append(_scipy(edges, nodes)[0])
        t0 = time.perf_counter()
        adj = _dict_adjacency(edges_list, nodes)
        t1 = time.perf_counter()
        dict_ranks = dict_power_iteration(adj, ITERATIONS)
        runs_dict.append(time.perf_counter() - t1)
        runs_build.append(t1 - t0)
        del adj
        timings, ranks = _frames_pagerank(edges, nodes, 2)
        runs.append(timings)
    scipy_s, dict_s = statistics.median(runs_scipy), statistics.median(runs_dict)
    whole_dict = [b + d for b, d in zip(runs_build, runs_dict)]
    dict_program_s = statistics.median(whole_dict)
    err = float(np.max(np.abs(ranks - want)))
    err_dict = max(abs(dict_ranks[u] - want[u]) for u in range(nodes))
    iterations_s = statistics.median(r["iterations"] for r in runs)
    program_s = statistics.median(r["program"] for r in runs)
    rows = [
        [name, "scipy.sparse power iteration (matrix built from the edge arrays)", "1",
         f"{scipy_s * 1000:.0f}", "", f"runs {', '.join(f'{t * 1000:.0f}' for t in runs_scipy)}"],
        [name, "dict loop (samples.pagerank.power_iteration), its adjacency built beforehand",
         "1", f"{dict_s * 1000:.0f}", f"frames' dataflow {dict_s / iterations_s:.1f}x faster",
         f"runs {', '.join(f'{t * 1000:.0f}' for t in runs_dict)}; max diff {err_dict:.1e}"],
        [name, "dict program: the adjacency built from the edge list, then the dict loop", "1",
         f"{dict_program_s * 1000:.0f}",
         f"frames' whole program {dict_program_s / program_s:.1f}x faster",
         f"building {statistics.median(runs_build) * 1000:.0f} (runs "
         f"{', '.join(f'{t * 1000:.0f}' for t in runs_build)})"],
    ]
    own = statistics.median(r["own"] for r in runs)
    for key, what in (("iterations", "inputs fed -> ranks delivered"),
                      ("program", "whole program: start -> join")):
        t = statistics.median(r[key] for r in runs)
        own_runs = ", ".join(f"{r['own'] * 1000:.0f}" for r in runs)
        if key == "iterations":
            ratios = f"**{t / scipy_s:.1f}x scipy's time**; {dict_s / t:.1f}x faster than dicts"
            note = (f"; each process from its own feed: {own * 1000:.0f} ({own / scipy_s:.1f}x "
                    f"scipy, {dict_s / own:.1f}x faster than dicts; runs {own_runs})")
        else:
            ratios = (f"**{t / scipy_s:.1f}x scipy's time**; {dict_program_s / t:.1f}x faster "
                      f"than the dict program ({dict_s / t:.1f}x the dict loop alone)")
            note = f"; max diff from scipy {err:.1e}"
        rows.append([name, f"**frames**, {what}", "2", f"{t * 1000:.0f}", ratios,
                     f"runs {', '.join(f'{r[key] * 1000:.0f}' for r in runs)}" + note])
    return rows


def bench_pagerank(repeat: int = 9) -> None:
    from samples.debian import real_graph
    labelled, what = real_graph()
    load = [os.getloadavg()[0]]
    rows = pagerank_rows(what.split(" (")[0], labelled, repeat)
    load.append(os.getloadavg()[0])
    rows += pagerank_rows(f"RMAT scale {SCALE}", rmat_edges(SCALE, seed=1), repeat)
    load.append(os.getloadavg()[0])
    body = table(["graph", "implementation", "processes", "ms", "ratios", "notes"], rows)
    body += ("\n\nLoad average (1 min) of the shared 2-core machine at the start, between the "
             f"graphs and at the end: {', '.join(f'{x:.1f}' for x in load)}.")
    body += (f"\n\n{what}; RMAT scale {SCALE}: 65,536 nodes, 1,048,576 edges (duplicates "
             f"kept). {ITERATIONS} iterations. Frames: samples.frames_pagerank (each process feeds the "
             "edges whose src its own workers own and the ranks of its own nodes, by "
             "frames.share, so no edge crosses processes and the first split recalls the rows' workers; per iteration FrameStream.spread "
             "along the entered edges, then a map_batches for the damping), "
             f"2 processes x 1 worker, medians of {repeat}: from the moment the last process "
             "has fed its inputs to the moment the last one has its ranks delivered to a "
             "subscriber (the dataflow's work: indexing the edges, the iterations; the "
             "processes return from activate 0-7 ms apart under load, and the dataflow cannot "
             "complete anything before the later one has fed; the notes give the former "
             "measure too, each process from its own feed, the slowest), and the whole "
             "program (its share of the edges and nodes, the graph, activate, "
             "the iterations, and join's shutdown protocol), from the moment the last process "
             "started its program to the end of the last; process start-up (and the skew "
             "between the processes' starts) and pyarrow's "
             "first-use initialisation (it imports pandas, 0.3-0.5 s here) are excluded as "
             "launch costs. The processes connect to each other (rendezvous, CURVE handshakes, "
             "hello) on a thread from their start, overlapping their imports and the program's "
             "first steps, so activate only compares the graphs' fingerprints: the "
             "connection's waits and part of its CPU time fall before the program starts "
             "(docs/launch.md). scipy: median of "
             f"{repeat}, CSR matrix construction included. Dicts: the adjacency (a dict of "
             "out-neighbour tuples) is built from the edge list, then the loop runs; both are "
             f"timed, medians of {repeat}. Like is compared with like: the dataflow's time with "
             "the dict loop's (neither counts building its structures), the whole program with "
             "the dict program (both start from the edges in memory, as scipy does with its "
             "matrix); the whole program against the dict loop alone is given too. Each round "
             "runs scipy, the dicts and frames in turn. Goals: within 5x of scipy, at least 10x "
             "faster than the dict loop.")
    update_section("frames-pagerank", "Frames: PageRank vs scipy.sparse and the dict loop",
                   "python -m tests.benchmarks frames", body)


# ---- word count --------------------------------------------------------------------------------
# str.split() splits on the information separators \x1c-\x1f and on the whitespace above ASCII
# (linq.words.WIDE_SPACES: str.isspace is true for them); ascii_split_whitespace splits only on
# \t \n \v \f \r and space, and leaves every other byte, those of multi-byte UTF-8 characters
# included, inside the words; utf8_split_whitespace splits on exactly what str.isspace accepts.
# So the ASCII kernel splits a piece exactly as str.split() does unless the piece holds one of
# those characters.
_SEPARATORS = b"\x1c\x1d\x1e\x1f"
_WIDE = frozenset(c.encode("utf-8") for c in WIDE_SPACES)
_LEADS = sorted({w[0] for w in _WIDE})


def text_table(data: bytes, size: int = 1 << 16) -> pa.Table:
    r"""The bytes ``data`` as a table ``(text, plain)`` of pieces of about ``size`` bytes cut at
    line ends, ``text`` an Arrow string array built on the bytes themselves (no Python string
    per piece; pieces that are not valid UTF-8 are decoded with replacement characters, as
    ``bytes.decode(errors="replace")``), ``plain`` true for the pieces that the ASCII kernel
    splits exactly as ``str.split()``: without the separators \x1c-\x1f (found by
    ``bytes.find``, at memchr speed) and without whitespace above ASCII (its UTF-8 sequences,
    looked for where numpy finds the bytes that can start one)."""
    ends, start = [0], 0
    while start < len(data):
        end = data.find(b"\n", min(start + size, len(data)))
        start = len(data) if end < 0 else end + 1
        ends.append(start)
    bounds = np.asarray(ends, np.int64)
    plain = np.ones(len(ends) - 1, bool)
    for byte in _SEPARATORS:
        at = data.find(bytes([byte]))
        while at >= 0:
            piece = int(np.searchsorted(bounds, at, "right")) - 1
            plain[piece] = False
            at = data.find(bytes([byte]), ends[piece + 1])
    raw = np.frombuffer(data, np.uint8)
    high = np.flatnonzero(raw >= min(_LEADS))
    wide = [at for at in high[np.isin(raw[high], _LEADS)].tolist()
            if data[at:at + 2] in _WIDE or data[at:at + 3] in _WIDE]
    plain[np.searchsorted(bounds, np.asarray(wide, np.int64), "right") - 1] = False
    array = _strings(data, bounds)
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        array = _replaced(data, ends, array)
    return pa.table({"text": array, "plain": plain})


def _strings(data: bytes, bounds: np.ndarray) -> pa.StringArray:
    offsets = pa.array(bounds.astype(np.int32))
    return pa.StringArray.from_buffers(len(bounds) - 1, offsets.buffers()[1], pa.py_buffer(data))


def _replaced(data: bytes, ends: List[int], array: pa.StringArray) -> pa.StringArray:
    """``array`` with its pieces that are not valid UTF-8 decoded with replacement characters
    (found by validating each piece in C; the others are copied as they are)."""
    out, bounds, at = [], [0], 0
    view = memoryview(data)
    for i in range(len(array)):
        a, b = ends[i], ends[i + 1]
        try:
            array.slice(i, 1).validate(full=True)
            piece = view[a:b]
        except pa.ArrowInvalid:
            piece = data[a:b].decode("utf-8", "replace").encode("utf-8")
        out.append(piece)
        at += len(piece)
        bounds.append(at)
    return _strings(b"".join(out), np.asarray(bounds, np.int64))


def split_pieces(t: pa.Table) -> pa.Table:
    r"""The words of the ``text`` column as ``str.split()`` finds them, and the empty strings the
    kernels leave where a piece starts or ends with whitespace: the ``plain`` pieces (see
    :func:`text_table`) are split by the (faster) ASCII kernel, the others by the Unicode one."""
    text, plain = t["text"], t["plain"]
    parts = [pc.list_flatten(pc.ascii_split_whitespace(text.filter(plain))),
             pc.list_flatten(pc.utf8_split_whitespace(text.filter(pc.invert(plain))))]
    return pa.table({"word": pa.chunked_array([c for p in parts for c in p.chunks], pa.string())})


def split_words(t: pa.Table) -> pa.Table:
    """The words of the ``text`` column exactly as ``str.split()`` finds them."""
    words = split_pieces(t)["word"]
    return pa.table({"word": words.filter(pc.not_equal(words, ""))})


def _not_empty(t: pa.Table) -> pa.Array:
    return pc.not_equal(t["word"], "")


def _wordcount_program(path: str):
    def run(comp):
        pa.array(np.zeros(1))          # pyarrow's first-use initialisation, as for PageRank
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            text = text_table(f.read())
        inp = comp.new_input()
        # The empty strings are counted with the words and their one row dropped at the end:
        # cheaper than filtering 4.5 M words.
        got = frames.of(inp.stream).map_batches(split_pieces).group_by(
            "word", n=("word", "count")).filter(_not_empty).collect()
        comp.activate()
        p, n = comp.process_index, comp.processes
        inp.on_next([text.slice(i, PIECES) for i in range(p * PIECES, text.num_rows, PIECES * n)])
        inp.on_completed()
        comp.join()
        seconds = time.perf_counter() - t0
        out = pa.concat_tables(got.results.get(0, []))
        return seconds, dict(zip(out["word"].to_pylist(), out["n"].to_pylist()))
    return run


def bench_wordcount(repeat: int = 3) -> None:
    from tests.benchmarks.bench_wordcount import text_file
    path = text_file()

    def counter() -> float:
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        got["counter"] = Counter(chain.from_iterable(map(str.split, text.splitlines())))
        return time.perf_counter() - t0
    got: dict = {}
    base, base_runs = _median(counter, repeat)

    rows = [["collections.Counter over str.split (reading included)", "1 x 1", f"{base:.2f}",
             "1.0x", ", ".join(f"{t:.2f}" for t in base_runs)]]
    same = True
    for workers in (1, 2):
        def naiad_frames() -> float:
            parts = naiad.execute(_wordcount_program(str(path)), workers=workers)
            got["frames"] = parts[0][1]
            return parts[0][0]
        fr, fr_runs = _median(naiad_frames, repeat)
        same = same and got["frames"] == dict(got["counter"])
        rows.append([f"**frames**: split kernels + group_by count (reading included)",
                     f"1 x {workers}", f"{fr:.2f}", f"**{base / fr:.1f}x**",
                     ", ".join(f"{t:.2f}" for t in fr_runs)])
    body = table(["implementation", "processes x workers", "seconds", "speed", "runs"], rows)
    body += (f"\n\n50 MB of the standard library's .py sources (bench_wordcount's file), one "
             f"epoch, medians of {repeat}. The frames program reads the file into an Arrow "
             "string array of 64 KB pieces cut at line ends (built on the bytes read, without a "
             "Python string per piece; small pieces are more often pure ASCII), 64 pieces per "
             "table (the 3 pieces that are not UTF-8 decoded with replacement characters), "
             "splits the pieces without the separators \\x1c-\\x1f and without whitespace above "
             "ASCII with ascii_split_whitespace (multi-byte characters stay inside the words, so "
             "that is exactly str.split) and the others with utf8_split_whitespace (which "
             "splits where str.isspace is true), counts with group_by and drops the empty "
             "strings the kernels leave at the pieces' ends (one row); its time runs from the "
             "program's start to join. "
             "With 2 workers the kernels of the two worker threads run in parallel (Arrow "
             "releases the GIL). Counts equal the Counter's: "
             f"{'yes' if same else 'NO'}. Goal: at least 2x Counter.")
    update_section("frames-wordcount", "Frames: word count over 50 MB vs collections.Counter",
                   "python -m tests.benchmarks frames", body)


# ---- tables on the wire ------------------------------------------------------------------------
def bench_wire(repeat: int = 5) -> None:
    rows = []
    rng = np.random.default_rng(0)
    for n in (10_000, 1_000_000):
        t = pa.table({"node": np.arange(n), "rank": rng.random(n),
                      "name": pa.array([f"n{i}" for i in range(n)])})
        tuples = list(zip(*(c.to_pylist() for c in t.columns)))
        items = [("D", 3, (0, (1,)), [(1, t)])]
        tuple_items = [("D", 3, (0, (1,)), tuples)]

        def frames_trip() -> float:
            t0 = time.perf_counter()
            payload, buffers = encode(items)
            decode(payload, [memoryview(b) for b in buffers])
            return time.perf_counter() - t0

        def tuples_trip() -> float:
            t0 = time.perf_counter()
            pickle.loads(pickle.dumps(tuple_items, protocol=5))
            return time.perf_counter() - t0
        base, _ = _median(tuples_trip, repeat)
        fast, _ = _median(frames_trip, repeat)
        payload, buffers = encode(items)
        size = len(payload) + sum(b.raw().nbytes for b in buffers)
        rows.append([f"{n:,}", f"{base * 1000:.2f}", f"{fast * 1000:.2f}",
                     f"**{base / fast:.0f}x**",
                     f"{len(pickle.dumps(tuple_items, protocol=5)) / 1e6:.1f} / {size / 1e6:.1f}"])
    body = table(["rows (int64, float64, string)", "pickled tuples ms", "table ms (IPC, "
                  "out of band)", "speed", "MB tuples / table"], rows)
    body += (f"\n\nEncode plus decode of one step's items, median of {repeat}: the rows as "
             "pickled tuples against the table through naiad.transport.wire (Arrow IPC in an "
             "out-of-band pickle buffer, sent as its own ZeroMQ frame; decoding points into it).")
    update_section("frames-wire", "Frames: tables on the wire vs pickled tuples",
                   "python -m tests.benchmarks frames", body)


def main(argv: Sequence[str] = ()) -> None:
    argv = list(argv) if argv else sys.argv[1:] if __name__ == "__main__" else []
    chosen = argv or ["wire", "pagerank", "wordcount"]
    for name in chosen:
        {"pagerank": bench_pagerank, "wordcount": bench_wordcount, "wire": bench_wire}[name]()


if __name__ == "__main__":
    main()
