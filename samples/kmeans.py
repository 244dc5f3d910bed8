"""k-means (Lloyd's algorithm) as an iterate over LINQ operators.

The loop carries two kinds of record: points ``("p", shard, point)`` and centroids
``("c", cid, centroid)``.  One iteration:

1. every centroid is copied to each of the ``shards`` point shards (``select_many``);
2. ``cogroup_by`` shard meets a shard's points with all centroids: each point goes to its
   nearest centroid (ties to the lower id), and the shard emits per centroid a partial sum
   ``("s", cid, (coordinate sums, count, fallback))``; the points pass through unchanged;
3. ``aggregate`` by centroid id adds the partial sums (combining locally before the exchange),
   and each centroid moves to the mean of its points (it stays put if it has none).

:func:`lloyd` is the same algorithm in plain Python, the oracle.

    python -m samples.kmeans                         # 20,000 points around 8 centres
    python -m samples.kmeans --points 100000 -k 16 -t 2

>>> from naiad.testing import run
>>> pts = [(0.0, 0.0), (10.0, 10.0), (0.0, 1.0), (10.0, 11.0)]
>>> run(lambda comp, s: kmeans(s, iterations=3, shards=2), [records(pts, k=2, shards=2)])
{0: [(0, (0.0, 0.5)), (1, (10.0, 10.5))]}
"""

from __future__ import annotations

import random
import sys
import time
from typing import Dict, Iterable, List, Sequence, Tuple

import linq  # noqa: F401 - installs the Stream methods
import naiad
from samples._options import max_difference, naiad_sample, positive, sample_parser
from naiad.graph import Stream
from naiad.testing import shard as share_of

__all__ = ["kmeans", "records", "lloyd", "blobs", "program", "run_kmeans", "main"]

Point = Tuple[float, ...]


def records(points: Sequence[Point], k: int, shards: int = 16, first: bool = True) -> List[tuple]:
    """Loop records for ``points``: each point tagged with a shard, and (when ``first``) the
    initial centroids, the first ``k`` points."""
    out: List[tuple] = [("p", i % shards, tuple(p)) for i, p in enumerate(points)]
    if first:
        out.extend(("c", cid, tuple(points[cid])) for cid in range(k))
    return out


def _nearest(p: Point, centroids: List[tuple]) -> int:
    best, best_d = -1, 0.0
    for cid, c in centroids:
        d = 0.0
        for a, b in zip(p, c):
            d += (a - b) * (a - b)
        if best < 0 or d < best_d:
            best, best_d = cid, d
    return best


def _assign(shard: int, points: list, centroids: list) -> list:
    """A shard's points with every centroid: the points, and a partial sum per centroid."""
    cents = sorted((cid, c) for _, cid, c in centroids)
    if not cents:
        return points
    dim = len(cents[0][1])
    sums: Dict[int, list] = {}
    for _, _, p in points:
        cid = _nearest(p, cents)
        acc = sums.get(cid)
        if acc is None:
            acc = sums[cid] = [0.0] * dim + [0]
        for i in range(dim):
            acc[i] += p[i]
        acc[dim] += 1
    out = list(points)
    for cid, c in cents:
        acc = sums.get(cid)
        if acc is not None or shard == 0:     # shard 0 keeps every centroid alive
            acc = acc or [0.0] * dim + [0]
            out.append(("s", cid, (tuple(acc[:dim]), acc[dim], c if shard == 0 else None)))
    return out


def _merge(a: tuple, b: tuple) -> tuple:
    return (tuple(x + y for x, y in zip(a[0], b[0])), a[1] + b[1],
            a[2] if a[2] is not None else b[2])


def _move(kv: tuple) -> tuple:
    cid, (sums, n, old) = kv
    return ("c", cid, tuple(x / n for x in sums) if n else old)


