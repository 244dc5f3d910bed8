"""Reading an event trace: ``execute(..., trace=PATH)`` wrote it, ``naiad trace summarize`` reads it.

A trace directory holds ``graph.json`` (the logical graph: stages, connectors, layout), one
``worker-<index>.jsonl`` per worker and one ``process-<p>.jsonl`` per process (checkpoints,
failures).  Each line is one JSON event; the schema (version :data:`naiad.meter.SCHEMA_VERSION`)
is documented in docs/observability.md.  :func:`summarize` reports per stage the records in and
out, batches and busy time; per connector the batches and records sent to each worker; and the
slowest epochs, by the span from their input to the last callback that ran at them.

A run that recovered from failures (``checkpoint_dir=``) keeps each failed attempt's files in
``attempt-<n>/`` (:func:`keep_attempt`, called before the restart); the top level holds the
attempt that ended the run.  :func:`read_trace` reads those too, and :func:`summarize` names
each attempt's failure.  ``naiad.execute`` clears the attempts of an earlier run into the same
directory (:func:`clear_attempts`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from naiad.meter import trace_directory

__all__ = ["Trace", "read_trace", "summarize", "keep_attempt", "clear_attempts"]

_ATTEMPT = "attempt-"


class Trace:
    """A trace directory's graph and events (events sorted by time)."""

    def __init__(self, graph: Dict[str, Any], events: List[Dict[str, Any]], damaged: int,
                 attempts: Optional[List[List[Dict[str, Any]]]] = None):
        self.graph = graph
        self.events = events
        self.damaged = damaged          # lines that were not JSON (a run killed mid-write)
        self.attempts = attempts or []  # the events of each failed attempt, in order

    def stage_name(self, sid: int) -> str:
        stages = self.graph.get("stages", [])
        return stages[sid]["name"] if 0 <= sid < len(stages) else f"stage {sid}"

    def of(self, kind: str) -> Iterator[Dict[str, Any]]:
        return (e for e in self.events if e.get("ev") == kind)


def read_trace(path: str) -> Trace:
    """Load a trace directory; FileNotFoundError names what is missing."""
    root = Path(path)
    files = sorted(root.glob("*.jsonl")) if root.is_dir() else []
    if not files:
        msg = (f"no trace in {path!r}: expected worker-*.jsonl files written by "
               "naiad.execute(..., trace=PATH)")
        raise FileNotFoundError(msg)
    graph_file = root / "graph.json"
    graph = json.loads(graph_file.read_text()) if graph_file.exists() else {}
    launcher = root / "launcher.jsonl"
    if graph_file.exists() and launcher in files and \
            launcher.stat().st_mtime_ns < graph_file.stat().st_mtime_ns:
        files.remove(launcher)      # an earlier run's failure (this run started after it)
    events, damaged = _events(files)
    attempts = []
    for directory in _attempt_dirs(root):
        before, bad = _events(sorted(directory.glob("*.jsonl")))
        attempts.append(before)
        damaged += bad
    return Trace(graph, events, damaged, attempts)


def _events(files: List[Path]) -> Tuple[List[Dict[str, Any]], int]:
    events, damaged = [], 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    damaged += 1
    events.sort(key=lambda e: e.get("ts", 0.0))
    return events, damaged


def _attempt_dirs(root: Path) -> List[Path]:
    found = [(int(d.name[len(_ATTEMPT):]), d) for d in root.glob(_ATTEMPT + "*")
             if d.is_dir() and d.name[len(_ATTEMPT):].isdigit()]
    return [d for _, d in sorted(found)]


def keep_attempt(path: Any, attempt: int) -> None:
    """Move the trace files of a failed attempt (its processes have exited) into
    ``PATH/attempt-<attempt>/``, so that the restarted run's files do not replace them."""
    root = Path(os.fspath(path))
    files = sorted(root.glob("*.jsonl"))
    if not files:
        return
    kept = root / f"{_ATTEMPT}{attempt}"
    kept.mkdir(mode=0o700, exist_ok=True)
    for f in files:
        os.replace(f, kept / f.name)


def clear_attempts(path: Any) -> None:
    """Remove the failed attempts and the launcher's failure an earlier run left in the trace
    directory ``path``, once it is known to be this user's private directory (not a link
    planted to another)."""
    root = trace_directory(path)
    for directory in _attempt_dirs(root):
        shutil.rmtree(directory, ignore_errors=True)
    launcher = root / "launcher.jsonl"
    if launcher.exists():           # (unlink of a missing file fails on a read-only mount)
        launcher.unlink()


def _table(header: Tuple[str, ...], rows: List[Tuple[Any, ...]]) -> List[str]:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for n, r in enumerate(cells):
        out.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                    for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return out


