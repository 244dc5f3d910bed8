"""Seeing a computation: the event trace, the graph picture and the monitor's server."""

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import naiad
import stages
from naiad import monitor
from naiad.tracing import read_trace, summarize


class _Forward(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        if time not in self.seen:
            self.seen.add(time)
            self.notify_at(time)
        self.send_batch_by(0, messages, time)

    def __init__(self):
        super().__init__()
        self.seen = set()

    def on_notify(self, time):
        self.send_by(0, -1, time)


def _traced(comp, epochs=4, per=50):
    inp = comp.new_input(name="numbers")
    fwd = stages.unary(inp.stream, _Forward, partition_by=lambda r: r, name="forward")
    got = fwd.collect()
    comp.activate()
    for e in range(epochs):
        inp.on_next(range(comp.process_index, per, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return {e: len(r) for e, r in got.results.items()}


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 2), (2, 2)])
def test_the_trace_counts_every_record_and_batch(tmp_path, processes, workers):
    naiad.execute(_traced, processes=processes, workers=workers, trace=tmp_path)
    total = processes * workers
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["graph.json"] + [f"worker-{w}.jsonl" for w in range(total)]
                           + [f"process-{p}.jsonl" for p in range(processes)])
    assert all((p.stat().st_mode & 0o077) == 0 for p in tmp_path.iterdir())
    trace = read_trace(str(tmp_path))
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert [s["name"] for s in graph["stages"]] == ["numbers", "forward", "collect_1"]
    forward = [e for e in trace.of("run") if e["stage"] == 1]
    assert sum(e["n"] for e in forward if e["cb"] == "recv") == 4 * 50
    notified = [e for e in forward if e["cb"] == "notify"]
    # One notification per epoch per worker that received records of that epoch.
    assert {e["t"][0] for e in notified} == {0, 1, 2, 3}
    sends = [e for e in trace.of("send") if e["conn"] == 0]
    assert sum(e["n"] for e in sends) == 4 * 50
    assert {e["dst"] for e in sends} == set(range(total))
    inputs = list(trace.of("input"))
    assert sum(e["n"] for e in inputs) == 4 * 50 and {e["epoch"] for e in inputs} == set(range(4))
    assert len(list(trace.of("notify_at"))) == len(notified)
    if total > 1:
        assert any(e["dir"] == "applied" for e in trace.of("progress"))
    assert len(list(trace.of("end"))) == total + processes
    text = summarize(trace)
    assert "forward" in text and "numbers -> forward (exchange(<lambda>))" in text
    assert "slowest epochs" in text


def test_a_failure_is_in_the_trace(tmp_path):
    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, _Boom, name="boom").collect()
        comp.activate()
        inp.on_next([1])
        inp.on_completed()
        comp.join(timeout=30)

    with pytest.raises(naiad.VertexError):
        naiad.execute(program, trace=tmp_path)
    failures = list(read_trace(str(tmp_path)).of("failure"))
    assert failures and "boom" in failures[0]["error"]


class _Boom(naiad.Vertex):
    def on_recv(self, edge, message, time):
        raise RuntimeError("boom")


class _BoomOnce(naiad.Vertex):
    """Fails at epoch 2 while the file named by its stage does not exist, creating it."""

    def on_recv(self, edge, message, time):
        import pathlib
        flag = pathlib.Path(self.stage.name.split("@", 1)[1])
        if time.epoch == 2 and not flag.exists():
            flag.touch()
            raise RuntimeError("boom at epoch 2")
        self.send_by(0, message, time)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_recovered_failure_stays_in_the_trace(tmp_path, processes):
    """A run that restarts after a failure keeps the failed attempt's trace in attempt-1/; the
    summary names the failure; the run's own files are the final attempt's; a later run into
    the same directory clears the old attempts."""
    trace = tmp_path / "trace"
    flag = tmp_path / "failed-once"

    def program(comp):
        inp = comp.new_input()
        out = stages.unary(inp.stream, _BoomOnce, name=f"boom@{flag}").collect()
        comp.activate()
        for e in range(4):
            inp.on_next([e] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=30)
        return out.results

    results = naiad.execute(program, processes=processes, trace=trace,
                            checkpoint_dir=tmp_path / "ckpt", checkpoint_every=1)
    assert sorted(r for part in results for rs in part.values() for r in rs) == [0, 1, 2, 3]
    assert flag.exists() and (trace / "attempt-1").is_dir()
    t = read_trace(str(trace))
    assert len(t.attempts) == 1
    failed = [e for e in t.attempts[0] if e["ev"] == "failure"]
    assert failed and all("boom at epoch 2" in e["error"] for e in failed)
    assert not list(t.of("failure"))                      # the final attempt did not fail
    assert any(e["ev"] == "end" for e in t.events)
    text = summarize(t)
    assert "attempt 1 of 2 failed" in text and "boom at epoch 2" in text
    naiad.execute(_traced, trace=trace)
    assert not (trace / "attempt-1").exists() and not read_trace(str(trace)).attempts


