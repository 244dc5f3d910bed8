"""Several processes over ZeroMQ: processes started by hand, failures, security, mismatches."""

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

import naiad
import stages
from naiad.testing import free_ports, run
from naiad.transport.security import needs_authentication
from tests import dist_programs, launch_programs, procfs

ROOT = Path(__file__).resolve().parents[1]


def expected_wordcount():
    words = "the quick brown fox jumps over the lazy dog the end".split()
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return counts


def test_processes_started_by_hand_with_naiad_flags():
    ports = free_ports(2)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    env = dict(os.environ, PYTHONPATH=str(ROOT), NAIAD_SECRET="hand-started test secret")
    procs = [subprocess.Popen([sys.executable, "-m", "naiad.cli", "run",
                               "tests.dist_programs:wordcount", "-p", str(i), "-n", "2",
                               "-t", "2", "-h", *hosts],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=ROOT)
             for i in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    merged = {}
    for out, _ in outs:
        for word, n in eval(out.strip().splitlines()[-1]):
            assert word not in merged, "a key reached two processes"
            merged[word] = n
    assert merged == expected_wordcount()


def test_execute_returns_one_result_per_process():
    results = naiad.execute(dist_programs.wordcount, processes=3)
    assert len(results) == 3
    merged = dict(kv for part in results for kv in part)
    assert merged == expected_wordcount()


def test_a_killed_process_ends_the_computation_quickly():
    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed, match=r"process 1 .*SIGKILL"):
        run(lambda comp, s: stages.unary(s, dist_programs.KillSelf, name="killer"),
            [[1, 2]] * 6, processes=2)
    assert time.monotonic() - t0 < 10


def test_a_vertex_error_in_another_process_names_stage_vertex_time_and_process():
    with pytest.raises(naiad.VertexError) as info:
        run(lambda comp, s: stages.unary(s, dist_programs.Raise, name="lookup"),
            [[1, 2, 3, 4]] * 4, processes=2, timeout=30)
    err = info.value
    assert (err.stage, err.vertex, err.time, err.process) == ("lookup", 1, naiad.Timestamp(2), 1)
    assert "KeyError" in str(err) and "no such key" in str(err)


def test_processes_with_different_graphs_are_detected_at_start():
    with pytest.raises(naiad.ComputationFailed, match="different dataflow graph"):
        naiad.execute(launch_programs.differing_graphs, processes=2)


def test_a_missing_process_is_named_after_the_connect_timeout():
    ports = free_ports(2)
    comp = naiad.Computation(process_index=0, processes=2,
                             hosts=[f"127.0.0.1:{p}" for p in ports], connect_timeout=1.5,
                             secret="s")
    comp.new_input().stream.collect()
    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed, match=rf"process\(es\) 1 \(tcp://127.0.0.1:{ports[1]}\)"
                       r".*failed or stopped before it connected.*--connect-timeout S"):
        comp.activate()
    assert time.monotonic() - t0 < 10


def test_connect_timeout_is_one_of_naiads_flags():
    """`naiad run` had no way to set connect_timeout, which its wait message advised raising."""
    argv = ["-p", "0", "-n", "2", "--connect-timeout", "2.5"]
    assert naiad.Computation.from_args(argv).options["connect_timeout"] == 2.5
    assert naiad.Computation.from_args(argv, connect_timeout=9).options["connect_timeout"] == 9
    assert naiad.Computation.from_args(argv[:4]).options["connect_timeout"] == 30.0
    with pytest.raises(SystemExit, match="--connect-timeout must be a positive"):
        naiad.Computation.from_args(["--connect-timeout", "0"])


def test_listening_beyond_loopback_requires_a_secret():
    assert needs_authentication(["10.0.0.5:2101", "127.0.0.1:2102"])
    assert not needs_authentication(["127.0.0.1:2101", "localhost:2102"])
    comp = naiad.Computation(process_index=0, processes=2,
                             hosts=["10.255.255.1:2101", "10.255.255.2:2101"])
    comp.new_input().stream.collect()
    with pytest.raises(naiad.NaiadError, match="secret"):
        comp.activate()


