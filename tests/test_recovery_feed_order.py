"""Checkpoints at the policy's boundaries whatever order a program feeds its independent inputs
in: an input fed past a boundary another has not reached is held back until every open input
has, so each process cuts at the same epochs; the held epochs are logged, delivered after the
cut, and replayed after a kill, each epoch's output exactly once."""

from __future__ import annotations

import random

import pytest

import naiad
from naiad.recovery.store import list_checkpoints
from tests.test_recovery import kill_stage

EPOCHS = 12


def _feed(comp, a, b, order: str, rng: random.Random) -> None:
    """Feed ``EPOCHS`` epochs of both inputs: ``lockstep``, ``ahead`` (a two epochs ahead of
    b), ``a_then_b`` (all of a, then all of b), ``b_closes_early`` (b completed after 4 epochs
    while a runs on), or ``random`` (a random interleaving)."""
    def rec(name, e):
        return [(name, e, comp.process_index, j) for j in range(3)]
    if order == "lockstep":
        for e in range(EPOCHS):
            a.on_next(rec("a", e))
            b.on_next(rec("b", e))
    elif order == "ahead":
        a.on_next(rec("a", 0))
        a.on_next(rec("a", 1))
        for e in range(EPOCHS):
            b.on_next(rec("b", e))
            if e + 2 < EPOCHS:
                a.on_next(rec("a", e + 2))
    elif order == "a_then_b":
        for e in range(EPOCHS):
            a.on_next(rec("a", e))
        for e in range(EPOCHS):
            b.on_next(rec("b", e))
    elif order == "b_closes_early":
        for e in range(EPOCHS):
            a.on_next(rec("a", e))
            if e < 4:
                b.on_next(rec("b", e))
            elif e == 4:
                b.on_completed()
        a.on_completed()
        return
    else:
        left = ["a"] * EPOCHS + ["b"] * EPOCHS
        rng.shuffle(left)
        fed = {"a": 0, "b": 0}
        for name in left:
            (a if name == "a" else b).on_next(rec(name, fed[name]))
            fed[name] += 1
    a.on_completed()
    b.on_completed()


def _program(orders, kill=None, seed=0):
    def program(comp):
        a, b = comp.new_input(name="a"), comp.new_input(name="b")
        stream = a.stream.concat(b.stream)
        if kill is not None:
            stream = kill_stage(stream, *kill)
        got = stream.collect()
        deliveries: list = []
        stream.subscribe(lambda e, recs: deliveries.append(e))
        comp.activate()
        _feed(comp, a, b, orders[comp.process_index], random.Random(seed + comp.process_index))
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}, deliveries
    return program


def _want(processes: int, order_b_short: bool = False) -> dict:
    out: dict = {}
    for e in range(EPOCHS):
        for p in range(processes):
            for name in ("a", "b"):
                if name == "b" and order_b_short and e >= 4:
                    continue
                out.setdefault(e, []).extend((name, e, p, j) for j in range(3))
    return {e: sorted(r) for e, r in out.items()}


def _merged(parts) -> dict:
    out: dict = {}
    for results, _ in parts:
        for e, recs in results.items():
            out.setdefault(e, []).extend(recs)
    return {e: sorted(r) for e, r in out.items()}


@pytest.mark.parametrize("orders", [("ahead",), ("a_then_b",), ("b_closes_early",),
                                    ("lockstep", "a_then_b"), ("ahead", "lockstep"),
                                    ("random", "random")])
