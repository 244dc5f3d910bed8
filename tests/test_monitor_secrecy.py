"""What the monitor's server lets other local users read or learn, tried through real sockets.

* ``progress=True`` without ``monitor=`` gathers the processes' reports on a loopback port of
  the launcher; that server must serve neither the page nor ``/state`` (which quote failure
  messages) to whoever finds the port.
* A report captured by whoever took the page's port first must be no quicker a test of the
  run's passphrase than a captured CURVE handshake: its key goes through scrypt.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Set

import pytest

import naiad
from naiad import monitor


def _listening_ports() -> Set[int]:
    """The loopback TCP ports this process listens on, from /proc (as any user could list
    every port of the machine and then try each)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and inode in mine:                  # LISTEN
            ports.add(int(local.split(":")[1], 16))
    return ports


def _readable(port: int) -> Dict[str, int]:
    """The status of ``/`` and ``/state`` on ``port``, asked as the page's own browser would."""
    got = {}
    for path in ("/", "/state"):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers={"Host": f"127.0.0.1:{port}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                got[path] = response.status
        except urllib.error.HTTPError as exc:
            got[path] = exc.code
        except OSError:
            got[path] = -1
    return got


def _slow_failure(comp):
    """Fails on a record that quotes something private, after a few seconds of epochs."""
    inp = comp.new_input(name="salaries")

    def check(r):
        if "SSN" in r:
            raise ValueError(f"bad record {r!r}")
        return r
    inp.stream.select(check).collect()
    comp.activate()
    for e in range(40):
        inp.on_next([f"row {e}"] if e < 35 or comp.process_index else ["SSN 078-05-1120 alice"])
        time.sleep(0.1)
    inp.on_completed()
    comp.join(timeout=30)


def test_progress_alone_serves_nothing_to_read(capfd):
    before = _listening_ports()
    seen: List[Dict[str, int]] = []
    done = threading.Event()

    def scan():
        while not done.is_set():
            for port in _listening_ports() - before:
                seen.append(_readable(port))
            time.sleep(0.2)
    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        with pytest.raises(naiad.VertexError, match="bad record 'SSN"):
            naiad.execute(_slow_failure, processes=2, progress=True)
    finally:
        done.set()
        scanner.join(timeout=10)
    # (other listeners of the launcher, not HTTP, drop the request: -1)
    assert any(s == {"/": 404, "/state": 404} for s in seen), "the reports' server was not found"
    assert all(set(s.values()) <= {404, -1} for s in seen), {str(s) for s in seen}
    # The progress line is still fed by the processes' reports.
    assert "naiad: " in capfd.readouterr().err
    assert not _listening_ports() - before, "the reports' server outlived the run"


def test_a_captured_report_tests_a_passphrase_only_through_scrypt():
    """A process other than 0 posts its report to 127.0.0.1:PORT, where anyone may listen first.
    Checking a guessed passphrase against the captured signature needs the guess's scrypt."""
    passphrase = "same-in-both"
    thief = socket.create_server(("127.0.0.1", 0))
    port = thief.getsockname()[1]
    captured: List[bytes] = []

    def take():
        conn, _ = thief.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
                    data.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0]):
                data += conn.recv(65536)
            captured.append(data)
            conn.sendall(b"HTTP/1.0 204 No Content\r\n\r\n")
    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    report = {"process": 1, "processes": 2, "workers": [], "graph": {}}
    monitor.post_report(f"http://127.0.0.1:{port}/", monitor.report_token(passphrase), report)
    taker.join(timeout=10)
    thief.close()
    head, body = captured[0].split(b"\r\n\r\n", 1)
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    sent, signature = headers["X-Naiad-Time"], headers["X-Naiad-Signature"]
    assert json.loads(body) == report

    def signs(key: str) -> bool:
        return hmac.compare_digest(signature, monitor._signature(key, sent, body))
    # A key made from the passphrase by a fast hash does not check it ...
    fast = hmac.new(passphrase.encode(), b"naiad-monitor-report", hashlib.sha256).hexdigest()
    assert not signs(fast)
    assert not signs(hashlib.sha256(passphrase.encode()).hexdigest())
    # ... the one made through scrypt, as the CURVE keys are, does.
    master = hashlib.scrypt(passphrase.encode(), salt=b"naiad-curve-v2", n=2 ** 14, r=8, p=1,
                            dklen=32)
    slow = hashlib.sha256(b"naiad-curve-v2\0derived\0monitor-report\0" + master).hexdigest()
    assert signs(slow)
    assert not signs(monitor.report_token("same-in-both!"))