class _Exploit:
    """A record whose unpickling would run code: the attack a stranger would try."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_curve_rejects_a_stranger_who_does_not_know_the_secret(tmp_path):
    marker = str(tmp_path / "pwned")

    def program(comp):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        if comp.process_index == 0:
            ctx = zmq.Context.instance()
            stranger = ctx.socket(zmq.PUSH)
            stranger.linger = 0
            stranger.connect(comp.fabric.endpoints[1])
            stranger.send_multipart([b"D", pickle.dumps([_Exploit(marker)])])
            time.sleep(0.5)
            stranger.close()
        inp.on_next([comp.process_index])
        inp.on_completed()
        comp.join(timeout=60)
        return sorted(got.results[0])

    # The test is about authentication, not liveness: a generous heartbeat bound keeps a loaded
    # machine (one busy core was enough) from failing it as "process 0 has sent nothing".
    assert naiad.execute(program, processes=2, secret="correct horse",
                         heartbeat_timeout=30) == [[0], [1]]
    assert not Path(marker).exists()


def test_no_socket_of_a_run_accepts_a_stranger(tmp_path, monkeypatch):
    """execute() without a secret still authenticates every peer: a local stranger who sends
    pickled exploits in every frame shape to every socket (control and data) runs nothing."""
    monkeypatch.delenv("NAIAD_SECRET", raising=False)
    marker = tmp_path / "pwned"
    attacked = tmp_path / "attacked"

    def program(comp):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        if comp.process_index == 0:
            fabric = comp.fabric
            targets = list(fabric.endpoints) + list(fabric.worker_endpoints.values())
            bomb = pickle.dumps([_Exploit(str(marker))])
            shapes = [[bomb], [b"D", bomb], [b"H", (1).to_bytes(4, "little"), bomb],
                      [b"A", (1).to_bytes(4, "little"), bomb],
                      [b"F", (1).to_bytes(4, "little"), bomb], [b"E", b"\x01\0\0\0", bomb]]
            ctx = zmq.Context()
            for endpoint in targets:
                for kind in (zmq.PUSH, zmq.DEALER):
                    stranger = ctx.socket(kind)
                    stranger.linger = 0
                    stranger.connect(endpoint)
                    for frames in shapes:
                        try:
                            stranger.send_multipart(frames, zmq.NOBLOCK)
                        except zmq.Again:
                            pass
                    time.sleep(0.05)
                    stranger.close()
            ctx.term()
            attacked.write_text(str(len(targets)))
        inp.on_next([comp.process_index])
        inp.on_completed()
        comp.join(timeout=60)
        return sorted(got.results[0])

    assert naiad.execute(program, processes=2, workers=2, heartbeat_timeout=30) == [[0], [1]]
    assert int(attacked.read_text()) == 2 + 4       # two control sockets, four workers' sockets
    assert not marker.exists()


def test_processes_started_by_hand_refuse_to_start_without_a_secret(monkeypatch):
    monkeypatch.delenv("NAIAD_SECRET", raising=False)
    monkeypatch.delenv("NAIAD_SECRET_FILE", raising=False)
    comp = naiad.Computation(process_index=0, processes=2,
                             hosts=[f"127.0.0.1:{p}" for p in free_ports(2)])
    comp.new_input().stream.collect()
    with pytest.raises(naiad.NaiadError, match="NAIAD_SECRET"):
        comp.activate()


def test_processes_given_different_secrets_say_so(tmp_path):
    """Two processes started by hand with different secrets: they waited connect_timeout and
    blamed --numprocs and --hosts. The one whose handshakes are refused stops at once naming
    the secrets; the other names them too."""
    ports = free_ports(2)
    script = tmp_path / "mismatch.py"
    script.write_text(
        "import sys, naiad\n"
        "i = int(sys.argv[1])\n"
        f"comp = naiad.Computation(process_index=i, processes=2, connect_timeout=8,\n"
        f"    hosts=['127.0.0.1:{ports[0]}', '127.0.0.1:{ports[1]}'], secret=f'secret {{i}}')\n"
        "comp.new_input().stream.collect()\n"
        "comp.activate()\n")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(script), str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
             for i in range(2)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] != [0, 0]
    assert time.monotonic() - t0 < 30
    first = [e for e in errs if "refused this process's CURVE handshake 3 times" in e]
    assert first, errs
    assert all("different secrets" in e or "waited 8 s for process(es)" in e for e in errs), errs


def test_a_process_that_activates_after_its_peer_gave_up_hears_of_it(tmp_path):
    """Started by hand, process 1 reaches activate() after process 0 stopped waiting there:
    process 0 had only said goodbye, so process 1 found its fingerprint, went on, and waited
    in join() for ever, printing nothing."""
    ports = free_ports(2)
    script = tmp_path / "late.py"
    script.write_text(
        "import sys, time, naiad\n"
        "i = int(sys.argv[1])\n"
        f"comp = naiad.Computation(process_index=i, processes=2, connect_timeout=3,\n"
        f"    hosts=['127.0.0.1:{ports[0]}', '127.0.0.1:{ports[1]}'], secret='s')\n"
        "comp.connect()\n"
        "inp = comp.new_input(name='nums')\n"
        "inp.stream.collect()\n"
        "if i == 1:\n"
        "    time.sleep(6)\n"
        "comp.activate()\n"
        "inp.on_next([i])\n"
        "inp.on_completed()\n"
        "comp.join()\n")
    procs = [subprocess.Popen([sys.executable, str(script), str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
             for i in range(2)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], errs
    assert all("process 0 waited 3 s at activate for process(es) [1]" in e for e in errs), errs


def test_a_secret_file_that_is_missing_or_empty_is_named(tmp_path, monkeypatch):
    from naiad.transport.security import resolve_secret
    monkeypatch.delenv("NAIAD_SECRET", raising=False)
    monkeypatch.setenv("NAIAD_SECRET_FILE", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"NAIAD_SECRET_FILE=.*nowhere: No such file"):
        resolve_secret(None)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    monkeypatch.setenv("NAIAD_SECRET_FILE", str(empty))
    with pytest.raises(ValueError, match=r"NAIAD_SECRET_FILE=.*empty is empty"):
        resolve_secret(None)


def test_a_secret_file_must_be_private(tmp_path, monkeypatch):
    from naiad.transport.security import resolve_secret
    path = tmp_path / "secret"
    path.write_text("from a file\n")
    monkeypatch.delenv("NAIAD_SECRET", raising=False)
    monkeypatch.setenv("NAIAD_SECRET_FILE", str(path))
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        resolve_secret(None)
    path.chmod(0o600)
    assert resolve_secret(None) == b"from a file"


def test_unpicklable_records_crossing_processes_get_a_clear_error():
    def build(comp, s):
        made = stages.unary(s, _MakeLock, name="make")
        return stages.unary(made, _Pass, partition_by=lambda r: r[0], name="take")

    with pytest.raises(naiad.VertexError, match=r"'make' to stage 'take'.*cannot be pickled"):
        run(build, [list(range(8))], processes=2, timeout=30)


def _refuse_to_load(value):
    raise ValueError(f"cannot load {value}")


class _LoadsNowhere:
    """Pickles; unpickling it raises (a class whose reduction fails where it arrives)."""

    def __reduce__(self):
        return (_refuse_to_load, (7,))


class _MakeUnloadable(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, (message, _LoadsNowhere() if message == 5 else message), time)


def _deep(n: int) -> list:
    out: list = []
    for _ in range(n):
        out = [out]
    return out


class _MakeDeep(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, (message, _deep(100_000) if message == 5 else message), time)


@pytest.mark.parametrize("maker, named", [
    (_MakeUnloadable, r"vertex \d of stage 'take' .* failed in receiving from another process at "
                      r"Timestamp\(0\): TypeError: records sent from stage 'make' \(worker \d\) "
                      r"to stage 'take' at Timestamp\(0\) cannot be unpickled here "
                      r"\(_refuse_to_load raised ValueError: cannot load 7\)"),
    (_MakeDeep, r"'make' to stage 'take'.*cannot be pickled.*RecursionError.*the first bad "
                r"record is \(5, \[\[\[")])
def test_records_that_fail_on_the_other_side_or_too_deep_to_pickle_are_named(maker, named):
    """A record that pickles but raises as it is unpickled gave a bare ValueError, and one
    nested too deeply to pickle a bare RecursionError (its whole repr was built for the
    message): both without the stage or time."""
    def build(comp, s):
        made = stages.unary(s, maker, name="make")
        return stages.unary(made, _Pass, partition_by=lambda r: r[0], name="take")

    with pytest.raises(naiad.VertexError, match=named):
        run(build, [list(range(8))], processes=2, timeout=30)


class _MakeLock(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, (message, threading.Lock()), time)


class _Pass(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, message[0], time)


def test_children_do_not_import_from_the_launchers_working_directory(tmp_path, monkeypatch):
    """A module in the directory execute() is called from does not shadow an installed one in
    the child processes (they get this process's sys.path, and start with -P)."""
    marker = tmp_path / "shadowed"
    (tmp_path / "cloudpickle.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('shadowed')\n")
    monkeypatch.chdir(tmp_path)

    def program(comp):
        import cloudpickle
        return cloudpickle.__name__

    assert naiad.execute(program, processes=2) == ["cloudpickle", "cloudpickle"]
    assert not marker.exists()


class _Twice(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, messages * 2, time)


class _Once(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, messages, time)


def test_processes_whose_graphs_differ_only_in_a_vertex_class_are_detected():
    def program(comp):
        inp = comp.new_input(name="numbers")
        kind = _Twice if comp.process_index == 0 else _Once
        stages.unary(inp.stream, kind, name="step").collect()
        comp.activate()
        inp.on_completed()
        comp.join(timeout=20)

    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed, match="different dataflow graph"):
        naiad.execute(program, processes=2)
    assert time.monotonic() - t0 < 30


