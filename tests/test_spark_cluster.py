"""naiad.spark.execute on a real Spark standalone cluster: a master and two one-core workers.

The cluster (tests/spark_cluster.py) is started once for the module from the installed PySpark,
bound to 127.0.0.1; each worker starts its own executor JVM, and each executor its own Python
workers.  The drivers run as separate processes (the samples' own command lines), so no
SparkSession of this test process is involved.  The cluster and everything it started are
killed in the fixture's ``finally``.  A task that dies or hangs before the rendezvous is
diagnosed, not waited for: the driver raises ``StageFailed`` naming the cause, within a bound.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from tests.spark_cluster import StandaloneCluster, unavailable

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[StandaloneCluster]:
    reason = unavailable()
    if reason:
        pytest.skip(f"no Spark standalone cluster here: {reason}")
    box = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    try:
        box.start()
        yield box
    finally:
        box.stop()


def _start_driver(cluster: StandaloneCluster, argv: List[str]) -> subprocess.Popen:
    """A driver process in a session of its own, so that its JVM can be killed with it."""
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=cluster.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _driver(cluster: StandaloneCluster, argv: List[str], timeout: float = 300
            ) -> Tuple[int, str, str]:
    """Run a driver to its end (bounded); its exit code, stdout and stderr."""
    proc = _start_driver(cluster, argv)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            _kill_session(proc)
    return proc.returncode, out, err


def _executor_dirs(cluster: StandaloneCluster, app: str) -> List[Path]:
    """The executor directories of application ``app`` on every worker."""
    return sorted(p for p in cluster.directory.glob(f"worker*/{app}/*") if p.is_dir())


def _last_app(cluster: StandaloneCluster) -> str:
    apps = cluster.state().get("completedapps", []) + cluster.state().get("activeapps", [])
    return max(apps, key=lambda a: a["starttime"])["id"]


# A driver whose program, as it is unpickled in the task of partition 1 (before the task's
# Computation and its rendezvous), ends that task's Python process or hangs it.  Spark ends the
# executor of a task it kills in allGather, so after an "exit" the stage's later attempts fail
# for want of that executor's shuffle output, and Spark's final error names only that.
EARLY_DRIVER = """\
import os, sys, time
import naiad.spark

class Early:
    def __init__(self, mode):
        self.mode = mode

    def __setstate__(self, state):
        from pyspark import TaskContext
        if TaskContext.get().partitionId() == 1:
            if state["mode"] == "exit":
                time.sleep(2)      # partition 0 waits at the rendezvous when Spark kills it
                os._exit(3)
            time.sleep(3600)
        self.__dict__.update(state)

    def __call__(self, comp, rows):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        rows.feed(inp)
        comp.join()
        return got.records()

spark = naiad.spark.local_session(sys.argv[1], processes=2,
                                  **{"spark.ui.showConsoleProgress": "false"})
frame = spark.createDataFrame([(i,) for i in range(100)], "x long").repartition(2)
try:
    naiad.spark.execute(frame, Early(sys.argv[2]), processes=2, schema="x long",
                        connect_timeout=5)
    print("NO ERROR", flush=True)
except naiad.spark.StageFailed as err:
    print("STAGEFAILED", err, flush=True)
except Exception as err:
    print("OTHER", type(err).__name__, str(err)[:2000], flush=True)
spark.stop()
"""


@pytest.mark.parametrize("mode, cause", [
    ("exit", "a task's Python process ended without an error"),
    ("hang", "waited 5 s at the rendezvous (BarrierTaskContext.allGather)"),
])
def test_a_task_lost_before_the_rendezvous_fails_the_driver_with_its_cause(
        cluster, tmp_path, mode, cause):
    script = tmp_path / "early_driver.py"
    script.write_text(EARLY_DRIVER)
    start = time.monotonic()
    proc = _start_driver(cluster, [str(script), cluster.url, mode])
    try:
        out, err = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        pytest.fail(f"the driver still waited after {time.monotonic() - start:.0f} s "
                    f"(a task {mode} before the rendezvous)")
    assert "STAGEFAILED" in out, out[-3000:] + err[-5000:]
    assert cause in out, out[-3000:]


def test_the_pagerank_main_sample_runs_on_two_executors_of_the_cluster(cluster):
    code, out, err = _driver(cluster, ["-m", "samples.main", "--master", cluster.url, "-n", "2",
                                       "-i", "10", "--graph", "imports", "--top", "3"])
    assert code == 0, out[-3000:] + err[-5000:]
    assert f"one Spark barrier stage ({cluster.url})" in out
    assert "Checked against a plain power iteration: max difference" in out
    # One executor on each worker: each its own JVM, the two processes on different workers.
    dirs = _executor_dirs(cluster, _last_app(cluster))
    assert {d.parent.parent.name for d in dirs} == {"worker0", "worker1"}, dirs


def test_the_kmeans_sample_runs_on_the_cluster(cluster):
    code, out, err = _driver(cluster, ["-m", "samples.spark_kmeans", "--master", cluster.url,
                                       "-n", "2", "--points", "4000", "-i", "5"])
    assert code == 0, out[-3000:] + err[-5000:]
    assert "Checked against plain Lloyd iterations: max difference" in out
    dirs = _executor_dirs(cluster, _last_app(cluster))
    assert {d.parent.parent.name for d in dirs} == {"worker0", "worker1"}, dirs


def test_a_killed_python_worker_makes_spark_retry_the_whole_barrier_stage(cluster, tmp_path):
    pid_file = tmp_path / "pid"
    proc = _start_driver(cluster, ["-m", "tests.spark_cluster_programs", "--master",
                                   cluster.url, "--pid-dir", str(tmp_path)])
    try:
        deadline = time.monotonic() + 240
        while not pid_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the first attempt never reached its stall"
            time.sleep(0.2)
        pid = int(pid_file.read_text())
        assert pid != proc.pid
        os.kill(pid, signal.SIGKILL)     # the executor's Python worker running process 0
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            _kill_session(proc)
    assert proc.returncode == 0, out[-3000:] + err[-8000:]
    assert "RESULT OK" in out
    # The driver's log: the task died with its Python worker, the barrier stage failed as a
    # whole, was resubmitted, and its next attempt finished.
    assert "Python worker exited unexpectedly" in err, err[-8000:]
    failed = re.search(r"Marking (\d+) \(.*\) as failed due to a barrier task failed", err)
    assert failed, err[-8000:]
    stage = failed.group(1)
    resubmit = re.search(rf"Resubmitting \w+ {stage} \(.*\) due to barrier stage failure", err)
    assert resubmit, err[-8000:]
    assert re.search(rf"Stage {stage} \(.*\) finished in", err[resubmit.end():]), err[-8000:]
