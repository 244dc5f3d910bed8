"""Naiad over Apache Spark: load with Spark, iterate here, results back to Spark.

Three ways in:

* :func:`execute` runs an SPMD program as one Spark barrier stage over a DataFrame's or RDD's
  partitions, one task per process; the tasks rendezvous through the driver under a local
  master (:mod:`naiad.spark.rendezvous`) and ``BarrierTaskContext.allGather`` otherwise,
  connect over CURVE-authenticated ZeroMQ, and return their rows as a DataFrame.  The same call
  runs on a local master and on a cluster: this is the scalable path.
* :func:`source` lets programs run by :func:`naiad.execute` read a DataFrame or RDD: Spark's
  executors write its partitions to files and each process reads a disjoint share.
* :func:`to_dataframe` turns a computation's records (per epoch or all epochs) into a DataFrame.

:func:`local_session` is the embedded default: a ``local[*]`` SparkSession set up for this
interpreter.  PySpark is an optional dependency (``pip install 'naiad[spark]'``); ``import naiad``
never imports it.
"""

try:
    import pyspark  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "naiad.spark needs PySpark (and pyarrow): install the extra with "
        "`pip install 'naiad[spark]'`; Spark also needs a Java 17 or 21 runtime") from _exc

from naiad.spark.session import SparkUnavailable, check_java, local_session, task_slots
from naiad.spark.io import (EpochSpec, PartitionRows, SparkSource, check_columns, source,
                            to_dataframe)
from naiad.spark.barrier import StageFailed, execute
from naiad.spark.frames import PartitionTables

__all__ = [
    "execute",
    "source",
    "to_dataframe",
    "local_session",
    "PartitionRows",
    "PartitionTables",
    "SparkSource",
    "EpochSpec",
    "StageFailed",
    "SparkUnavailable",
    "check_java",
    "check_columns",
    "task_slots",
]
