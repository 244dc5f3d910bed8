"""Probes: the frontier at a point of the graph, correct across workers and processes."""

import time

import pytest

import naiad
import stages
from naiad import Timestamp


class _SlowStamp(naiad.Vertex):
    """Sleeps on every batch, then emits ``(epoch, monotonic time it finished the batch)``."""

    def on_recv_batch(self, edge, messages, time_):
        time.sleep(0.03)
        self.send_by(0, (time_.epoch, time.monotonic()), time_)


def _slow_program(comp):
    """Every record goes to worker 0 (process 0), which is slow; every process waits on a probe
    after it and notes when it saw each epoch complete."""
    inp = comp.new_input(name="numbers")
    out = stages.unary(inp.stream, _SlowStamp, partition_by=lambda r: 0, name="slow")
    got = out.collect()
    probe = out.probe()
    comp.activate()
    seen = {}
    for epoch in range(6):
        inp.on_next(range(comp.process_index, 40, comp.processes))
        probe.wait(epoch, timeout=60)
        seen[epoch] = time.monotonic()
        assert not probe.less_equal(epoch) and probe.less_equal(epoch + 1)
        assert not probe.done()
    inp.on_completed()
    comp.join(timeout=60)
    assert probe.done()
    return seen, {e: [t for _, t in recs] for e, recs in got.results.items()}


@pytest.mark.parametrize("processes,workers", [(1, 2), (2, 1), (2, 2)])
def test_every_process_sees_an_epoch_complete_only_after_the_last_record_is_processed(
        processes, workers):
    results = naiad.execute(_slow_program, processes=processes, workers=workers)
    finished = {}
    for _, stamps in results:                   # only process 0's worker 0 processes records
        for epoch, times in stamps.items():
            finished[epoch] = max(times + [finished.get(epoch, 0.0)])
    assert sorted(finished) == list(range(6))
    for seen, _ in results:
        for epoch, at in seen.items():
            assert at >= finished[epoch], f"epoch {epoch} reported complete too early"


class _Halve(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time_):
        self.send_batch_by(0, [m // 2 for m in messages], time_)


def test_probe_inside_a_loop_compares_loop_times_in_the_product_order():
    comp = naiad.Computation(workers=2)
    inp = comp.new_input()
    loop = naiad.LoopContext(comp, "halve")
    fb = loop.feedback(max_iterations=3)
    body = stages.unary(loop.enter(inp.stream).concat(fb.stream), _Halve, name="halve")
    fb.connect(body)
    inner = body.probe(name="inner")
    outer = loop.exit(body).probe(name="outer")
    comp.activate()
    inp.on_next([8, 9])
    outer.wait(0, timeout=10)
    # Inside the loop, epoch 0's iterations are complete; epoch 1 may still start.
    assert not inner.less_equal(Timestamp(0, (2,)))
    assert inner.less_equal(Timestamp(1, (0,)))
    assert inner.less_than(Timestamp(1, (1,))) and not inner.less_than(Timestamp(1, (0,)))
    inp.on_completed()
    comp.join(timeout=10)
    assert inner.done() and outer.done() and inner.frontier() == []


class _Stuck(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.notify_at(time)           # asks for a notification it can never get while open


def test_wait_gives_up_after_its_timeout_saying_what_is_active():
    comp = naiad.Computation()
    inp = comp.new_input(name="numbers")
    probe = inp.stream.probe()
    comp.activate()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"probe 'probe': epoch 0 not complete.*numbers"):
        probe.wait(0, timeout=0.3)       # epoch 0 is still open: nothing was fed
    assert time.monotonic() - t0 < 5
    inp.on_completed()
    comp.join(timeout=10)


class _Fails(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if time.epoch == 1:
            raise ValueError("bad record")


def test_wait_raises_the_failure_of_another_process_promptly():
    def program(comp):
        inp = comp.new_input()
        probe = stages.unary(inp.stream, _Fails, partition_by=lambda r: r, name="fails").probe()
        comp.activate()
        for epoch in range(3):
            inp.on_next([1, 2, 3])
            probe.wait(epoch, timeout=60)
        return "unreachable"

    t0 = time.monotonic()
    with pytest.raises(naiad.VertexError, match="fails"):
        naiad.execute(program, processes=2)
    assert time.monotonic() - t0 < 30


def test_probe_is_built_before_activate_and_takes_a_stream():
    comp = naiad.Computation()
    inp = comp.new_input()
    comp.activate()
    with pytest.raises(naiad.GraphError, match="activate"):
        inp.stream.probe()
    inp.on_completed()
    comp.join(timeout=10)