MAIN_SCRIPT = '''
import naiad, stages

class Point:                      # defined in __main__: pickle cannot find it by name elsewhere
    def __init__(self, x):
        self.x = x

class Double(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [Point(p.x * 2) for p in messages], time)

def program(comp):
    inp = comp.new_input()
    out = stages.unary(inp.stream, Double, partition_by=lambda p: p.x, name="double")
    got = stages.unary(out, Double, partition_by=lambda p: p.x + 1, name="again").collect()
    comp.activate()
    inp.on_next([Point(i) for i in range(comp.process_index, 20, comp.processes)])
    inp.on_completed()
    comp.join(timeout=60)
    return sorted(p.x for p in got.results[0])

if __name__ == "__main__":
    parts = naiad.execute(program, processes=2)
    print(sorted(parts[0] + parts[1]))
'''


def test_records_of_a_class_defined_in_main_cross_processes(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(MAIN_SCRIPT)
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(sorted(4 * i for i in range(20)))


SLEEPER = '''
import time, naiad

def program(comp):
    comp.activate()
    time.sleep(120)

naiad.execute(program, processes=2)
'''


def _start_sleeper(tmp_path, script_text=SLEEPER):
    """A launcher of two processes that sleep, with its own TMPDIR: (launcher, children, tmp)."""
    import os
    import subprocess
    import sys
    script = tmp_path / "sleeper.py"
    script.write_text(script_text)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    import signal

    def as_from_a_terminal():            # SIGHUP's default, even under nohup (as CI may run)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    launcher = subprocess.Popen([sys.executable, str(script)], env=dict(os.environ, TMPDIR=str(tmp)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 60
    children = []
    while time.monotonic() < deadline and len(children) < 2:
        children = procfs.children(launcher.pid)
        time.sleep(0.1)
    assert len(children) == 2 and list(tmp.glob("naiad-*")), "the run did not start"
    return launcher, children, tmp


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_to_the_launcher_removes_its_directory_and_its_children(tmp_path, signame):
    """SIGTERM, or SIGHUP (the terminal or ssh session closed: it used to leave the private
    directory behind)."""
    import signal
    sig = getattr(signal, signame)
    launcher, children, tmp = _start_sleeper(tmp_path)
    launcher.send_signal(sig)
    assert launcher.wait(timeout=20) == 128 + sig
    assert not list(tmp.glob("naiad-*")), "the private directory (with the secret) was left"
    time.sleep(0.5)
    assert not [c for c in children if procfs.alive(c)], "children outlived the launcher"


def test_a_vertex_factory_failing_in_one_process_reaches_the_other_at_once():
    """Processes started by hand: no launcher watches them, so the failing process itself must
    tell its peers (it used to leave them waiting for a heartbeat timeout, or for ever)."""
    import subprocess
    import sys
    script = str(Path(__file__).parent / "hand_started_factory_failure.py")
    ports = [str(p) for p in free_ports(2)]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, script, str(i), *ports], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    for i, out in enumerate(outs):
        assert out.startswith(f"{i} VertexError") and "factory exploded" in out, out
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("target1, named", [
    ("samples.nosuch:program", "cannot import 'samples.nosuch'"),
    ("tests.dist_programs:fails_before_activate_in_1", "input.txt is not on this host")])
