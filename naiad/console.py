"""Progress of a long run in the terminal: epochs completed, loop iterations, records per second.

``execute(..., progress=True)`` (and ``naiad.spark.execute``) reads the same reports as the
monitor page (:mod:`naiad.monitor`), in the process that started the run, so it covers every
process.  On a terminal (stderr is a TTY) it is a live tqdm line; otherwise it writes one plain
line to stderr per ``interval`` seconds, for logs.  The figures:

* epochs completed: every epoch before the least epoch still in the frontier of any stage;
* iteration: the highest loop counter in the frontier at that epoch (for iterative programs);
* records/s: records received by all stages, over the last interval.

>>> line = describe({"epochs_complete": 3, "iteration": 7, "rate": 125000.0, "records": 10**6,
...                  "done": False})
>>> line
'3 epochs complete, iteration 7, 125,000 records/s, 1,000,000 records'
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Optional

from naiad.ticker import Ticker

__all__ = ["summary", "describe", "ConsoleProgress"]


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
    done = bool(view.get("finished")) or (seen and least is None)
    rate = 0.0
    if previous is not None and view["now"] > previous["now"]:
        rate = max(0.0, (records - previous["records"]) / (view["now"] - previous["now"]))
    if done:             # the final line: the average since the first report
        history = view.get("history") or [[0.0, 0]]
        rate = records / max(view["now"] - history[0][0], 1e-3)
    complete = view.get("epochs_fed", 0) if done else (least or 0)
    return {"epochs_complete": complete, "iteration": iteration, "rate": rate,
            "records": records, "done": done, "now": view["now"]}


def describe(s: Dict[str, Any]) -> str:
    """One line of text for a summary."""
    parts = [f"{s['epochs_complete']} epoch{'s' if s['epochs_complete'] != 1 else ''} complete"]
    if s["iteration"] is not None:
        parts.append(f"iteration {s['iteration']}")
    parts.append(f"{s['rate']:,.0f} records/s")
    parts.append(f"{s['records']:,} records")
    text = ", ".join(parts)
    return text + " (finished)" if s["done"] else text


def _tqdm() -> Any:
    """tqdm, imported when a live line is first shown: it is only needed on a terminal, and
    importing it (with its version and CLI machinery) costs every process of every run ~8 ms."""
    import tqdm

    return tqdm.tqdm


class ConsoleProgress:
    """Shows ``view()`` (a monitor view) on stderr every ``interval`` seconds until stopped."""

    def __init__(self, view: Callable[[], Dict[str, Any]], interval: Optional[float] = None,
                 stream: Any = None):
        self.view = view
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (0.5 if self.tty else 5.0)
        self.bar = (_tqdm()(total=None, unit="epoch", desc="naiad", file=self.stream,
                         bar_format="{desc}: {n} epochs complete{postfix}")
                    if self.tty else None)
        self.last: Optional[Dict[str, Any]] = None
        self.lines = 0
        self._ticker = Ticker(self._show, self.interval, "naiad-console")

    def _show(self) -> None:
        view = self.view()
        if not view.get("workers"):
            return
        s = summary(view, self.last)
        self.last = s
        if self.bar is not None:
            self.bar.n = s["epochs_complete"]
            post = f"{s['rate']:,.0f} records/s"
            if s["iteration"] is not None:
                post = f"iteration {s['iteration']}, {post}"
            self.bar.set_postfix_str(post, refresh=True)
        else:
            print(f"naiad: {describe(s)}", file=self.stream, flush=True)
            self.lines += 1

    def stop(self) -> None:
        """Show the final state and stop."""
        self._ticker.stop()
        if self.bar is not None:
            self.bar.close()
