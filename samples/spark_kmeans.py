"""k-means on a Spark DataFrame of points: Spark makes the points, the iterations run here.

Spark generates points around a few centres (``spark.range`` and ``randn``); the k-means of
:mod:`samples.kmeans` (Lloyd's algorithm as an ``iterate`` over LINQ operators) runs as a timely
dataflow inside one Spark barrier stage, each process over the points of its own partition;
the centroids come back as a DataFrame, and Spark assigns every point to its nearest centroid
and counts the clusters.  The result is checked against plain Lloyd iterations.

    python -m samples.spark_kmeans                   # 20,000 points, k = 6, 2 processes
    python -m samples.spark_kmeans --points 100000 -k 8 -i 15
"""

from __future__ import annotations

import random
import sys
import time
from typing import List, Optional, Sequence, Tuple

import naiad
from samples.kmeans import kmeans, lloyd
from samples._options import max_difference, naiad_sample, positive, sample_parser

__all__ = ["KMeansProgram", "points_frame", "main"]


class KMeansProgram:
    """``program(comp, rows)`` for :func:`naiad.spark.execute`: ``rows`` are ``(x, y, ...)``
    points; ``centroids`` the initial ones (supplied by process 0).  Returns
    ``(cluster, x, y, ...)`` rows, one per centroid, from the processes that own them."""

    def __init__(self, centroids: Sequence[Tuple[float, ...]], iterations: int,
                 shards: int = 16):
        self.centroids = [tuple(c) for c in centroids]
        self.iterations = iterations
        self.shards = shards

    def __call__(self, comp: naiad.Computation, rows) -> List[tuple]:
        inp = comp.new_input(name="points")
        got = kmeans(inp.stream, self.iterations, self.shards).collect()
        comp.activate()
        first, step, shards = comp.process_index, comp.processes, self.shards
        mine = [("p", (first + i * step) % shards, tuple(p)) for i, p in enumerate(rows)]
        if comp.process_index == 0:
            mine += [("c", cid, c) for cid, c in enumerate(self.centroids)]
        inp.on_next(mine)
        inp.on_completed()
        comp.join()
        return [(cid,) + tuple(c) for cid, c in got.records()]


def points_frame(spark, n: int, centres: int, seed: int = 1, partitions: int = 2):
    """A DataFrame ``id long, x double, y double`` of ``n`` points scattered (Gaussian, sd 1)
    around ``centres`` random centres in [0, 20)^2."""
    from pyspark.sql import functions as F
    rng = random.Random(seed)
    mids = spark.createDataFrame([(i, rng.uniform(0, 20), rng.uniform(0, 20))
                                  for i in range(centres)], "centre long, cx double, cy double")
    return (spark.range(0, n, numPartitions=partitions)
            .withColumn("centre", F.col("id") % centres)
            .join(F.broadcast(mids), "centre")
            .select("id", (F.col("cx") + F.randn(seed)).alias("x"),
                    (F.col("cy") + F.randn(seed + 1)).alias("y"))
            .repartition(partitions))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = sample_parser("spark_kmeans", __doc__)
    parser.add_argument("--points", type=positive, default=20_000)
    parser.add_argument("-k", type=positive, default=6)
    parser.add_argument("-i", "--iterations", type=positive, default=10)
    parser.add_argument("-n", "--processes", type=positive, default=2)
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    import naiad.spark
    from pyspark.sql import functions as F

    spark = naiad.spark.local_session(args.master, processes=args.processes)
    points = points_frame(spark, args.points, args.k, partitions=args.processes).cache()
    # The initial centroids: the k points of least id (a small query; the data stays in Spark).
    first = [(r.x, r.y) for r in points.orderBy("id").limit(args.k).collect()]
    print(f"k-means of {args.points} points made by Spark, k={args.k}, {args.iterations} "
          f"iterations, {args.processes} processes in one Spark barrier stage", flush=True)
    t0 = time.perf_counter()
    centroids = naiad.spark.execute(points.select("x", "y"),
                                    KMeansProgram(first, args.iterations),
                                    processes=args.processes,
                                    schema="cluster int, cx double, cy double")
    took = time.perf_counter() - t0
    # Back in Spark: each point's nearest centroid, and the size of every cluster.
    distance = (F.col("x") - F.col("cx")) ** 2 + (F.col("y") - F.col("cy")) ** 2
    nearest = (points.crossJoin(F.broadcast(centroids)).withColumn("d", distance)
               .groupBy("id").agg(F.min_by("cluster", "d").alias("cluster")))
    sizes = nearest.groupBy("cluster").count()
    print(f"The computation took {took:.2f} s. The centroids, with their cluster sizes "
          "counted by Spark:")
    centroids.join(sizes, "cluster").orderBy("cluster").show()
    ordered = [(r.x, r.y) for r in points.orderBy("id").select("x", "y").collect()]
    want = lloyd(ordered, args.k, args.iterations)
    got = {r.cluster: (r.cx, r.cy) for r in centroids.collect()}
    err = max_difference(abs(a - b) for cid in want for a, b in zip(got[cid], want[cid]))
    print(f"Checked against plain Lloyd iterations: max difference {err:.1e}")
    print(f"Total time {time.perf_counter() - start:.1f} s (Spark start-up included)")
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(naiad_sample("spark_kmeans"))
