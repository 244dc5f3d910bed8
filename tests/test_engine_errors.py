"""Errors a user can act on: failing vertices, violations of the vertex model, invalid graphs.

Every failing computation must end (no hang): the tests carry a timeout, and the programs join
with one.
"""

from __future__ import annotations

import functools
import sys

import pytest

import naiad
import naiad.testing
import stages
from naiad import Timestamp
from naiad.testing import shard


def run_failing(cluster, factory, epochs, *, name="victim", partition_by=lambda r: r):
    """Run one stage of ``factory`` over ``epochs``; return the VertexError that execute raised."""

    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, factory, partition_by=partition_by, name=name).collect()
        comp.activate()
        for recs in epochs:
            inp.on_next(shard(recs, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)

    with pytest.raises(naiad.VertexError) as info:
        cluster.execute(program)
    return info.value


def check_cause(cluster, err, kind, text):
    """The original exception is chained (in its own process) and named in the message always."""
    assert f"{kind.__name__}: {text}" in str(err)
    if cluster.processes == 1:
        assert isinstance(err.__cause__, kind) and text in str(err.__cause__)


# ---- a user callback raises -----------------------------------------------------------------

class FailsInRecv(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if message == 13:
            raise ValueError("unlucky 13")
        self.send_by(0, message, time)


class FailsInNotify(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.notify_at(time)

    def on_notify(self, time):
        if time.epoch == 1:
            raise KeyError("no such thing")


def failing_factory():
    raise RuntimeError("cannot build")


@pytest.mark.timeout(120)
def test_exception_in_on_recv(cluster):
    err = run_failing(cluster, FailsInRecv, [list(range(10)), list(range(10, 20))])
    total = cluster.processes * cluster.workers
    assert (err.stage, err.callback, err.time) == ("victim", "on_recv", Timestamp(1))
    assert err.vertex == naiad.key_hash(13) % total
    assert f"vertex {err.vertex} of stage 'victim'" in str(err) and "Timestamp(1)" in str(err)
    check_cause(cluster, err, ValueError, "unlucky 13")
    assert "unlucky 13" in err.traceback and "on_recv" in err.traceback


@pytest.mark.timeout(120)
def test_exception_in_on_notify(cluster):
    err = run_failing(cluster, FailsInNotify, [[1, 2], [3], [4]], partition_by=lambda r: 0)
    assert (err.stage, err.callback, err.time) == ("victim", "on_notify", Timestamp(1))
    assert err.vertex == naiad.key_hash(0) % (cluster.processes * cluster.workers)
    check_cause(cluster, err, KeyError, "'no such thing'")


@pytest.mark.timeout(120)
def test_exception_in_the_factory(cluster):
    err = run_failing(cluster, failing_factory, [[1]])
    assert err.stage == "victim" and "factory" in err.callback
    check_cause(cluster, err, RuntimeError, "cannot build")


class ExitsInRecv(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if message == 13:
            sys.exit(7)
        self.send_by(0, message, time)


@pytest.mark.timeout(120)
def test_sys_exit_in_a_callback_is_named_like_an_exception(cluster):
    """sys.exit() inside on_recv ended the run with the exit status and not a word (a
    SystemExit is not an Exception)."""
    err = run_failing(cluster, ExitsInRecv, [list(range(10)), list(range(10, 20))])
    assert (err.stage, err.callback, err.time) == ("victim", "on_recv", Timestamp(1))
    assert "SystemExit: 7" in str(err)


@pytest.mark.timeout(120)
def test_the_factorys_error_names_the_process_and_no_time(cluster):
    err = run_failing(cluster, failing_factory, [[1]])
    assert err.time is None and " at None" not in str(err)
    if cluster.processes > 1:
        assert f"in process {err.process} failed in the vertex factory: " in str(err)


def test_factory_returning_something_else():
    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, lambda: 42, name="odd")
        comp.activate()

    with pytest.raises(TypeError, match="'odd'.*not a naiad.Vertex"):
        naiad.execute(program)


# ---- violations of the vertex model -----------------------------------------------------------

class SendsIntoThePast(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, message, Timestamp(time.epoch - 1))


class NotifiesInThePast(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.notify_at(Timestamp(0))


class NotifiesInThePastWhenNotified(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.notify_at(Timestamp(time.epoch + 1))

    def on_notify(self, time):
        self.notify_at(Timestamp(time.epoch - 1))


def check_time_violation(err, what, now, bad, chained):
    assert isinstance(err, naiad.VertexError) and err.stage == "victim" and err.time == now
    message = str(err)
    assert "TimeViolation" in message and what in message
    assert repr(now) in message and repr(bad) in message
    assert f"stage 'victim' vertex {err.vertex}" in message
    if chained:
        assert isinstance(err.__cause__, naiad.TimeViolation)


@pytest.mark.timeout(120)
def test_send_into_the_past(cluster):
    err = run_failing(cluster, SendsIntoThePast, [[], [5]])
    check_time_violation(err, "send_by", Timestamp(1), Timestamp(0), cluster.processes == 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("factory,now,bad", [
    (NotifiesInThePast, Timestamp(1), Timestamp(0)),
    (NotifiesInThePastWhenNotified, Timestamp(2), Timestamp(1)),
], ids=["in-on_recv", "in-on_notify"])
@pytest.mark.parametrize("workers", [1, 2])
def test_notify_into_the_past(factory, now, bad, workers):
    err = run_failing(naiad.testing.Cluster(1, workers), factory, [[], [5]])
    check_time_violation(err, "notify_at", now, bad, True)


def test_time_of_another_depth_is_a_violation():
    class Leaks(naiad.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(0, message, Timestamp(time.epoch))     # drops the loop counter

    def program(comp):
        inp = comp.new_input()
        loop = stages.LoopContext(comp, name="loop")
        body = stages.unary(loop.enter(inp.stream), Leaks, name="leaks")
        loop.exit(body).collect()
        comp.activate()
        inp.on_next([1])
        inp.on_completed()
        comp.join(timeout=30)

    with pytest.raises(naiad.VertexError, match="incomparable") as info:
        naiad.execute(program)
    assert isinstance(info.value.__cause__, naiad.TimeViolation)


def test_send_outside_a_callback_and_on_a_missing_port():
    v = FailsInRecv()
    with pytest.raises(naiad.NaiadError, match="stage"):
        v.send_by(0, "x", Timestamp(0))

    class WrongPort(naiad.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(3, message, time)

    with pytest.raises(naiad.VertexError, match="no output port 3") as info:
        naiad.testing.run_unary(WrongPort, [[1]])
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("port", [-1, -2, "0", 1.0])
def test_a_negative_or_non_integer_port_is_refused(port):
    """send_by(-1, ...) used to send on the last port (Python's negative index)."""
    class BadPort(naiad.Vertex):
        def on_recv(self, edge, message, time):
            self.send_by(port, message, time)

    class BadBatchPort(naiad.Vertex):
        def on_recv_batch(self, edge, messages, time):
            self.send_batch_by(port, messages, time)

    for factory in (BadPort, BadBatchPort):
        with pytest.raises(naiad.VertexError, match=rf"no output port {port!r}; the stage has 1"):
            naiad.testing.run_unary(factory, [[1]])


@pytest.mark.parametrize("records, says", [
    ("abc", "got a str, whose items would each become a record"),
    (b"ab", "got a bytes"),
    ({"a": 1}, "got a dict, whose keys"),
    (5, "got int 5"),
    (None, "got NoneType None"),
])
def test_on_next_refuses_what_is_not_a_collection_of_records(records, says):
    comp = naiad.Computation()
    inp = comp.new_input(name="lines")
    inp.stream.collect()
    comp.activate()
    try:
        with pytest.raises(TypeError, match=rf"input 'lines': on_next takes an iterable.*{says}"):
            inp.on_next(records)
        inp.on_next(["fine"])
        inp.on_completed()
    finally:
        comp.join(timeout=30)


def test_a_partition_function_that_raises():
    with pytest.raises(naiad.VertexError, match="partition_by") as info:
        naiad.testing.run_unary(FailsInRecv, [[1, 2, 3]], partition_by=lambda r: 1 / 0,
                                workers=2)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# ---- invalid graphs -----------------------------------------------------------------------------

class Id(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, message, time)


@pytest.fixture
def comp():
    return naiad.Computation()


def test_stream_from_outside_a_loop_needs_enter(comp):
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="cc")
    inside = loop.enter(inp.stream)
    with pytest.raises(naiad.GraphError, match=r"loop\.enter"):
        stages.binary(inside, inp.stream, Id)
    with pytest.raises(naiad.GraphError, match="scope"):
        inside.concat(inp.stream)


def test_feedback_never_connected(comp):
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="cc")
    x = loop.enter(inp.stream)
    fb = loop.feedback()
    loop.exit(stages.unary(x.concat(fb.stream), Id)).collect()
    with pytest.raises(naiad.GraphError, match=r"never connected.*fb\.connect"):
        comp.activate()


def test_feedback_connected_twice_or_bounded_badly(comp):
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="cc")
    x = loop.enter(inp.stream)
    fb = loop.feedback()
    body = stages.unary(x.concat(fb.stream), Id)
    fb.connect(body)
    with pytest.raises(naiad.GraphError, match="already connected"):
        fb.connect(body)
    with pytest.raises(ValueError, match="max_iterations"):
        loop.feedback(max_iterations=0)


def test_cycle_without_feedback_is_refused(comp):
    """Connecting a stage's own output back to its input would be a cycle with no feedback."""
    inp = comp.new_input()
    st = stages.new_stage(Id, name="selfish")
    st.new_input(inp.stream)
    out = st.new_output()
    stages.unary(out, Id)
    with pytest.raises(naiad.GraphError, match="feedback"):
        st.new_input(out)


def test_a_self_loop_is_refused_while_the_graph_is_built(comp):
    """A stage's own output, not used by anything yet, connected back to it: refused at the
    call that would close the cycle (not at activate), whether alone or in a concat."""
    inp = comp.new_input()
    st = stages.new_stage(Id, name="selfish")
    st.new_input(inp.stream)
    out = st.new_output()
    with pytest.raises(naiad.GraphError, match=r"'selfish': its own output cannot be its "
                                               r"input.*feedback"):
        st.new_input(out)
    with pytest.raises(naiad.GraphError, match="its own output"):
        st.new_input(inp.stream.concat(out))


def test_input_handle_instead_of_its_stream(comp):
    inp = comp.new_input()
    with pytest.raises(TypeError, match=r"\.stream"):
        stages.unary(inp, Id)
    with pytest.raises(TypeError, match=r"\.stream"):
        stages.LoopContext(comp).enter(inp)
    with pytest.raises(TypeError, match="Stream"):
        inp.stream.concat(inp)


@pytest.mark.parametrize("bad", [None, 3, "Id", Id()])
def test_non_callable_factory(comp, bad):
    inp = comp.new_input()
    with pytest.raises(TypeError, match="zero-argument callable"):
        stages.unary(inp.stream, bad, name="bad")
    with pytest.raises(TypeError, match="zero-argument callable"):
        stages.new_stage(bad)


def test_subscribe_inside_a_loop(comp):
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="cc")
    x = loop.enter(inp.stream)
    with pytest.raises(naiad.GraphError, match=r"loop\.exit"):
        x.subscribe(print)
    with pytest.raises(naiad.GraphError, match=r"loop\.exit"):
        x.collect()
    with pytest.raises(TypeError, match="callable"):
        inp.stream.subscribe("print")


def test_exit_of_a_stream_not_in_the_loop(comp):
    inp = comp.new_input()
    loop = stages.LoopContext(comp, name="cc")
    with pytest.raises(naiad.GraphError, match="not in this loop"):
        loop.exit(inp.stream)


def test_streams_of_another_computation(comp):
    other = naiad.Computation()
    theirs = other.new_input().stream
    with pytest.raises(naiad.GraphError, match="another computation"):
        stages.binary(comp.new_input().stream, theirs, Id)


def test_bad_arguments():
    with pytest.raises(TypeError, match="Computation"):
        stages.LoopContext("comp")
    with pytest.raises(TypeError, match="unknown option"):
        naiad.execute(lambda comp: None, colour="blue")
    with pytest.raises(ValueError, match="workers"):
        naiad.execute(lambda comp: None, workers=0)
    with pytest.raises(TypeError, match="callable"):
        naiad.execute("program")
    with pytest.raises(TypeError, match="partition_by"):
        stages.unary(naiad.Computation().new_input().stream, Id, partition_by="key")


class _Stuck(naiad.Vertex):
    """Its callback does not return for 20 s (a user function that hangs)."""

    def on_recv(self, edge, message, time):
        import time as clock
        clock.sleep(20)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_join_timeout_names_the_callback_a_worker_is_stuck_in(processes):
    """comp.join(timeout) raises in time, naming the stage, callback, time and the user code
    the worker is in; execute then returns in seconds (not after 15 s of waiting for a thread
    that cannot stop), leaving the stuck thread to end with its callback."""
    import time as clock

    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, _Stuck, name="stuck").collect()
        comp.activate()
        inp.on_next([1])            # every worker of every process gets stuck
        inp.on_completed()
        comp.join(timeout=0.5)

    t0 = clock.monotonic()
    with pytest.raises(TimeoutError) as err:
        naiad.execute(program, processes=processes)
    assert clock.monotonic() - t0 < 8
    msg = str(err.value)
    assert "did not finish within 0.5 s" in msg
    assert "is in stage 'stuck'.on_recv at Timestamp(0)" in msg, msg


class SleepsOnce(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if message == 3:
            import time as clock
            clock.sleep(2.5)
        self.send_by(0, message, time)


class SleepsOften(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        import time as clock
        clock.sleep(0.3)            # many callbacks at one time, each short: not a stall
        self.send_batch_by(0, messages, time)


def _slow(factory, batches):
    def program(comp):
        inp = comp.new_input()
        stages.unary(inp.stream, factory, name="slow").collect()
        comp.activate()
        for b in batches:
            inp.on_next(b)
        inp.on_completed()
        comp.join(timeout=60)
    return program


@pytest.mark.parametrize("processes", [1, 2])
def test_a_callback_that_does_not_return_is_named(capfd, monkeypatch, processes):
    """A vertex stuck in a callback held the run with nothing said; after NAIAD_STALL seconds
    (60 by default) its process names the stage, callback and time on stderr."""
    monkeypatch.setenv("NAIAD_STALL", "1")
    naiad.execute(_slow(SleepsOnce, [list(range(5))]), processes=processes)
    err = capfd.readouterr().err
    assert "is in stage 'slow'.on_recv at Timestamp(0), now at " in err, err
    assert f"{__file__}:{_line_of(SleepsOnce.on_recv, 'clock.sleep')}, for " in err, err
    assert "a callback that does not return holds its time" in err


def _line_of(function, text: str) -> int:
    """The number of the first line of ``function`` that holds ``text``."""
    import inspect
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


class SleepsAtNotify(naiad.Vertex):
    def on_recv_batch(self, edge, messages, t):
        self.notify_at(t)

    def on_notify(self, t):
        import time as clock
        clock.sleep(2.5)


def test_a_stalled_callback_is_named_with_its_time_and_line_whatever_its_parameters(
        capfd, monkeypatch):
    """The time was read from a parameter named time (or time_), and the line only from a
    function the callback had called: a callback sleeping in its own body, its time named t,
    was named without either."""
    monkeypatch.setenv("NAIAD_STALL", "1")
    naiad.execute(_slow(SleepsAtNotify, [[1], [2]]), processes=1)
    err = capfd.readouterr().err
    line = _line_of(SleepsAtNotify.on_notify, "clock.sleep")
    assert f"is in stage 'slow'.on_notify at Timestamp(0), now at {__file__}:{line}, for " \
        in err, err


def test_many_short_callbacks_are_not_a_stall(capfd, monkeypatch):
    monkeypatch.setenv("NAIAD_STALL", "1")
    naiad.execute(_slow(SleepsOften, [[i] for i in range(8)]))
    assert "does not return" not in capfd.readouterr().err