def test_a_refused_report_is_said_once_in_the_log(caplog):
    """Reports signed with another secret than the page's are refused (403): the run goes on,
    and says why its page stays empty, once, not at each of its reports."""
    import logging
    import linq  # noqa: F401 - the operators
    secret = "naiad-key:" + "3c" * 32
    server = monitor.serve(0, monitor.report_token("naiad-key:" + "4d" * 32))
    caplog.set_level(logging.WARNING, logger="naiad.ticker")
    try:
        comp = naiad.Computation(report_to=server.url, secret=secret)
        inp = comp.new_input()
        got = inp.stream.select(lambda x: x + 1).collect()
        comp.activate()
        for epoch in range(3):
            inp.on_next([epoch])
            time.sleep(0.6)                 # past a report's interval (0.5 s) each time
        inp.on_completed()
        comp.join(timeout=30)
        assert sorted(got.records()) == [1, 2, 3]
        said = [r.getMessage() for r in caplog.records if r.name == "naiad.ticker"]
        assert len(said) == 1, said
        assert "reporting to the monitoring page failed" in said[0] and "403" in said[0], said
    finally:
        server.close()


def _report_head(port: int, length: int, sent: str) -> bytes:
    return (f"POST /report HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {length}\r\n"
            f"X-Naiad-Time: {sent}\r\nX-Naiad-Head: {'0' * 64}\r\n"
            f"X-Naiad-Signature: {'0' * 64}\r\n\r\n").encode()


@pytest.mark.timeout(90)
def test_a_stranger_cannot_make_the_server_read_or_hold_much(monkeypatch):
    """Any local user can reach the page's port.  An unsigned report of 8 MB was read whole
    before its signature was checked, each connection held open kept a thread, and nothing
    closed an idle one: 60 such connections held 500 MB and 110 threads of the launcher."""
    monkeypatch.setattr(monitor._Handler, "timeout", 1.0)     # the idle bound, shortened
    server = monitor.serve(0, monitor.report_token("a secret"))
    port = server.port
    try:
        # An unsigned report is refused on its headers, its body never read.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(_report_head(port, 8 << 20, f"{time.time():.6f}") + b"x" * 1000)
            s.settimeout(3)
            assert s.recv(64).split(b" ")[1] == b"403"
        # An idle connection is closed.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            idle.settimeout(10)
            t0 = time.monotonic()
            assert idle.recv(1) == b""
            assert time.monotonic() - t0 < 5
        # Many connections at once hold at most _MAX_CONNECTIONS threads.
        before = threading.active_count()
        crowd = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(100)]
        time.sleep(1.0)
        assert threading.active_count() - before <= monitor._MAX_CONNECTIONS
        for c in crowd:
            c.close()
        # The run's own reports still get through.
        report = {"process": 0, "processes": 1, "workers": [], "graph": {}}
        deadline = time.monotonic() + 10
        while True:
            try:
                monitor.post_report(server.url, monitor.report_token("a secret"), report)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert server.state.view()["reported"] == 1
    finally:
        server.close()


def test_the_report_of_a_large_graph_is_accepted():
    """About 1.4 KB per stage and worker: 1,500 stages at 4 workers made reports over the 8 MB
    the page took, and the page showed nothing (the sender saw only a broken pipe).  Reports
    are read only once their headers carry the run's HMAC, so the bound is 64 MB."""
    server = monitor.serve(0, monitor.report_token("a secret"))
    try:
        report = {"process": 0, "processes": 1, "graph": {},
                  "workers": [{"stages": {str(i): {"name": "s" * 1000} for i in range(9000)}}]}
        assert len(json.dumps(report)) > 8 << 20
        monitor.post_report(server.url, monitor.report_token("a secret"), report, timeout=30)
        assert server.state.view()["reported"] == 1
        too_big = {"process": 0, "processes": 1, "graph": {}, "pad": "x" * (65 << 20)}
        with pytest.raises(ValueError, match="over the 64 MB the page accepts"):
            monitor.post_report(server.url, monitor.report_token("a secret"), too_big)
    finally:
        server.close()


@pytest.mark.timeout(60)
def test_a_client_dripping_bytes_is_cut_off(monkeypatch):
    """The idle bound applied to each read: a client sending a byte every few seconds held
    its connection (and thread) for ever, and 32 of them froze the page and its reports."""
    monkeypatch.setattr(monitor, "_CONNECTION", 3.0)
    server = monitor.serve(0, monitor.report_token("a secret"))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            request = f"GET /state HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode()
            t0 = time.monotonic()
            cut = False
            for byte in request * 4:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    cut = True
                    break
                s.settimeout(1.0)
                try:
                    if s.recv(1) == b"":
                        cut = True
                        break
                except socket.timeout:
                    pass
                if time.monotonic() - t0 > 15:
                    break
            assert cut and time.monotonic() - t0 < 8, time.monotonic() - t0
    finally:
        server.close()
