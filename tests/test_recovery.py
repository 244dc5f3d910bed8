"""Checkpoint, restore and recovery, proved with real processes, real files and SIGKILL.

Every scenario compares against plain Python (an oracle) and against a run without failure, and
checks exactly-once delivery: each process's ``subscribe`` function appends one line per call to a
file in ``tmp_path``, which survives the kill, so the file shows every delivery of the whole run,
failures and restarts included.  A kill happens once: the first process to reach the kill point
creates a marker file (``O_EXCL``) and SIGKILLs itself; after the restart the marker is there.
The kill epochs are drawn from a seeded generator (``NAIAD_TEST_SEED`` overrides the seed).

A SIGKILL that lands between a subscriber's ``fn`` returning and its delivery mark being written
delivers that epoch again after the restart: the one window of ``subscribe`` (docs/recovery.md).
``fn`` runs in the subscription's own thread (naiad.delivery), so a kill sent by a worker thread
can land there, and the more epochs are in flight (aligned checkpoints never pause the inputs),
the likelier.  Where a test checks exactly-once delivery, the vertex that decides to kill
therefore only asks for it (``deferred``: a request file for its process) and the process's
subscriber kills itself at the start of its next call, before its effect: the dataflow is still
cut at an arbitrary point, but never inside that window.
"""

from __future__ import annotations

import ast
import collections
import os
import random
import signal
import time
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import linq  # noqa: F401 - installs the Stream methods used by the PageRank sample
import naiad
import stages
from naiad.recovery.coordinator import ROTATE_LOGS
from naiad.recovery.journal import (COMMIT, HEADER_SIZE, PART, ROTATE_RECORDS, Record,
                                    journal_files, scan)
from naiad.recovery.store import CheckpointWarning, EpochLog, list_checkpoints
from naiad.recovery.directory import directory_key
from naiad.recovery.restart import RecoveryFailed
from naiad.testing import shard
from samples import components_vertex, wordcount_vertex
from samples.wordcount_vertex import RunningTotal
from samples.graphs import adjacency, random_edges
from samples.pagerank import pagerank, power_iteration

SEED = int(os.environ.get("NAIAD_TEST_SEED", "20240611"))
VOCABULARY = [f"w{i}" for i in range(40)]


# ---- kill points ---------------------------------------------------------------------------------
def kill_once(marker: str) -> None:
    """SIGKILL this process, unless some process already did it (the marker file exists)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{time.time():.6f}".encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_requested(marker: str) -> bool:
    """Whether a :class:`KillAt` of this process asked for the kill (``deferred``)."""
    return os.path.exists(f"{marker}.request-{os.getpid()}")


class KillAt(naiad.Vertex):
    """Passes its input on; worker ``victim`` SIGKILLs its process the first time a batch at an
    epoch ``>= epoch`` (and, inside a loop, at an iteration ``>= iteration``) reaches it; if
    ``deferred``, it asks the process's delivery log (:func:`log_deliveries`) to do it instead."""

    def __init__(self, marker: Path, epoch: int, victim: int, iteration: int = 0,
                 deferred: bool = False):
        super().__init__()
        self.marker = str(marker)
        self.epoch = epoch
        self.victim = victim
        self.iteration = iteration
        self.deferred = deferred

    def on_recv_batch(self, edge, messages, time):
        if (self.index == self.victim and time.epoch >= self.epoch
                and (not time.counters or time.counters[-1] >= self.iteration)):
            if not self.deferred:
                kill_once(self.marker)
            elif not os.path.exists(self.marker):
                open(f"{self.marker}.request-{os.getpid()}", "a").close()
        self.send_batch_by(0, messages, time)


def kill_stage(stream, marker, epoch, victim, iteration=0, deferred=False):
    return stages.unary(stream, lambda: KillAt(marker, epoch, victim, iteration, deferred),
                        name="kill")


# ---- what the processes leave behind ----------------------------------------------------------------
def note_start(logs: Path, comp: naiad.Computation) -> None:
    """One line per start of the program in a process: counts the attempts."""
    with open(logs / f"starts-{comp.process_index}.log", "a") as f:
        f.write("start\n")


def starts(logs: Path, process: int) -> int:
    path = logs / f"starts-{process}.log"
    return len(path.read_text().split()) if path.exists() else 0


def log_deliveries(stream: naiad.Stream, logs: Path, comp: naiad.Computation, kill=None):
    """``subscribe`` with a function that appends ``(epoch, sorted records)`` to a file; with
    ``kill`` (a marker), it first carries out a kill a deferred :class:`KillAt` asked for."""
    path = logs / f"delivered-{comp.process_index}.log"
    marker = None if kill is None else str(kill)

    def fn(epoch, records):
        if marker is not None and kill_requested(marker):
            kill_once(marker)
        with open(path, "a") as f:
            f.write(repr((epoch, sorted(records))) + "\n")
    return stream.subscribe(fn)


