"""The local launcher (naiad.launch, naiad._child): what travels to the processes, the
rendezvous and exits over the links, and the diagnostics when a process does not take part."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import naiad
from naiad.launch import program_payload
from tests import launch_programs as lp
from tests.procfs import alive, children


def test_a_program_of_a_module_travels_by_name_not_with_its_data():
    """The module holds 2 MB of text; the program sent to every process is its name only, and
    each process reads its own share of the data itself."""
    data_bytes = sum(len(line) for line in lp.BOOK)
    assert data_bytes > 1_000_000
    assert len(program_payload(lp.count_words)) < 1000
    parts = naiad.execute(lp.count_words, processes=2)
    total = dict(parts[0])
    assert not set(total) & set(parts[1])          # each word counted in one process
    total.update(parts[1])
    assert total == dict(lp.expected_counts())


def test_a_closure_over_the_data_pays_for_every_byte():
    """The contrast the docs warn about: data held by the program's closure is pickled into
    the file every process reads."""
    book = list(lp.BOOK)

    def program(comp):
        return len(book[comp.process_index::comp.processes])

    assert len(program_payload(program)) > sum(len(line) for line in book)
    assert naiad.execute(program, processes=2) == [30_000, 30_000]


def test_a_process_late_to_the_rendezvous_is_named():
    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed,
                       match=r"process 1 \(pid \d+\) did not join the rendezvous .* 2 s"):
        naiad.execute(lp.late_to_activate, processes=2, connect_timeout=2)
    assert time.monotonic() - t0 < 30


def test_a_process_returning_without_activating_fails_the_run_at_once():
    t0 = time.monotonic()
    with pytest.raises(naiad.ComputationFailed,
                       match=r"process 1 \(pid \d+\) returned without calling comp.activate"):
        naiad.execute(lp.never_activates_in_one, processes=2)
    assert time.monotonic() - t0 < 20


def test_no_process_activating_is_a_valid_run():
    def program(comp):
        return comp.process_index
    assert naiad.execute(program, processes=3) == [0, 1, 2]


def test_a_forked_process_holding_the_link_does_not_delay_the_end():
    """The launcher sees each child's exit itself: a process the program forked (which holds
    the child's link open) does not keep execute() waiting."""
    t0 = time.monotonic()
    pids = naiad.execute(lp.forks_a_sleeper, processes=2)
    try:
        assert time.monotonic() - t0 < 20
        assert all(alive(pid) for pid in pids)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


SLEEPER = '''
import sys, time, naiad

def program(comp):
    comp.activate()
    print("running", flush=True)
    time.sleep(120)

naiad.execute(program, processes=2)
'''


def test_children_exit_as_soon_as_their_launcher_is_killed(tmp_path):
    """SIGKILL leaves the launcher no chance to clean up: the children see their links close
    and exit on their own, at once."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    launcher = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    try:
        # Both children print once past activate(); their lines may interleave.
        assert "running" in launcher.stdout.readline()
        kids = children(launcher.pid)
        assert len(kids) == 2
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(c) for c in kids):
            time.sleep(0.05)
        assert not [c for c in kids if alive(c)], "children outlived their launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for c in children(launcher.pid):
            os.kill(c, signal.SIGKILL)


def _arenas(comp):
    return os.environ.get("MALLOC_ARENA_MAX")


def test_children_share_one_malloc_arena_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert naiad.execute(_arenas, processes=2) == ["1", "1"]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert naiad.execute(_arenas, processes=2) == ["4", "4"]


def _tunables(comp):
    return os.environ.get("GLIBC_TUNABLES")


def test_children_ask_for_huge_pages_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert naiad.execute(_tunables, processes=2) == ["glibc.malloc.hugetlb=1"] * 2
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    assert naiad.execute(_tunables, processes=2) == ["glibc.malloc.hugetlb=0"] * 2


def _cpus(comp):
    import threading
    seen = {}

    def worker_side():
        seen["thread"] = sorted(os.sched_getaffinity(0))
    t = threading.Thread(target=worker_side)     # a thread started by the program, as workers are
    t.start()
    t.join()
    return sorted(os.sched_getaffinity(0)), seen["thread"]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and at least 2 CPUs")
def test_processes_are_bound_to_cpus_of_their_own_when_there_are_enough():
    cpus = sorted(os.sched_getaffinity(0))
    got = naiad.execute(_cpus, processes=2)
    assert [main for main, _ in got] == [[cpus[0]], [cpus[1]]]
    assert all(thread == main for main, thread in got)
    for unbound in (naiad.execute(_cpus, processes=2, pin_cpus=False),
                    naiad.execute(_cpus, processes=2, workers=len(cpus))):   # too few CPUs
        assert all(main == cpus and thread == cpus for main, thread in unbound)


_STARTS_AT_IMPORT = '''
"""A module that starts a computation when imported (no __main__ guard)."""
import os
import naiad

def program(comp):
    comp.activate()
    comp.join(timeout=30)
    return comp.process_index

# A safety valve for the code before the fix, where each process importing this module started
# two more: without it the test would start processes without end.
depth = int(os.environ.get("STARTS_AT_IMPORT_DEPTH", "0"))
os.environ["STARTS_AT_IMPORT_DEPTH"] = str(depth + 1)
if depth < 2:
    RESULT = naiad.execute(program, processes=2)
'''


def test_a_module_that_starts_a_computation_when_imported_is_refused_in_the_children(tmp_path):
    """The program of a module that calls execute at import: each process imports the module
    to load the program and used to start two processes of its own (and they two more, without
    end: a thousand processes on a loaded machine). Process loading a program now refuses to
    start a computation, and the launcher says what to do."""
    (tmp_path / "starts_at_import.py").write_text(_STARTS_AT_IMPORT)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), root]))
    env.pop("STARTS_AT_IMPORT_DEPTH", None)
    proc = subprocess.run([sys.executable, "-c", "import starts_at_import"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "RuntimeError: naiad.execute was called while process" in proc.stderr, proc.stderr
    assert "if __name__ == \"__main__\":" in proc.stderr, proc.stderr
