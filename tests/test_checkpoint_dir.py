"""The checkpoint directory is private and used by one run at a time (through real files)."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

import naiad


def program(epochs):
    def run(comp):
        inp = comp.new_input(name="numbers")
        got = inp.stream.collect()
        comp.activate()
        for e in range(epochs):
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return run


def _subscribed(comp):
    inp = comp.new_input(name="numbers")
    got = inp.stream.collect()
    inp.stream.subscribe(lambda epoch, records: None)      # its delivery marks, in outputs/
    comp.activate()
    for e in range(6):
        inp.on_next([e])
    inp.on_completed()
    comp.join(timeout=60)
    return got.results


@pytest.mark.parametrize("processes", [1, 2])
def test_the_directory_and_its_files_are_private(tmp_path, processes):
    """Every directory 0700 and every file 0600, whatever the umask: with umask 002 the
    delivery marks' directories were group-writable (a member could plant a mark that
    skips epochs)."""
    root = tmp_path / "ckpt"
    old = os.umask(0o002)
    try:
        naiad.execute(_subscribed, processes=processes, checkpoint_dir=str(root),
                      checkpoint_every=2)
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    files = [p for p in root.rglob("*") if p.is_file()]
    dirs = [p for p in root.rglob("*") if p.is_dir()]
    assert files and any(p.name.endswith(".delivered") for p in files)
    assert {p.relative_to(root).as_posix() for p in dirs} >= {"outputs", "outputs/proc-0"}
    loose = [f"{p} {oct(stat.S_IMODE(p.stat().st_mode))}" for p in files + dirs
             if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert not loose, f"readable or writable by others: {loose}"


def test_a_directory_others_can_write_is_refused(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(PermissionError, match=r"must belong to you and be writable by you only"):
        naiad.execute(program(2), checkpoint_dir=str(root), checkpoint_every=1)


def test_a_second_run_on_the_same_directory_fails_at_once_naming_the_holder(tmp_path):
    root = tmp_path / "ckpt"
    started, release = threading.Event(), threading.Event()

    def slow(comp):
        inp = comp.new_input(name="numbers")
        inp.stream.collect()
        comp.activate()
        inp.on_next([1])
        started.set()
        release.wait(30)
        inp.on_completed()
        comp.join(timeout=60)

    first = threading.Thread(target=naiad.execute, args=(slow,),
                             kwargs={"checkpoint_dir": str(root), "checkpoint_every": 1})
    first.start()
    try:
        assert started.wait(30)
        t0 = time.monotonic()
        with pytest.raises(naiad.NaiadError, match=rf"in use by pid {os.getpid()}"):
            naiad.execute(program(2), checkpoint_dir=str(root), checkpoint_every=1,
                          max_restarts=0)
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
        first.join(60)
    # Once the first run has ended the directory is free again.
    naiad.execute(program(2), checkpoint_dir=str(root), checkpoint_every=1)


def test_errors_of_the_program_itself_are_not_retried(tmp_path):
    """A TypeError from building the graph fails at once, not after max_restarts attempts."""
    starts = tmp_path / "starts"

    def bad(comp):
        with open(starts, "a") as f:
            f.write("start\n")
        comp.new_input().stream.select(3)        # not a function: TypeError at build time

    import linq  # noqa: F401 - select
    with pytest.raises(TypeError):
        naiad.execute(bad, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=1,
                      max_restarts=3)
    assert starts.read_text().count("start") == 1


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_run_leaves_no_file_of_the_directory_open(tmp_path):
    """Every log, mark, journal and the lock are closed when the run returns (not when the
    garbage collector gets to the store): checked with the collector off."""
    import gc
    root = (tmp_path / "ckpt").resolve()
    gc.disable()
    try:
        naiad.execute(program(9), checkpoint_dir=str(root), checkpoint_every=2)
        held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}")]
    finally:
        gc.enable()
    assert not [p for p in held if p.startswith(str(root))], held


def _by_hand(root):
    """A process started without execute (as `naiad run` starts one) on ``root``."""
    comp = naiad.Computation(checkpoint_dir=str(root))
    inp = comp.new_input(name="numbers")
    inp.stream.collect()
    comp.activate()         # opens the directory: CheckpointInUse if another run holds it
    inp.on_completed()
    comp.join(timeout=30)


def test_no_other_run_takes_the_directory_while_a_run_restarts(tmp_path, monkeypatch):
    """Run A (2 processes) loses process 1 at its checkpoint of epoch 4 and restarts. Run B
    tries the directory over and over meanwhile, through execute and through a Computation of
    its own: every try fails at once with CheckpointInUse (B took a process's lock while A's
    processes restarted, and A, finding its directory taken, failed for good)."""
    root = tmp_path / "ckpt"
    monkeypatch.setenv("NAIAD_FAULT", "checkpoint-write:4:1")
    got: dict = {}

    started, finishing = tmp_path / "started", tmp_path / "finishing"

    def slow(comp):
        inp = comp.new_input(name="numbers")
        out = inp.stream.collect()
        comp.activate()
        started.touch()
        for e in range(10):
            inp.on_next([e])
            time.sleep(0.1)
        inp.on_completed()
        comp.join(timeout=60)
        finishing.touch()       # A still holds the directory, and lets it go soon
        return out.results

    def run_a():
        try:
            got["a"] = naiad.execute(slow, processes=2, checkpoint_dir=str(root),
                                     checkpoint_every=2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            got["a"] = exc

    first = threading.Thread(target=run_a)
    first.start()
    tries: dict = {}
    try:
        while first.is_alive() and not started.exists():
            time.sleep(0.01)
        # Until A's program has ended: then A releases the directory, and B may take it
        # (to fail there with CheckpointLayoutError, since it is A's, of another layout).
        while first.is_alive() and not finishing.exists():
            for how in ("execute", "computation"):
                try:
                    if how == "execute":
                        naiad.execute(program(1), checkpoint_dir=str(root), checkpoint_every=1,
                                      max_restarts=0)
                    else:
                        _by_hand(root)
                    outcome = "took it"
                except naiad.CheckpointInUse:
                    outcome = "in use"
                except Exception as exc:  # noqa: BLE001 - any other outcome is the defect
                    outcome = type(exc).__name__
                tries[how, outcome] = tries.get((how, outcome), 0) + 1
            time.sleep(0.02)
    finally:
        first.join(120)
    assert not isinstance(got["a"], BaseException), got["a"]
    merged = {e: r for part in got["a"] for e, r in part.items() if r}
    assert merged == {e: [e] for e in range(10)}
    assert (root / ".fault-checkpoint-write-4-1").exists()       # A did restart
    assert {outcome for _, outcome in tries} == {"in use"}, tries


@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", ["deleted", "changed"])
def test_a_lost_or_changed_key_is_named_and_never_replaced(tmp_path, damage):
    """A deleted KEY was quietly replaced by a new one in the directory of an earlier run, and
    both a deleted and a changed KEY were reported as a changed RUN."""
    root = tmp_path / "ckpt"
    naiad.execute(_subscribed, processes=2, checkpoint_dir=str(root), checkpoint_every=2)
    key = root / "KEY"
    if damage == "deleted":
        key.unlink()
        says = "has no KEY, though a run has used it"
    else:
        key.write_bytes(bytes(32))
        says = "RUN does not carry the HMAC of the directory's KEY"
    with pytest.raises(Exception, match=says):
        naiad.execute(_subscribed, processes=2, checkpoint_dir=str(root), checkpoint_every=2,
                      max_restarts=0)
    assert key.exists() == (damage == "changed")