def test_a_hand_started_process_failing_before_activate_tells_the_others(target1, named):
    """Its module does not import, or its program fails before activate, in one process started
    by hand with the run command: the other fails at once with its error, instead of waiting its
    connect timeout (30 s: "process 0 waited 30 s for process(es) 1") or saying only that it
    ended."""
    import subprocess
    import sys
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    env = dict(os.environ, NAIAD_SECRET="s3cret")
    targets = ["tests.dist_programs:failing", target1]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "naiad.cli", "run", targets[i], "-p",
                               str(i), "-n", "2", "-h", *hosts], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    errs = [p.communicate(timeout=90)[1] for p in procs]
    assert procs[1].returncode in (1, 2) and named in errs[1], errs[1]
    assert procs[0].returncode == 1, errs[0]
    assert "process 1 failed before it activated" in errs[0] and named in errs[0], errs[0]
    assert time.monotonic() - t0 < 20


def _ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_hosts_given_as_ipv6_addresses():
    """[::1]:port hosts: ZeroMQ's sockets take IPv6 only when asked (each process failed with
    'cannot listen on tcp://[::1]:PORT: No such device')."""
    import subprocess
    import sys
    hosts = [f"[::1]:{p}" for p in free_ports(2)]
    code = ("import sys, naiad, linq; i = int(sys.argv[1]); "
            "comp = naiad.Computation(process_index=i, processes=2, hosts=sys.argv[2:], "
            "secret='s3cret', connect_timeout=20); inp = comp.new_input(); "
            "got = inp.stream.select(lambda r: r * 10).collect(); comp.activate(); "
            "inp.on_next([i, i + 2]); inp.on_completed(); comp.join(timeout=30); "
            "print(sorted(got.results[0]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i), *hosts],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    import ast
    got = sorted(x for out, _ in outs for x in ast.literal_eval(out.strip() or "[]"))
    assert got == [0, 10, 20, 30], outs


class _HoldTheGil(naiad.Vertex):
    """One C call that keeps the GIL for seconds (a big-integer power), in process 1 only."""

    def on_recv_batch(self, edge, messages, time_):
        if self.index == 1:
            t0 = time.monotonic()
            pow(7, 6 * 10**6)
            self.send_by(0, time.monotonic() - t0, time_)


def test_a_vertex_holding_the_gil_longer_than_the_heartbeat_timeout_is_not_dead():
    def program(comp):
        inp = comp.new_input()
        got = stages.unary(inp.stream, _HoldTheGil, partition_by=lambda r: r, name="gil").collect()
        comp.activate()
        inp.on_next([0, 1] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=120)
        return got.results.get(0, [])

    results = naiad.execute(program, processes=2, heartbeat_timeout=1.0)
    held = results[1]
    assert len(held) == 1 and held[0] > 1.0, held      # it really held the GIL past the bound


class _StopSelf(naiad.Vertex):
    def on_recv(self, edge, message, time_):
        if self.index == 1 and time_.epoch == 1:
            # Directed at this thread, the stop takes effect before the call returns; sent to
            # the process, it waits for the main thread to be scheduled, and this worker could
            # finish the epoch first (then process 0 completes, and the stopped process is the
            # launcher's to find: the next test).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        self.send_by(0, message, time_)


def test_a_stopped_peer_is_detected_within_15_s():
    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, _StopSelf, partition_by=lambda r: r, name="stopper").collect()
        comp.activate()
        for _ in range(3):
            inp.on_next([0, 1] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=120)

    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed, match=r"process 1 .* is gone"):
        naiad.execute(program, processes=2)       # the default heartbeat_timeout (6 s)
    assert time.monotonic() - t0 < 15


