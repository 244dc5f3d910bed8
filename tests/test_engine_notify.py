"""Notifications keep the paper's promise: on_notify(t) only after every on_recv at t' <= t.

The vertices check the promise themselves as they run (an AssertionError inside a vertex fails
the computation), and the counts they report at each notification are compared with an oracle:
a notification delivered too early would either trip the check or miss records.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from typing import Dict, List, Set

import naiad
import stages
from naiad import Timestamp

EPOCHS = 6


class Checker(naiad.Vertex):
    """Checks the guarantee; forwards each record, possibly to a later epoch; at each notification
    reports ``(stage tag, epoch, records received at that time)`` on output 1."""

    def __init__(self, tag: str, shift_field: int):
        super().__init__()
        self.tag = tag
        self.shift_field = shift_field
        self.received: Counter = Counter()
        self.notified: Set[Timestamp] = set()

    def on_recv(self, edge, message, time):
        late = [n for n in self.notified if time.less_equal(n)]
        assert not late, f"{self.tag}: record at {time} after the notification at {late}"
        if not self.received[time]:
            self.notify_at(time)
        self.received[time] += 1
        shift = message[self.shift_field]
        self.send_by(0, message, Timestamp(time.epoch + shift))

    def on_notify(self, time):
        for n in self.notified:
            assert not time.less_than(n), f"{self.tag}: notified at {time} after {n}"
        self.notified.add(time)
        self.send_by(1, (self.tag, time.epoch, self.received.pop(time)), time)


def checked_stage(stream, tag, key_field, shift_field):
    st = stages.new_stage(functools.partial(Checker, tag, shift_field), name=tag)
    st.new_input(stream, partition_by=lambda r: r[key_field])
    return st.new_output(), st.new_output()


def random_epochs(seed: int) -> List[list]:
    """Records ``(id, key_a, key_b, shift_a, shift_b)``; one epoch is empty."""
    rng = random.Random(seed)
    epochs = []
    for e in range(EPOCHS):
        n = 0 if e == 2 else rng.randrange(1, 60)
        epochs.append([(f"{e}.{i}", rng.randrange(1000), rng.random(), rng.randrange(2),
                        rng.randrange(3)) for i in range(n)])
    return epochs


def expected_counts(epochs) -> Dict[tuple, int]:
    """Records reaching each stage per epoch: ``a`` at the input epoch, ``b`` shifted by shift_a."""
    counts: Counter = Counter()
    for e, recs in enumerate(epochs):
        for r in recs:
            counts[("a", e)] += 1
            counts[("b", e + r[3])] += 1
    return dict(counts)


def notify_program(comp, epochs):
    from naiad.testing import shard
    inp = comp.new_input()
    a_out, a_counts = checked_stage(inp.stream, "a", key_field=1, shift_field=3)
    b_out, b_counts = checked_stage(a_out, "b", key_field=2, shift_field=4)
    got = a_counts.concat(b_counts).collect()
    final = b_out.collect()
    comp.activate()
    for recs in epochs:
        inp.on_next(shard(recs, comp.process_index, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return got.results, final.results


def test_notify_after_every_earlier_record(cluster):
    epochs = random_epochs(seed=7)
    parts = cluster.execute(functools.partial(notify_program, epochs=epochs))
    counts: Counter = Counter()
    final: Counter = Counter()
    for got, out in parts:
        for e, recs in got.items():
            for tag, epoch, n in recs:
                assert epoch == e
                counts[(tag, epoch)] += n
        for e, recs in out.items():
            final[e] += len(recs)
    assert dict(counts) == expected_counts(epochs)
    # b shifted again by shift_b: every record came out, at its own epoch, even past the inputs
    want: Counter = Counter()
    for e, recs in enumerate(epochs):
        for r in recs:
            want[e + r[3] + r[4]] += 1
    assert dict(final) == dict(want)


# ---- notifications inside a loop: one barrier per iteration -------------------------------

class Countdown(naiad.Vertex):
    """``(id, remaining)``: goes round while remaining > 0; at the end of each iteration reports
    ``(iteration, records seen)`` and checks that iterations complete in order."""

    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()
        self.done: Dict[int, int] = {}          # epoch -> last completed iteration

    def on_recv(self, edge, message, time):
        k = time.counters[-1]
        assert self.done.get(time.epoch, -1) < k, f"record at iteration {k} after its barrier"
        if not self.seen[time]:
            self.notify_at(time)
        self.seen[time] += 1
        ident, remaining = message
        if remaining > 0:
            self.send_by(0, (ident, remaining - 1), time)

    def on_notify(self, time):
        k = time.counters[-1]
        assert self.done.get(time.epoch, -1) < k, f"iteration {k} completed twice or backwards"
        self.done[time.epoch] = k
        self.send_by(1, (k, self.seen.pop(time)), time)


def loop_program(comp, epochs):
    from naiad.testing import shard
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="countdown")
    fb = loop.feedback(partition_by=lambda r: r[0] * 7 + r[1])
    st = stages.new_stage(Countdown, name="countdown")
    st.new_input(loop.enter(inp.stream).concat(fb.stream), partition_by=lambda r: r[0])
    again, report = st.new_output(), st.new_output()
    fb.connect(again)
    got = loop.exit(report).collect()
    comp.activate()
    for recs in epochs:
        inp.on_next(shard(recs, comp.process_index, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return got.results


def test_loop_notifications_per_iteration(cluster):
    rng = random.Random(3)
    epochs = [[(i, rng.randrange(12)) for i in range(40)], [], [(i, i % 4) for i in range(9)]]
    parts = cluster.execute(functools.partial(loop_program, epochs=epochs))
    alive: Dict[int, Counter] = {}
    for part in parts:
        for e, recs in part.items():
            for k, n in recs:
                alive.setdefault(e, Counter())[k] += n
    for e, recs in enumerate(epochs):
        want = Counter()
        for _, remaining in recs:
            for k in range(remaining + 1):
                want[k] += 1
        assert alive.get(e, Counter()) == want, f"epoch {e}"


# ---- a loop inside a loop --------------------------------------------------------------------

OUTER = 3


class InnerStep(naiad.Vertex):
    """Inner loop: ``x`` climbs by one until it is a multiple of 5, then leaves with its counters."""

    def __init__(self):
        super().__init__()
        self.pending: Set[Timestamp] = set()

    def on_recv(self, edge, message, time):
        assert time.depth == 2, time
        ident, x = message
        if x % 5 == 0:
            self.send_by(1, (ident, x, time.counters[0], time.counters[1]), time)
        else:
            self.send_by(0, (ident, x + 1), time)
        if time not in self.pending:
            self.pending.add(time)
            self.notify_at(time)

    def on_notify(self, time):
        assert time.depth == 2
        self.pending.discard(time)


class OuterStep(naiad.Vertex):
    """Outer loop: reports each round and sends ``3x + 1`` round again."""

    def on_recv(self, edge, message, time):
        ident, x, k, c = message
        assert time.counters == (k,), (time, k)       # egress dropped the inner counter only
        self.send_by(1, (ident, k, x, c), time)
        self.send_by(0, (ident, 3 * x + 1), time)


def nested_program(comp, epochs):
    from naiad.testing import shard
    inp = comp.new_input()
    outer = stages.LoopContext(comp, name="outer")
    start = outer.enter(inp.stream)
    ofb = outer.feedback(partition_by=lambda r: r[1], max_iterations=OUTER)
    inner = stages.LoopContext(comp, name="inner")
    entered = inner.enter(start.concat(ofb.stream))
    ifb = inner.feedback(partition_by=lambda r: r[0])
    step = stages.new_stage(InnerStep, name="inner_step")
    step.new_input(entered.concat(ifb.stream), partition_by=lambda r: r[1])
    climb, leave = step.new_output(), step.new_output()
    ifb.connect(climb)
    rounds = stages.new_stage(OuterStep, name="outer_step")
    rounds.new_input(inner.exit(leave), partition_by=lambda r: r[0])
    again, report = rounds.new_output(), rounds.new_output()
    ofb.connect(again)
    got = outer.exit(report).collect()
    comp.activate()
    for recs in epochs:
        inp.on_next(shard(recs, comp.process_index, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return got.results


def nested_oracle(records):
    out = []
    for ident, x in records:
        for k in range(OUTER):
            c = 0
            while x % 5:
                x += 1
                c += 1
            out.append((ident, k, x, c))
            x = 3 * x + 1
    return sorted(out)


def test_nested_loops(cluster):
    rng = random.Random(11)
    epochs = [[(i, rng.randrange(100)) for i in range(30)], [(100, 1), (101, 5)]]
    parts = cluster.execute(functools.partial(nested_program, epochs=epochs))
    merged: Dict[int, list] = {}
    for part in parts:
        for e, recs in part.items():
            merged.setdefault(e, []).extend(recs)
    assert {e: sorted(r) for e, r in merged.items()} == {
        e: nested_oracle(recs) for e, recs in enumerate(epochs)}


class _Again(naiad.Vertex):
    """Asks again, in on_notify(t), for a notification at t itself (as often as ``times``)."""

    def __init__(self, times: int):
        super().__init__()
        self.times = times
        self.calls: Dict[Timestamp, int] = {}

    def on_recv(self, edge, message, time):
        self.notify_at(time)

    def on_notify(self, time):
        n = self.calls[time] = self.calls.get(time, 0) + 1
        self.send_by(0, (time.epoch, n), time)
        if n <= self.times:
            self.notify_at(time)


def _asking_again(comp):
    inp = comp.new_input()
    got = stages.unary(inp.stream, functools.partial(_Again, 2), partition_by=lambda r: r,
                       name="again").collect()
    comp.activate()
    for epoch in range(4):
        inp.on_next(range(3) if comp.process_index == 0 else [])
    inp.on_completed()
    comp.join(timeout=30)
    return got.results


def test_a_notification_asked_again_at_its_own_time_is_delivered_again(cluster):
    """The rule of time allows notify_at(t) in on_notify(t).  The new request and the
    retirement of the one delivered cancelled in the progress buffer, the view did not change,
    and the worker never looked at its notifications again: the run hung."""
    results = cluster.execute(_asking_again)
    merged: Counter = Counter()
    for proc in results:
        for epoch, got in proc.items():
            merged.update((epoch, r) for r in got)
    vertices = {epoch: sum(n for (e, (_, k)), n in merged.items() if e == epoch and k == 1)
                for epoch in range(4)}
    for epoch in range(4):
        # every vertex that got a record is notified three times, in order
        assert merged[(epoch, (epoch, 1))] == merged[(epoch, (epoch, 2))] == \
            merged[(epoch, (epoch, 3))] == vertices[epoch] >= 1
        assert merged[(epoch, (epoch, 4))] == 0