def test_a_trace_directory_others_could_write_is_refused(tmp_path):
    """The trace shows what the run computed, and its files are opened for writing: a
    directory another user could write (or plant links in), or a link to one, is refused;
    one this run creates is 0700 with 0600 files."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match=r"trace directory .*shared .* mode 0o777.*chmod 700"):
        naiad.execute(_traced, trace=shared)
    link = tmp_path / "link"
    precious = tmp_path / "precious"
    (precious / "attempt-1").mkdir(parents=True)       # looks like an earlier run's attempt
    link.symlink_to(precious)
    for processes in (1, 2):
        with pytest.raises(PermissionError, match="symbolic link is not taken"):
            naiad.execute(_traced, trace=link, processes=processes)
    assert (precious / "attempt-1").is_dir()            # nothing was removed through the link
    fresh = tmp_path / "fresh" / "trace"
    naiad.execute(_traced, trace=fresh, processes=2)
    assert fresh.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in fresh.iterdir()} == {0o600}


def test_without_trace_or_monitor_no_worker_is_metered():
    comp = naiad.Computation(workers=2)
    inp = comp.new_input()
    inp.stream.collect()
    comp.activate()
    assert comp.observer is None and all(w.meter is None for w in comp.local_workers)
    inp.on_completed()
    comp.join(timeout=10)


def test_trace_summarize_on_the_command_line(tmp_path):
    naiad.execute(_traced, workers=2, trace=tmp_path)
    out = subprocess.run([sys.executable, "-m", "naiad.cli", "trace", "summarize", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "stages (records in and out" in out and "forward" in out
    missing = subprocess.run([sys.executable, "-m", "naiad.cli", "trace", "summarize",
                              str(tmp_path / "nothing")], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "no trace in" in missing.stderr
    negative = subprocess.run([sys.executable, "-m", "naiad.cli", "trace", "summarize",
                               str(tmp_path), "--slowest", "-2"], capture_output=True, text=True,
                              timeout=60)
    assert negative.returncode == 2 and "-2 is not a count" in negative.stderr


def test_trace_summarize_counts_each_checkpoint_once(tmp_path):
    """Every process records its part of a checkpoint: 2 processes gave "checkpoints: 4
    (epochs 2, 2, 4, 4)"."""
    got = naiad.execute(_checkpointed, processes=2, trace=str(tmp_path / "trace"),
                        checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2)
    from naiad.tracing import read_trace, summarize
    line = [x for x in summarize(read_trace(str(tmp_path / "trace"))).splitlines()
            if x.startswith("checkpoints:")]
    last = sum(stats[-1]["bytes"] for stats in got)
    assert line == [f"checkpoints: 2 (epochs 2, 4; the last {last:,} bytes)"], line


# ---- the picture --------------------------------------------------------------------------------
def _looped(comp):
    inp = comp.new_input(name="numbers")
    loop = naiad.LoopContext(comp, "halve")
    fb = loop.feedback(max_iterations=3, partition_by=lambda r: r)
    body = stages.unary(loop.enter(inp.stream).concat(fb.stream), _Forward, name="step")
    fb.connect(body)
    loop.exit(body).collect()
    comp.activate()
    raise AssertionError("unreachable when drawing")


def test_graph_dot_names_stages_partitioning_and_loop_clusters():
    comp = naiad.Computation()
    with pytest.raises(AssertionError):
        _looped(comp)
    dot = comp.graph_dot()
    for name in ("numbers", "halve.enter", "halve.feedback", "step", "halve.exit", "collect_1"):
        assert f'label="{name}"' in dot
    assert "subgraph cluster_1" in dot and 'label="loop halve"' in dot
    assert 'label="exchange(<lambda>)"' in dot           # the feedback's partitioning
    cluster = dot[dot.index("subgraph cluster_1"):]
    cluster = cluster[:cluster.index("}")]
    assert 'label="step"' in cluster and 'label="numbers"' not in cluster
    assert dot.count(" -> ") == len(comp.graph.connectors)


