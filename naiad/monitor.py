"""The live monitoring page: a small HTTP server on loopback, fed by every process's reporter.

``execute(..., monitor=PORT)`` serves ``http://127.0.0.1:PORT/`` from the process that called it
(the launcher, or the Spark driver); each process of the computation sends a snapshot of its
workers' counters (:class:`naiad.meter.Meter`) twice a second: directly when it is the serving
process, otherwise as JSON in an HTTP POST to ``/report`` signed with a key derived from the
run's secret (an HMAC of the report and the time it was sent; the key itself never travels, so
whoever receives a report cannot forge another, and a report older than a minute, or seen
before, is refused; nothing received is ever unpickled).  The page itself
(``naiad/monitor_page.html``, shipped in the package, no asset from the internet) polls
``/state`` and draws the graph, each stage's frontier and counts, throughput over time, per-worker
busy time, checkpoints and failures.  The server stays up after the computation ends, so the
last state remains readable until the program exits.

>>> server = serve(0)
>>> server.state.update({"process": 0, "processes": 1, "graph": {"stages": [], "connectors": []},
...                      "workers": [], "checkpoints": [], "failure": None, "epochs_fed": 3})
>>> import json, urllib.request
>>> json.load(urllib.request.urlopen(server.url + "state"))["epochs_fed"]
3
>>> server.close()
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import importlib.resources
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Union

from naiad.ticker import Ticker

__all__ = ["MonitorState", "MonitorServer", "serve", "Reporter", "report_token", "post_report",
           "SHOWN_CHECKPOINTS"]

SHOWN_CHECKPOINTS = 50
"""The page shows the figures of this many checkpoints, the latest, with how many the run took
in all; a process's report carries only those (a long run takes checkpoints without end, and
every report would carry them all)."""

_HISTORY = 600                 # throughput samples kept (5 minutes at 2 per second)
_MAX_REPORT = 64 << 20         # bytes accepted in one report (read only once its headers
                               # carry the run's HMAC: about 1.4 KB per stage and worker)
_MAX_CONNECTIONS = 32          # connections served at once; more are closed at once
_IDLE = 5.0                    # seconds a connection may keep the server waiting for bytes
_CONNECTION = 20.0             # seconds a connection may last in all (a report of 64 MB over
                               # loopback takes well under one)
_servers: Dict[int, "MonitorServer"] = {}
_servers_lock = threading.Lock()


_FRESH = 60.0                  # seconds a signed report stays acceptable


def report_token(secret: Union[str, bytes, None]) -> Optional[str]:
    """The key reports are signed with (None: no secret), derived from the run's secret as its
    CURVE keys are (:func:`naiad.transport.security.derived_key`, through scrypt for a
    passphrase): a captured report tests a guessed passphrase no faster than a handshake."""
    if not secret:
        return None
    from naiad.transport.security import derived_key
    return derived_key(secret, b"monitor-report").hex()


def _signature(token: str, sent: str, body: bytes) -> str:
    return hmac.new(token.encode(), sent.encode() + b"." + body, hashlib.sha256).hexdigest()


def _head(token: str, sent: str, length: int) -> str:
    """What a report's headers carry so that the server checks its sender before it reads the
    body: an HMAC of the time sent and the body's length."""
    return hmac.new(token.encode(), b"head." + sent.encode() + b"." + str(length).encode(),
                    hashlib.sha256).hexdigest()


