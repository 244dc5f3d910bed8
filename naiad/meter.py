"""What one worker did: counters for the monitor, and JSON-lines events for the trace.

A worker holds a :class:`Meter` only when the computation asked for a trace or a monitor
(``execute(..., trace=PATH)`` or ``monitor=PORT``); otherwise its meter is ``None`` and the
scheduling loop pays one ``is None`` test per batch.  The meter keeps running totals per stage
(records in and out, batches, busy seconds) and per connector and destination (batches, records),
which the monitor reads from another thread (plain int and float updates, so a reader sees a
value that was true a moment ago), and, when tracing, writes one JSON object per event to
``PATH/worker-<index>.jsonl``.  Events are written in batches, at most
:data:`FLUSH_SECONDS` and a quarter of it after they happen, by the worker or, when it is
idle, by its process's flusher thread (which looks four times per FLUSH_SECONDS) (the rare ones, such as ``start``, ``checkpoint`` and ``failure``, at once), so
a process killed with SIGKILL loses only its last moment's events.  The schema is in docs/observability.md and :mod:`naiad.tracing`.

>>> m = Meter(worker=0, process=0)
>>> m.ran(2, "recv", (0, ()), 10, 4, 0.001)
>>> m.stage_in[2], m.stage_out[2], round(m.busy, 3)
(10, 4, 0.001)
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Tuple

from naiad.files import open_private, private_dir


__all__ = ["Meter", "trace_file", "time_json", "SCHEMA_VERSION", "FLUSH_SECONDS",
           "launcher_failure"]

SCHEMA_VERSION = 1
"""Version of the trace's event schema (in every ``start`` event)."""

_FLUSH_EVERY = 256            # events buffered between writes, at most
FLUSH_SECONDS = 0.5
"""Seconds an event of a running worker waits in memory, at most, before it is written."""
_AT_ONCE = frozenset({"start", "checkpoint", "failure", "stopped", "end"})


def trace_directory(directory: Any) -> Path:
    """The trace directory, created private, or checked to be: another user must not read
    the trace, nor plant links in it (PermissionError saying how to fix it)."""
    return private_dir(Path(os.fspath(directory)), "trace directory",
                       "the trace shows what the run computed")


def trace_file(directory: str, name: str) -> str:
    """The path of one writer's trace file, in the checked :func:`trace_directory`."""
    trace_directory(directory)
    return os.path.join(directory, f"{name}.jsonl")


def launcher_failure(directory: str, error: str) -> None:
    """Record, in ``launcher.jsonl``, how a multi-process run ended when it failed, as its
    launcher saw it: a process killed by a signal cannot record that itself."""
    event = {"ev": "failure", "w": -1, "process": "launcher", "by": "launcher",
             "error": error, "ts": round(time.time(), 6)}
    with open_private(Path(trace_file(directory, "launcher")), buffering=-1,
                      truncate=True) as out:
        out.write((json.dumps(event, separators=(",", ":")) + "\n").encode())


def time_json(t: Any) -> list:
    """A timestamp as JSON: ``[epoch, [loop counters...]]``."""
    return [t[0], list(t[1])]


def _time_text(t: Any) -> str:
    c = t[1]
    return f"[{t[0]},[{','.join(map(str, c))}]]" if c else f"[{t[0]},[]]"


