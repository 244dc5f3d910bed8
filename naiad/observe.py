"""One process's observability: its workers' meters, its trace files, its monitor reporter.

:class:`Observer` is what :class:`~naiad.Computation` holds when ``trace=`` or ``monitor=`` is set
(and nothing is built when neither is).  It makes a :class:`~naiad.meter.Meter` per worker, writes
the trace's ``graph.json`` and ``process-<p>.jsonl`` (checkpoints and failures), and runs the
:class:`~naiad.monitor.Reporter` that sends this process's snapshot to the monitor page: directly
when the page is served here, otherwise over HTTP to the serving process on loopback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from naiad.console import ConsoleProgress
from naiad.files import write_atomic
from naiad.meter import FLUSH_SECONDS, Meter
from naiad.ticker import Ticker
from naiad.picture import graph_json
from naiad.transport.security import resolve_secret

if TYPE_CHECKING:  # pragma: no cover
    from naiad import monitor
    from naiad.computation import Computation

__all__ = ["Observer", "wanted", "watch", "Watch"]


def wanted(options: Dict[str, Any]) -> bool:
    """Whether the options ask for a trace or a monitor."""
    return any(options.get(k) is not None for k in ("trace", "monitor", "report_to"))


def _monitor():
    """:mod:`naiad.monitor`, imported when a run first asks for a monitor or a report: it
    brings an HTTP server and client (``http.server``, ``urllib.request``), which every process of
    every run would otherwise import at start (the launched children among them)."""
    from naiad import monitor

    return monitor


class Observer:
    """Meters, trace files and the monitor reporter of one process."""

    def __init__(self, comp: "Computation"):
        self.comp = comp
        opts = comp.options
        self.trace_dir: Optional[str] = os.fspath(opts["trace"]) if opts["trace"] else None
        self.meters: List[Meter] = []
        self.graph: Dict[str, Any] = {}
        self.process_meter: Optional[Meter] = None
        self.reporter: Optional[monitor.Reporter] = None
        self.sink: Optional[Callable[..., None]] = None
        self.flusher: Optional[Ticker] = None
        self.server: Optional[monitor.MonitorServer] = None
        self._served = False       # this computation took the server (and frees it at close)

    def meter_for(self, worker: int) -> Meter:
        m = Meter(worker, self.comp.process_index, self.trace_dir)
        self.meters.append(m)
        return m

    def start(self) -> None:
        """The graph is frozen: write the trace's header, start reporting to the monitor."""
        comp = self.comp
        self.graph = graph_json(comp.graph)
        if self.trace_dir is not None:
            self.process_meter = Meter(-1, comp.process_index, self.trace_dir,
                                       name=f"process-{comp.process_index}")
            # An idle worker writes nothing: its kept events are written from here.
            self.flusher = Ticker(self._flush_due, FLUSH_SECONDS / 4, "naiad-trace-flush",
                                  "writing the trace")
            if comp.process_index == 0:
                layout = {"processes": comp.processes, "workers": comp.workers_per_process}
                write_atomic(Path(self.trace_dir) / "graph.json",
                             json.dumps(dict(self.graph, **layout)).encode(), sync=False)
                for old in Path(self.trace_dir).glob("*.jsonl"):    # an older, larger run's
                    stem = old.stem.split("-")
                    if len(stem) == 2 and stem[1].isdigit() and int(stem[1]) >= (
                            comp.workers if stem[0] == "worker" else comp.processes):
                        old.unlink()
        sink = self._sink()
        if sink is not None:
            self.sink = sink
            self.reporter = _monitor().Reporter(self.snapshot, sink)

    def _sink(self) -> Optional[Callable[[Dict[str, Any]], None]]:
        opts = self.comp.options
        port, url = opts["monitor"], opts["report_to"]
        token = _monitor().report_token(resolve_secret(opts["secret"]))
        if url is None and port is not None:
            self.server = _monitor().local_server(port)
            if self.server is not None and not self.server.busy:
                self.server = None          # an earlier run's: this one starts afresh
            if self.server is None and self.comp.process_index == 0:
                self.server = _monitor().serve(port, token)
                self.server.busy = self._served = True
                if port == 0:
                    _monitor().announce(self.server)
            if self.server is not None:
                return self.server.state.update
            url = f"http://127.0.0.1:{port}/"
        if url is None:
            return None
        if token is None:
            msg = "monitor: reporting to another process needs the run's secret"
            raise ValueError(msg)
        to: str = url
        key: str = token

        def post(report: Dict[str, Any], timeout: float = 2.0) -> None:
            _monitor().post_report(to, key, report, timeout)
        return post

    def snapshot(self) -> Dict[str, Any]:
        """This process's part of the monitor page."""
        comp = self.comp
        failure = comp.failure
        return {
            "process": comp.process_index, "processes": comp.processes, "graph": self.graph,
            "workers": [m.snapshot() for m in self.meters],
            "checkpoints": comp.checkpoint_stats[-_monitor().SHOWN_CHECKPOINTS:],
            "checkpoints_taken": 0 if comp.coordinator is None else comp.coordinator.taken,
            "failure": None if failure is None else f"{type(failure).__name__}: {failure}",
            "finished": all(m.finished for m in self.meters),
            "epochs_fed": comp.epochs_fed,
        }

    def checkpoint(self, stats: Dict[str, Any]) -> None:
        if self.process_meter is not None:
            self.process_meter.event("checkpoint", **stats)

    def failed(self, exc: BaseException) -> None:
        if self.process_meter is not None:
            self.process_meter.event("failure", process=self.comp.process_index,
                                     error=f"{type(exc).__name__}: {exc}")

    def stopped(self, reason: str) -> None:
        """The process is stopped from outside (SIGTERM) and exits at once: say so in its
        trace, write what its workers' trace files still keep in memory, and send the
        monitor its last state."""
        if self.process_meter is not None:
            self.process_meter.event("stopped", process=self.comp.process_index, reason=reason)
        for m in self.meters:
            m.flush()
        if self.sink is not None and self.server is None:
            try:                     # the last state, for the page (briefly: the launcher waits)
                self.sink(self.snapshot(), timeout=0.5)
            except Exception:  # noqa: BLE001 - the page is a diagnostic
                pass

    def _flush_due(self) -> None:
        for m in self.meters:
            m.flush_if_due()

    def close(self) -> None:
        """The computation ended: the last report, trace files closed."""
        if self.flusher is not None:
            self.flusher.stop()
        if self.reporter is not None:
            self.reporter.stop()
        if self.process_meter is not None:
            self.process_meter.close()
        if self._served and self.server is not None:
            self.server.busy = False


