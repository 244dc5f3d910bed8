"""Processes started by hand (not by execute) on a checkpoint directory: they resume from the
same checkpoint or fail at once, together, naming why (real processes, sockets and files).

Each run starts both processes of a script with ``Computation.from_args`` (as a program run on
several machines does), a shared secret in the environment and fresh loopback ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from naiad.testing import free_ports

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(180)

JOB = """\
import sys
import naiad
from naiad.computation import run_program

def program(comp):
    inp = comp.new_input(name="nums")
    got = inp.stream.collect()
    comp.activate()
    print(f"resumes from {None if comp.restored is None else comp.restored.epoch}", flush=True)
    for e in range(12):
        inp.on_next([e * 10 + comp.process_index])
    inp.on_completed()
    comp.join()
    return got.results

recovery = {} if sys.argv[1] == "-" else {"checkpoint_dir": sys.argv[1],
                                           "checkpoint_every": int(sys.argv[2])}
comp = naiad.Computation.from_args(sys.argv[3:], connect_timeout=20, **recovery)
print(sorted(run_program(program, comp).items()), flush=True)
"""


def _run(tmp_path: Path, dirs: List[Path], every: int = 3, extra: Tuple[List[str], ...] = ([], [])
         ) -> Tuple[List[int], List[str], List[str], float]:
    """Both processes of the job, process i on ``dirs[i]``: return codes, outputs, errors and
    the seconds until both ended."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), NAIAD_SECRET="hand-started recovery test")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(script), str(dirs[i]), str(every), "-p",
                               str(i), "-n", "2", "-h", *hosts, *extra[i]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path)
             for i in range(2)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:          # a run that hangs is killed, and fails the test
            p.kill()
    return ([p.returncode for p in procs], [o for o, _ in outs], [e for _, e in outs],
            time.monotonic() - t0)


def _first_run(tmp_path: Path) -> Path:
    shared = tmp_path / "ckpt"
    codes, outs, errs, _ = _run(tmp_path, [shared, shared])
    assert codes == [0, 0], errs
    assert all("resumes from None" in o for o in outs), outs
    return shared


def test_both_resume_from_the_same_checkpoint(tmp_path):
    shared = _first_run(tmp_path)
    codes, outs, errs, _ = _run(tmp_path, [shared, shared])
    assert codes == [0, 0], errs
    assert all("resumes from 9" in o for o in outs), outs
    for i, out in enumerate(outs):
        assert out.strip().splitlines()[-1] == str([(e, [e * 10 + i]) for e in range(12)])


@pytest.mark.parametrize("elsewhere", [0, 1])
def test_a_process_on_another_directory_fails_both_at_once(tmp_path, elsewhere):
    """One process's directory is not the shared one (a host where it is not mounted gets a
    fresh, empty one): it resumed from nothing while the other restored epoch 9, and both
    waited for ever without a word."""
    shared = _first_run(tmp_path)
    dirs = [shared, shared]
    dirs[elsewhere] = tmp_path / "not-mounted" / "ckpt"
    codes, outs, errs, took = _run(tmp_path, dirs, every=100)
    assert codes == [1, 1], (outs, errs)
    for err in errs:
        assert "uses another checkpoint directory than process" in err, errs
        assert "from epoch 9" in err and "from no checkpoint" in err, errs
        assert "every process must see the same checkpoint_dir" in err, errs
    assert took < 15, took


@pytest.mark.parametrize("without", [0, 1])
def test_a_process_without_the_checkpoint_dir_fails_both_at_once(tmp_path, without):
    """One process is given no checkpoint_dir: the one that has it connects early and waited
    for the other's graph at activate while the other waited for its resume point (20 s)."""
    dirs = [tmp_path / "ckpt", tmp_path / "ckpt"]
    dirs[without] = Path("-")
    codes, outs, errs, took = _run(tmp_path, dirs)
    assert codes == [1, 1], (outs, errs)
    assert all(f"process {1 - without} has a checkpoint_dir but process {without} has none"
               in e for e in errs), errs
    assert took < 15, took


def test_a_process_that_cannot_resume_fails_the_other_at_once(tmp_path):
    """Process 1 is given 2 workers where the directory's run had 1; and then process 1's
    delivery marks are gone: each time both processes fail at once naming it (process 0 used
    to fail only after connect_timeout, 20 s here, with a message about starting processes)."""
    shared = _first_run(tmp_path)
    codes, _, errs, took = _run(tmp_path, [shared, shared], extra=([], ["-t", "2"]))
    assert codes == [1, 1], errs
    assert all("give every process the same -n and -t" in e for e in errs), errs
    assert took < 15, took
    shutil.rmtree(shared / "outputs" / "proc-1")
    codes, _, errs, took = _run(tmp_path, [shared, shared])
    assert codes == [1, 1], errs
    assert all("OutputLost" in e for e in errs), errs
    assert took < 15, took


def _slow_to_restore(comp):
    """Process 1 takes 4 s to find and load its checkpoint (a large state, a slow disk)."""
    if comp.process_index == 1:
        import naiad.recovery.store as store
        latest = store.CheckpointStore.latest

        def slow(self, fingerprint):
            time.sleep(4)
            return latest(self, fingerprint)
        store.CheckpointStore.latest = slow
    inp = comp.new_input(name="nums")
    got = inp.stream.collect()
    comp.activate()
    for e in range(10):
        inp.on_next([e])
    inp.on_completed()
    comp.join(timeout=60)
    return sorted(got.results)


def test_a_process_slow_to_restore_is_waited_for_as_a_checkpoint_is(tmp_path):
    """Under execute, the resume points are compared after each process opened its
    checkpoint directory: a process 4 s slower than connect_timeout (2 s) failed every
    attempt ("process 0 waited 2 s at resume")."""
    import naiad
    got = naiad.execute(_slow_to_restore, processes=2, checkpoint_dir=str(tmp_path / "ck"),
                        checkpoint_every=5, connect_timeout=2, max_restarts=0)
    assert got == [list(range(10))] * 2