def deliveries(logs: Path, process: int) -> List[tuple]:
    """Every ``(epoch, records)`` handed to the subscriber of ``process``, in order, all runs."""
    path = logs / f"delivered-{process}.log"
    if not path.exists():
        return []
    return [ast.literal_eval(line) for line in path.read_text().splitlines()]


def assert_delivered_exactly_once(logs: Path, processes: int, expected: Dict[int, list],
                                  close=None) -> None:
    """Each process saw every epoch exactly once, in order; together they saw ``expected``."""
    merged: Dict[int, list] = {}
    for p in range(processes):
        got = deliveries(logs, p)
        epochs = [e for e, _ in got]
        assert epochs == list(range(len(expected))), f"process {p} delivered epochs {epochs}"
        for e, recs in got:
            merged.setdefault(e, []).extend(recs)
    merged = {e: sorted(recs) for e, recs in merged.items()}
    if close is None:
        assert merged == expected
    else:
        close(merged, expected)


def merge(parts) -> Dict[int, list]:
    """The per-process ``{epoch: records}`` results of execute, merged and sorted."""
    merged: Dict[int, list] = {}
    for part in parts:
        for e, recs in part.items():
            merged.setdefault(e, []).extend(recs)
    return {e: sorted(recs) for e, recs in sorted(merged.items())}


def checkpoints(directory: Path) -> List[int]:
    """Boundary epochs of the committed checkpoints in ``directory``."""
    return list_checkpoints(directory)


# ---- streaming word count: per-epoch counts and running totals across epochs --------------------------
def text_epochs(epochs: int, lines: int, seed: int) -> List[List[str]]:
    rng = random.Random(seed)
    return [[" ".join(rng.choice(VOCABULARY) for _ in range(rng.randrange(1, 8)))
             for _ in range(lines)] for _ in range(epochs)]


def running_totals(epochs: List[List[str]]) -> Dict[int, list]:
    totals: collections.Counter = collections.Counter()
    out = {}
    for e, lines in enumerate(epochs):
        counts = collections.Counter(w for line in lines for w in wordcount_vertex.words(line))
        totals.update(counts)
        out[e] = sorted((w, totals[w]) for w in counts)
    return out