@pytest.mark.parametrize("activated", [False, True])
def test_graph_dot_draws_a_fused_stage_as_left_out_before_and_after_activate(activated):
    """select_many fused into count: nothing reads its stage. Before activate() it was drawn
    as the path of the data (input -> select_many, and nothing after it)."""
    import linq  # noqa: F401 - the operators
    comp = naiad.Computation()
    lines = comp.new_input(name="lines")
    got = lines.stream.select_many(str.split).count().collect()
    if activated:
        comp.activate()
    dot = comp.graph_dot()
    if activated:
        lines.on_completed()
        comp.join(timeout=30)
        assert got.results == {}
    fused = next(line for line in dot.splitlines() if 'label="select_many(split)"' in line)
    assert "dashed" in fused
    sm = fused.split()[0]
    edge = next(line for line in dot.splitlines() if f"-> {sm}" in line)
    assert "dashed" in edge
    count = next(line.split()[0] for line in dot.splitlines() if 'label="count"' in line)
    assert any(f"-> {count}" in line and "dashed" not in line for line in dot.splitlines())


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz is not installed: sudo apt-get install graphviz")
def test_naiad_graph_renders_svg_with_graphviz(tmp_path):
    out = tmp_path / "graph.svg"
    subprocess.run([sys.executable, "-m", "naiad.cli", "graph", "tests.test_observability:_looped",
                    "-o", str(out)], check=True, timeout=60, capture_output=True)
    svg = out.read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and "halve.feedback" in svg


