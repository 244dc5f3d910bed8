"""A Spark driver whose barrier stage stalls once, for tests/test_spark_cluster.py.

``python -m tests.spark_cluster_programs --master spark://... --pid-dir DIR`` runs PageRank (the
main sample's dataflow) through ``naiad.spark.execute`` with 2 processes.  In the stage's first
attempt, process 0 writes its pid (the executor's Python worker) to ``DIR/pid`` after the
third iteration and then sleeps, in the middle of the computation, until the test kills it;
the attempt that Spark runs next finds the file and goes through.  The driver prints
``RESULT OK`` when the ranks equal a plain power iteration's, and logs Spark's DAG scheduler at INFO.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import naiad
import naiad.spark
from samples.graphs import adjacency
from samples.main import pagerank
from samples.pagerank import power_iteration

ITERATIONS = 8
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.dag.name = org.apache.spark.scheduler.DAGScheduler
logger.dag.level = info
"""
STALL_AFTER = 3


def edges(nodes: int = 300, count: int = 1500, seed: int = 7) -> List[Tuple[int, int]]:
    """A seeded random directed graph."""
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(count)]


class StallOnce:
    """PageRank whose process 0 stalls after an iteration, in the stage's first attempt only."""

    def __init__(self, pid_dir: str) -> None:
        self.pid_dir = pid_dir

    def stall(self, iteration: int, change: float) -> None:
        marker = Path(self.pid_dir) / "pid"
        if iteration == STALL_AFTER and not marker.exists():
            tmp = marker.with_suffix(".tmp")
            tmp.write_text(str(os.getpid()))
            tmp.rename(marker)
            time.sleep(600)   # the test kills this process long before

    def __call__(self, comp: naiad.Computation, rows) -> list:
        inp = comp.new_input(name="edges")
        got = pagerank(inp.stream, ITERATIONS, on_iteration=self.stall).collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return got.records()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.spark_cluster_programs")
    parser.add_argument("--master", required=True)
    parser.add_argument("--pid-dir", required=True)
    args = parser.parse_args(argv)
    log_config = Path(args.pid_dir) / "log4j2.properties"
    log_config.write_text(LOG4J)
    spark = naiad.spark.local_session(args.master, processes=2, quiet=False, **{
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log_config}",
        "spark.ui.showConsoleProgress": "false"})
    graph = edges()
    frame = spark.createDataFrame(graph, "src long, dst long").repartition(2)
    ranks = naiad.spark.execute(frame, StallOnce(args.pid_dir), processes=2,
                                schema="node long, rank double")
    got = dict(ranks.collect())
    want = power_iteration(adjacency(graph)[1], ITERATIONS)
    err = max(abs(got[u] - want[u]) for u in want)
    print(f"RESULT {'OK' if err < 1e-9 else 'WRONG'} max difference {err:.1e}", flush=True)
    spark.stop()
    return 0 if err < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
