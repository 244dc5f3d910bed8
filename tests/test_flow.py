"""Flow control: on_next waits while max_epochs_in_flight epochs are fed and not complete."""

import time

import pytest

import naiad
import stages


class _SlowDone(naiad.Vertex):
    """Notes (epoch, monotonic time) when each epoch is complete here, 10 ms of work each."""

    def __init__(self):
        super().__init__()
        self.pending = set()

    def on_recv_batch(self, edge, messages, time_):
        if time_ not in self.pending:
            self.pending.add(time_)
            self.notify_at(time_)

    def on_notify(self, time_):
        time.sleep(0.01)
        self.pending.discard(time_)
        self.send_by(0, (time_.epoch, time.monotonic()), time_)


def _program(epochs, bound_note):
    def program(comp):
        inp = comp.new_input(name="numbers")
        done = stages.unary(inp.stream, _SlowDone, partition_by=lambda r: 1, name="slow").collect()
        comp.activate()
        fed = {}
        for e in range(epochs):
            inp.on_next(list(range(10)))
            fed[e] = time.monotonic()
        inp.on_completed()
        comp.join(timeout=60)
        return fed, {e: t for recs in done.results.values() for e, t in recs}
    return program


@pytest.mark.parametrize("processes,bound", [(1, 4), (2, 4), (2, 1)])
def test_an_input_never_runs_more_than_the_bound_ahead(processes, bound):
    results = naiad.execute(_program(30, bound), processes=processes,
                            max_epochs_in_flight=bound)
    finished = {}
    for _, done in results:
        finished.update(done)
    assert sorted(finished) == list(range(30))
    for fed, _ in results:
        for e, at in fed.items():
            if e >= bound:
                # on_next(e) returned only once epoch e - bound was complete everywhere.
                assert at >= finished[e - bound], (e, bound)


def test_without_a_bound_the_producer_runs_ahead():
    results = naiad.execute(_program(30, None), processes=2, max_epochs_in_flight=None)
    fed, done = results[0][0], {**results[0][1], **results[1][1]}
    assert fed[29] < done[10]         # all 30 epochs fed before epoch 10 was complete


def test_an_input_held_back_by_another_input_of_the_process_is_an_error_not_a_hang():
    def program(comp):
        a = comp.new_input(name="a")
        b = comp.new_input(name="b")
        a.stream.concat(b.stream).collect()
        comp.activate()
        for _ in range(10):
            a.on_next([1])             # b is never fed: epoch 0 can never complete
        a.on_completed()
        b.on_completed()
        comp.join(timeout=30)

    t0 = time.monotonic()
    with pytest.raises(naiad.NaiadError, match=r"input 'a': feeding epoch 4 .* input\(s\) 'b' "
                                               r"\(at epoch 0\)"):
        naiad.execute(program, max_epochs_in_flight=4)
    assert time.monotonic() - t0 < 10


def test_an_input_a_little_behind_another_does_not_stop_it_for_ever():
    """b one epoch behind a's window: a waits only until the epochs b has fed complete (the
    half-free window it waits for otherwise is out of reach while b holds the frontier)."""
    def program(comp):
        a = comp.new_input(name="a")
        b = comp.new_input(name="b")
        got = stages.unary(a.stream.concat(b.stream), _Slow, name="slow").collect()
        comp.activate()
        b.on_next([("b", 0)])
        for e in range(5):
            a.on_next([("a", e)])          # epoch 4: a full window; b holds the frontier at 1
        for e in range(1, 5):
            b.on_next([("b", e)])
        a.on_completed()
        b.on_completed()
        comp.join(timeout=30)
        return sorted(got.results)

    t0 = time.monotonic()
    assert naiad.execute(program, max_epochs_in_flight=4) == [[0, 1, 2, 3, 4]]
    assert time.monotonic() - t0 < 20


class _Slow(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time_):
        time.sleep(0.3)
        self.send_batch_by(0, messages, time_)


def test_a_failure_wakes_a_blocked_input():
    class Boom(naiad.Vertex):
        def on_recv(self, edge, message, time_):
            time.sleep(0.2)
            raise RuntimeError("boom")

    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, Boom, name="boom").collect()
        comp.activate()
        for _ in range(100):
            inp.on_next([1])
        inp.on_completed()
        comp.join(timeout=30)

    t0 = time.monotonic()
    with pytest.raises(naiad.VertexError, match="boom"):
        naiad.execute(program, max_epochs_in_flight=2)
    assert time.monotonic() - t0 < 10


def _flow_warnings(monkeypatch, callback, window: int, epochs: int, said_hook=None,
                   warn_after: float = 1.0) -> list:
    """The naiad.flow warnings of a run feeding ``epochs`` epochs, one at a time, to a stream
    whose subscriber is ``callback``, with WARN_AFTER at ``warn_after`` seconds."""
    import logging
    from naiad import flow
    monkeypatch.setattr(flow, "WARN_AFTER", warn_after)
    said: list = []

    class Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())
            if said_hook is not None:
                said_hook()
    handler = Said()
    logging.getLogger("naiad.flow").addHandler(handler)
    try:
        def program(comp):
            inp = comp.new_input(name="n")
            inp.stream.subscribe(callback)
            comp.activate()
            for e in range(epochs):
                inp.on_next([e])
            inp.on_completed()
            comp.join(timeout=60)
            return True
        assert naiad.execute(program, max_epochs_in_flight=window) == [True]
    finally:
        logging.getLogger("naiad.flow").removeHandler(handler)
    return said


def test_an_input_held_by_a_subscriber_callback_says_so(monkeypatch):
    """The subscriber's callback waits for the program, which waits in on_next for room the
    undelivered epochs take: after WARN_AFTER seconds on_next logs which callback holds it and
    what to do (here the log record itself releases the callback, so the run ends)."""
    import threading
    release = threading.Event()
    said = _flow_warnings(monkeypatch, lambda e, recs: release.wait(15), 4, 12, release.set)
    assert len(said) == 1, said
    assert ("input 'n': on_next for epoch" in said[0] and "the callback of subscriber" in said[0]
            and "max_epochs_in_flight=None" in said[0]), said[0]


@pytest.mark.timeout(60)
def test_a_slow_subscriber_that_returns_is_not_said_to_hold_the_input(monkeypatch):
    """Callbacks of 1.4 s each, on_next waiting about 5.6 s for four of them, WARN_AFTER at
    1.6 s: no warning, since no single call runs for the whole wait.  (The wait looks once a
    second, so some look finds a call that has run 1.2 s or more: naming any call that has
    run a second, as before, named this one.)"""
    assert _flow_warnings(monkeypatch, lambda e, recs: time.sleep(1.4), 8, 9,
                          warn_after=1.6) == []
