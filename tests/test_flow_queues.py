"""Flow control within an epoch: the queues between processes are bounded, a full queue makes
the sender's worker wait (reading meanwhile, so two processes sending to each other do not
deadlock), and a destination that never drains is named.  Real processes, real ZeroMQ (CURVE)."""

import hashlib
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import naiad
import stages
from naiad.testing import free_ports

RECORD = 1024          # bytes per record


def _blob(i: int, size: int = RECORD) -> bytes:
    return i.to_bytes(4, "big") * (size // 4)


class _SlowSum(naiad.Vertex):
    """Takes 10 ms per batch; at the end of each epoch sends (count, digest of the records)."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def on_recv_batch(self, edge, messages, time_):
        time.sleep(0.01)
        if time_ not in self.seen:
            self.seen[time_] = [0, 0]
            self.notify_at(time_)
        acc = self.seen[time_]
        acc[0] += len(messages)
        for m in messages:
            acc[1] ^= int.from_bytes(hashlib.blake2b(m, digest_size=8).digest(), "big")

    def on_notify(self, time_):
        self.send_by(0, tuple(self.seen.pop(time_)), time_)


def _expected(n: int, size: int = RECORD):
    digest = 0
    for i in range(n):
        digest ^= int.from_bytes(hashlib.blake2b(_blob(i, size), digest_size=8).digest(), "big")
    return (n, digest)


def _one_epoch(n: int, size: int = RECORD):
    """Process 0 feeds one epoch of ``n`` records of ``size`` bytes, all to a slow vertex of
    process 1."""
    def program(comp):
        inp = comp.new_input(name="blobs")
        got = stages.unary(inp.stream, _SlowSum, partition_by=lambda r: 1, name="slow").collect()
        comp.activate()
        inp.on_next([_blob(i, size) for i in range(n)] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=120)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024      # MB
        return peak, [r for recs in got.results.values() for r in recs]
    return program


@pytest.mark.parametrize("size", [RECORD, 64 * RECORD])
def test_one_large_epoch_into_a_slow_process_stays_bounded(size):
    """60 MB in one epoch into a vertex that takes 10 ms per batch (about 1 MB): the receiver's
    peak stays within 25 MB of a 1,000-record run (without flow control it drained the whole
    epoch into memory), the sender's within the epoch it built plus 25 MB (40 MB with 64 KB
    records; it also held every pickled batch in its ZeroMQ queue), and the sums are right.  Records of 64 KB used to go
    in parts of at least 1,024 records (64 MB), so the bounded queues held 16 times that."""
    n = 60 * 2**20 // size
    base = naiad.execute(_one_epoch(1000 * RECORD // size, size), processes=2, workers=1)
    big = naiad.execute(_one_epoch(n, size), processes=2, workers=1)
    assert [r for _, recs in base for r in recs] == [_expected(1000 * RECORD // size, size)]
    assert [r for _, recs in big for r in recs] == [_expected(n, size)]
    epoch_mb = n * (size + 33 + 8) / 2**20       # the records process 0 builds and keeps
    over = [big[p][0] - base[p][0] for p in (0, 1)]
    assert over[1] < 25, f"receiver grew {over[1]:.0f} MB over its baseline (bound 25 MB)"
    # The sender: its epoch, 16 messages of about 1 MB queued, the kernel's TCP buffers and
    # its allocator's slack; with 64 KB records the allocator keeps more of the freed parts,
    # so those are held to the 40 MB per peer that docs/security.md states.
    slack = 25 if size == RECORD else 40
    assert over[0] < epoch_mb + slack, \
        f"sender grew {over[0]:.0f} MB over its baseline (its epoch is {epoch_mb:.0f} MB)"


class _Forward(naiad.Vertex):
    """Sends every record on, 5 ms per batch."""

    def on_recv_batch(self, edge, messages, time_):
        time.sleep(0.005)
        self.send_batch_by(0, messages, time_)


def _both_ways(n: int):
    """Each process sends ``n`` records of 1 KB to the other, which sends them back."""
    def program(comp):
        inp = comp.new_input(name="blobs")
        other = 1 - comp.process_index
        there = stages.unary(inp.stream, _Forward, partition_by=lambda r: r[0] ^ 1, name="there")
        back = stages.unary(there, _Forward, partition_by=lambda r: r[0] ^ 1, name="back")
        got = stages.unary(back, _SlowSum, partition_by=lambda r: r[0], name="sum").collect()
        comp.activate()
        inp.on_next([bytes([comp.process_index]) + _blob(i)[1:] for i in range(n)])
        inp.on_completed()
        comp.join(timeout=120)
        assert other in (0, 1)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak, [r for recs in got.results.values() for r in recs]
    return program


def test_two_processes_sending_large_batches_to_each_other_do_not_deadlock():
    """30 MB each way at once, twice (there and back), through bounded queues: both finish, with
    the right sums, within a bounded time."""
    n = 30_000
    t0 = time.monotonic()
    results = naiad.execute(_both_ways(n), processes=2, workers=1, send_timeout=20)
    assert time.monotonic() - t0 < 60
    for p, (_, recs) in enumerate(results):
        digest = 0
        for i in range(n):
            digest ^= int.from_bytes(hashlib.blake2b(bytes([p]) + _blob(i)[1:],
                                                     digest_size=8).digest(), "big")
        assert recs == [(n, digest)]


class _Stuck(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time_):
        time.sleep(30)


def _stuck(n: int):
    def program(comp):
        inp = comp.new_input(name="blobs")
        stages.sink(inp.stream, _Stuck, partition_by=lambda r: 1, name="stuck")
        comp.activate()
        inp.on_next([_blob(i) for i in range(n)] if comp.process_index == 0 else [])
        inp.on_completed()
        comp.join(timeout=60)
    return program


def test_a_destination_that_never_drains_is_named_after_send_timeout():
    t0 = time.monotonic()
    with pytest.raises(naiad.NaiadError, match=r"worker 1 of process 1 .*send_timeout") as err:
        naiad.execute(_stuck(60_000), processes=2, workers=1, send_timeout=2)
    assert time.monotonic() - t0 < 25, str(err.value)
    # A receiver that is only slow is told apart from a stuck one by the advice, not the wait.
    assert "may be stuck, or be slower than that per batch" in str(err.value)



def test_a_sender_waiting_for_a_process_that_died_fails_fast():
    """Processes started by hand (no launcher kills the survivor): process 1 exits while process
    0 waits for room in its queue to it (send_timeout is 120 s); process 0's wait ends with the
    failure, naming process 1, within seconds."""
    script = str(Path(__file__).parent / "hand_started_dying_receiver.py")
    ports = [str(p) for p in free_ports(2)]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, script, str(i), *ports], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        out = procs[0].communicate(timeout=60)[0]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
    assert procs[1].returncode == 3
    assert out.startswith("0 ") and "process 1" in out and "ok" not in out.split()[:2], out
    assert time.monotonic() - t0 < 20, out