def summarize(trace: Trace, slowest: int = 5) -> str:
    """A plain-text report of a trace (see the module docstring)."""
    per_stage: Dict[int, List[float]] = {}          # stage -> [in, out, batches, busy us]
    epoch_busy: Dict[int, float] = {}
    epoch_first: Dict[int, float] = {}
    epoch_last: Dict[int, float] = {}
    for e in trace.of("run"):
        s = per_stage.setdefault(e["stage"], [0, 0, 0, 0.0])
        s[0] += e["n"]
        s[1] += e["out"]
        s[2] += 1
        s[3] += e["us"]
        epoch = e["t"][0]
        epoch_busy[epoch] = epoch_busy.get(epoch, 0.0) + e["us"]
        epoch_last[epoch] = max(epoch_last.get(epoch, 0.0), e["ts"])
    for e in trace.of("input"):
        s = per_stage.setdefault(e["stage"], [0, 0, 0, 0.0])
        s[1] += e["n"]
        epoch_first[e["epoch"]] = min(epoch_first.get(e["epoch"], e["ts"]), e["ts"])
    sent: Dict[Tuple[int, int], List[int]] = {}
    for e in trace.of("send"):
        c = sent.setdefault((e["conn"], e["dst"]), [0, 0])
        c[0] += 1
        c[1] += e["n"]
    workers = sorted({e["w"] for e in trace.events if e.get("w", -1) >= 0})
    lines = [f"trace: {len(trace.events)} events from {len(workers)} worker(s)"
             + (f"; {trace.damaged} damaged line(s) skipped" if trace.damaged else "")]
    lines.append("")
    lines.append("stages (records in and out, callbacks, busy time):")
    rows: List[tuple] = [(trace.stage_name(sid), int(v[0]), int(v[1]), int(v[2]), f"{v[3] / 1e3:.1f} ms")
            for sid, v in sorted(per_stage.items())]
    lines += _table(("stage", "in", "out", "callbacks", "busy"), rows)
    lines.append("")
    lines.append("connectors (batches and records per destination worker):")
    conns = {c["id"]: c for c in trace.graph.get("connectors", [])}
    rows = []
    for (cid, dst), (batches, records) in sorted(sent.items()):
        conn = conns.get(cid)
        name = (f"{trace.stage_name(conn['src'])} -> {trace.stage_name(conn['dst'])} "
                f"({conn['partitioning']})") if conn else f"connector {cid}"
        rows.append((name, dst, batches, records))
    lines += _table(("connector", "to worker", "batches", "records"), rows)
    progress = list(trace.of("progress"))
    n_sent = sum(e["n"] for e in progress if e["dir"] == "sent")
    n_applied = sum(e["n"] for e in progress if e["dir"] == "applied")
    lines.append("")
    lines.append(f"progress: {n_sent} update(s) broadcast, {n_applied} applied from peers; "
                 f"{sum(1 for _ in trace.of('notify_at'))} notification(s) requested")
    # Each process records its part of a checkpoint: one checkpoint per epoch, its bytes
    # summed over the parts.
    sizes: Dict[int, int] = {}
    earlier = [e for before in trace.attempts for e in before if e.get("ev") == "checkpoint"]
    for ck in [*earlier, *trace.of("checkpoint")]:      # every attempt's, as on the page
        sizes[ck["epoch"]] = sizes.get(ck["epoch"], 0) + int(ck.get("bytes", 0))
    if sizes:
        lines.append(f"checkpoints: {len(sizes)} (epochs {', '.join(map(str, sorted(sizes)))}; "
                     f"the last {sizes[max(sizes)]:,} bytes)")
    for n, before in enumerate(trace.attempts, 1):
        failures = _failures(before)
        if not failures:
            lines.append(f"attempt {n} of {len(trace.attempts) + 1} failed without recording "
                         "why (a process was killed?); restarted from the last checkpoint")
        for f in failures:
            lines.append(f"attempt {n} of {len(trace.attempts) + 1} failed, {_seen(f)}; "
                         "restarted from the last checkpoint")
    for f in _failures(trace.events):
        lines.append(f"failure {_seen(f)}")
    lines.append("")
    spans = {ep: epoch_last[ep] - epoch_first.get(ep, epoch_last[ep]) for ep in epoch_last}
    worst = sorted(spans, key=lambda ep: -spans[ep])[:slowest]
    lines.append("slowest epochs (input to last callback; busy = time in callbacks):")
    rows = [(ep, f"{spans[ep] * 1e3:.1f} ms", f"{epoch_busy.get(ep, 0.0) / 1e3:.1f} ms")
            for ep in worst]
    lines += _table(("epoch", "span", "busy"), rows)
    return "\n".join(lines)


def _failures(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The failures the workers and processes recorded, or else the launcher's (a process
    killed by a signal records none itself)."""
    failures = [e for e in events if e.get("ev") == "failure"]
    own = [e for e in failures if e.get("by") != "launcher"]
    return own or failures


def _seen(failure: Dict[str, Any]) -> str:
    """Where a failure event happened, and its error."""
    if failure.get("by") == "launcher":
        return f"as the launcher saw it: {failure['error']}"
    return f"in {_where(failure)}: {failure['error']}"


def _where(event: Dict[str, Any]) -> str:
    w = event.get("w", -1)
    return f"worker {w}" if w >= 0 else f"process {event.get('process', '?')}"
