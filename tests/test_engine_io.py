"""Inputs and outputs: subscribe once per epoch in order (empty epochs too), collect, and the
errors of using a computation in the wrong order."""

from __future__ import annotations

import functools
import threading
import time

import pytest

import naiad
import stages
from naiad.testing import shard

EPOCHS = [[3, 1, 2], [], [4], [], list(range(10, 30)), [], [7]]


class Later(naiad.Vertex):
    """Sends each record one epoch later (so the last epoch's records outlive the inputs' epochs)."""

    def on_recv(self, edge, message, time):
        self.send_by(0, message, naiad.Timestamp(time.epoch + 1))


def subscribe_program(comp, epochs):
    inp = comp.new_input()
    calls = []
    seen = threading.Event()

    def on_epoch(epoch, records):
        calls.append((epoch, sorted(records)))
        seen.set()

    stages.unary(inp.stream, Later, partition_by=lambda r: r).subscribe(on_epoch)
    got = inp.stream.collect()
    comp.activate()
    streamed = []
    for recs in epochs:
        seen.clear()
        inp.on_next(shard(recs, comp.process_index, comp.processes))
        # on_next seals the epoch: it is handed out while the computation runs, not at the end.
        deadline = time.monotonic() + 30
        while len(calls) < comp.epochs_fed and time.monotonic() < deadline:
            seen.wait(0.05)
        streamed.append(len(calls))
    inp.on_completed()
    comp.join(timeout=60)
    return calls, got.results, streamed


def test_subscribe_once_per_epoch_in_order_and_collect(cluster):
    parts = cluster.execute(functools.partial(subscribe_program, epochs=EPOCHS))
    n = len(EPOCHS)
    merged_calls = {}
    merged_collect = {}
    beyond = 0
    for calls, collected, streamed in parts:
        # Every process sees every epoch exactly once, in epoch order, empty ones included.  The
        # records shifted past the last input epoch come in one more epoch, where they arrive.
        epochs = [e for e, _ in calls]
        assert epochs in (list(range(n)), list(range(n + 1)))
        beyond += len(epochs) == n + 1
        assert streamed == list(range(1, n + 1))
        for e, recs in calls:
            merged_calls.setdefault(e, []).extend(recs)
        assert sorted(collected) == list(range(n))
        for e, recs in collected.items():
            merged_collect.setdefault(e, []).extend(recs)
    assert beyond >= 1
    assert {e: sorted(r) for e, r in merged_calls.items()} == {
        e: sorted(EPOCHS[e - 1]) if e else [] for e in range(n + 1)}
    assert {e: sorted(r) for e, r in merged_collect.items()} == {
        e: sorted(recs) for e, recs in enumerate(EPOCHS)}


def test_collection_records_in_epoch_order():
    def program(comp):
        inp = comp.new_input()
        got = inp.stream.collect()
        comp.activate()
        inp.on_next([2, 1])
        inp.on_next([])
        inp.on_next([3])
        inp.on_completed()
        comp.join(timeout=30)
        return got.records(), got.results

    [(records, results)] = naiad.execute(program)
    assert records == [2, 1, 3] and results == {0: [2, 1], 1: [], 2: [3]}


def test_no_epochs_at_all():
    def program(comp):
        inp = comp.new_input()
        calls = []
        inp.stream.subscribe(lambda e, recs: calls.append(e))
        got = inp.stream.collect()
        comp.activate()
        inp.on_completed()
        comp.join(timeout=30)
        return calls, got.results

    assert naiad.execute(program, workers=2) == [([], {})]


# ---- using a computation in the wrong order -----------------------------------------------

class Slow(naiad.Vertex):
    def on_recv(self, edge, message, when):
        time.sleep(0.6)
        self.send_by(0, message, when)


def misuse_program(comp):
    """Each misuse is caught and its message returned, so every process reports its own."""
    errors = {}
    inp = comp.new_input(name="numbers")
    got = stages.unary(inp.stream, Slow, name="slow").collect()
    try:
        inp.on_next([1])
    except naiad.NaiadError as exc:
        errors["on_next before activate"] = str(exc)
    try:
        comp.join()
    except naiad.NaiadError as exc:
        errors["join before activate"] = str(exc)
    comp.activate()
    try:
        comp.activate()
    except naiad.NaiadError as exc:
        errors["activate twice"] = str(exc)
    try:
        stages.unary(inp.stream, Slow)
    except naiad.GraphError as exc:
        errors["build after activate"] = str(exc)
    inp.on_next([1] if comp.process_index == 0 else [])
    try:
        comp.join()
    except naiad.NaiadError as exc:
        errors["join with an open input"] = str(exc)
    inp.on_completed()
    try:
        inp.on_next([2])
    except naiad.NaiadError as exc:
        errors["on_next after on_completed"] = str(exc)
    try:
        comp.join(timeout=0.05)
    except TimeoutError as exc:
        errors["join timeout"] = str(exc)
    comp.join(timeout=60)       # and the computation still finishes
    comp.join()                 # joining again is harmless
    return errors, got.results


@pytest.mark.timeout(120)
def test_misuse_gives_clear_errors(cluster):
    parts = cluster.execute(misuse_program)
    for errors, results in parts:
        assert "activate" in errors["on_next before activate"]
        assert "numbers" in errors["on_next before activate"]
        assert "activate" in errors["join before activate"]
        assert "already" in errors["activate twice"]
        assert "activate" in errors["build after activate"]
        assert "'numbers'" in errors["join with an open input"]
        assert "on_completed" in errors["join with an open input"]
        assert "on_completed" in errors["on_next after on_completed"]
        timeout = errors["join timeout"]
        assert "0.05" in timeout and "Timestamp(" in timeout    # says what is outstanding
    assert sum(len(r.get(0, [])) for _, r in parts) == 1