class MonitorState:
    """The latest snapshot of every process, and totals over time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "lock", threading.Lock()):
            self.processes: Dict[int, Dict[str, Any]] = {}
            self.history: List[List[float]] = []      # [seconds into the run, records processed]
            self.restarts: List[str] = []             # the failures of earlier attempts
            self.earlier: List[Dict[str, Any]] = []   # the checkpoints of earlier attempts
            self.taken_before = 0                     # how many those attempts took
            self.failure: Optional[str] = None        # the run's failure, as its launcher saw it

    def restarted(self, failure: str) -> None:
        """An attempt failed with ``failure``, and the run restarts: its checkpoints stay on
        the page, its processes' reports go (the new attempt's replace them)."""
        with self.lock:
            done = {c["epoch"] for c in self.earlier}
            procs = list(self.processes.values())
            self.earlier = (self.earlier + [c for c in _checkpoints(procs)
                                            if c["epoch"] not in done])[-SHOWN_CHECKPOINTS:]
            self.taken_before = self._taken(procs)
            self.restarts.append(failure)
            self.processes = {}

    def ended(self, failure: str) -> None:
        """The run failed with ``failure``: shown unless a process reported its own."""
        with self.lock:
            self.failure = failure

    def update(self, report: Dict[str, Any]) -> None:
        """Take one process's snapshot."""
        with self.lock:
            self.processes[int(report["process"])] = report
            total = sum(sum(w.get("stage_in", {}).values())
                        for p in self.processes.values() for w in p.get("workers", []))
            now = round(self._elapsed(), 3)
            # One sample per reporting interval, whatever the number of processes reporting.
            if not self.history or now - self.history[-1][0] >= 0.45:
                self.history.append([now, total])
                del self.history[:-_HISTORY]

    def view(self) -> Dict[str, Any]:
        """Everything the page shows, as JSON data."""
        with self.lock:
            procs = [self.processes[p] for p in sorted(self.processes)]
            first = procs[0] if procs else {}
            return {
                "graph": first.get("graph", {"stages": [], "connectors": []}),
                "processes": first.get("processes", 0),
                "reported": len(procs),
                "workers": [w for p in procs for w in p.get("workers", [])],
                "checkpoints": self._all_checkpoints(procs)[-SHOWN_CHECKPOINTS:],
                "checkpoints_taken": self._taken(procs),
                "failure": next((p["failure"] for p in procs if p.get("failure")),
                                self.failure),
                "restarts": list(self.restarts),
                "finished": bool(procs) and all(p.get("finished") for p in procs),
                "epochs_fed": max((p.get("epochs_fed", 0) for p in procs), default=0),
                "history": list(self.history),
                "now": round(self._elapsed(), 3),     # as the history's times
            }

    def _all_checkpoints(self, procs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The checkpoints of earlier attempts and of this one, by epoch."""
        now = _checkpoints(procs)
        if not self.earlier:
            return now
        epochs = {c["epoch"] for c in now}
        return sorted([c for c in self.earlier if c["epoch"] not in epochs] + now,
                      key=lambda c: c["epoch"])

    def _taken(self, procs: List[Dict[str, Any]]) -> int:
        """How many checkpoints the run took, over every attempt."""
        now = max((p.get("checkpoints_taken", len(p.get("checkpoints", []))) for p in procs),
                  default=0)
        return self.taken_before + now

    def _elapsed(self) -> float:
        """How long the run has been going (or went): its longest-running worker's time since
        it started, stopped at its end; not the server's age, which may have served other runs
        or waited for this one to start."""
        return max((w.get("uptime", 0.0) for p in self.processes.values()
                    for w in p.get("workers", [])), default=0.0)


def _checkpoints(procs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The checkpoints the processes reported, one per epoch: the parts' bytes summed, the
    longest pause and time of any process.

    >>> _checkpoints([{"checkpoints": [{"epoch": 2, "bytes": 10, "quiesce_s": 0.1,
    ...                                 "total_s": 0.2}]},
    ...               {"checkpoints": [{"epoch": 2, "bytes": 90, "quiesce_s": 0.3,
    ...                                 "total_s": 0.1}]}])
    [{'epoch': 2, 'bytes': 100, 'quiesce_s': 0.3, 'total_s': 0.2, 'processes': 2}]
    """
    merged: Dict[int, Dict[str, Any]] = {}
    for p in procs:
        for c in p.get("checkpoints", []):
            m = merged.setdefault(c["epoch"], {"epoch": c["epoch"], "bytes": 0, "quiesce_s": 0.0,
                                               "total_s": 0.0, "processes": 0})
            m["bytes"] += c.get("bytes", 0)
            m["quiesce_s"] = max(m["quiesce_s"], c.get("quiesce_s", 0.0))
            m["total_s"] = max(m["total_s"], c.get("total_s", 0.0))
            m["processes"] += 1
    return [merged[e] for e in sorted(merged)]


def _page() -> bytes:
    return importlib.resources.files("naiad").joinpath("monitor_page.html").read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    timeout = _IDLE


    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - quiet by default
        pass

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _local(self) -> bool:
        """Whether the request names this server as the browser reached it (127.0.0.1 or
        localhost and its port): a page of another site, its name rebound to 127.0.0.1 (DNS
        rebinding), would send its own name and is refused."""
        port = self.server.server_address[1]
        if self.headers.get("Host", "") in (f"127.0.0.1:{port}", f"localhost:{port}"):
            return True
        self._send(403, b"this page is served as http://127.0.0.1:PORT/ only", "text/plain")
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._local():
            return
        if not self.server.monitor.readable:
            self._send(404, b"this server only gathers the run's reports for its progress "
                       b"line; run with monitor=PORT for the page", "text/plain")
            return
        path = self.path.split("?")[0]
        if path in ("/", "/index.html"):
            self._send(200, _page(), "text/html; charset=utf-8")
        elif path == "/state":
            body = json.dumps(self.server.monitor.state.view()).encode()
            self._send(200, body, "application/json")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        if not self._local():
            return
        monitor = self.server.monitor
        if self.path != "/report" or monitor.token is None:
            self._send(403, b"reports need the run's signature", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0:
            self._send(411, b"a report needs its Content-Length", "text/plain")
            return
        if length > _MAX_REPORT:
            self._send(413, b"report too large", "text/plain")
            return
        sent = self.headers.get("X-Naiad-Time", "")
        if not monitor.admits(sent, self.headers.get("X-Naiad-Head", ""), length):
            self._send(403, b"reports need the run's signature", "text/plain")
            return       # nothing of a stranger's body is read
        body = self.rfile.read(length)
        if not monitor.accept(self.headers.get("X-Naiad-Time", ""),
                              self.headers.get("X-Naiad-Signature", ""), body):
            self._send(403, b"reports need the run's signature", "text/plain")
            return
        try:
            report = json.loads(body)
            self.server.monitor.state.update(report)
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, f"bad report: {exc}".encode(), "text/plain")
            return
        self._send(204, b"", "text/plain")


class _HTTPServer(ThreadingHTTPServer):
    """One thread per connection, at most :data:`_MAX_CONNECTIONS` at once: any local user can
    connect, and each connection held open would otherwise hold a thread."""

    daemon_threads = True
    request_queue_size = 64          # the listen backlog (5 by default): a burst of connections
    monitor: "MonitorServer"         # waits in the kernel, not in SYN retries

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self._deadlines: Dict[Any, float] = {}       # open connection -> when it is cut
        self._deadlines_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)       # too many at once: closed unanswered
            return
        with self._deadlines_lock:
            self._deadlines[request] = time.monotonic() + _CONNECTION
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self._deadlines_lock:
            self._deadlines.pop(request, None)
        self._slots.release()

    def service_actions(self) -> None:
        """Between polls of the listening socket (twice a second): cut the connections open
        longer than ``_CONNECTION`` (each read waits at most ``_IDLE`` seconds, so a client
        sending a byte now and then would otherwise hold its thread for ever)."""
        now = time.monotonic()
        with self._deadlines_lock:
            late = [r for r, deadline in self._deadlines.items() if deadline < now]
        for request in late:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass                 # closed already

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or sent garbage: nothing to print on the run's stderr."""


