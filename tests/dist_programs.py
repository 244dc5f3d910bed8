"""Programs run by the distributed tests in processes started by hand (importable by name)."""

import os
import signal

import naiad
import stages


class CountPerKey(naiad.Vertex):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def on_recv_batch(self, edge, messages, time):
        if time not in self.counts:
            self.counts[time] = {}
            self.notify_at(time)
        d = self.counts[time]
        for m in messages:
            d[m] = d.get(m, 0) + 1

    def on_notify(self, time):
        self.send_batch_by(0, sorted(self.counts.pop(time).items()), time)


def wordcount(comp: naiad.Computation):
    """Counts words; every process supplies a share; returns this process's sorted counts."""
    words = "the quick brown fox jumps over the lazy dog the end".split()
    inp = comp.new_input(name="words")
    got = stages.unary(inp.stream, CountPerKey, partition_by=lambda w: w, name="count").collect()
    comp.activate()
    inp.on_next(words[comp.process_index::comp.processes])
    inp.on_completed()
    comp.join(timeout=60)
    return sorted(got.results[0])


class KillSelf(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        if self.index == 1 and time.epoch == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        self.send_batch_by(0, messages, time)


class Raise(naiad.Vertex):
    def on_recv(self, edge, message, time):
        if self.index == 1 and time.epoch == 2:
            raise KeyError(f"no such key {message!r}")
        self.send_by(0, message, time)


class _AlwaysRaise(naiad.Vertex):
    def on_recv(self, edge, message, time):
        raise KeyError(f"no such key {message!r}")


def failing(comp: naiad.Computation):
    """A vertex raises on the first record: for the command line's exit code and message."""
    inp = comp.new_input(name="keys")
    stages.unary(inp.stream, _AlwaysRaise, name="lookup").collect()
    comp.activate()
    inp.on_next(["k"])
    inp.on_completed()
    comp.join(timeout=30)


def fails_before_activate_in_1(comp: naiad.Computation):
    """Process 1 raises while it builds its graph (a file it cannot read, say); the others
    run as usual and wait for it at activate."""
    inp = comp.new_input(name="lines")
    inp.stream.collect()
    if comp.process_index == 1:
        raise FileNotFoundError("input.txt is not on this host")
    comp.activate()
    inp.on_next(["a line"])
    inp.on_completed()
    comp.join(timeout=30)
