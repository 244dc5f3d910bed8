"""A local SparkSession that works on a fresh machine, and the checks that explain why it would not.

``local_session()`` is the embedded default: no cluster, a ``local[*]`` master with at least as
many task slots as the computation has processes (a barrier stage needs one slot per task, all
at once).  It sets the environment PySpark needs — ``SPARK_LOCAL_IP`` (loopback) and the Python
of this interpreter for the executors — unless the user already did, and turns a missing Java
into an error that says what to install.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import warnings
from typing import Any, Optional

from naiad.errors import NaiadError

__all__ = ["SparkUnavailable", "local_session", "check_java", "task_slots", "quiet_warnings"]


class SparkUnavailable(NaiadError):
    """Spark cannot start here: no Java, or a session that failed to launch."""


def quiet_warnings() -> None:
    """Silence PySpark's warning about pandas versions it has not certified (noise, not advice)."""
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas",
                            category=FutureWarning)


def check_java() -> str:
    """The ``java`` executable Spark will use; raises :class:`SparkUnavailable` when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        msg = (f"JAVA_HOME is {home!r} but {java} is not an executable: point JAVA_HOME at a "
               "Java 17 or 21 installation, or unset it to use the java on PATH")
        raise SparkUnavailable(msg)
    java = shutil.which("java")
    if java is None:
        msg = ("Spark needs a Java runtime (17 or 21) and none was found: install one (for "
               "example `apt-get install openjdk-17-jre-headless`, or `brew install openjdk@17`) "
               "or set JAVA_HOME")
        raise SparkUnavailable(msg)
    return java


_LOG4J = """\
# Written by naiad.spark.local_session(quiet=True): Spark's own messages at ERROR only; a
# failed task's error reaches the driver's exception, so the executor does not log it too.
rootLogger.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


_LOG_DIR: list = []


def _quiet_log_config() -> str:
    """A log4j2 configuration that logs errors only (Spark's start-up chatter is warnings),
    in a private temporary directory of this process (0700, removed at exit): a shared,
    predictable path could be replaced by another user to change what the JVM loads."""
    if not _LOG_DIR:
        directory = tempfile.mkdtemp(prefix="naiad-spark-")
        atexit.register(shutil.rmtree, directory, True)
        _LOG_DIR.append(directory)
    path = os.path.join(_LOG_DIR[0], "log4j2.properties")
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "w") as f:
            f.write(_LOG4J)
    return path


def _prepare_environment(local: bool) -> None:
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The executors' Python must be this one: it has naiad, pyarrow and the program's imports.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(master: Optional[str] = None, *, processes: int = 2, app_name: str = "naiad",
                  quiet: bool = True, **conf: Any):
    """A SparkSession on this machine (``local[*]``, or ``local[processes]`` on a machine with
    fewer cores, so a barrier stage of ``processes`` tasks can start); reused if one is active.

    ``conf`` entries are Spark settings with dots written as given, e.g.
    ``local_session(**{"spark.sql.shuffle.partitions": "4"})``.  ``quiet`` sets the log level
    to ERROR and hides the console progress bar.  A local session does not attempt a failed
    stage again (``spark.stage.maxConsecutiveAttempts=1``): on one machine a failing program
    fails the same way every time, so its error should come at once.
    """
    quiet_warnings()
    if master is None:
        master = "local[*]" if (os.cpu_count() or 1) >= processes else f"local[{processes}]"
    local = master.startswith("local")
    check_java()
    _prepare_environment(local)
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    if local:
        settings["spark.stage.maxConsecutiveAttempts"] = "1"
    if quiet:
        settings["spark.ui.showConsoleProgress"] = "false"
        if "spark.driver.extraJavaOptions" not in conf:
            settings["spark.driver.extraJavaOptions"] = (
                f"-Dlog4j2.configurationFile=file:{_quiet_log_config()}")
    settings.update({k: str(v) for k, v in conf.items()})
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - re-raised with what to do
        text = str(exc)
        hint = ""
        if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
            hint = ("; the Java process behind Spark exited at start: check that `java -version` "
                    "shows Java 17 or 21 and that JAVA_HOME, if set, points at it")
        msg = f"could not start a local SparkSession ({master}): {type(exc).__name__}: {exc}{hint}"
        raise SparkUnavailable(msg) from exc
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def _task_cpus(spark) -> int:
    """``spark.task.cpus``, read with one py4j call (``getConf()`` copies the whole conf)."""
    return int(spark.conf.get("spark.task.cpus", "1"))


def task_slots(spark) -> Optional[int]:
    """How many tasks can run at once under a local master; ``None`` on a cluster (unknown)."""
    master = spark.sparkContext.master
    m = _LOCAL.match(master)
    if m:
        n = m.group(1)
        cores = (os.cpu_count() or 1) if n == "*" else int(n or 1)
        return max(1, cores // _task_cpus(spark))
    m = _LOCAL_CLUSTER.match(master)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // _task_cpus(spark))
    return None