class MonitorServer:
    """The page's server on 127.0.0.1:``port``, in a daemon thread."""

    def __init__(self, port: int, token: Optional[str], readable: bool = True):
        try:
            self.httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        except OSError as exc:
            msg = (f"monitor: cannot serve on 127.0.0.1:{port} ({exc.strerror}); choose a free "
                   "port with monitor=PORT, or monitor=0 for any free port")
            raise OSError(exc.errno, msg) from exc
        self.httpd.monitor = self
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.token = token
        self.readable = readable             # False: reports in, no page or /state out
        self.busy = False                    # a run of this process is using it
        self.seen: Dict[str, float] = {}     # signatures accepted in the last _FRESH seconds
        self._seen_lock = threading.Lock()
        self.state = MonitorState()
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="naiad-monitor",
                                       daemon=True)
        self.thread.start()

    def _fresh_token(self, sent: str) -> Optional[str]:
        """The key to check a report sent at ``sent`` with, if it was sent in the last minute
        (by the clock of this machine: reports come over loopback) and reports are taken."""
        try:
            age = time.time() - float(sent)
        except ValueError:
            return None
        return self.token if -_FRESH < age < _FRESH else None

    def admits(self, sent: str, head: str, length: int) -> bool:
        """Whether a report's headers are this run's and fresh (checked before its body is
        read)."""
        token = self._fresh_token(sent)
        return token is not None and hmac.compare_digest(head, _head(token, sent, length))

    def accept(self, sent: str, signature: str, body: bytes) -> bool:
        """Whether a report carries this run's signature, is fresh and was not accepted
        before."""
        token = self._fresh_token(sent)
        if token is None or not hmac.compare_digest(signature, _signature(token, sent, body)):
            return False
        now = time.time()
        with self._seen_lock:
            if signature in self.seen:
                return False
            self.seen = {s: t for s, t in self.seen.items() if now - t < 2 * _FRESH}
            self.seen[signature] = now
        return True

    def close(self) -> None:
        """Stop serving (the page is gone after this)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with _servers_lock:
            for port, s in list(_servers.items()):
                if s is self:
                    del _servers[port]


def serve(port: int, token: Optional[str] = None, readable: bool = True) -> MonitorServer:
    """The server on ``port`` (0: any free port) in this process, started or reused (a new
    computation on the same port starts from an empty page; a run still using it, ``busy``,
    refuses).  ``readable=False`` (a fresh
    server on a free port) takes reports for this process's own use, the terminal's progress
    line, and serves neither the page nor ``/state``."""
    with _servers_lock:
        server = _servers.get(port) if port else None
        if server is not None:
            if server.busy:
                msg = (f"monitor: 127.0.0.1:{port} serves the page of another run of this "
                       "process, still going; choose another port with monitor=PORT, or "
                       "monitor=0 for any free port")
                raise OSError(errno.EADDRINUSE, msg)
            server.state.reset()
            if token is not None:
                server.token = token
            server.readable = server.readable or readable
            return server
        server = MonitorServer(port, token, readable)
        _servers[server.port] = server
        if port:
            _servers[port] = server
        return server


def announce(server: MonitorServer) -> None:
    """Say where the page of a server on a port of its choosing (``monitor=0``) is: on stderr,
    and as an INFO record of the ``naiad.monitor`` logger."""
    print(f"naiad: monitoring page at {server.url}", file=sys.stderr, flush=True)
    import logging
    logging.getLogger("naiad.monitor").info("monitoring page at %s", server.url)


def local_server(port: int) -> Optional[MonitorServer]:
    """The server this process runs on ``port``, if any."""
    with _servers_lock:
        return _servers.get(port)


def post_report(url: str, token: str, report: Dict[str, Any], timeout: float = 2.0) -> None:
    """Send one snapshot to a monitor served by another process."""
    body = json.dumps(report).encode()
    if len(body) > _MAX_REPORT:
        msg = (f"a report of {len(body) >> 20} MB is over the {_MAX_REPORT >> 20} MB the page "
               "accepts (it grows with stages x workers of a process); the page will not show "
               "this process")
        raise ValueError(msg)
    sent = f"{time.time():.6f}"
    req = urllib.request.Request(url + "report", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Naiad-Time": sent,
                                          "X-Naiad-Head": _head(token, sent, len(body)),
                                          "X-Naiad-Signature": _signature(token, sent, body)})
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            pass
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (BrokenPipeError, ConnectionResetError)):
            msg = ("the page closed the connection before taking the report: it refuses a "
                   "report not signed with this run's secret (another run serves that port?) "
                   f"before reading it ({exc.reason})")
            raise ConnectionError(msg) from exc
        raise


class Reporter(Ticker):
    """Sends ``snapshot()`` to ``sink`` every ``interval`` seconds until stopped, then once more."""

    def __init__(self, snapshot: Callable[[], Dict[str, Any]],
                 sink: Callable[[Dict[str, Any]], None], interval: float = 0.5):
        super().__init__(lambda: sink(snapshot()), interval, "naiad-reporter",
                         "reporting to the monitoring page")
