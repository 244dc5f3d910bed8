"""A daemon thread that calls a function every ``interval`` seconds, and once more when stopped.

Used for what watches a run from the side (the monitor's reports, the terminal progress): a
failure of the function is counted, never raised, since a view must not fail the computation;
it is logged as a warning of the ``naiad.ticker`` logger, once for each different error (a page
that stopped updating says why, once, not twice a second).

>>> calls = []
>>> t = Ticker(lambda: calls.append(1), interval=60, name="demo")
>>> t.stop()
>>> calls
[1]
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

__all__ = ["Ticker"]


class Ticker:
    """Calls ``fn()`` every ``interval`` seconds until :meth:`stop`, then a last time."""

    def __init__(self, fn: Callable[[], None], interval: float, name: str, what: str = ""):
        self.fn = fn
        self.what = what or name
        self.interval = interval
        self.errors = 0
        self.last_error: Optional[str] = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _call(self) -> None:
        try:
            self.fn()
        except Exception as exc:  # noqa: BLE001 - a view of the run must not fail the run
            self.errors += 1
            said = f"{type(exc).__name__}: {exc}"
            if said != self.last_error:
                self.last_error = said
                import logging   # here: only a failing view needs it
                logging.getLogger("naiad.ticker").warning(
                    "%s failed (the run goes on; said again only if the error changes): %s",
                    self.what, said)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._call()

    def stop(self) -> None:
        """Stop, after a last call (the final state)."""
        self._stop.set()
        self.thread.join(timeout=5.0)
        self._call()
