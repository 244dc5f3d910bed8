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
