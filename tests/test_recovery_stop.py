"""A process that did not fail is stopped between two subscriber calls, never inside one.

When a process dies, the launcher stops the others before every process starts again.  A
subscriber of a surviving process may be in the middle of ``fn``: its effect done, its delivery
mark not yet written.  Killed there, the process would hand that epoch out again after the
restart.  The launcher sends SIGTERM first, and a process stopped that way lets the call return
and be marked before it exits (naiad._child); SIGKILL follows only for one that does not end.

Two real processes: process 0's subscriber, at epoch ``KILL_AT``, writes its line, SIGKILLs
process 1 and is still inside ``fn`` (slow: it sleeps) when the launcher stops process 0.
"""

from __future__ import annotations

import ast
import os
import random
import signal
import time

import pytest

import linq  # noqa: F401 - the fluent Stream methods
import naiad

KILL_AT = 5
SLOW = 0.4            # seconds process 0's fn takes after its effect, at KILL_AT


def program(epochs, logs):
    def run(comp):
        p = comp.process_index
        if p == 1:
            (logs / "pid-1").write_text(str(os.getpid()))
        inp = comp.new_input(name="numbers")
        sums = inp.stream.select(lambda n: ("s", n)).aggregate(lambda kv: kv[0], lambda kv: kv[1],
                                                               lambda a, b: a + b)
        marker = logs / "killed"

        def fn(epoch, records):
            with open(logs / f"delivered-{p}.log", "a") as f:
                f.write(f"{epoch} {sorted(records)!r}\n")
            if p == 0 and epoch == KILL_AT and not marker.exists():
                marker.write_text("")
                os.kill(int((logs / "pid-1").read_text()), signal.SIGKILL)
                time.sleep(SLOW)      # a slow subscriber: the launcher stops us meanwhile

        sums.subscribe(fn)
        comp.activate()
        for e in epochs:
            inp.on_next(e[p::2])
        inp.on_completed()
        comp.join(timeout=60)
    return run


@pytest.mark.timeout(120)
def test_a_surviving_subscriber_finishes_its_call_before_its_process_is_stopped(tmp_path):
    rng = random.Random(11)
    epochs = [[rng.randrange(100) for _ in range(6)] for _ in range(12)]
    naiad.execute(program(epochs, tmp_path), processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                  checkpoint_every=3)
    assert (tmp_path / "killed").exists()
    lines = {p: (tmp_path / f"delivered-{p}.log").read_text().splitlines() for p in (0, 1)}
    for p in (0, 1):
        got = [int(line.split()[0]) for line in lines[p]]
        assert got == list(range(len(epochs))), f"process {p} delivered epochs {got}"
    # The sums (each process's share of the records reaches the worker that owns key "s").
    want = {e: [("s", sum(r))] for e, r in enumerate(epochs)}
    got = {}
    for p in (0, 1):
        for line in lines[p]:
            e, recs = line.split(" ", 1)
            got.setdefault(int(e), []).extend(ast.literal_eval(recs))
    assert got == want