class Meter:
    """Counters of one worker, and its trace writer when tracing."""

    def __init__(self, worker: int, process: int, trace_dir: Optional[str] = None,
                 name: Optional[str] = None):
        self.worker = worker
        self.process = process
        self.started = time.time()
        self.ended: Optional[float] = None
        self.busy = 0.0
        self.stage_in: Dict[int, int] = {}
        self.stage_out: Dict[int, int] = {}
        self.stage_batches: Dict[int, int] = {}
        self.stage_busy: Dict[int, float] = {}
        self.sent: Dict[Tuple[int, int], List[int]] = {}   # (connector, dest) -> [batches, records]
        self.progress_sent = 0
        self.progress_applied = 0
        self.notifications = 0
        self.frontiers: Dict[int, list] = {}                # stage -> frontier, as JSON
        self.frontier_clock = 0.0
        self.finished = False
        self._out: Optional[IO[bytes]] = None
        # Appended by the worker, taken from the left by whichever thread flushes (deque's
        # append and popleft are atomic): no event is lost or written twice.
        self._lines: "deque[str]" = deque()
        self._flush_at = 0.0             # time.time() after which the next event flushes
        self._write_lock = threading.Lock()     # the worker, and a stop from another thread
        if trace_dir is not None:
            path = trace_file(trace_dir, name or f"worker-{worker}")
            # This run's file replaces an older run's; created readable by this user only.
            self._out = open_private(Path(path), buffering=-1, truncate=True)
            self.event("start", process=process, schema=SCHEMA_VERSION)

    # ---- events -------------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        """Write one trace event (when tracing): ``{"ev": kind, "w": worker, "ts": ..., ...}``."""
        if self._out is None:
            return
        now = time.time()
        fields["ev"] = kind
        fields["w"] = self.worker
        fields["ts"] = round(now, 6)
        self._lines.append(json.dumps(fields, separators=(",", ":"), default=str))
        if kind in _AT_ONCE or len(self._lines) >= _FLUSH_EVERY or now >= self._flush_at:
            self.flush()

    def _line(self, fields: str) -> None:
        now = time.time()
        self._lines.append(f'{{{fields},"w":{self.worker},"ts":{now:.6f}}}')
        if len(self._lines) >= _FLUSH_EVERY or now >= self._flush_at:
            self.flush()

    def ran(self, stage: int, callback: str, t: Any, records_in: int, records_out: int,
            seconds: float) -> None:
        """A vertex callback ran (``recv`` with a batch, or ``notify``) for ``seconds``."""
        self.busy += seconds
        self.stage_in[stage] = self.stage_in.get(stage, 0) + records_in
        self.stage_out[stage] = self.stage_out.get(stage, 0) + records_out
        self.stage_batches[stage] = self.stage_batches.get(stage, 0) + 1
        self.stage_busy[stage] = self.stage_busy.get(stage, 0.0) + seconds
        if self._out is not None:       # the hot events are formatted directly (no json.dumps)
            self._line(f'"ev":"run","stage":{stage},"cb":"{callback}","t":{_time_text(t)},'
                       f'"n":{records_in},"out":{records_out},"us":{seconds * 1e6:.1f}')

    def send(self, connector: int, dest: int, t: Any, records: int) -> None:
        """A batch left on ``connector`` for worker ``dest`` (possibly this one)."""
        key = (connector, dest)
        got = self.sent.get(key)
        if got is None:
            self.sent[key] = [1, records]
        else:
            got[0] += 1
            got[1] += records
        if self._out is not None:
            self._line(f'"ev":"send","conn":{connector},"dst":{dest},"t":{_time_text(t)},'
                       f'"n":{records}')

    def received(self, connector: int, t: Any, records: int) -> None:
        """A batch arrived from another process or worker on ``connector``."""
        if self._out is not None:
            self._line(f'"ev":"recv","conn":{connector},"t":{_time_text(t)},"n":{records}')

    def progress(self, sent: bool, updates: int) -> None:
        """Progress updates broadcast (``sent``) or applied from a peer."""
        if sent:
            self.progress_sent += updates
        else:
            self.progress_applied += updates
        if self._out is not None:
            self._line(f'"ev":"progress","dir":"{"sent" if sent else "applied"}","n":{updates}')

    def notify_requested(self, stage: int, t: Any) -> None:
        self.notifications += 1
        if self._out is not None:
            self._line(f'"ev":"notify_at","stage":{stage},"t":{_time_text(t)}')

    def input(self, stage: int, epoch: int, records: int) -> None:
        self.stage_out[stage] = self.stage_out.get(stage, 0) + records
        if self._out is not None:
            self.event("input", stage=stage, epoch=epoch, n=records)

    # ---- the monitor's view --------------------------------------------------------------------
    def publish_frontiers(self, tracker, stages) -> None:
        """Record the frontier at every stage (called by the worker, rate-limited)."""
        self.frontier_clock = time.monotonic()
        self.frontiers = {st.id: [time_json(t) for t in tracker.frontier_at(st.loc)]
                          for st in stages}

    def snapshot(self) -> Dict[str, Any]:
        """The counters as plain JSON data."""
        return {
            "worker": self.worker, "process": self.process, "busy": self.busy,
            "uptime": (self.ended or time.time()) - self.started, "finished": self.finished,
            "stage_in": dict(self.stage_in), "stage_out": dict(self.stage_out),
            "stage_busy": dict(self.stage_busy), "stage_batches": dict(self.stage_batches),
            "sent": [[c, d, b, r] for (c, d), (b, r) in list(self.sent.items())],
            "progress_sent": self.progress_sent, "progress_applied": self.progress_applied,
            "frontiers": dict(self.frontiers),
        }

    # ---- end ------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the events kept so far (from the worker, or from a signal handler stopping
        the process: each event is written once, whole)."""
        with self._write_lock:
            self._flush_at = time.time() + FLUSH_SECONDS
            pending = self._lines
            lines = [pending.popleft() for _ in range(len(pending))]
            if self._out is not None and lines:
                self._out.write(("\n".join(lines) + "\n").encode())
                self._out.flush()

    def flush_if_due(self) -> None:
        """Write the events kept for longer than :data:`FLUSH_SECONDS` (an idle worker's:
        called by the process's flusher thread)."""
        if self._lines and time.time() >= self._flush_at:
            self.flush()

    def close(self, failure: Optional[str] = None) -> None:
        """The worker ended: final event, file closed."""
        self.finished = True
        self.ended = time.time()
        if self._out is not None:
            if failure is not None:
                self.event("failure", error=failure)
            self.event("end", busy_us=round(self.busy * 1e6, 1))
            with self._write_lock:
                self._out.close()
                self._out = None