def _stop_after_join(comp):
    inp = comp.new_input()
    inp.stream.collect()
    comp.activate()
    inp.on_next([comp.process_index])
    inp.on_completed()
    comp.join(timeout=60)
    if comp.process_index == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    return comp.process_index


def test_a_process_stopped_after_its_peer_finished_is_killed_by_the_launcher():
    # Process 0 completes and exits; process 1 stops before it returns its result. No peer is
    # left to miss its heartbeats: the launcher sees the stopped state itself.
    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed,
                       match=r"process 1 was stopped: it stayed stopped \(SIGSTOP\) for 2 s "
                             r"\(the heartbeat_timeout option\) after process 0 ended"):
        naiad.execute(_stop_after_join, processes=2, heartbeat_timeout=2)
    assert time.monotonic() - t0 < 30


def test_the_launchers_sigterm_handler_lasts_only_as_long_as_the_run():
    import signal as _signal
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers belong to the main thread")
    before = [_signal.getsignal(s) for s in (_signal.SIGTERM, _signal.SIGHUP)]
    assert naiad.execute(dist_programs.wordcount, processes=2)
    assert [_signal.getsignal(s) for s in (_signal.SIGTERM, _signal.SIGHUP)] == before


def test_sigkill_to_the_launcher_leaves_no_secret_on_disk(tmp_path):
    """A launcher killed outright cannot clean up: its private directory may stay, but the
    run's secret never was in it (the options travel over each child's private link), and the
    children end with the launcher."""
    import signal
    launcher, children, tmp = _start_sleeper(tmp_path)
    time.sleep(1.0)                       # the children have their options and connected
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=20)
    left = [f for d in tmp.glob("naiad-*") for f in d.rglob("*") if f.is_file()]
    assert left, "nothing to look at: the directory went after all"
    for f in left:
        assert b"naiad-key:" not in f.read_bytes(), f"{f} holds the run's secret"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and [c for c in children if procfs.alive(c)]:
        time.sleep(0.1)
    assert not [c for c in children if procfs.alive(c)], "children outlived the launcher"


