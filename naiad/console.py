"""Progress of a long run in the terminal: epochs completed, loop iterations, records per second.

``execute(..., progress=True)`` (and ``naiad.spark.execute``) reads the same reports as the
monitor page (:mod:`naiad.monitor`), in the process that started the run, so it covers every
process.  On a terminal (stderr is a TTY) it is a live tqdm line; otherwise it writes one plain
line to stderr per ``interval`` seconds, for logs.  The figures:

* epochs completed: every epoch before the least epoch still in the frontier of any stage;
* iteration: the highest loop counter in the frontier at that epoch (for iterative programs);
* records/s: records received by all stages, over the last :data:`RATE_WINDOW` seconds (a
  logged line: since the previous one; the final line: over the whole run).

Without ``progress=`` (``None``), :class:`FrontierProgress` shows a run that lasts longer than
:data:`LONG_RUN` seconds, from process 0's own view of the frontier (nothing is metered): epochs
complete, the iteration, and their rates; on a terminal a live line, otherwise INFO records of
the ``naiad.progress`` logger.

>>> line = describe({"epochs_complete": 3, "iteration": 7, "rate": 125000.0, "records": 10**6,
...                  "done": False})
>>> line
'3 epochs complete, iteration 7, 125,000 records/s, 1,000,000 records'
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional

from naiad.ticker import Ticker

__all__ = ["summary", "describe", "ConsoleProgress", "LONG_RUN", "frontier_summary",
           "describe_frontier", "FrontierProgress", "frontier_view"]


def summary(view: Dict[str, Any], previous: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The figures shown, from a monitor view (``MonitorState.view()``)."""
    records = sum(sum(w.get("stage_in", {}).values()) for w in view["workers"])
    least = None
    iteration = None
    seen = False
    for w in view["workers"]:
        for times in w.get("frontiers", {}).values():
            seen = True
            for t in times:
                if least is None or t[0] < least:
                    least, iteration = t[0], None
                if t[0] == least and t[1]:
                    iteration = max(iteration or 0, t[1][-1])
    failed = bool(view.get("failure"))
    done = failed or bool(view.get("finished")) or (seen and least is None)
    if previous is not None and view["now"] > previous["now"]:
        rate = max(0.0, (records - previous["records"]) / (view["now"] - previous["now"]))
    else:                # the first line: the average since the run started
        rate = records / max(view["now"], 1e-3)
    if done:             # the final line: the average over the whole run
        rate = records / max(view["now"], 1e-3)
    if failed:           # what completed before the failure, not what was fed
        complete = least if least is not None else view.get("epochs_fed", 0)
    else:
        complete = view.get("epochs_fed", 0) if done else (least or 0)
    return {"epochs_complete": complete, "iteration": iteration, "rate": rate,
            "records": records, "done": done, "failed": failed, "now": view["now"]}


def describe(s: Dict[str, Any]) -> str:
    """One line of text for a summary."""
    parts = [f"{s['epochs_complete']} epoch{'s' if s['epochs_complete'] != 1 else ''} complete"]
    if s["iteration"] is not None:
        parts.append(f"iteration {s['iteration']}")
    parts.append(f"{s['rate']:,.0f} records/s")
    parts.append(f"{s['records']:,} records")
    return ", ".join(parts) + _ending(s)


def _ending(s: Dict[str, Any]) -> str:
    """How a summary's line ends: `` (failed)``, `` (finished)`` or nothing while it runs."""
    return " (failed)" if s.get("failed") else " (finished)" if s["done"] else ""


def _tqdm() -> Any:
    """tqdm, imported when a live line is first shown: it is only needed on a terminal, and
    importing it (with its version and CLI machinery) costs every process of every run ~8 ms."""
    import tqdm

    return tqdm.tqdm