def test_naiad_graph_says_how_to_install_graphviz_when_it_is_missing(tmp_path):
    env = {"PATH": str(tmp_path), "PYTHONPATH": ":".join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "naiad.cli", "graph",
                           "tests.test_observability:_looped", "-o", str(tmp_path / "g.svg")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1 and "apt-get install graphviz" in proc.stderr
    dot = subprocess.run([sys.executable, "-m", "naiad.cli", "graph",
                          "tests.test_observability:_looped"], capture_output=True, text=True,
                         timeout=60, env=env, check=True).stdout
    assert dot.startswith("digraph naiad {")


# ---- the monitor's server -----------------------------------------------------------------------
def test_reports_need_the_runs_signature_and_cannot_be_replayed():
    server = monitor.serve(0, monitor.report_token("a secret"))
    try:
        report = {"process": 0, "processes": 1, "workers": [], "graph": {}}
        for token in ("", "forged", monitor.report_token("another secret")):
            with pytest.raises(urllib.error.HTTPError) as err:
                monitor.post_report(server.url, token, report)
            assert err.value.code == 403
        assert server.state.view()["reported"] == 0
        monitor.post_report(server.url, monitor.report_token("a secret"), report)
        assert server.state.view()["reported"] == 1
        page = urllib.request.urlopen(server.url).read().decode()
        # What a report carries can be replayed by whoever received it: refused, as is a
        # report signed more than a minute ago; the key itself is never sent.
        import time as clock
        key = monitor.report_token("a secret")
        body = json.dumps(report).encode()

        def post(sent):
            headers = {"X-Naiad-Time": sent, "X-Naiad-Head": monitor._head(key, sent, len(body)),
                       "X-Naiad-Signature": monitor._signature(key, sent, body)}
            assert key not in str(headers)
            request = urllib.request.Request(server.url + "report", data=body, method="POST",
                                             headers=headers)
            return urllib.request.urlopen(request).status
        now = f"{clock.time():.6f}"
        assert post(now) == 204
        for sent in (now, f"{clock.time() - 120:.6f}", "yesterday"):
            with pytest.raises(urllib.error.HTTPError) as err:
                post(sent)
            assert err.value.code == 403, sent
        assert "<title>Naiad monitor</title>" in page and "src=\"http" not in page and "href=\"http" not in page
    finally:
        server.close()


def test_the_page_times_the_run_not_the_server():
    import time as clock
    server = monitor.serve(0)
    try:
        clock.sleep(1.0)                     # the server waits, as it does for a slow start
        before = clock.time()
        naiad.execute(_epochs, monitor=server.port)
        after = clock.time()
        view = server.state.view()
        assert view["finished"]
        # The run's duration, within the run's window: not the server's age.
        assert 0 < view["now"] <= after - before, (view["now"], after - before)
        assert all(t <= view["now"] for t, _ in view["history"])
        clock.sleep(0.3)                     # a finished run's time stands still
        assert server.state.view()["now"] == view["now"]
    finally:
        server.close()


def test_an_idle_run_shows_its_current_frontier(capfd):
    """Frontiers are published at most four times a second; the last move before a worker
    went idle was kept back until the next one, so a run waiting for input showed an old
    epoch (epoch 0 after three epochs had completed)."""
    import time as clock
    server = monitor.serve(0)
    capfd.readouterr()

    def program(comp):
        inp = comp.new_input(name="numbers")
        probe = stages.unary(inp.stream, _Forward, partition_by=lambda r: r,
                             name="forward").probe()
        comp.activate()
        for e in range(3):
            inp.on_next(range(10))
        probe.wait(2, timeout=30)
        clock.sleep(1.5)                     # idle: at least two reports go out meanwhile
        view = server.state.view()
        inp.on_completed()
        comp.join(timeout=30)
        return view

    try:
        view = naiad.execute(program, workers=2, monitor=server.port)[0]
    finally:
        server.close()
    for w in view["workers"]:
        for stage, frontier in w["frontiers"].items():
            assert min(t[0] for t in frontier) == 3, (stage, frontier)


def test_the_page_sums_each_checkpoint_over_the_processes_and_says_where_it_is(tmp_path, capfd):
    """The checkpoints table showed process 0's part only; monitor=0 never said its port."""
    got = naiad.execute(_checkpointed, processes=2, monitor=0,
                        checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2)
    err = capfd.readouterr().err
    assert "naiad: monitoring page at http://127.0.0.1:" in err, err
    port = int(err.split("http://127.0.0.1:")[1].split("/")[0])
    view = monitor.local_server(port).state.view()
    parts = {p: {c["epoch"]: c["bytes"] for c in stats} for p, stats in enumerate(got)}
    assert [c["epoch"] for c in view["checkpoints"]] == [2, 4]
    for c in view["checkpoints"]:
        assert c["processes"] == 2 and c["bytes"] == parts[0][c["epoch"]] + parts[1][c["epoch"]]
    assert parts[1][2] > 10 * parts[0][2]        # process 1's part is the large one


def _many_checkpoints(comp, epochs=30):
    inp = comp.new_input(name="numbers")
    inp.stream.subscribe(lambda epoch, records: None)
    comp.activate()
    for e in range(epochs):
        inp.on_next([e])
    inp.on_completed()
    comp.join(timeout=30)
    return list(comp.checkpoint_stats), comp.observer.snapshot()


def test_a_long_run_keeps_and_reports_only_its_latest_checkpoints(tmp_path, capfd, monkeypatch):
    """checkpoint_stats kept every checkpoint and every report to the page carried them all:
    a long run's memory grew with its checkpoints, and its reports until the page refused them
    (8 MB) and froze.  Now the latest STATS_KEPT are kept, SHOWN_CHECKPOINTS reported, and the
    page says how many were taken (14 here: boundaries 2, 4, ..., 28)."""
    from naiad.recovery import coordinator
    monkeypatch.setattr(coordinator, "STATS_KEPT", 5)
    monkeypatch.setattr(monitor, "SHOWN_CHECKPOINTS", 3)
    (stats, report), = naiad.execute(_many_checkpoints, monitor=0, checkpoint_every=2,
                                     checkpoint_dir=str(tmp_path / "ck"))
    assert [c["epoch"] for c in stats] == [20, 22, 24, 26, 28]
    assert [c["epoch"] for c in report["checkpoints"]] == [24, 26, 28]
    assert report["checkpoints_taken"] == 14
    port = int(capfd.readouterr().err.split("http://127.0.0.1:")[1].split("/")[0])
    view = monitor.local_server(port).state.view()
    assert [c["epoch"] for c in view["checkpoints"]] == [24, 26, 28]
    assert view["checkpoints_taken"] == 14


class _Hoard(naiad.Vertex):
    """Keeps what it is sent; process 1's vertex is sent far more."""

    def __init__(self):
        super().__init__()
        self.kept = []

    def on_recv_batch(self, edge, messages, time_):
        self.kept.extend(messages)


def _checkpointed(comp):
    inp = comp.new_input(name="numbers")
    stages.sink(inp.stream, _Hoard, name="hoard")
    comp.activate()
    for e in range(6):
        inp.on_next(range(2000) if comp.process_index == 1 else range(10))
    inp.on_completed()
    comp.join(timeout=30)
    return list(comp.checkpoint_stats)


def test_the_monitor_listens_on_loopback_only():
    server = monitor.serve(0)
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
    finally:
        server.close()


def _raw(port: int, request: bytes, hang_up: bool = True) -> bytes:
    """``request`` sent over a plain socket, and what came back (without ``hang_up`` the
    connection stays open for writing, as a client streaming a body would keep it)."""
    import socket
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        if hang_up:
            s.shutdown(socket.SHUT_WR)
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    return out


def test_the_monitor_refuses_other_host_names_and_bad_lengths(capfd):
    """A page of another site whose name was rebound to 127.0.0.1 (DNS rebinding) sends its
    own Host: refused. A report with a negative or unreadable Content-Length was read to the
    end of the connection (no size bound) or printed a traceback on the run's stderr."""
    server = monitor.serve(0, monitor.report_token("a secret"))
    port = server.port
    try:
        for host in (b"127.0.0.1", b"localhost"):
            ok = _raw(port, b"GET /state HTTP/1.1\r\nHost: " + host + b":%d\r\n"
                      b"Connection: close\r\n\r\n" % port)
            assert ok.startswith(b"HTTP/1.0 200"), ok[:80]
        for host in (b"attacker.example:%d" % port, b"127.0.0.1", b""):
            for method in (b"GET /state", b"GET /"):
                got = _raw(port, method + b" HTTP/1.1\r\nHost: " + host + b"\r\n"
                           b"Connection: close\r\n\r\n")
                assert got.startswith(b"HTTP/1.0 403"), (host, got[:80])
                assert b"epochs_fed" not in got and b"<title>" not in got
        for length in (b"-1", b"abc", b""):
            # Answered at once: the server does not read on to the end of the connection.
            got = _raw(port, b"POST /report HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                       b"Content-Length: " % port + length + b"\r\n\r\nxxxx", hang_up=False)
            assert got.startswith(b"HTTP/1.0 411"), (length, got[:80])
        _raw(port, b"POST /report HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Len" % port)
        assert urllib.request.urlopen(server.url + "state").status == 200    # still serving
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err


# ---- progress in the terminal -------------------------------------------------------------------
def _epochs(comp, epochs=6):
    inp = comp.new_input(name="numbers")
    probe = stages.unary(inp.stream, _Forward, partition_by=lambda r: r, name="forward").probe()
    comp.activate()
    for e in range(epochs):
        inp.on_next(range(100))
        probe.wait(e, timeout=30)
    inp.on_completed()
    comp.join(timeout=30)


@pytest.mark.parametrize("processes", [1, 2])
def test_progress_is_logged_when_stderr_is_not_a_terminal(capfd, processes):
    naiad.execute(_epochs, processes=processes, progress=True)
    err = capfd.readouterr().err
    last = [line for line in err.splitlines() if line.startswith("naiad: ")][-1]
    assert last.startswith("naiad: 6 epochs complete") and last.endswith("(finished)")
    # Each process feeds 600 records; they reach forward and then the probe, with one
    # end-of-epoch marker per worker and epoch.
    assert f"{processes * (600 * 2 + 6):,} records" in last


def _fails_at_four(comp):
    import linq  # noqa: F401 - Stream.select
    inp = comp.new_input(name="numbers")

    def boom(x):
        if x == 4:
            raise ValueError("four")
        return x
    probe = inp.stream.select(boom).probe()
    comp.activate()
    for e in range(8):
        inp.on_next([e])
        probe.wait(e, timeout=30)
    inp.on_completed()
    comp.join(timeout=30)


@pytest.mark.parametrize("processes", [1, 2])
def test_the_last_progress_line_of_a_failed_run_says_failed(capfd, processes):
    """The run fails at epoch 4: its last line says so, with the 4 epochs completed before
    (not "finished", nor the epochs fed)."""
    with pytest.raises(naiad.VertexError, match="four"):
        naiad.execute(_fails_at_four, processes=processes, progress=True)
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("naiad: ")]
    assert lines and lines[-1].startswith("naiad: 4 epochs complete"), lines
    assert lines[-1].endswith("(failed)"), lines


def _fails_at_four_after_a_while(comp):
    import time
    import linq  # noqa: F401 - Stream.select

    def boom(x):
        if x == 4:
            time.sleep(0.5)          # a line is shown while epoch 4 runs
            raise ValueError("four")
        return x
    inp = comp.new_input(name="numbers")
    probe = inp.stream.select(boom).probe()
    comp.activate()
    for e in range(10):
        inp.on_next([e])
        if e < 4:
            probe.wait(e, timeout=30)
    inp.on_completed()
    comp.join(timeout=30)


def test_the_default_progress_line_of_a_failed_run_says_failed(caplog, monkeypatch):
    """The run fails at epoch 4 with 10 epochs fed: the last line of the default progress
    (process 0's own frontier) said "10 epochs complete ... (failed)", the epochs fed."""
    import logging
    from naiad.console import FrontierProgress
    monkeypatch.setattr(FrontierProgress, "delay", 0.1)
    with caplog.at_level(logging.INFO, logger="naiad.progress"):
        with pytest.raises(naiad.VertexError, match="four"):
            naiad.execute(_fails_at_four_after_a_while)
    lines = [r.getMessage() for r in caplog.records if r.name == "naiad.progress"]
    assert lines and lines[-1].startswith("naiad: 4 epochs complete"), lines
    assert lines[-1].endswith("(failed)"), lines


def test_progress_is_a_live_line_on_a_terminal():
    out = _in_a_terminal("import sys, tests.test_observability as t, naiad; "
                         "naiad.execute(t._slow_epochs, workers=2, progress=True)")
    frames = [f for f in out.split("\r") if "epochs complete" in f]
    assert len(frames) >= 3, out                         # redrawn in place, several times
    assert "naiad: 12 epochs complete" in frames[-1] and "records/s" in frames[-1]


def _in_a_terminal(code: str, timeout: float = 60) -> str:
    """Run ``python -c code`` with a pseudo-terminal as stdin, stdout and stderr; its output."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            out += data
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=timeout) == 0, out
    return out.decode(errors="replace")


@pytest.mark.parametrize("processes", [1, 2])
def test_a_long_run_shows_its_progress_on_a_terminal_by_default(processes):
    """progress=None (the default): once a run has lasted LONG_RUN seconds, process 0 draws a
    live line from its own view of the frontier (epochs, iterations, rates; nothing metered);
    a shorter run shows nothing.  In one process the delay is shortened for the test."""
    # The children of a 2-process run start with the real delay: that run lasts over 6 s.
    short = "import naiad.console as c; c.FrontierProgress.delay = 0.5; " if processes == 1 else ""
    pause = 0.15 if processes == 1 else 0.55
    code = (f"{short}import functools, tests.test_observability as t, naiad; "
            f"naiad.execute(functools.partial(t._slow_epochs, pause={pause}), "
            f"processes={processes})")
    out = _in_a_terminal(code)
    frames = [f for f in out.split("\r") if "epochs complete" in f]
    assert len(frames) >= 3, out                                  # redrawn in place
    assert "naiad: 12 epochs complete" in frames[-1], frames[-1]
    assert any("epochs/s" in f for f in frames), frames
    assert "records/s" not in out                                  # no meters: no records
    quick = _in_a_terminal("import tests.test_observability as t, naiad; "
                           "naiad.execute(t._epochs)")
    assert "epochs complete" not in quick, quick
    if processes == 1:
        off = _in_a_terminal(f"{short}import tests.test_observability as t, naiad; "
                             f"naiad.execute(t._slow_epochs, progress=False)")
        assert "epochs complete" not in off, off


@pytest.mark.parametrize("processes", [1, 2])
def test_the_default_progress_is_logged_when_stderr_is_not_a_terminal(caplog, monkeypatch,
                                                                      processes):
    """Not on a terminal, the default progress goes to the naiad.progress logger (INFO), and
    only when that logger takes INFO: otherwise nothing is started.  With 2 processes, process
    0 sends its lines to the launcher, whose logging the application configured (they went to
    process 0's own logger, which logs nothing); its children keep the real delay, so that run
    lasts over 6 s."""
    import functools
    import logging
    from naiad.console import FrontierProgress
    monkeypatch.setattr(FrontierProgress, "delay", 0.2)
    program = functools.partial(_slow_epochs, pause=0.15 if processes == 1 else 0.55)
    with caplog.at_level(logging.INFO, logger="naiad.progress"):
        naiad.execute(program, processes=processes)
    lines = [r.getMessage() for r in caplog.records if r.name == "naiad.progress"]
    assert lines and lines[-1] == "naiad: 12 epochs complete (finished)", lines
    assert not FrontierProgress.wanted() or sys.stderr.isatty()   # pytest's stderr, INFO off


def _paced(comp):
    """Six epochs 20 ms apart; returns the seconds from activate() to the last epoch's end."""
    inp = comp.new_input(name="numbers")
    probe = stages.unary(inp.stream, _Forward, partition_by=lambda r: r, name="forward").probe()
    comp.activate()
    t0 = time.monotonic()
    for e in range(6):
        time.sleep(0.02)
        inp.on_next(range(100))
        probe.wait(e, timeout=30)
    inner = time.monotonic() - t0
    inp.on_completed()
    comp.join(timeout=30)
    return inner


@pytest.mark.parametrize("processes", [1, 2])
def test_the_final_rate_is_the_average_over_the_whole_run(capfd, processes):
    """A run shorter than one report interval: its final line divided the records by the time
    since the first report, 0, floored at 1 ms (a rate 1,000 times the record count)."""
    t0 = time.monotonic()
    inner = min(naiad.execute(_paced, processes=processes, progress=True))
    elapsed = time.monotonic() - t0
    last = [line for line in capfd.readouterr().err.splitlines()
            if line.startswith("naiad: ")][-1]
    rate, records = (int(part.split()[0].replace(",", "")) for part in last.split(", ")[1:3])
    # (the run's time is read from the workers' clocks and rounded to 1 ms: 10% of slack)
    assert records / elapsed <= rate <= 1.1 * records / inner, (last, elapsed, inner)


def test_the_final_summary_divides_by_the_run_time():
    from naiad.console import summary
    view = {"workers": [{"stage_in": {"a": 1000}}], "finished": True, "now": 2.0,
            "history": [[1.99, 1000]]}
    assert summary(view)["rate"] == 500.0


def test_rates_are_measured_over_seconds_not_one_interval():
    """One epoch a second, looked at every half second: over one interval the rate read 2.0
    or nothing; over the last 5 seconds it reads 1.0 give or take one epoch in the window."""
    from naiad.console import FrontierProgress
    from naiad.progress.timestamp import Timestamp
    clock = {"now": 0.0}

    def view():
        epoch = int(clock["now"])                    # epoch e completes at second e + 1
        return {"times": [Timestamp(epoch)], "epochs_fed": epoch + 1, "done": False,
                "now": clock["now"]}
    lines: list = []
    progress = FrontierProgress(view, emit=lines.append)
    progress.delay = 0.0
    try:
        for step in range(24):                       # 12 s, twice a second
            clock["now"] = step * 0.5
            progress._show()
    finally:
        progress.stop()
    rates = [float(line.split("(")[1].split()[0]) for line in lines[12:]]
    assert all(0.8 <= r <= 1.2 for r in rates), lines


def test_a_looping_run_shows_its_iteration():
    from naiad.console import describe_frontier, frontier_summary
    from naiad.progress.timestamp import Timestamp
    first = frontier_summary({"times": [Timestamp(0, (3,)), Timestamp(1)], "epochs_fed": 2,
                              "done": False, "now": 1.0})
    assert describe_frontier(first) == "0 epochs complete, iteration 3"
    later = frontier_summary({"times": [Timestamp(1)], "epochs_fed": 2, "done": False,
                              "now": 3.0}, first)
    assert describe_frontier(later) == "1 epoch complete (0.5 epochs/s)"
    done = frontier_summary({"times": [], "epochs_fed": 2, "done": True, "now": 4.0}, later)
    assert describe_frontier(done) == "2 epochs complete (1.0 epochs/s) (finished)"


def _slow_epochs(comp, pause=0.15):
    import time
    inp = comp.new_input(name="numbers")
    probe = stages.unary(inp.stream, _Forward, partition_by=lambda r: r, name="forward").probe()
    comp.activate()
    for e in range(12):
        inp.on_next(range(100))
        probe.wait(e, timeout=30)
        time.sleep(pause)
    inp.on_completed()
    comp.join(timeout=30)
