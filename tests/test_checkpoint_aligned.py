"""Aligned checkpoints (checkpoint_every): the inputs go on while a checkpoint is cut.

Two real processes over ZeroMQ.  A gate vertex holds epoch ``b - 1`` until the program has fed
epoch ``b + 2``: with checkpoints that stop the inputs at ``b`` until every worker has drained,
the program could never get there.  A vertex sends every record two epochs ahead (a send into
the future, which a checkpoint must carry across its boundary) into running totals (state that
outlives epochs, which a snapshot taken with later epochs already in it would count twice).  A
second run on the same directory resumes from the last cut, taken while epochs beyond it were
in flight, and must give the oracle's results.
"""

from __future__ import annotations

import collections
import json
import random
import threading

import pytest

import naiad
import stages

AHEAD = 2
EVERY = 5
FLOW = {"max_epochs_in_flight": None}
"""The gate blocks its worker, whose last word to the inputs' flow control may be several epochs
old: without a bound on the epochs in flight, only a checkpoint could block the inputs."""


def _epochs(n, seed=7):
    rng = random.Random(seed)
    return [[rng.randrange(100) for _ in range(rng.randrange(1, 8))] for _ in range(n)]


class Gate(naiad.Vertex):
    """Holds ``epoch`` until the program has fed a later one (``fed`` is set), so that epochs
    beyond the next boundary are in flight while the checkpoint is cut."""

    def __init__(self, epoch, fed):
        super().__init__()
        self.epoch = epoch
        self.fed = fed

    def on_recv_batch(self, edge, messages, time):
        if time.epoch == self.epoch and not self.fed.wait(30):
            msg = f"the inputs were blocked at the checkpoint after epoch {self.epoch}"
            raise RuntimeError(msg)
        self.send_batch_by(0, messages, time)

    def checkpoint(self):
        return None            # the event is configuration, made again by the program

    def restore(self, state):
        pass


class Ahead(naiad.Vertex):
    """Sends every record AHEAD epochs later than it arrived."""

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, messages, naiad.Timestamp(time.epoch + AHEAD))


class Total(naiad.Vertex):
    """Per epoch: (epoch's sum, running sum over all epochs so far)."""

    def __init__(self):
        super().__init__()
        self.running = 0
        self.pending = {}

    def on_recv_batch(self, edge, messages, time):
        if time not in self.pending:
            self.pending[time] = 0
            self.notify_at(time)
        self.pending[time] += sum(messages)

    def on_notify(self, time):
        s = self.pending.pop(time)
        self.running += s
        self.send_by(0, (s, self.running), time)


def oracle(epochs):
    out, running = {}, 0
    for e in range(len(epochs) + AHEAD):
        if e < AHEAD:
            out[e] = []          # fed, and nothing sent into them
            continue
        s = sum(epochs[e - AHEAD])
        running += s
        out[e] = [(s, running)]
    return out


def program(epochs, gate_at, release_after):
    def run(comp):
        fed = threading.Event()
        inp = comp.new_input(name="numbers")
        gated = stages.unary(inp.stream, lambda: Gate(gate_at, fed), name="gate")
        ahead = stages.unary(gated, Ahead, name="ahead")
        totals = stages.unary(ahead, Total, partition_by=lambda r: 0, name="totals")
        got = totals.collect()
        comp.activate()
        for e, records in enumerate(epochs):
            inp.on_next(records[comp.process_index::comp.processes])
            if e == release_after:
                fed.set()        # on_next of two epochs past the boundary has returned
        fed.set()
        inp.on_completed()
        comp.join(timeout=120)
        return {"results": got.results,
                "restored": comp.restored.epoch if comp.restored is not None else None}
    return run


def merged(parts):
    out = collections.defaultdict(list)
    for part in parts:
        for epoch, records in part["results"].items():
            out[epoch].extend(records)
    return dict(out)


@pytest.mark.timeout(120)
def test_a_cut_with_later_epochs_in_flight_restores_to_the_oracle(tmp_path):
    root = tmp_path / "ckpt"
    first = _epochs(30)
    boundary = 25
    parts = naiad.execute(program(first, boundary - 1, boundary + 2), processes=2,
                          checkpoint_dir=str(root), checkpoint_every=EVERY, max_restarts=0, **FLOW)
    assert merged(parts) == oracle(first)
    manifest = json.loads((root / f"ckpt-{boundary:09d}" / "MANIFEST.json").read_text())
    assert manifest["epoch"] == boundary
    # Records of epochs 23 and 24 were sent into epochs 25 and 26 before the cut: carried.
    carried = [c for p in range(2)
               for c in json.loads((root / f"ckpt-{boundary:09d}" / f"proc-{p}.json")
                                   .read_text())["carried"]]
    expected = [e + AHEAD for e in (boundary - 2, boundary - 1) for p in range(2)
                if first[e][p::2]]
    assert sorted(c[2] for c in carried) == expected

    more = first + _epochs(10, seed=8)
    parts = naiad.execute(program(more, 34, 37), processes=2, checkpoint_dir=str(root),
                          checkpoint_every=EVERY, max_restarts=0, **FLOW)
    assert [p["restored"] for p in parts] == [boundary, boundary]
    assert merged(parts) == oracle(more)


@pytest.mark.timeout(60)
def test_epochs_delivered_before_a_restart_do_not_hold_the_inputs_back(tmp_path):
    """The subscriber handed out epochs 0-7 in the first run; the second resumes from the
    checkpoint at 5 with one epoch in flight at most: epochs 5-7 are recomputed but not handed
    out again, and must not count as in flight (the inputs would wait for ever)."""
    root = tmp_path / "ckpt"
    seen = tmp_path / "seen.txt"

    def numbers(epochs):
        def run(comp):
            inp = comp.new_input(name="numbers")

            def note(epoch, records):
                with seen.open("a") as f:
                    f.write(f"{epoch} {sum(records)}\n")

            inp.stream.subscribe(note)
            comp.activate()
            for e in range(epochs):
                inp.on_next([e, 2 * e])
            inp.on_completed()
            comp.join(timeout=60)
        return run

    naiad.execute(numbers(8), checkpoint_dir=str(root), checkpoint_every=5)
    naiad.execute(numbers(12), checkpoint_dir=str(root), checkpoint_every=5,
                  max_epochs_in_flight=1)
    lines = seen.read_text().split("\n")[:-1]
    assert lines == [f"{e} {3 * e}" for e in range(12)]
