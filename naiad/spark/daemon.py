"""Spark's Python daemon with naiad's modules already imported, for ``spark.python.daemon.module``.

Spark starts the Python workers of an executor by forking them from one daemon process
(``pyspark.daemon``), reuses a worker for later tasks, and ends a worker that has been idle for a
minute.  A fresh worker's first ``naiad.spark.execute`` task imports naiad, ``linq``, pyarrow,
numpy, pandas and pyzmq: 0.5-1 s on a loaded 2-core machine, longer than the PageRank stage it
runs.  :func:`naiad.spark.local_session` names this module as the daemon, so every worker is
forked with those imports done.  A module that cannot be imported here is left to the task,
which then reports it as usual; nothing else differs from ``pyspark.daemon``.
"""

from __future__ import annotations



def preload() -> bool:
    """Import what naiad's tasks need; False if some of it cannot be imported here."""
    try:
        import numpy  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import zmq  # noqa: F401
        import linq.frames  # noqa: F401
        import naiad.spark.barrier  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    preload()
    from pyspark import daemon
    daemon.manager()
