"""Subscribers run in their own thread: a slow one delays only itself, and no further than
max_epochs_in_flight; a failing one stops the computation with an error naming it."""

import threading
import time

import pytest

import naiad


def _program(delivered, stamps, bound_probe_epochs=None):
    def program(comp):
        inp = comp.new_input(name="numbers")

        def slow(epoch, records):
            time.sleep(0.1)
            delivered.append((epoch, sorted(records), threading.current_thread().name))

        inp.stream.subscribe(slow)
        probe = inp.stream.probe()
        comp.activate()
        for e in range(10):
            inp.on_next([e, e + 100])
            stamps.append((e, len(delivered)))
        probe.wait(9, timeout=30)
        at_probe = len(delivered)
        inp.on_completed()
        comp.join(timeout=60)
        return at_probe
    return program


def test_a_slow_subscriber_does_not_hold_the_dataflow_back():
    delivered, stamps = [], []
    [at_probe] = naiad.execute(_program(delivered, stamps), workers=2, max_epochs_in_flight=None)
    assert at_probe < 10            # the dataflow finished epoch 9 before the subscriber did
    assert [(e, r) for e, r, _ in delivered] == [(e, [e, e + 100]) for e in range(10)]
    assert all(not name.startswith("naiad-worker") for _, _, name in delivered)


def test_a_slow_subscriber_holds_the_inputs_back_by_at_most_the_bound():
    delivered, stamps = [], []
    naiad.execute(_program(delivered, stamps), max_epochs_in_flight=2)
    for epoch, seen in stamps:
        # on_next(epoch) returned with at most 2 epochs fed and not delivered.
        assert (epoch + 1) - seen <= 2, (epoch, seen)
    assert len(delivered) == 10


def test_a_failing_subscriber_names_its_stage_and_epoch():
    def program(comp):
        inp = comp.new_input()

        def fussy(epoch, records):
            if epoch == 3:
                raise ValueError("no thanks")
        inp.stream.subscribe(fussy)
        comp.activate()
        for e in range(20):
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=30)

    t0 = time.monotonic()
    with pytest.raises(naiad.VertexError, match=r"stage 'subscribe.*subscribe at .*3.*no thanks"):
        naiad.execute(program, processes=2)
    assert time.monotonic() - t0 < 20


def test_a_subscriber_that_never_returns_is_named_not_waited_for_for_ever():
    release = threading.Event()
    comp = naiad.Computation()
    inp = comp.new_input()
    sub = inp.stream.subscribe(lambda epoch, records: release.wait(30))
    comp.activate()
    inp.on_next([1])
    inp.on_completed()
    deadline = time.monotonic() + 10
    while sub.delivered < 1 and time.monotonic() < deadline:   # handed to its thread
        time.sleep(0.01)
    t0 = time.monotonic()
    sub.close(timeout=0.3)
    assert time.monotonic() - t0 < 5
    with pytest.raises(naiad.NaiadError, match="has not returned from epoch 0 after 0 s"):
        comp.check_failed()
    release.set()
    comp.shutdown()
