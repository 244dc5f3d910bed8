"""A real Spark standalone cluster on this machine's loopback, for tests and benchmarks.

:class:`StandaloneCluster` starts a master and ``workers`` workers from the installed PySpark
(``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``), all bound to 127.0.0.1, each worker with one core and its own
directory, and waits (bounded) until the master lists every worker as alive.  :meth:`stop` kills
every process the cluster started: the master, the workers, and the executor JVMs and Python
workers the workers started (they are in the workers' process groups' descendants, found
through /proc).  Use it as a context manager so that ``stop`` runs even on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

import pyspark

from naiad.testing import free_ports

__all__ = ["StandaloneCluster", "spark_home", "unavailable"]


def spark_home() -> str:
    """The installed PySpark's directory: it holds bin/spark-class and the jars."""
    return os.path.dirname(pyspark.__file__)


def unavailable() -> Optional[str]:
    """Why a standalone cluster cannot start here, or None."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (Spark needs Java 17 or 21)"
    if not os.access(os.path.join(spark_home(), "bin", "spark-class"), os.X_OK):
        return "the installed pyspark has no bin/spark-class"
    return None


class StandaloneCluster:
    """A master and ``workers`` one-core workers on 127.0.0.1; logs under ``directory``."""

    def __init__(self, directory: Path, workers: int = 2, memory: str = "1g") -> None:
        self.directory = Path(directory)
        self.workers = workers
        self.memory = memory
        self.procs: List[subprocess.Popen] = []
        port, ui, *worker_uis = free_ports(2 + workers)
        self.port, self.ui, self.worker_uis = port, ui, worker_uis
        self.url = f"spark://127.0.0.1:{port}"

    def env(self) -> Dict[str, str]:
        """The environment of the cluster's processes (and of a driver that uses it)."""
        return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                    SPARK_LOG_DIR=str(self.directory / "logs"),
                    PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                    PYTHONPATH=str(Path(__file__).resolve().parent.parent))

    def _spark_class(self, name: str, args: List[str], log: str) -> subprocess.Popen:
        out = open(self.directory / log, "w")
        try:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), name, *args],
                env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            out.close()
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 120.0) -> "StandaloneCluster":
        """Start the master and the workers; wait until all workers are alive."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._spark_class("org.apache.spark.deploy.master.Master",
                          ["--host", "127.0.0.1", "--port", str(self.port),
                           "--webui-port", str(self.ui)], "master.log")
        for i, ui in enumerate(self.worker_uis):
            work = self.directory / f"worker{i}"
            work.mkdir(exist_ok=True)
            self._spark_class("org.apache.spark.deploy.worker.Worker",
                              [self.url, "--host", "127.0.0.1", "--cores", "1",
                               "--memory", self.memory, "--webui-port", str(ui),
                               "--work-dir", str(work)], f"worker{i}.log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    msg = f"a cluster process exited with {proc.returncode}: {self.logs()}"
                    raise RuntimeError(msg)
            if self.alive_workers() >= self.workers:
                return self
            time.sleep(0.5)
        msg = f"{self.workers} workers not alive after {timeout} s: {self.logs()}"
        raise TimeoutError(msg)

    def state(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return json.loads(r.read().decode())

    def alive_workers(self) -> int:
        try:
            workers = self.state().get("workers", [])
        except OSError:
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def logs(self) -> str:
        """The tail of every log of the cluster (for failure messages)."""
        parts = []
        for path in sorted(self.directory.rglob("*")):
            if path.is_file() and (path.suffix == ".log" or path.name in ("stderr", "stdout")):
                parts.append(f"--- {path.relative_to(self.directory)}\n"
                             + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Kill the master, the workers and everything they started (executors, Python)."""
        doomed = set()
        for proc in self.procs:
            doomed |= _descendants(proc.pid) | {proc.pid}
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "StandaloneCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _descendants(pid: int) -> set:
    """Every process below ``pid`` (from /proc: parent links)."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