STOPPED = SLEEPER.replace("    time.sleep(120)", """    if comp.process_index == 1:
        import os, signal
        os.kill(os.getpid(), signal.SIGSTOP)     # a stopped process cannot read its link
    time.sleep(120)""")


def test_a_stopped_child_ends_with_its_launcher(tmp_path):
    """A child stopped by SIGSTOP does not see its link close when the launcher is killed: it
    stayed, stopped, reparented to init, for good."""
    import signal
    launcher, children, _ = _start_sleeper(tmp_path, STOPPED)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(procfs.state(c) == "T" for c in children):
        time.sleep(0.1)
    assert any(procfs.state(c) == "T" for c in children), "no child stopped"
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(timeout=20)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and [c for c in children if procfs.alive(c)]:
        time.sleep(0.1)
    left = [c for c in children if procfs.alive(c)]
    for c in left:
        os.kill(c, signal.SIGKILL)
    assert not left, "a stopped child outlived the launcher"


def test_ctrl_c_in_one_hand_started_process_is_named_by_the_other(tmp_path):
    """Ctrl-C in process 0 of a `naiad run` pair: process 1 printed "interrupted", as if it
    had been."""
    import signal
    ports = free_ports(2)
    (tmp_path / "slowmod.py").write_text(
        "import time\n"
        "def program(comp):\n"
        "    inp = comp.new_input(name='nums')\n"
        "    inp.stream.collect()\n"
        "    comp.activate()\n"
        "    print('running', flush=True)\n"
        "    for e in range(600):\n"
        "        inp.on_next([e])\n"
        "        time.sleep(0.05)\n"
        "    inp.on_completed()\n"
        "    comp.join()\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", NAIAD_SECRET="s")

    def as_from_a_terminal():     # Ctrl-C's default even when the tests run in the background
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    procs = [subprocess.Popen([sys.executable, "-m", "naiad.cli", "run", "slowmod:program",
                               "-p", str(i), "-n", "2", "-h", f"127.0.0.1:{ports[0]}",
                               f"127.0.0.1:{ports[1]}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                              preexec_fn=as_from_a_terminal)
             for i in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "running"
        procs[0].send_signal(signal.SIGINT)
        errs = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert "interrupted" in errs[0]
    assert "process 0 was stopped (KeyboardInterrupt); process 1 stops" in errs[1], errs[1]
    assert "interrupted" not in errs[1]
