"""Reading an event trace: ``execute(..., trace=PATH)`` wrote it, ``naiad trace summarize`` reads it.

A trace directory holds ``graph.json`` (the logical graph: stages, connectors, layout), one
``worker-<index>.jsonl`` per worker and one ``process-<p>.jsonl`` per process (checkpoints,
failures).  Each line is one JSON event; the schema (version :data:`naiad.meter.SCHEMA_VERSION`)
is documented in docs/observability.md.  :func:`summarize` reports per stage the records in and
out, batches and busy time; per connector the batches and records sent to each worker; and the
slowest epochs, by the span from their input to the last callback that ran at them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

__all__ = ["Trace", "read_trace", "summarize"]


class Trace:
    """A trace directory's graph and events (events sorted by time)."""

    def __init__(self, graph: Dict[str, Any], events: List[Dict[str, Any]], damaged: int):
        self.graph = graph
        self.events = events
        self.damaged = damaged          # lines that were not JSON (a run killed mid-write)

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
    events, damaged = [], 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    damaged += 1
    events.sort(key=lambda e: e.get("ts", 0.0))
    return Trace(graph, events, damaged)


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
    checkpoints = list(trace.of("checkpoint"))
    if checkpoints:
        lines.append(f"checkpoints: {len(checkpoints)} (epochs "
                     f"{', '.join(str(c['epoch']) for c in checkpoints)})")
    for f in trace.of("failure"):
        lines.append(f"failure in worker {f['w']}: {f['error']}")
    lines.append("")
    spans = {ep: epoch_last[ep] - epoch_first.get(ep, epoch_last[ep]) for ep in epoch_last}
    worst = sorted(spans, key=lambda ep: -spans[ep])[:slowest]
    lines.append("slowest epochs (input to last callback; busy = time in callbacks):")
    rows = [(ep, f"{spans[ep] * 1e3:.1f} ms", f"{epoch_busy.get(ep, 0.0) / 1e3:.1f} ms")
            for ep in worst]
    lines += _table(("epoch", "span", "busy"), rows)
    return "\n".join(lines)