class ConsoleProgress:
    """Shows ``view()`` (a monitor view) on stderr every ``interval`` seconds until stopped."""

    delay = 0.0          # seconds before the first line

    def __init__(self, view: Callable[[], Dict[str, Any]], interval: Optional[float] = None,
                 stream: Any = None):
        self.view = view
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (0.5 if self.tty else 5.0)
        self.bar: Any = None                # the live line, made at the first one shown
        self.last: Optional[Dict[str, Any]] = None
        # The summaries of the last RATE_WINDOW seconds: rates are measured from the oldest
        # (over one half-second interval, one epoch a second read 2.0 or nothing).
        self._past: Deque[Dict[str, Any]] = deque()
        self.lines = 0
        self.started = time.monotonic()
        self._ticker = Ticker(self._show, self.interval, "naiad-console",
                              "showing the progress line")

    def anchor(self) -> Optional[Dict[str, Any]]:
        """The summary the next rates are measured from."""
        return self._past[0] if self._past else None

    def summarize(self, view: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return summary(view, self.anchor()) if view.get("workers") else None

    def describe(self, s: Dict[str, Any]) -> str:
        return describe(s)

    def postfix(self, s: Dict[str, Any]) -> str:
        post = f"{s['rate']:,.0f} records/s"
        post = f"iteration {s['iteration']}, {post}" if s["iteration"] is not None else post
        return post + _ending(s) if s.get("failed") else post

    def emit(self, text: str) -> None:
        print(f"naiad: {text}", file=self.stream, flush=True)

    def _show(self) -> None:
        if time.monotonic() - self.started < self.delay:
            return
        s = self.summarize(self.view())
        if s is None:
            return
        self.last = s
        self._past.append(s)
        while len(self._past) > 1 and s["now"] - self._past[0]["now"] > RATE_WINDOW:
            self._past.popleft()
        if self.tty:
            if self.bar is None:
                self.bar = _tqdm()(total=None, unit="epoch", desc="naiad", file=self.stream,
                                   initial=s["epochs_complete"],
                                   bar_format="{desc}: {n} epochs complete{postfix}")
            self.bar.n = s["epochs_complete"]
            self.bar.set_postfix_str(self.postfix(s), refresh=True)
        else:
            self.emit(self.describe(s))
            self.lines += 1

    def stop(self) -> None:
        """Show the final state (if a line was shown, once the delay is over) and stop."""
        self._ticker.stop()
        if self.bar is not None:
            self.bar.close()


LONG_RUN = 5.0
"""Seconds a run goes on before ``progress=None`` (the default) starts showing its progress."""

RATE_WINDOW = 5.0
"""Seconds over which a live line measures its rates (a logged line: since the last one)."""


def frontier_summary(view: Dict[str, Any],
                     previous: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The figures of the default progress line, from one process's view of the frontier (no
    meters): ``view`` holds ``times`` (of the active pointstamps), ``epochs_fed``, ``done``
    and ``now`` (seconds).  Rates are since ``previous``: epochs, and iterations while the
    least epoch is in a loop.

    >>> from naiad.progress.timestamp import Timestamp
    >>> first = frontier_summary({"times": [Timestamp(3, (4,)), Timestamp(5)], "epochs_fed": 6,
    ...                           "done": False, "now": 10.0})
    >>> later = frontier_summary({"times": [Timestamp(3, (8,))], "epochs_fed": 6,
    ...                           "done": False, "now": 12.0}, first)
    >>> describe_frontier(later)
    '3 epochs complete, iteration 8 (2.0 iterations/s)'
    """
    least: Optional[int] = None
    iteration: Optional[int] = None
    for t in view["times"]:
        if least is None or t.epoch < least:
            least, iteration = t.epoch, None
        if t.epoch == least and t.counters:
            iteration = max(iteration or 0, t.counters[-1])
    failed = bool(view.get("failed"))
    done = failed or bool(view["done"])
    if failed:
        complete = least if least is not None else view["epochs_fed"]
    else:
        complete = view["epochs_fed"] if done or least is None else least
    epoch_rate = iteration_rate = None
    if previous is not None and view["now"] > previous["now"]:
        dt = view["now"] - previous["now"]
        epoch_rate = max(0.0, (complete - previous["epochs_complete"]) / dt)
        if (iteration is not None and previous["iteration"] is not None
                and complete == previous["epochs_complete"]):
            iteration_rate = max(0.0, (iteration - previous["iteration"]) / dt)
    return {"epochs_complete": complete, "iteration": iteration, "epoch_rate": epoch_rate,
            "iteration_rate": iteration_rate, "done": done, "failed": failed, "now": view["now"]}


def describe_frontier(s: Dict[str, Any]) -> str:
    """One line of text for a :func:`frontier_summary`."""
    n = s["epochs_complete"]
    parts = [f"{n} epoch{'s' if n != 1 else ''} complete"]
    if s["epoch_rate"]:
        parts[0] += f" ({s['epoch_rate']:,.1f} epochs/s)"
    if s["iteration"] is not None:
        it = f"iteration {s['iteration']}"
        if s["iteration_rate"] is not None:
            it += f" ({s['iteration_rate']:,.1f} iterations/s)"
        parts.append(it)
    return ", ".join(parts) + _ending(s)


def frontier_view(comp: Any) -> Dict[str, Any]:
    """What the default progress line shows: the view of the frontier of ``comp`` (a
    :class:`~naiad.Computation`) in its process."""
    workers = comp.local_workers
    live = [w for w in workers if not w.finished]
    failed = comp.failure is not None
    # A failed run's workers stopped where it failed: their frontier says what completed.
    seen = live or (workers if failed else [])
    return {"times": seen[0].tracker.active_times() if seen else [],
            "epochs_fed": comp.epochs_fed, "done": not live, "failed": failed,
            "now": time.monotonic()}


class FrontierProgress(ConsoleProgress):
    """The default progress of a long run (``progress=None``), shown by process 0 from its own
    view of the frontier once the run has lasted :data:`LONG_RUN` seconds: a live line when
    stderr is a terminal, else INFO records of the ``naiad.progress`` logger (one per
    ``interval``).  Nothing is metered, and a short run shows nothing."""

    delay = LONG_RUN

    def __init__(self, view: Callable[[], Dict[str, Any]], stream: Any = None,
                 emit: Optional[Callable[[str], None]] = None):
        self.log = logging.getLogger("naiad.progress")
        self._emit = emit              # where each line goes instead of the logger
        stream = stream if stream is not None else sys.stderr
        tty = emit is None and bool(getattr(stream, "isatty", lambda: False)())
        super().__init__(view, interval=0.5 if tty else 10.0, stream=stream)
        self.tty = tty

    @staticmethod
    def wanted(stream: Any = None) -> bool:
        """Whether anything would be shown: stderr is a terminal, or the logger takes INFO."""
        stream = stream if stream is not None else sys.stderr
        return (bool(getattr(stream, "isatty", lambda: False)())
                or logging.getLogger("naiad.progress").isEnabledFor(logging.INFO))

    def summarize(self, view: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        return frontier_summary(view, self.anchor())

    def describe(self, s: Dict[str, Any]) -> str:
        return describe_frontier(s)

    def postfix(self, s: Dict[str, Any]) -> str:
        parts = [f"{s['epoch_rate']:,.1f} epochs/s"] if s["epoch_rate"] else []
        if s["iteration"] is not None:
            rate = s["iteration_rate"]
            parts.append(f"iteration {s['iteration']}"
                         + (f" ({rate:,.1f} iterations/s)" if rate is not None else ""))
        return ", ".join(parts) + (_ending(s) if s.get("failed") else "")

    def emit(self, text: str) -> None:
        if self._emit is not None:
            self._emit(text)
        else:
            self.log.info("naiad: %s", text)
