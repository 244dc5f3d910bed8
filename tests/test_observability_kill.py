"""A process killed with SIGKILL, seen in the trace and on the monitor page: the survivors'
events up to the launcher's stop are written (not lost in memory), the launcher records the
failure the killed process cannot, and the page shows it, or, when the run recovers, the
restart and every attempt's checkpoints."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import linq  # noqa: F401 - the fluent methods
import naiad
import stages
from naiad import monitor
from naiad.tracing import read_trace, summarize

EPOCHS = 8


class _KillAt5(naiad.Vertex):
    """Process 1's vertex kills its process when epoch 5 reaches it (once, if ``flag`` is a
    path: a restarted run goes on)."""

    def __init__(self, flag: str):
        super().__init__()
        self.flag = flag

    def on_recv_batch(self, edge, messages, time_):
        if time_.epoch == 5 and self.index == 1 and not os.path.exists(self.flag):
            Path(self.flag).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        self.send_batch_by(0, messages, time_)


def _program(flag: str):
    def program(comp):
        inp = comp.new_input(name="numbers")
        stages.unary(inp.stream, lambda: _KillAt5(flag), partition_by=lambda r: r,
                     name="fragile").collect()
        comp.activate()
        for e in range(EPOCHS):
            inp.on_next([e * 2, e * 2 + 1])
            time.sleep(0.05)
        inp.on_completed()
        comp.join(timeout=60)
        return True
    return program


def _events(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_process_and_the_survivors_are_in_the_trace(tmp_path):
    trace = tmp_path / "trace"
    with pytest.raises(naiad.errors.ComputationFailed, match="killed by SIGKILL"):
        naiad.execute(_program(str(tmp_path / "killed")), processes=2, trace=trace)
    survivor = _events(trace / "process-0.jsonl")
    assert [e["ev"] for e in survivor] == ["start", "stopped"]
    assert "SIGTERM" in survivor[1]["reason"]
    runs = [e for e in _events(trace / "worker-0.jsonl") if e["ev"] == "run"]
    assert {e["t"][0] for e in runs} >= {0, 1, 2, 3, 4}     # its work before the kill
    assert any(e["ev"] == "start" for e in _events(trace / "worker-1.jsonl"))
    [launcher] = _events(trace / "launcher.jsonl")
    assert launcher["ev"] == "failure" and "process 1" in launcher["error"]
    text = summarize(read_trace(str(trace)))
    assert "failure as the launcher saw it: ComputationFailed: process 1" in text, text
    assert "killed by SIGKILL" in text


def test_a_recovered_kill_is_named_in_the_attempts_trace(tmp_path):
    trace = tmp_path / "trace"
    naiad.execute(_program(str(tmp_path / "killed")), processes=2, trace=trace,
                  checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    t = read_trace(str(trace))
    assert len(t.attempts) == 1
    cuts = {e["epoch"] for e in t.attempts[0] if e["ev"] == "checkpoint"}
    assert {2, 4} <= cuts                           # the failed attempt's checkpoints
    text = summarize(t)
    assert "attempt 1 of 2 failed, as the launcher saw it: ComputationFailed: process 1" in text
    assert not list(t.of("failure"))


def _port(err: str) -> int:
    assert "naiad: monitoring page at http://127.0.0.1:" in err, err
    return int(err.split("http://127.0.0.1:")[1].split("/")[0])


def test_the_page_shows_a_killed_process(tmp_path, capfd):
    with pytest.raises(naiad.errors.ComputationFailed, match="killed by SIGKILL"):
        naiad.execute(_program(str(tmp_path / "killed")), processes=2, monitor=0)
    view = monitor.local_server(_port(capfd.readouterr().err)).state.view()
    assert view["failure"].startswith("ComputationFailed: process 1")
    assert "killed by SIGKILL" in view["failure"]


def test_the_page_shows_a_restart_and_every_attempts_checkpoints(tmp_path, capfd):
    naiad.execute(_program(str(tmp_path / "killed")), processes=2, monitor=0,
                  checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    view = monitor.local_server(_port(capfd.readouterr().err)).state.view()
    assert view["failure"] is None and view["finished"]
    [restart] = view["restarts"]
    assert restart.startswith("ComputationFailed: process 1") and "SIGKILL" in restart
    assert [c["epoch"] for c in view["checkpoints"]] == [2, 4, 6]


def test_an_idle_workers_events_are_written_before_a_kill(tmp_path):
    """Process 1 runs epochs 0-2, idles 2 s, and is killed: its worker wrote nothing after
    those epochs, and their events are on disk all the same (its process's flusher wrote
    them FLUSH_SECONDS after they happened)."""
    trace = tmp_path / "trace"

    def program(comp):
        inp = comp.new_input(name="n")
        probe = inp.stream.probe()
        inp.stream.collect()
        comp.activate()
        for e in range(3):
            inp.on_next([e, e + 100])
        probe.wait(2, timeout=30)
        time.sleep(2.0)
        if comp.process_index == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5)
        inp.on_completed()
        comp.join(timeout=30)
    with pytest.raises(naiad.errors.ComputationFailed, match="killed by SIGKILL"):
        naiad.execute(program, processes=2, trace=trace)
    runs = [e for e in _events(trace / "worker-1.jsonl") if e["ev"] == "run"]
    assert {e["t"][0] for e in runs} == {0, 1, 2}


@pytest.mark.parametrize("later", ["execute", "computation"])
def test_a_later_run_does_not_inherit_the_launchers_failure(tmp_path, later):
    """A failed execute(trace=DIR) leaves the launcher's view of its failure: a later execute
    removes it, and one made as a Computation(trace=DIR) (no launcher to remove it) does not
    read it (it was summarized as failing too)."""
    trace = tmp_path / "trace"

    def program(fail):
        def run(comp):
            inp = comp.new_input(name="x")
            inp.stream.collect()
            comp.activate()
            for e in range(3):
                inp.on_next([e])
            if fail and comp.process_index == 1:
                raise RuntimeError("boom in process 1")
            inp.on_completed()
            comp.join(timeout=30)
        return run
    with pytest.raises(RuntimeError, match="boom in process 1"):
        naiad.execute(program(True), processes=2, trace=trace)
    assert (trace / "launcher.jsonl").exists()
    if later == "execute":
        naiad.execute(program(False), processes=2, trace=trace)
        assert not (trace / "launcher.jsonl").exists()
    else:
        from naiad.computation import run_program
        time.sleep(0.05)                   # (file times of the two runs apart)
        run_program(program(False), naiad.Computation(trace=str(trace)))
    assert "fail" not in summarize(read_trace(str(trace)))


def _paced_named(name: str, epochs: int):
    def program(comp):
        import time as clock
        inp = comp.new_input(name=name)
        inp.stream.collect()
        comp.activate()
        for e in range(epochs):
            inp.on_next([e])
            clock.sleep(0.1)
        inp.on_completed()
        comp.join(timeout=60)
        return name
    return program


def test_a_second_run_in_one_process_does_not_take_a_page_in_use():
    """Two runs of one process on one monitor port: the second reset the first's page and
    replaced its key, so the page flipped between the two graphs (or, with processes=2,
    refused the first run's reports). The second now fails, naming the port; a later run
    reuses the port once the first has ended."""
    import threading
    import urllib.request
    from naiad.testing import free_ports
    port = free_ports(1)[0]
    first = threading.Thread(target=naiad.execute, args=(_paced_named("alpha", 30),),
                             kwargs=dict(monitor=port, processes=2), daemon=True)
    first.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:           # the first run's page is up
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    with pytest.raises(OSError, match=f"127.0.0.1:{port} serves the page of another run"):
        naiad.execute(_paced_named("beta", 2), monitor=port)
    first.join(timeout=60)

    def stages_shown():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5) as r:
            return {s["name"] for s in json.load(r)["graph"]["stages"]}
    assert "alpha" in stages_shown()
    assert naiad.execute(_paced_named("gamma", 2), monitor=port) == ["gamma"]
    assert "gamma" in stages_shown() and "alpha" not in stages_shown()


def _fails_once(flag: str):
    def program(comp):
        inp = comp.new_input(name="nums")

        def check(x):
            if x == 7 and not os.path.exists(flag):
                open(flag, "w").close()
                raise RuntimeError("planted once")
            return x
        inp.stream.select(check).collect()
        comp.activate()
        for e in range(10):
            inp.on_next([e] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=60)
    return program


def test_the_summary_counts_the_checkpoints_of_every_attempt(tmp_path):
    """After a restart, the summary listed only the last attempt's checkpoints (the page and
    list_checkpoints all of them)."""
    from naiad.recovery.store import list_checkpoints
    trace, root = tmp_path / "trace", tmp_path / "ckpt"
    naiad.execute(_fails_once(str(tmp_path / "flag")), processes=2, trace=str(trace),
                  checkpoint_dir=str(root), checkpoint_every=2)
    taken = list_checkpoints(str(root))
    text = summarize(read_trace(str(trace)))
    line = next(x for x in text.splitlines() if x.startswith("checkpoints:"))
    assert "attempt 1 of 2 failed" in text, text
    assert 2 in taken and 8 in taken, taken
    epochs = line.split("(epochs ")[1].split(";")[0]
    assert {2, 8} <= {int(e) for e in epochs.split(", ")}, line