def wordcount_program(epochs, logs: Path, kill=None, extra_epochs=(), durable_at=None):
    """Per-epoch counts (collected) and running totals (subscribed to a log), from the sample's
    vertices; ``kill`` is ``(marker, epoch, victim)`` or None; ``durable_at``: an epoch at which
    the program waits until a checkpoint is durable (policy checkpoints commit in the
    background, so without it a kill soon after a boundary may precede the commit)."""
    def program(comp):
        note_start(logs, comp)
        inp = comp.new_input(name="lines")
        lines = inp.stream if kill is None else kill_stage(inp.stream, *kill, deferred=True)
        counts = wordcount_vertex.count_words(comp, lines)
        totals = stages.unary(counts, RunningTotal, partition_by=lambda wc: wc[0], name="totals")
        got = counts.collect()
        log_deliveries(totals, logs, comp, kill and kill[0])
        comp.activate()
        for i, e in enumerate(list(epochs) + list(extra_epochs)):
            if i == durable_at:
                comp.checkpoint()
            inp.on_next(shard(e, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return program


def clean_run(program_factory, *args, processes=1, **kwargs):
    """The same program without checkpoints or failures, in this process, logging elsewhere."""
    return merge(naiad.execute(program_factory(*args, **kwargs), processes=processes))


@pytest.mark.timeout(60)
def test_wordcount_survives_sigkill_at_a_random_epoch(tmp_path):
    rng = random.Random(SEED)
    epochs = text_epochs(30, 24, rng.randrange(1 << 30))
    kill_epoch = rng.randrange(6, 26)
    marker = tmp_path / "killed"
    run_logs = tmp_path / "run"
    run_logs.mkdir()
    clean_logs = tmp_path / "clean"
    clean_logs.mkdir()
    parts = naiad.execute(wordcount_program(epochs, run_logs, (marker, kill_epoch, 1)),
                          processes=2, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=4)
    assert marker.exists(), f"no process was killed at epoch {kill_epoch}"
    assert starts(run_logs, 0) == starts(run_logs, 1) == 2     # one restart of every process
    clean = clean_run(wordcount_program, epochs, clean_logs)
    assert merge(parts) == clean == wordcount_vertex.oracle(epochs)
    assert_delivered_exactly_once(run_logs, 2, running_totals(epochs))
    assert checkpoints(tmp_path / "ckpt")[-1] == 28


@pytest.mark.timeout(60)
def test_wordcount_with_two_workers_per_process_survives_sigkill(tmp_path):
    """Quiescence across several workers per process; results only (see the module docstring)."""
    rng = random.Random(SEED + 1)
    epochs = text_epochs(24, 24, rng.randrange(1 << 30))
    kill_epoch = rng.randrange(5, 20)
    marker = tmp_path / "killed"
    parts = naiad.execute(wordcount_program(epochs, tmp_path, (marker, kill_epoch, 3)),
                          processes=2, workers=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=3)
    assert marker.exists()
    assert starts(tmp_path, 1) == 2
    assert merge(parts) == wordcount_vertex.oracle(epochs)


# ---- connected components: the sample's vertices in a loop, one graph per epoch -----------------------------
def components_program(graphs, logs: Path, kill=None):
    """Labels per epoch from ``samples.components_vertex`` (a loop that stops by itself), killed
    on the feedback edge if asked; component sizes summed over the epochs (state that outlives
    each epoch) are subscribed to the log."""
    def program(comp):
        note_start(logs, comp)
        inp = comp.new_input(name="edges")
        both = stages.unary(inp.stream, components_vertex.Symmetrize, name="symmetrize")
        loop = stages.LoopContext(comp, name="cc")
        inner = loop.enter(both)
        fb = loop.feedback()
        offers = fb.stream if kill is None else kill_stage(fb.stream, *kill, deferred=True)
        prop = stages.new_stage(components_vertex.Propagate, name="propagate")
        prop.new_input(inner, partition_by=lambda e: e[0])
        prop.new_input(offers, partition_by=lambda p: p[0])
        proposals, final = prop.new_output(), prop.new_output()
        fb.connect(proposals)
        labels = loop.exit(final)
        sizes = stages.unary(labels.select(lambda node_label: (node_label[1], 1)), RunningTotal,
                             partition_by=lambda kv: kv[0], name="sizes")
        got = labels.collect()
        log_deliveries(sizes, logs, comp, kill and kill[0])
        comp.activate()
        for edges in graphs:
            inp.on_next(shard(edges, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return program


def summed_component_sizes(labels: Dict[int, list]) -> Dict[int, list]:
    totals: collections.Counter = collections.Counter()
    out = {}
    for e in sorted(labels):
        sizes = collections.Counter(label for _, label in labels[e])
        totals.update(sizes)
        out[e] = sorted((label, totals[label]) for label in sizes)
    return out


@pytest.mark.timeout(60)
def test_connected_components_in_a_loop_survive_sigkill_mid_iteration(tmp_path):
    rng = random.Random(SEED + 2)
    graphs = [random_edges(60, 45, seed=rng.randrange(1 << 30)) for _ in range(12)]
    kill_epoch = rng.randrange(3, 10)
    marker = tmp_path / "killed"
    run_logs = tmp_path / "run"
    run_logs.mkdir()
    parts = naiad.execute(components_program(graphs, run_logs, (marker, kill_epoch, 2, 1)),
                          processes=3, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    assert marker.exists(), f"no label proposal reached worker 2 at epoch >= {kill_epoch}"
    assert [starts(run_logs, p) for p in range(3)] == [2, 2, 2]
    expected = {e: components_vertex.oracle(g) for e, g in enumerate(graphs)}
    clean_logs = tmp_path / "clean"
    clean_logs.mkdir()
    assert merge(parts) == clean_run(components_program, graphs, clean_logs) == expected
    assert_delivered_exactly_once(run_logs, 3, summed_component_sizes(expected))


# ---- PageRank: the LINQ sample, one graph per epoch ------------------------------------------------------
NODES = 40
ITERATIONS = 6


def pagerank_program(graphs, logs: Path, kill=None):
    def program(comp):
        note_start(logs, comp)
        inp = comp.new_input(name="graph")
        ranks = pagerank(inp.stream, NODES, ITERATIONS)
        if kill is not None:
            ranks = kill_stage(ranks, *kill, deferred=True)
        got = ranks.collect()
        log_deliveries(ranks, logs, comp, kill and kill[0])
        comp.activate()
        for edges in graphs:
            _, adj = adjacency(edges, nodes=range(NODES))
            inp.on_next([(u, adj[u]) for u in shard(range(NODES), comp.process_index,
                                                     comp.processes)])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return program


def assert_ranks_close(got: Dict[int, list], want: Dict[int, list]) -> None:
    assert sorted(got) == sorted(want)
    for e in want:
        assert [n for n, _ in got[e]] == [n for n, _ in want[e]], f"epoch {e}"
        assert all(abs(a - b) < 1e-12 for (_, a), (_, b) in zip(got[e], want[e])), f"epoch {e}"


@pytest.mark.timeout(60)
def test_pagerank_survives_sigkill_at_a_random_epoch(tmp_path):
    rng = random.Random(SEED + 3)
    graphs = [random_edges(NODES, 120, seed=rng.randrange(1 << 30)) for _ in range(10)]
    kill_epoch = rng.randrange(2, 8)
    marker = tmp_path / "killed"
    run_logs = tmp_path / "run"
    run_logs.mkdir()
    parts = naiad.execute(pagerank_program(graphs, run_logs, (marker, kill_epoch, 0)),
                          processes=2, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2)
    assert marker.exists()
    assert starts(run_logs, 0) == starts(run_logs, 1) == 2
    want = {e: sorted(power_iteration(adjacency(g, nodes=range(NODES))[1], ITERATIONS).items())
            for e, g in enumerate(graphs)}
    clean_logs = tmp_path / "clean"
    clean_logs.mkdir()
    assert_ranks_close(merge(parts), want)
    assert_ranks_close(clean_run(pagerank_program, graphs, clean_logs), want)
    assert_delivered_exactly_once(run_logs, 2, want, close=assert_ranks_close)


# ---- notifications pending at a later epoch are part of a checkpoint ------------------------------------
DELAY = 3


class Delay(naiad.Vertex):
    """Holds each epoch's records and sends them ``DELAY`` epochs later: at every checkpoint
    boundary it has notification requests at future epochs, which must be saved and restored."""

    def __init__(self):
        super().__init__()
        self.held: Dict[int, list] = {}

    def on_recv_batch(self, edge, messages, time):
        later = time.epoch + DELAY
        if later not in self.held:
            self.held[later] = []
            self.notify_at(naiad.Timestamp(later))
        self.held[later].extend(messages)

    def on_notify(self, time):
        self.send_batch_by(0, self.held.pop(time.epoch), time)


@pytest.mark.timeout(60)
def test_notifications_requested_for_later_epochs_survive_sigkill(tmp_path):
    rng = random.Random(SEED + 13)
    epochs = [[rng.randrange(1000) for _ in range(12)] for _ in range(16)]
    kill_epoch = rng.randrange(5, 13)
    marker = tmp_path / "killed"

    def program(comp):
        note_start(tmp_path, comp)
        inp = comp.new_input(name="numbers")
        held = stages.unary(kill_stage(inp.stream, marker, kill_epoch, 1, deferred=True), Delay,
                            partition_by=lambda n: n, name="delay")
        got = held.collect()
        log_deliveries(held, tmp_path, comp, marker)
        comp.activate()
        for e in epochs:
            inp.on_next(shard(e, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results

    parts = naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=2)
    assert marker.exists()
    assert starts(tmp_path, 0) == starts(tmp_path, 1) == 2
    expected = {e: sorted(epochs[e - DELAY]) if e >= DELAY else []
                for e in range(len(epochs) + DELAY)}
    assert merge(parts) == expected
    assert_delivered_exactly_once(tmp_path, 2, expected)


# ---- a kill while a checkpoint is being written --------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 1])
def test_sigkill_during_a_checkpoint_write(tmp_path, monkeypatch, victim):
    """NAIAD_FAULT kills the process while it writes its part of checkpoint 8 (its logs sealed,
    its files not yet written, the manifest not committed): the half-written checkpoint is ignored, the run resumes from 4 and
    takes checkpoint 8 again."""
    monkeypatch.setenv("NAIAD_FAULT", f"checkpoint-write:8:{victim}")
    epochs = text_epochs(16, 16, SEED + 4)
    ckpt = tmp_path / "ckpt"
    parts = naiad.execute(wordcount_program(epochs, tmp_path), processes=2,
                          checkpoint_dir=str(ckpt), checkpoint_every=4, checkpoint_keep=5)
    assert (ckpt / f".fault-checkpoint-write-8-{victim}").exists()
    assert starts(tmp_path, 0) == starts(tmp_path, 1) == 2
    assert checkpoints(ckpt)[-3:] == [4, 8, 12]
    assert merge(parts) == wordcount_vertex.oracle(epochs)
    assert_delivered_exactly_once(tmp_path, 2, running_totals(epochs))


@pytest.mark.timeout(60)
def test_a_checkpoint_that_never_commits_keeps_the_input_log_of_the_previous_one(tmp_path,
                                                                                  monkeypatch):
    """Process 0 dies just before committing checkpoint 6 (with checkpoint_keep=1), after process
    1 has written its part.  The run resumes from checkpoint 3, so epochs 3..5 are recomputed;
    the source here gives different records on every attempt (as a live feed would), so only the
    input log can make the recomputed epochs equal what was delivered before the failure."""
    monkeypatch.setenv("NAIAD_FAULT", "checkpoint-commit:6:0")
    ckpt = tmp_path / "ckpt"

    def program(comp):
        note_start(tmp_path, comp)
        attempt = starts(tmp_path, comp.process_index)
        inp = comp.new_input(name="feed")
        out = inp.stream.select(lambda r: r)
        got = out.collect()
        log_deliveries(out, tmp_path, comp)
        comp.activate()
        for e in range(10):
            inp.on_next([f"e{e}-p{comp.process_index}-attempt{attempt}"])
        inp.on_completed()
        comp.join(timeout=60)
        return got.results

    parts = naiad.execute(program, processes=2, checkpoint_dir=str(ckpt), checkpoint_every=3,
                          checkpoint_keep=1)
    assert (ckpt / ".fault-checkpoint-commit-6-0").exists()
    assert starts(tmp_path, 0) == starts(tmp_path, 1) == 2
    collected = merge(parts)
    assert [len(collected[e]) for e in range(10)] == [2] * 10
    assert_delivered_exactly_once(tmp_path, 2, collected)
    assert all("attempt1" in r for e in range(6) for r in collected[e])


# ---- resume after a full stop ------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_resume_after_every_process_stopped(tmp_path):
    """The first run dies (SIGKILL, no restarts allowed); running the same program again with the
    same directory continues from the last checkpoint, and feeds more epochs after it."""
    rng = random.Random(SEED + 5)
    epochs = text_epochs(20, 16, rng.randrange(1 << 30))
    more = text_epochs(6, 16, rng.randrange(1 << 30))
    kill_epoch = rng.randrange(8, 18)
    ckpt = str(tmp_path / "ckpt")
    marker = tmp_path / "killed"
    with pytest.raises(naiad.ComputationFailed, match="SIGKILL"):
        naiad.execute(wordcount_program(epochs, tmp_path, (marker, kill_epoch, 0), durable_at=6),
                      processes=2, checkpoint_dir=ckpt, checkpoint_every=3, max_restarts=0)
    assert starts(tmp_path, 0) == 1
    stopped_at = len(deliveries(tmp_path, 0))
    assert stopped_at <= kill_epoch
    assert checkpoints(tmp_path / "ckpt")
    # The second run: the same program (the marker keeps the kill from firing again).
    parts = naiad.execute(wordcount_program(epochs, tmp_path, (marker, kill_epoch, 0),
                                            extra_epochs=more),
                          processes=2, checkpoint_dir=ckpt, checkpoint_every=3)
    assert starts(tmp_path, 0) == starts(tmp_path, 1) == 2
    everything = epochs + more
    assert merge(parts) == wordcount_vertex.oracle(everything)
    assert_delivered_exactly_once(tmp_path, 2, running_totals(everything))


@pytest.mark.timeout(60)
def test_running_a_finished_program_again_delivers_nothing_twice(tmp_path):
    epochs = text_epochs(10, 10, SEED + 6)
    ckpt = str(tmp_path / "ckpt")
    first = naiad.execute(wordcount_program(epochs, tmp_path), checkpoint_dir=ckpt,
                          checkpoint_every=3)
    again = naiad.execute(wordcount_program(epochs, tmp_path), checkpoint_dir=ckpt,
                          checkpoint_every=3)
    assert merge(first) == merge(again) == wordcount_vertex.oracle(epochs)
    assert_delivered_exactly_once(tmp_path, 1, running_totals(epochs))


# ---- damaged checkpoints ------------------------------------------------------------------------------------------
class SeenEpochs(naiad.Vertex):
    """Passes records on and notes each epoch it processes in a file: shows where a run resumed."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_recv_batch(self, edge, messages, time):
        with open(self.path, "a") as f:
            f.write(f"{time.epoch}\n")
        self.send_batch_by(0, messages, time)


def resumable_program(epochs, logs: Path, seen: Path):
    def program(comp):
        note_start(logs, comp)
        inp = comp.new_input(name="lines")
        lines = stages.unary(inp.stream, lambda: SeenEpochs(str(seen)), name="seen")
        counts = wordcount_vertex.count_words(comp, lines)
        totals = stages.unary(counts, RunningTotal, partition_by=lambda wc: wc[0], name="totals")
        got = totals.collect()
        log_deliveries(totals, logs, comp)
        comp.activate()
        for e in epochs:
            inp.on_next(shard(e, comp.process_index, comp.processes))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results
    return program


def records(directory: Path, prefix: str, kind: int) -> List[Tuple[Path, Record]]:
    """The records of one kind in the journal files ``prefix-*.jnl``, in the order written."""
    return [(path, r) for path in journal_files(directory / "journal", prefix)
            for r in scan(path) if r.kind == kind]


def damage(directory: Path, prefix: str, kind: int, epoch: int, how: str) -> Path:
    """Damage the record of ``epoch`` in the journal ``prefix``: cut its file short in the
    middle of it, or flip one byte of its payload (the file keeps its size).  Returns the file."""
    [(path, rec)] = [(p, r) for p, r in records(directory, prefix, kind) if r.epoch == epoch]
    middle = rec.offset + HEADER_SIZE + rec.length // 2
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[:middle]))
    elif how == "flip":
        data[middle] ^= 0x01
        path.write_bytes(bytes(data))
    else:  # pragma: no cover
        raise ValueError(how)
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("prefix,kind,how", [
    ("proc-0", PART, "truncate"), ("proc-0", PART, "flip"), ("commits", COMMIT, "flip"),
    ("commits", COMMIT, "truncate"),
])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_previous_one(tmp_path, prefix, kind,
                                                                      how):
    """A part cut short or with a flipped byte, or a commit record with a flipped byte, is
    reported naming the file and the epoch; a commit record cut short is an interrupted
    commit (the checkpoint was never complete): no warning.  Either way the run resumes from
    the previous checkpoint and delivers every epoch once."""
    epochs = text_epochs(14, 10, SEED + 7)
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.log"
    want = running_totals(epochs)
    first = naiad.execute(resumable_program(epochs[:10], tmp_path, seen), checkpoint_dir=str(ckpt),
                          checkpoint_every=2)
    assert checkpoints(ckpt)[-3:] == [4, 6, 8]
    assert merge(first) == {e: want[e] for e in range(10)}
    path = damage(ckpt, prefix, kind, 8, how)
    seen.unlink()
    if (kind, how) == (COMMIT, "truncate"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)
            again = naiad.execute(resumable_program(epochs, tmp_path, seen),
                                  checkpoint_dir=str(ckpt), checkpoint_every=2)
    else:
        with pytest.warns(CheckpointWarning, match=f"{path.name} at epoch 8"):
            again = naiad.execute(resumable_program(epochs, tmp_path, seen),
                                  checkpoint_dir=str(ckpt), checkpoint_every=2)
    resumed_at = min(int(x) for x in seen.read_text().split())
    assert resumed_at == 6, "the run did not resume from the previous complete checkpoint"
    assert merge(again) == want
    assert_delivered_exactly_once(tmp_path, 1, want)


@pytest.mark.timeout(60)
def test_every_process_rejects_a_checkpoint_that_one_process_finds_damaged(tmp_path, capfd):
    """A flipped byte in process 1's file (same size) must make process 0 skip that checkpoint
    too, or the processes would resume from different checkpoints and never agree."""
    epochs = text_epochs(14, 10, SEED + 8)
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.log"
    want = running_totals(epochs)
    naiad.execute(resumable_program(epochs[:10], tmp_path, seen), processes=2,
                  checkpoint_dir=str(ckpt), checkpoint_every=2)
    path = damage(ckpt, "proc-1", PART, 8, "flip")
    seen.unlink()
    capfd.readouterr()
    again = naiad.execute(resumable_program(epochs, tmp_path, seen), processes=2,
                          checkpoint_dir=str(ckpt), checkpoint_every=2)
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if "CheckpointWarning" in line]
    assert len(warned) == 2 and all(f"{path.name} at epoch 8" in w for w in warned)
    assert min(int(x) for x in seen.read_text().split()) == 6
    assert merge(again) == want
    assert_delivered_exactly_once(tmp_path, 2, want)


# ---- policy: pruning, size, on demand, by time -------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("processes", [1, 2])
def test_old_checkpoints_and_input_logs_are_pruned_keeping_the_last_k(tmp_path, processes):
    """Journal files and input-log segments are deleted whole once every checkpoint they
    serve is older than the newest ``keep``: the disk holds the newest ``keep`` checkpoints and
    at most one journal file's worth more, and the input log from before the oldest kept
    checkpoint back to at most one rotation of segments earlier."""
    keep, count = 2, 3 * ROTATE_RECORDS
    epochs = text_epochs(count + 1, 4, SEED + 9)
    ckpt = tmp_path / "ckpt"
    parts = naiad.execute(wordcount_program(epochs, tmp_path), processes=processes,
                          checkpoint_dir=str(ckpt), checkpoint_every=1, checkpoint_keep=keep)
    assert merge(parts) == wordcount_vertex.oracle(epochs)
    for p in range(processes):
        stored = [r.epoch for _, r in records(ckpt, f"proc-{p}", PART)]
        assert stored == list(range(stored[0], count + 1)), stored
        assert keep <= len(stored) <= keep + ROTATE_RECORDS, stored
        logged = EpochLog(ckpt / "inputs" / f"proc-{p}" / "lines", directory_key(ckpt)).items()
        assert sorted(logged) == list(range(min(logged), count + 1))
        assert count - keep - 2 * ROTATE_LOGS <= min(logged) <= count - keep, sorted(logged)
        assert all(logged[e] == shard(epochs[e], p, processes) for e in logged)
    commits = [r.epoch for _, r in records(ckpt, "commits", COMMIT)]
    assert commits[-keep:] == [count - 1, count] and len(commits) <= keep + ROTATE_RECORDS


class Hoard(naiad.Vertex):
    """Keeps every record it ever saw: state that grows with history, for contrast."""

    def __init__(self):
        super().__init__()
        self.everything: List[str] = []

    def on_recv_batch(self, edge, messages, time):
        self.everything.extend(messages)
        self.send_batch_by(0, messages, time)


def checkpoint_sizes(directory: Path) -> Dict[int, int]:
    """Bytes of each checkpoint's part (one process)."""
    return {r.epoch: r.length for _, r in records(directory, "proc-0", PART)}


@pytest.mark.timeout(60)
def test_checkpoint_size_follows_live_state_not_history(tmp_path):
    """Per-time state (the word count's per-epoch counts, every LINQ operator's per-time tables,
    the subscription's pending epochs) is gone once its time is notified; what remains is the
    running totals over a fixed vocabulary.  So the checkpoints stay the same size over 40 epochs,
    while a vertex that hoards its input makes them grow."""
    epochs = text_epochs(40, 30, SEED + 10)

    def program_with(hoard: bool):
        def program(comp):
            inp = comp.new_input(name="lines")
            lines = stages.unary(inp.stream, Hoard, name="hoard") if hoard else inp.stream
            counts = wordcount_vertex.count_words(comp, lines)
            totals = stages.unary(counts, RunningTotal, partition_by=lambda wc: wc[0],
                                  name="totals")
            words = lines.select_many(str.split)
            linq_out = (words.distinct().count()
                        .join(words.group_by(lambda w: w, lambda k, rs: [(k, len(rs))]),
                              lambda a: a[0], lambda b: b[0], lambda a, b: (a[0], b[1]))
                        .where(lambda r: r[1] > 0))
            totals.subscribe(lambda e, r: None)
            linq_out.collect()
            comp.activate()
            for e in epochs:
                inp.on_next(e)
            inp.on_completed()
            comp.join(timeout=60)
        return program

    lean, fat = tmp_path / "lean", tmp_path / "fat"
    naiad.execute(program_with(False), workers=2, checkpoint_dir=str(lean), checkpoint_every=5,
                  checkpoint_keep=100)
    naiad.execute(program_with(True), workers=2, checkpoint_dir=str(fat), checkpoint_every=5,
                  checkpoint_keep=100)
    lean_sizes, fat_sizes = checkpoint_sizes(lean), checkpoint_sizes(fat)
    assert sorted(lean_sizes) == sorted(fat_sizes) == list(range(5, 40, 5))
    assert max(lean_sizes.values()) <= 1.1 * lean_sizes[10]
    assert fat_sizes[35] - lean_sizes[35] > 3 * (fat_sizes[10] - lean_sizes[10])


@pytest.mark.timeout(60)
def test_checkpoint_on_demand_and_by_interval(tmp_path):
    epochs = text_epochs(12, 4, SEED + 11)

    def program(comp):
        inp = comp.new_input(name="lines")
        got = wordcount_vertex.count_words(comp, inp.stream).collect()
        comp.activate()
        for i, e in enumerate(epochs):
            if i in (3, 7):
                comp.checkpoint()          # at the boundary before epoch i
            inp.on_next(e)
        inp.on_completed()
        comp.join(timeout=60)
        return got.results

    demand = tmp_path / "demand"
    assert merge(naiad.execute(program, checkpoint_dir=str(demand))) == \
        wordcount_vertex.oracle(epochs)
    assert checkpoints(demand) == [3, 7]

    def slow(comp):
        inp = comp.new_input(name="lines")
        got = wordcount_vertex.count_words(comp, inp.stream).collect()
        comp.activate()
        for e in epochs:
            inp.on_next(e)
            time.sleep(0.03)
        inp.on_completed()
        comp.join(timeout=60)
        return got.results

    timed = tmp_path / "timed"
    assert merge(naiad.execute(slow, checkpoint_dir=str(timed), checkpoint_interval=0.1,
                               checkpoint_keep=100)) == wordcount_vertex.oracle(epochs)
    assert len(checkpoints(timed)) >= 2


# ---- errors a user can act on ---------------------------------------------------------------------------------------
def test_checkpoint_without_a_directory_is_a_clear_error():
    def program(comp):
        inp = comp.new_input()
        inp.stream.collect()
        comp.activate()
        inp.on_next([1])
        comp.checkpoint()

    with pytest.raises(naiad.NaiadError, match=r"comp.checkpoint\(\) needs checkpoint_dir"):
        naiad.execute(program)


class FailAt(naiad.Vertex):
    def __init__(self, epoch: int):
        super().__init__()
        self.epoch = epoch

    def on_recv_batch(self, edge, messages, time):
        if time.epoch == self.epoch:
            raise ValueError(f"bad record {messages[0]!r}")
        self.send_batch_by(0, messages, time)


@pytest.mark.timeout(60)
def test_max_restarts_exhausted_raises_recovery_failed_naming_the_last_failure(tmp_path):
    def program(comp):
        note_start(tmp_path, comp)
        inp = comp.new_input(name="numbers")
        stages.unary(inp.stream, lambda: FailAt(3), name="fragile").collect()
        comp.activate()
        for e in range(6):
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=30)

    with pytest.raises(RecoveryFailed, match=r"failed 3 times \(max_restarts=2\).*"
                                             r"fragile.*bad record 3"):
        naiad.execute(program, checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=2,
                      max_restarts=2)
    assert starts(tmp_path, 0) == 3


@pytest.mark.timeout(60)
def test_a_process_killed_on_every_attempt_exhausts_the_restarts(tmp_path):
    def program(comp):
        note_start(tmp_path, comp)
        inp = comp.new_input(name="numbers")
        stages.unary(inp.stream, KillEveryTime, name="doomed").collect()
        comp.activate()
        for e in range(6):
            inp.on_next([e])
        inp.on_completed()
        comp.join(timeout=30)

    with pytest.raises(RecoveryFailed, match=r"failed 2 times.*process 1 .*SIGKILL"):
        naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                      checkpoint_every=2, max_restarts=1)
    assert starts(tmp_path, 1) == 2


class KillEveryTime(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        if self.index == 1 and time.epoch == 3:
            os.kill(os.getpid(), signal.SIGKILL)


def test_a_different_program_in_the_same_directory_is_refused(tmp_path):
    epochs = text_epochs(6, 4, SEED + 12)
    ckpt = str(tmp_path / "ckpt")
    naiad.execute(wordcount_program(epochs, tmp_path), checkpoint_dir=ckpt, checkpoint_every=2)

    def other(comp):
        inp = comp.new_input(name="numbers")
        inp.stream.collect()
        comp.activate()
        inp.on_next([1])

    with pytest.raises(naiad.NaiadError, match="different dataflow"):
        naiad.execute(other, checkpoint_dir=ckpt, max_restarts=0)
    # A configuration error: refused at once, never retried (a retry used to fail on the
    # directory's lock instead, hiding the cause).
    with pytest.raises(naiad.CheckpointLayoutError, match="different dataflow"):
        naiad.execute(other, checkpoint_dir=ckpt)


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


class SlowToSave(naiad.Vertex):
    """Passes records on; its checkpoint() takes 50 ms (a large state to pickle)."""

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, messages, time)

    def checkpoint(self):
        time.sleep(0.05)
        return None

    def restore(self, state):
        pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_checkpoint_stats_say_how_long_the_workers_pickled(tmp_path, workers):
    def program(comp):
        inp = comp.new_input(name="numbers")
        got = stages.unary(inp.stream, SlowToSave, name="slow").collect()
        comp.activate()
        for e in range(7):
            inp.on_next(list(range(e, e + 4)))
        inp.on_completed()
        comp.join(timeout=60)
        return got.results, list(comp.checkpoint_stats)

    [(results, stats)] = naiad.execute(program, workers=workers,
                                       checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert {e: sorted(r) for e, r in results.items()} == {e: list(range(e, e + 4))
                                                          for e in range(7)}
    assert [s["epoch"] for s in stats] == [3, 6]
    for s in stats:
        assert 0.05 <= s["snapshot_s"] <= s["quiesce_s"] <= s["total_s"], s