def kmeans(loop_records: Stream, iterations: int, shards: int = 16) -> Stream:
    """``(cid, centroid)`` after ``iterations`` steps of Lloyd's algorithm over
    :func:`records`-shaped input."""
    def step(s: Stream) -> Stream:
        points = s.where(lambda r: r[0] == "p")
        cents = (s.where(lambda r: r[0] == "c")
                 .select_many(lambda c: [(sh, c[1], c[2]) for sh in range(shards)]))
        assigned = points.cogroup_by(cents, lambda p: p[1], lambda c: c[0], _assign)
        moved = (assigned.where(lambda r: r[0] == "s")
                 .aggregate(lambda r: r[1], lambda r: r[2], _merge)
                 .select(_move))
        return assigned.where(lambda r: r[0] == "p").concat(moved)
    return (loop_records.iterate(step, iterations)
            .where(lambda r: r[0] == "c").select(lambda r: (r[1], r[2])))


def lloyd(points: Sequence[Point], k: int, iterations: int) -> Dict[int, Point]:
    """The oracle: Lloyd's algorithm from the first ``k`` points, in plain Python."""
    cents = {cid: tuple(points[cid]) for cid in range(k)}
    dim = len(points[0])
    for _ in range(iterations):
        order = sorted(cents.items())
        sums = {cid: [0.0] * dim + [0] for cid in cents}
        for p in points:
            acc = sums[_nearest(p, order)]
            for i in range(dim):
                acc[i] += p[i]
            acc[dim] += 1
        cents = {cid: tuple(x / acc[dim] for x in acc[:dim]) if acc[dim] else cents[cid]
                 for cid, acc in sums.items()}
    return cents


def blobs(n: int, centres: int, dim: int = 2, seed: int = 0) -> List[Point]:
    """``n`` points scattered (Gaussian, sd 1) around ``centres`` random centres in [0, 20)^dim."""
    rng = random.Random(seed)
    mids = [[rng.uniform(0, 20) for _ in range(dim)] for _ in range(centres)]
    return [tuple(rng.gauss(m, 1.0) for m in mids[rng.randrange(centres)]) for _ in range(n)]


def program(points: Sequence[Point], k: int, iterations: int, shards: int = 16):
    """A program for ``naiad.execute``: each process supplies its share of the points; the
    first process also supplies the initial centroids."""
    def run(comp: naiad.Computation) -> List[tuple]:
        inp = comp.new_input(name="points")
        got = kmeans(inp.stream, iterations, shards).collect()
        comp.activate()
        mine = share_of(records(points, k, shards, first=False), comp.process_index,
                        comp.processes)
        if comp.process_index == 0:
            mine += [("c", cid, tuple(points[cid])) for cid in range(k)]
        inp.on_next(mine)
        inp.on_completed()
        comp.join()
        return got.results.get(0, [])
    return run


def run_kmeans(points: Sequence[Point], k: int, iterations: int, processes: int = 1,
               workers: int = 1) -> Dict[int, Point]:
    parts = naiad.execute(program(points, k, iterations), processes=processes, workers=workers)
    return {cid: c for part in parts for cid, c in part}


def main(argv: Iterable[str] = None) -> int:
    parser = sample_parser("kmeans", __doc__)
    parser.add_argument("--points", type=positive, default=20_000)
    parser.add_argument("-k", type=positive, default=8)
    parser.add_argument("-i", "--iterations", type=positive, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", "--processes", type=positive, default=1)
    parser.add_argument("-t", "--workers", type=positive, default=1)
    args = parser.parse_args(argv)
    if args.k > args.points:
        parser.error(f"-k {args.k} is more clusters than --points {args.points}")
    points = blobs(args.points, args.k, seed=args.seed)
    t0 = time.perf_counter()
    got = run_kmeans(points, args.k, args.iterations, args.processes, args.workers)
    took = time.perf_counter() - t0
    want = lloyd(points, args.k, args.iterations)
    err = max_difference(abs(a - b) for cid in want for a, b in zip(got[cid], want[cid]))
    print(f"k-means, {args.points} points, k={args.k}, {args.iterations} iterations, "
          f"{args.processes} process(es) x {args.workers} worker(s): {took:.2f} s; "
          f"max difference from plain Lloyd {err:.1e}")
    for cid, c in sorted(got.items()):
        print(f"  {cid}: ({', '.join(f'{x:.3f}' for x in c)})")
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("kmeans"))
