"""``naiad.spark.execute``: an SPMD program as one Spark barrier stage, one task per process.

The driver plans the stage and generates the shared secret; each task

1. binds its ZeroMQ endpoint on the executor's own address (loopback under a local master),
2. exchanges endpoints with the other tasks (the computation's rendezvous: under a local master
   through the driver, :mod:`naiad.spark.rendezvous`, which answers as soon as the last task
   asks; otherwise through ``BarrierTaskContext.allGather``, which takes a second) and connects
   with CURVE authentication keyed by the secret,
3. runs ``program(comp, rows)`` over the rows of its own partition — Arrow batches straight from
   Spark for a DataFrame (``mapInArrow(..., barrier=True)``), the records for an RDD — and
4. returns the program's rows to Spark in pickled chunks; with ``frames=True`` the program gets
   the partition as ``pa.Table`` s and returns tables, which go back to Spark as Arrow batches
   of the result schema (:mod:`naiad.spark.frames`).

The stage's output passes one shuffle, which ends the barrier stage (Spark refuses ``take()``
and ``show()`` on barrier RDDs) and keeps the results on the executors: later actions on the
returned DataFrame read that shuffle output instead of running the computation again.  A task
that fails raises a ``RuntimeError`` whose message is the computation's error, so the Spark job
fails with it; the driver turns it back into :class:`StageFailed`.  When Spark gives up on the
stage for a later reason (a task killed in ``allGather`` ends its executor, and the next attempts
miss its shuffle output), the driver finds the first failure in Spark's status store instead
(:mod:`naiad.spark.failures`).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Any, Callable, List, Optional, Union

from naiad.observe import watch
from naiad.computation import Computation
from naiad.config import check_layout, check_options, positive_int
from naiad.execute import run_program
from naiad.transport.security import random_secret
from naiad.spark.io import (PartitionRows, epoch_spec, is_dataframe, is_rdd,
                            pack_results, readable_columns, unpack_results)
from naiad.spark.dataframes import struct_and_single, struct_of
from naiad.spark.failures import StageFailed, diagnosed, stage_failed, task_error
from naiad.spark.frames import (PAYLOADS, PartitionTables, decoded_batches, inferred_schema,
                                 payload_batches, result_batches)
from naiad.spark.rendezvous import BarrierGather, DriverGather, DriverRendezvous
from naiad.spark.session import quiet_warnings, task_slots

__all__ = ["execute", "StageFailed", "BarrierTask", "listen_host", "stage_failed"]

# Options that do not apply inside a barrier stage.
_NOT_HERE = {
    "rendezvous": "the tasks find each other through the driver (a local master) or "
                  "BarrierTaskContext.allGather",
    "checkpoint_dir": "Spark reruns the whole barrier stage when a task fails",
    "checkpoint_every": "Spark reruns the whole barrier stage when a task fails",
    "checkpoint_interval": "Spark reruns the whole barrier stage when a task fails",
    "max_restarts": "Spark reruns the whole barrier stage when a task fails "
                    "(spark.task.maxFailures, spark.stage.maxConsecutiveAttempts)",
}


# Arrow batches of the partition read ahead while the computation starts (frames=True).
_AHEAD = 32


def listen_host(address: str) -> str:
    """The IP address to bind, from an executor address such as ``host:port``.

    >>> listen_host("localhost:41013"), listen_host("10.1.2.3:7077"), listen_host("[::1]:7077")
    ('127.0.0.1', '10.1.2.3', '::1')
    """
    host = address
    if address.startswith("["):                 # [IPv6]:port
        host = address[1:].split("]", 1)[0]
    elif address.count(":") == 1:
        host = address.split(":", 1)[0]
    host = host or "127.0.0.1"
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class BarrierTask:
    """What each task of the stage runs; pickled by the driver with the program inside."""

    def __init__(self, program: Callable, workers: int, options: dict, secret: str,
                 columns: Optional[List[str]], epochs):
        self.program = program
        self.workers = workers
        self.options = options
        self.secret = secret
        self.columns = columns
        self.epochs = epochs
        self.schema: Any = None        # the result StructType, with frames=True
        self.row_schema: Any = None    # the result StructType rows are checked against
        self.single = False            # that schema is one type: every record is one value
        self.input_schema: Any = None  # the input's StructType, with frames=True
        self.timezone: Optional[str] = None  # the session's, for Arrow's timestamps
        self.gather: Optional[str] = None   # the driver's rendezvous endpoint, if it serves one

    def from_arrow(self, batches):
        """``mapInArrow`` function: Arrow batches in, one-column batches of pickled rows out."""
        import pyarrow as pa
        chunks = self._run(lambda pid: PartitionRows(columns=self.columns, batches=batches,
                                                     epochs=self.epochs, process_index=pid))
        for payload in chunks:
            yield pa.RecordBatch.from_arrays([pa.array([payload], type=pa.binary())],
                                             names=["payload"])

    def from_tables(self, batches):
        """``mapInArrow`` function with ``frames=True``: tables in, the program's tables out as
        Arrow batches of the result schema (``self.schema``, a Spark StructType)."""
        from pyspark.sql.pandas.types import to_arrow_schema
        # Spark's timestamps are instants, in Arrow timestamps of the session's time zone.
        target = None if self.schema is None else \
            to_arrow_schema(self.schema, timezone=self.timezone)
        given = to_arrow_schema(self.input_schema, timezone=self.timezone)
        tables: List[PartitionTables] = []

        def read(pid: int) -> PartitionTables:
            tables.append(PartitionTables(batches, self.columns or [], pid, ahead=_AHEAD,
                                          schema=given))
            return tables[-1]

        def finish(result, pid: int) -> list:
            for t in tables:
                t.close()       # the input stream is at its end before the task goes on
            if target is None:
                return list(payload_batches(result))    # the schema is inferred after
            return list(result_batches(result, target))
        return iter(self._run(read, finish))

    def decode(self, batches):
        """``mapInArrow`` function of the second pass of an inferred schema: the kept
        payloads in, batches of the result schema out."""
        from pyspark.sql.pandas.types import to_arrow_schema
        return decoded_batches(batches, to_arrow_schema(self.schema, timezone=self.timezone))

    def from_records(self, records):
        """``mapPartitions`` function for RDDs: records in, pickled chunks of rows out."""
        return iter(self._run(lambda pid: PartitionRows(columns=None, records=records,
                                                        epochs=self.epochs, process_index=pid)))

    def _rows(self, result, pid: int) -> list:
        return pack_results(result, pid, self.row_schema, self.single)

    def _run(self, make_rows, finish=None) -> list:
        from pyspark import BarrierTaskContext
        _import_linq()
        ctx = BarrierTaskContext.get()
        pid = ctx.partitionId()
        infos = ctx.getTaskInfos()
        options = dict(self.options)
        options["secret"] = self.secret
        if not options.get("listen"):
            options["listen"] = listen_host(infos[pid].address)
        wait, ids = float(options.get("connect_timeout", 30.0)), \
            (ctx.stageId(), ctx.taskAttemptId(), pid)
        options["rendezvous"] = BarrierGather(ctx, *ids, len(infos), wait) \
            if self.gather is None else DriverGather(self.gather, self.secret, *ids, wait)
        comp: Optional[Computation] = None
        try:
            comp = Computation(process_index=pid, processes=len(infos), workers=self.workers,
                               **options)
            rows = make_rows(pid)
            program = self.program
            result = run_program(lambda c: program(c, rows), comp)
            return (finish or self._rows)(result, pid)
        except BaseException as exc:  # noqa: BLE001 - becomes the Spark task's error
            if comp is not None and comp.failure_origin is not None:
                time.sleep(1.0)   # let the process where it started fail the stage first
            raise RuntimeError(task_error(exc, pid)) from None


def _import_linq() -> None:
    """Programs written with ``import linq`` in the driver's ``__main__`` expect the fluent
    methods on Stream; that import does not travel with a pickled program, so do it here."""
    try:
        import linq  # noqa: F401
    except ImportError:  # pragma: no cover - linq is part of the distribution
        pass


def _payload(row) -> bytes:
    return row[0]


def _session_of(data):
    if is_dataframe(data):
        return data.sparkSession
    from pyspark.sql import SparkSession
    return SparkSession.getActiveSession() or SparkSession(data.context)


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message that says something."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")


def _session_timezone(spark) -> str:
    """The session's time zone (its default, the JVM's, when not set)."""
    try:
        return spark.conf.get("spark.sql.session.timeZone") or "UTC"
    except Exception:  # noqa: BLE001 - a session without the setting
        return "UTC"


def _run_frames(spark, data, task: BarrierTask, schema: Any, processes: int):
    """The frames=True stage: mapInArrow both ways, then one shuffle, materialised once on the
    executors (a local checkpoint), so later actions do not run the computation again.
    Without ``schema`` the tables are kept as Arrow payloads first, and turned into batches of
    the schema unified from theirs in a second pass (:mod:`naiad.spark.frames`)."""
    struct = None if schema is None else struct_of(schema) if isinstance(schema, str) \
        else schema
    task.schema = struct
    task.input_schema = data.schema
    task.timezone = _session_timezone(spark)
    out = data.mapInArrow(task.from_tables, struct or PAYLOADS, barrier=True)
    if struct is not None:
        return _checkpointed(spark, out.repartition(processes))
    kept = _checkpointed(spark, out)
    from pyspark.sql.pandas.types import from_arrow_schema
    schemas = [row[0] for row in kept.where("kind = 0").select("payload").collect()]
    task.schema = from_arrow_schema(inferred_schema(schemas))
    decoded = kept.where("kind = 1").select("payload").mapInArrow(task.decode, task.schema)
    return _checkpointed(spark, decoded.repartition(processes))


def _checkpointed(spark, out):
    """``out`` computed now, once, and kept on the executors."""
    _plan_without_adaptive(spark, out)
    return out.localCheckpoint(eager=True)


_ADAPTIVE = "spark.sql.adaptive.enabled"


def _plan_without_adaptive(spark, out) -> None:
    """Plan ``out`` with adaptive query execution off, so that the barrier stage and the
    checkpoint run as one job: adaptive execution would run the stage's shuffle as a job of its
    own and plan again before the checkpoint's (0.05-0.15 s more on a 2-core machine).  The
    session's setting is changed only while the plan is made (the plan keeps it) and then
    restored; a query planned on another thread of this session in that moment is planned
    without it too."""
    jdf = getattr(out, "_jdf", None)     # a Spark Connect DataFrame has no JVM side here
    before = spark.conf.get(_ADAPTIVE, None)
    if jdf is None or before == "false":
        return
    spark.conf.set(_ADAPTIVE, "false")
    try:
        jdf.queryExecution().executedPlan()
    finally:
        if before is None:
            spark.conf.unset(_ADAPTIVE)
        else:
            spark.conf.set(_ADAPTIVE, before)


def _check_options(options: dict) -> dict:
    for name, why in _NOT_HERE.items():      # before the checks that combine options
        if options.get(name) is not None:
            msg = f"naiad.spark.execute does not take {name}=: {why}"
            raise TypeError(msg)
    check_options(options)   # unknown names raise, listing the known ones
    return {k: v for k, v in options.items() if k not in _NOT_HERE}


def execute(data: Any, program: Callable, *, processes: Optional[int] = None,
            schema: Any = None, epoch_column: Optional[Union[str, int]] = None,
            workers: int = 1, frames: bool = False, **options: Any):
    """Run ``program(comp, rows)`` as one Spark barrier stage over ``data``'s partitions.

    Each of the ``processes`` tasks (default: the number of partitions; the data is repartitioned
    when it differs) is one process of the computation and gets the rows of its own partition as
    a :class:`~naiad.spark.PartitionRows` (iterate for tuples, or ``rows.feed(inp)``; with
    ``epoch_column``, one epoch per sorted distinct value of that column).  ``workers`` is worker
    threads per process; other ``options`` go to :class:`naiad.Computation` (``secret`` defaults
    to a fresh random one per call).  Returns a DataFrame of the rows the programs return, with
    ``schema`` (DDL string, StructType or column names) or an inferred one.  Raises
    :class:`StageFailed` with the computation's error (stage, vertex, time) if a task fails.

    ``frames=True`` (DataFrames only): the program gets its partition as ``pa.Table`` s (a
    :class:`~naiad.spark.frames.PartitionTables`) and returns ``pa.Table`` s; the result
    DataFrame, of ``schema`` (inferred from the returned tables when omitted), is built from
    Arrow without Python rows.
    """
    quiet_warnings()
    if not (is_dataframe(data) or is_rdd(data)):
        msg = (f"naiad.spark.execute needs a pyspark.sql.DataFrame or a pyspark.RDD; got "
               f"{type(data).__name__}")
        raise TypeError(msg)
    if not callable(program):
        msg = f"naiad.spark.execute needs a callable program(comp, rows); got {type(program).__name__}"
        raise TypeError(msg)
    positive_int("workers", workers)
    options = _check_options(options)
    spark = _session_of(data)
    frame = is_dataframe(data)
    if frames and not frame:
        msg = ("naiad.spark.execute(frames=True) needs a DataFrame (its partitions come as Arrow "
               f"batches); got {type(data).__name__}: use spark.createDataFrame(rdd, schema)")
        raise TypeError(msg)
    if frames and isinstance(schema, (list, tuple)):
        msg = ("naiad.spark.execute(frames=True) takes schema= as a DDL string or a StructType "
               "(the tables are cast to its types), or none to infer it from the tables; a "
               "list of column names is for rows")
        raise TypeError(msg)
    if frames and epoch_column is not None:
        msg = ("naiad.spark.execute(frames=True) does not take epoch_column=: the program gets "
               "whole tables; split them into epochs itself (e.g. with table.filter)")
        raise TypeError(msg)
    partitions = data.rdd.getNumPartitions() if frame else data.getNumPartitions()
    if processes is None:
        processes = max(1, partitions)
    check_layout(processes, workers)
    slots = task_slots(spark)
    if slots is not None and processes > slots:
        master = spark.sparkContext.master
        msg = (f"a barrier stage of {processes} tasks needs {processes} task slots at once, but "
               f"the master {master} has {slots}: pass processes={slots} or fewer, or start "
               f"Spark with local[{processes}]")
        raise ValueError(msg)
    if isinstance(schema, str):
        try:
            struct_of(schema)      # a bad DDL is refused before any task runs
        except Exception as exc:  # noqa: BLE001 - re-raised with advice
            msg = (f"naiad.spark.execute: schema={schema!r} is not a DDL string Spark reads "
                   f"({type(exc).__name__}: {_first_line(exc)}); write it as "
                   "'name type, ...', e.g. 'node string, rank double'")
            raise TypeError(msg) from None
    if frame:
        readable_columns(list(data.columns), "execute")
    if processes != partitions:
        data = data.repartition(processes)
    epochs = epoch_spec(data, epoch_column)
    secret = options.pop("secret", None) or random_secret()
    # The page and terminal progress are the driver's; tasks report to it on loopback, so this
    # serves local and one-host runs.
    options, watching = watch(options, secret, in_process=False)
    task = BarrierTask(program, workers, options, secret, list(data.columns) if frame else None,
                       epochs)
    if not frames and schema is not None and not isinstance(schema, (list, tuple)):
        # One type (``"long"``, ``LongType()``) is one column ``value``: the rows are tuples.
        schema, task.single = struct_and_single(schema)
        task.row_schema = schema
    served = None
    if spark.sparkContext.master.startswith("local"):
        served = DriverRendezvous(secret, processes)
        task.gather = served.endpoint
    since = int(spark.sparkContext._jvm.System.currentTimeMillis())
    try:
        try:
            return _run_stage(spark, since, data, task, schema, processes, frame, frames)
        except Exception as exc:  # noqa: BLE001 - one refusal is retried, the rest re-raised
            if isinstance(exc, StageFailed) or \
                    "BarrierJobUnsupportedRDDChainException" not in str(exc):
                raise               # (a task ran: the program's own error, whatever it says)
            # The data ends in a narrowing step (coalesce, union, ...), which a barrier stage
            # cannot read: a shuffle in front gives it partitions of its own.  No task ran.
            return _run_stage(spark, since, data.repartition(processes), task, schema,
                              processes, frame, frames)
    except BaseException as exc:
        if watching is not None:
            watching.ended(exc)
        raise
    finally:
        if served is not None:
            served.stop()
        if watching is not None:
            watching.stop()


def _run_stage(spark, since: int, data, task: BarrierTask, schema: Any, processes: int,
               frame: bool, frames: bool):
    """The stage run now; a failure of its tasks raised as :class:`StageFailed`."""
    try:
        return _run_barrier(spark, data, task, schema, processes, frame, frames)
    except Exception as exc:  # noqa: BLE001 - the computation's own error, if it is there
        failed = stage_failed(exc) or diagnosed(spark, exc, since)
        if failed is None:
            raise
        raise failed from exc


def _run_barrier(spark, data, task: BarrierTask, schema: Any, processes: int, frame: bool,
                 frames: bool):
    if frames:
        return _run_frames(spark, data, task, schema, processes)
    if frame:
        payloads = data.mapInArrow(task.from_arrow, "payload binary", barrier=True).rdd.map(_payload)
    else:
        payloads = data.barrier().mapPartitions(task.from_records)
    shuffled = payloads.repartition(processes)
    shuffled.count()          # runs the stage now, once; its output stays in the shuffle
    rows = shuffled.flatMap(unpack_results)
    try:
        # Rows checked in the tasks against this schema need no second check here.
        return spark.createDataFrame(rows, schema, verifySchema=task.row_schema is None)
    except Exception as exc:  # noqa: BLE001 - re-raised with advice
        if schema is None and rows.isEmpty():
            msg = ("naiad.spark.execute: the programs returned no rows, so Spark cannot infer a "
                   "schema; give schema= (a DDL string such as 'node string, rank double')")
            raise ValueError(msg) from exc
        msg = (f"naiad.spark.execute: Spark cannot make a DataFrame of the programs' rows "
               f"({type(exc).__name__}: {exc}); give or fix schema=")
        raise TypeError(msg) from exc