class Watch:
    """What the starting process runs for a ``monitor=``/``progress=`` run: the page's server and
    the terminal progress, both fed by the processes' reports."""

    def __init__(self, server: monitor.MonitorServer, console: Optional[ConsoleProgress]):
        self.server = server
        self.console = console

    def restarted(self, exc: BaseException) -> None:
        """An attempt failed and the run restarts from its last checkpoint."""
        self.server.state.restarted(f"{type(exc).__name__}: {exc}")

    def ended(self, exc: BaseException) -> None:
        """The run failed (as the launcher saw it: a killed process reports nothing)."""
        self.server.state.ended(f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        """The run ended: the last progress line (the page stays served; a server that only
        fed the progress line stops)."""
        if self.console is not None:
            self.console.stop()
        self.server.busy = False
        if not self.server.readable:
            self.server.close()


def watch(options: Dict[str, Any], secret: Any, in_process: bool):
    """Start the monitor's server (and the terminal progress) for a run started here; returns
    the options for the run's processes and the :class:`Watch` (None when neither is asked)."""
    port, progress = options.get("monitor"), options.get("progress")
    if port is None and not progress:
        return options, None
    # Without monitor=, the server only gathers the processes' reports for the progress line:
    # it serves nothing another local user could read.
    server = _monitor().serve(port if port is not None else 0,
                              _monitor().report_token(resolve_secret(secret)),
                              readable=port is not None)
    server.busy = True                  # until Watch.stop: another run here cannot take it
    if port == 0:
        _monitor().announce(server)
    # The processes show no progress of their own when this one shows it (progress=True).
    shown = None if progress is None else False
    if in_process:
        options = dict(options, monitor=server.port, progress=shown)
    else:
        options = dict(options, monitor=None, report_to=server.url, progress=shown)
    console = ConsoleProgress(server.state.view) if progress else None
    return options, Watch(server, console)