def test_checkpoints_at_every_boundary_whatever_the_feed_order(tmp_path, orders):
    """checkpoint_every=3 cuts at 3, 6 and 9 at 1 and 2 processes, the processes feeding
    their inputs in different orders; every epoch's output is complete and delivered once."""
    parts = naiad.execute(_program(orders, seed=len(orders)), processes=len(orders),
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert list_checkpoints(str(tmp_path / "ckpt")) == [3, 6, 9]
    assert _merged(parts) == _want(len(orders), "b_closes_early" in orders)
    assert all(sorted(deliveries) == list(range(EPOCHS)) for _, deliveries in parts)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kill_epoch", [5, 8])
def test_held_epochs_are_replayed_after_a_kill(tmp_path, kill_epoch):
    """Process 1 feeds all of a before b (a's epochs from 3 on are held); it is killed at
    ``kill_epoch``; the run restarts from the last checkpoint and collects every epoch's
    output exactly once, as a run without a failure does."""
    marker = tmp_path / "killed"
    orders = ("lockstep", "a_then_b")
    parts = naiad.execute(_program(orders, (marker, kill_epoch, 1)), processes=2,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert marker.exists(), "no process was killed"
    assert _merged(parts) == _want(2)


def _probe_program(ahead_in):
    """Processes in ``ahead_in`` feed all of a, wait on a probe for a's last epoch (past the
    boundary at 3, while b has not reached it), then feed b; the others feed in lockstep."""
    import linq  # noqa: F401 - Stream.select

    def program(comp):
        a, b = comp.new_input(name="a"), comp.new_input(name="b")
        probe = a.stream.select(lambda r: r).probe()
        got = a.stream.concat(b.stream).collect()
        comp.activate()
        me = comp.process_index
        if me in ahead_in:
            for e in range(EPOCHS):
                a.on_next([("a", e, me, 0)])
            probe.wait(EPOCHS - 1, timeout=30)
            for e in range(EPOCHS):
                b.on_next([("b", e, me, 0)])
        else:
            for e in range(EPOCHS):
                a.on_next([("a", e, me, 0)])
                b.on_next([("b", e, me, 0)])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}, []
    return program


@pytest.mark.parametrize("processes,ahead_in", [(1, (0,)), (2, (0, 1))])
def test_a_probe_wait_past_a_boundary_lets_the_held_epochs_go(tmp_path, processes, ahead_in):
    """A program that waits on a probe for an epoch an input holds back gets it (the boundary
    is let go in every process), rather than waiting for an input it has not fed yet."""
    parts = naiad.execute(_probe_program(ahead_in), processes=processes,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    want: dict = {}
    for e in range(EPOCHS):
        for p in range(processes):
            want.setdefault(e, []).extend([("a", e, p, 0), ("b", e, p, 0)])
    assert _merged(parts) == {e: sorted(r) for e, r in want.items()}


def test_a_probe_wait_past_a_boundary_in_one_process_only_never_hangs(tmp_path):
    """Process 1 waits on a probe past the boundary its other input has not reached, process
    0 feeds in lockstep: process 1 lets the boundary go and says so, so process 0 lets it go
    too (or, if it was cutting it already, the run fails at once with CheckpointMisaligned);
    either way within seconds, not the checkpoint barrier's ten minutes."""
    import time
    from naiad.errors import CheckpointMisaligned, ComputationFailed
    t0 = time.monotonic()
    try:
        parts = naiad.execute(_probe_program((1,)), processes=2, max_restarts=0,
                              checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    except (CheckpointMisaligned, ComputationFailed, naiad.RecoveryFailed) as exc:
        assert "boundary" in str(exc) or "checkpoint" in str(exc), exc
    else:
        assert len(_merged(parts)) == EPOCHS
    assert time.monotonic() - t0 < 30


def _random_plan(rng: random.Random, counts):
    """A random interleaving of ``on_next`` (per input, ``counts[i]`` of them) and
    ``on_completed`` calls, one input sometimes running several calls ahead."""
    seqs = {i: [("next", i)] * c + [("done", i)] for i, c in enumerate(counts)}
    out = []
    while any(seqs.values()):
        i = rng.choice([k for k, v in seqs.items() if v])
        for _ in range(rng.choice([1, 1, 1, 4])):
            if seqs[i]:
                out.append(seqs[i].pop(0))
    return out


def _plan_program(plans):
    def program(comp):
        ins = [comp.new_input(name=n) for n in "abc"]
        stream = ins[0].stream.concat(ins[1].stream, ins[2].stream)
        got = stream.collect()
        comp.activate()
        fed = [0, 0, 0]
        for kind, i in plans[comp.process_index]:
            if kind == "next":
                ins[i].on_next([("abc"[i], fed[i], comp.process_index)])
                fed[i] += 1
            else:
                ins[i].on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}, []
    return program


@pytest.mark.parametrize("processes", [1, 2])
def test_random_feed_orders_cut_the_same_boundaries(tmp_path, processes):
    """Three inputs, random epoch counts and interleavings (differing between the processes:
    inputs complete at different points), random checkpoint_every: every run gets every
    epoch right and cuts every boundary some input is fed past, whichever input completed
    first, so the processes always agree."""
    for seed in range(12):
        rng = random.Random(seed)
        counts = [rng.choice([0, 1, 2, 3, 5, 8]) for _ in range(3)]
        plans = [_random_plan(rng, counts) for _ in range(processes)]
        every = rng.choice([1, 2, 3])
        want: dict = {}
        for p in range(processes):
            for i, c in enumerate(counts):
                for e in range(c):
                    want.setdefault(e, []).append(("abc"[i], e, p))
        ckpt = str(tmp_path / f"ckpt{seed}")
        parts = naiad.execute(_plan_program(plans), processes=processes, max_restarts=0,
                              checkpoint_dir=ckpt, checkpoint_every=every, checkpoint_keep=100)
        assert _merged(parts) == {e: sorted(r) for e, r in want.items()}, seed
        assert list_checkpoints(ckpt) == list(range(every, max(counts), every)), (seed, plans)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_boundary_no_input_is_fed_past_is_not_cut(tmp_path, processes):
    """a has 2 epochs, b 1, checkpoint_every=1: only boundary 1 is passed. Process 0 feeds a
    first (its epoch 1 held back for b) and completes b at 1 while a is at 2, then a; process
    1 feeds b first. Both cut at 1 only: a completion does not cut the boundary an open input
    has reached without passing it."""
    def program(comp):
        a, b = comp.new_input(name="a"), comp.new_input(name="b")
        got = a.stream.concat(b.stream).collect()
        comp.activate()
        if comp.process_index == 0:
            a.on_next(["a0"])
            a.on_next(["a1"])
            b.on_next(["b0"])
            b.on_completed()
            a.on_completed()
        else:
            b.on_next(["b0"])
            b.on_completed()
            a.on_next(["a0"])
            a.on_next(["a1"])
            a.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}
    ckpt = str(tmp_path / "ckpt")
    parts = naiad.execute(program, processes=processes, max_restarts=0, checkpoint_dir=ckpt,
                          checkpoint_every=1, checkpoint_keep=100)
    assert list_checkpoints(ckpt) == [1]
    assert _merged([(p, None) for p in parts]) == {
        0: sorted(["a0", "b0"] * processes), 1: ["a1"] * processes}


def test_checkpoint_on_demand_beside_the_policy_with_epochs_held(tmp_path):
    """a runs ahead (epochs from 3 on held) and completes; b is fed to 3 and comp.checkpoint()
    is called there: the policy's cut at 3 is that checkpoint, the epochs held before the next
    boundary go on, and the run ends with every epoch."""
    def program(comp):
        a, b = comp.new_input(name="a"), comp.new_input(name="b")
        got = a.stream.concat(b.stream).collect()
        comp.activate()
        for e in range(8):
            a.on_next([("a", e)])
        a.on_completed()
        for e in range(3):
            b.on_next([("b", e)])
        comp.checkpoint()
        for e in range(3, 10):
            b.on_next([("b", e)])
        b.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}
    [got] = naiad.execute(program, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert got == {e: sorted([("b", e)] + ([("a", e)] if e < 8 else [])) for e in range(10)}
    assert list_checkpoints(str(tmp_path / "ckpt"))[0] == 3


def test_a_program_waiting_for_held_output_another_way_gets_it(tmp_path):
    """The program feeds a past the boundary, then waits for a's output through a
    subscription (not a probe) before feeding b from it: after HOLD_PATIENCE seconds with
    nothing fed, the boundary is let go and the held epochs reach the subscriber."""
    import threading
    from naiad.recovery.coordinator import HOLD_PATIENCE

    def program(comp):
        a, b = comp.new_input(name="a"), comp.new_input(name="b")
        seen: dict = {}
        last = threading.Event()

        def on_a(epoch, records):
            seen[epoch] = records
            if epoch == 4:
                last.set()
        a.stream.subscribe(on_a)
        got = a.stream.concat(b.stream).collect()
        comp.activate()
        for e in range(5):
            a.on_next([e])
        assert last.wait(timeout=10 * HOLD_PATIENCE)
        for e in range(5):
            b.on_next([sum(seen[e]) * 10])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=60)
        return {e: sorted(r) for e, r in got.results.items()}
    [got] = naiad.execute(program, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3,
                          max_restarts=0)
    assert got == {e: [e, 10 * e] for e in range(5)}
