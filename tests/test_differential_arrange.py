"""Shared arrangements (``Collection.arrange``): joins reading one trace per worker give what
private joins give, against a from-scratch oracle on seeded random updates, at 1 and 2
processes and 1-3 workers; the trace is kept once; compaction waits for a reader whose other
input lags; the readers' view leaves out batches still on their way to them (vertices driven by
hand, deliveries permuted); and the errors name what to do."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import naiad
from linq import differential as dd
from linq.differential.arrange import ArrangedJoinVertex, ArrangeVertex, Handle
from linq.differential.testing import arrangement_sizes
from naiad.errors import GraphError
from naiad.testing import shard

M = 17


def _updates(seed: int, epochs: int, size: int):
    """Per epoch, ``(record, diff)`` changes keeping every count >= 0: pairs of ints below M."""
    rng = random.Random(seed)
    current: Counter = Counter()
    out = []
    for e in range(epochs):
        changes = []
        for _ in range(size if e == 0 else size // 3):
            if current and rng.random() < 0.4:
                r = rng.choice(sorted(current))
                changes.append((r, -1))
                current[r] -= 1
                current = +current
            else:
                r = (rng.randrange(M), rng.randrange(M))
                changes.append((r, 1))
                current[r] += 1
        out.append(changes)
    return out


def _at(updates, epoch: int) -> Counter:
    acc: Counter = Counter()
    for changes in updates[:epoch + 1]:
        for r, d in changes:
            acc[r] += d
    return +acc


def _oracle(a: Counter, b: Counter) -> Counter:
    """The three joins of :func:`_program` from scratch."""
    out: Counter = Counter()
    for (x, y), n in a.items():
        for (u, v), m in b.items():
            if y == u:
                out[("ab", x, v)] += n * m          # a.y = b.u
            if x == u:
                out[("ba", y, v)] += n * m          # by_first read from both sides
        for (u, v), m in a.items():
            if x == u:
                out[("aa", y, v)] += n * m          # the arrangement joined with itself
    return +out


def _check_every_epoch(results, ua, ub) -> None:
    """The changes every process collected, accumulated epoch by epoch, against the joins of
    :func:`_program` from scratch."""
    acc: Counter = Counter()
    for e in range(len(ua)):
        for per_epoch in results:
            for r, d in per_epoch.get(e, []):
                acc[r] += d
        assert +acc == _oracle(_at(ua, e), _at(ub, e)), f"epoch {e}"


def _program(ua, ub, lag: bool = False, wait_each: bool = False):
    def program(comp):
        a_in, b_in = dd.new_input(comp, name="a"), dd.new_input(comp, name="b")
        a, b = a_in.collection, b_in.collection
        a_by_first = a.arrange(key=lambda r: r[0])
        b_by_first = b.arrange(key=lambda r: r[0])
        ab = a.join(b_by_first, key=lambda r: r[1], result=lambda p, q: ("ab", p[0], q[1]))
        ba = a_by_first.join(b_by_first, result=lambda p, q: ("ba", p[1], q[1]))
        aa = a_by_first.join(a_by_first, result=lambda p, q: ("aa", p[1], q[1]))
        got = ab.concat(ba, aa).collect()
        got_probe = ab.concat(ba, aa).probe()
        b_probe = b_by_first.collection.probe()
        comp.activate()
        me, n = comp.process_index, comp.processes
        if lag:
            # b runs every epoch ahead of a (its arrangement has seen them all) before a
            # starts: b's trace must not compact past the epochs a's batches join at.
            for changes in ub:
                b_in.update(shard(changes, me, n))
            b_probe.wait(len(ub) - 1)
            for changes in ua:
                a_in.update(shard(changes, me, n))
            a_in.on_completed()
            b_in.on_completed()
        else:
            for e, (ca, cb) in enumerate(zip(ua, ub)):
                a_in.update(shard(ca, me, n))
                b_in.update(shard(cb, me, n))
                if wait_each:
                    got_probe.wait(e)
            a_in.on_completed()
            b_in.on_completed()
        got_probe.wait(len(ua) - 1)
        sizes = arrangement_sizes(comp)
        comp.join(timeout=60)
        return got.results, sizes
    return program


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 3), (2, 1), (2, 2)])
@pytest.mark.parametrize("seed", [1, 2])
def test_shared_joins_match_the_oracle_every_epoch(seed, processes, workers):
    """Three joins read two arrangements (one of them from both sides, one beside a private
    side); the accumulated output equals the joins from scratch after every epoch."""
    epochs = 5
    ua, ub = _updates(seed, epochs, 60), _updates(seed + 100, epochs, 60)
    parts = naiad.execute(_program(ua, ub), processes=processes, workers=workers)
    assert len(parts) == processes
    _check_every_epoch([results for results, _ in parts], ua, ub)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_reader_whose_other_input_lags_holds_compaction_back(processes):
    """``b`` is complete for every epoch before ``a`` starts: b's arrangement must not compact
    past the epochs a's batches still join at (each output change at its own epoch)."""
    epochs = 6
    ua, ub = _updates(7, epochs, 40), _updates(8, epochs, 40)
    parts = naiad.execute(_program(ua, ub, lag=True), processes=processes, workers=2)
    _check_every_epoch([results for results, _ in parts], ua, ub)


def test_the_arrangement_is_kept_once_and_compacted():
    """Two arrangements and one private side: three traces per worker, not the six that
    private joins keep, and compaction (as the epochs complete one by one) keeps them at the
    size of the live collection and the last epoch's changes."""
    ua, ub = _updates(3, 8, 50), _updates(4, 8, 50)
    [(_, sizes)] = naiad.execute(_program(ua, ub, wait_each=True), workers=2)
    names = Counter(stage for stage, _, _ in sizes)
    assert sum(n for s, n in names.items() if s.startswith("arrange")) == 4   # 2 x 2 workers
    assert sum(n for s, n in names.items() if s.startswith("join")) == 2      # ab's private a
    live = len(_at(ua, 7)) + len(_at(ub, 7))
    arranged = sum(u for s, _, u in sizes if s.startswith("arrange"))
    assert arranged <= live + 2 * len(ua[-1]) + len(ub[-1])


@pytest.mark.parametrize("seed", range(6))
def test_a_reader_reads_only_what_it_has_had(seed):
    """Vertices driven by hand: one arrange vertex, two joins reading it (one from both
    sides), their deliveries permuted at random; every pair of updates is produced once."""
    rng = random.Random(seed)
    handle = Handle()
    arrange = ArrangeVertex("arrange", handle, None)
    readers, outs = [], []
    for shared_edges in ((1,), (0, 1)):
        parties = [handle.new_party() if e in shared_edges else None for e in (0, 1)]
        handles = [handle if e in shared_edges else None for e in (0, 1)]
        v = ArrangedJoinVertex("join", lambda p, q: (p, q), None, handles, parties)
        handle.parties.update(p for p in parties if p is not None)
        out: Counter = Counter()

        def capture(port, records, time, out=out):
            for r, d in records:
                out[r] += d
        v.send_batch_by = capture
        readers.append(v)
        outs.append(out)
    for v in [arrange] + readers:
        v.index = 0
    sent = []
    arrange.send_by = lambda port, rec, time: sent.append((rec, time))
    t = naiad.Timestamp(0)
    left: list = []
    for _ in range(8):
        triples = [(rng.randrange(4), rng.randrange(5), rng.choice((1, 1, -1)))
                   for _ in range(rng.randrange(1, 5))]
        arrange.on_recv_batch(0, triples, t)
        if rng.random() < 0.5:
            batch = [(rng.randrange(4), ("L", rng.randrange(5)), 1)]
            left.append(batch)
            readers[0].on_recv_batch(0, batch, t)
    deliveries = [(r, e, rec) for rec, _ in sent for r, e in ((0, 1), (1, 0), (1, 1))]
    rng.shuffle(deliveries)
    for r, e, rec in deliveries:
        readers[r].on_recv_batch(e, [rec], t)
    assert handle.at(0).pending == {}
    everything = [x for rec, _ in sent for x in rec[1]]
    want0: Counter = Counter()
    for batch in left:
        for k, v, d in batch:
            for k2, v2, d2 in everything:
                if k == k2:
                    want0[(v, v2)] += d * d2
    want1: Counter = Counter()
    for k, v, d in everything:
        for k2, v2, d2 in everything:
            if k == k2:
                want1[(v, v2)] += d * d2
    def nonzero(c: Counter) -> dict:
        return {r: d for r, d in c.items() if d}
    assert nonzero(outs[0]) == nonzero(want0)
    assert nonzero(outs[1]) == nonzero(want1)


def test_arrangement_errors_name_what_to_do():
    def program(comp):
        a = dd.new_input(comp, name="a").collection
        by = a.arrange(key=lambda r: r)
        with pytest.raises(TypeError, match="leave other_key out"):
            a.join(by, key=lambda r: r, other_key=lambda r: r, result=lambda p, q: p)
        with pytest.raises(TypeError, match="arrange needs a callable key"):
            a.arrange(key=3)
        with pytest.raises(GraphError, match=r"loop.enter\(c\).arrange"):
            a.iterate(lambda loop, x: x.join(by, key=lambda r: r, result=lambda p, q: p)
                      .concat(x).distinct())
        return True
    assert naiad.execute(program) == [True]


def reach_in_loop(edges, roots, step) -> None:
    """``roots`` iterated to a fixed point by ``x.concat(*step(arr, x)).distinct()``, with
    ``arr`` the entered edges arranged by source inside the loop, at 1 and 2 processes, against
    the plain fixed point from ``roots`` (and the nodes ``step``'s ``extra(edges)`` adds)."""
    def program(comp):
        e_in, r_in = dd.new_input(comp, name="edges"), dd.new_input(comp, name="roots")

        def body(loop, x):
            arr = loop.enter(e_in.collection).arrange(key=lambda e: e[0])
            return x.concat(*step.body(arr, x)).distinct()
        got = r_in.collection.iterate(body).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        e_in.on_next(shard(edges, me, n))
        r_in.on_next(shard(roots, me, n))
        e_in.on_completed()
        r_in.on_completed()
        comp.join(timeout=60)
        return got.at(0)
    reach = set(roots) | step.extra(edges)
    while True:
        more = reach | {d for s, d in edges if s in reach}
        if more == reach:
            break
        reach = more
    for processes in (1, 2):
        merged: Counter = Counter()
        for part in naiad.execute(program, processes=processes, workers=2):
            merged.update(part)
        assert dict(merged) == {r: 1 for r in reach}


class _TwoSteps:
    """One and two steps along the edges, both joins reading the arrangement."""

    @staticmethod
    def body(arr, x):
        fwd = x.join(arr, key=lambda n: n, result=lambda n, e: e[1])
        return [fwd, fwd.join(arr, key=lambda n: n, result=lambda n, e: e[1])]

    @staticmethod
    def extra(edges):
        return set()


def test_an_arrangement_inside_a_loop_is_shared_by_its_joins():
    """Reachability with the entered edges arranged once inside the loop, read by two joins
    (forward and backward steps), against a plain fixed point."""
    rng = random.Random(5)
    edges = sorted({(rng.randrange(30), rng.randrange(30)) for _ in range(60)})
    reach_in_loop(edges, [0, 7], _TwoSteps)


@pytest.mark.timeout(180)
def test_shared_arrangements_survive_sigkill(tmp_path):
    """A process killed mid-run (epoch 5 of 9, checkpoints every 2 epochs): the arrange
    vertices restore their traces, the joins theirs, and the accumulated output equals the
    joins from scratch after every epoch."""
    from tests.test_recovery import kill_stage
    epochs = 9
    ua, ub = _updates(11, epochs, 50), _updates(12, epochs, 50)
    marker = tmp_path / "killed"

    def program(comp, kill=True):
        a_in, b_in = dd.new_input(comp, name="a"), dd.new_input(comp, name="b")
        a = a_in.collection
        if kill:
            a = dd.Collection(kill_stage(a.stream, marker, 5, 1))
        b_by_first = b_in.collection.arrange(key=lambda r: r[0])
        a_by_first = a.arrange(key=lambda r: r[0])
        got = (a.join(b_by_first, key=lambda r: r[1], result=lambda p, q: ("ab", p[0], q[1]))
               .concat(a_by_first.join(b_by_first, result=lambda p, q: ("ba", p[1], q[1])),
                       a_by_first.join(a_by_first, result=lambda p, q: ("aa", p[1], q[1])))
               .collect())
        comp.activate()
        me, n = comp.process_index, comp.processes
        for ca, cb in zip(ua, ub):
            a_in.update(shard(ca, me, n))
            b_in.update(shard(cb, me, n))
        a_in.on_completed()
        b_in.on_completed()
        comp.join(timeout=120)
        return got.results
    parts = naiad.execute(program, processes=2, checkpoint_dir=str(tmp_path / "ckpt"),
                          checkpoint_every=2)
    assert marker.exists(), "no process was killed"
    _check_every_epoch(parts, ua, ub)


def _first(r):
    return r[0]


def test_errors_in_shared_joins_name_the_operator_and_the_function():
    """An unhashable value anywhere in a batch is named by the arrangement it enters (not by
    a reader or a compaction); a result function that raises is named as written, with its
    arguments in its own order, whichever side the arrangement is on."""
    from naiad.errors import VertexError

    def my_result(arranged, other):
        raise ValueError("boom")

    def program(comp, how):
        a_in, b_in = dd.new_input(comp, name="a"), dd.new_input(comp, name="b")
        a, b = a_in.collection, b_in.collection
        if how == "unhashable":
            by = a.arrange(key=_first)
            out = by.join(by, result=lambda p, q: 1)
            feed = [[((0, 1), 1)], [((0, 2), 1), ((0, [3]), 1)]]
        else:
            out = a.arrange(key=_first).join(b, result=my_result, other_key=_first)
            feed = [[((0, "arranged-side"), 1)]]
        out.collect()
        comp.activate()
        for changes in feed:
            a_in.update(changes)
            b_in.update([((0, "collection-side"), 1)] if how != "unhashable" else [])
        a_in.on_completed()
        b_in.on_completed()
        comp.join(timeout=60)
    with pytest.raises(VertexError, match=r"stage 'arrange\(_first\)'.*unhashable.*\[3\]"):
        naiad.execute(lambda comp: program(comp, "unhashable"))
    with pytest.raises(VertexError, match=r"join\(_first, _first, my_result\)' .*the result "
                       r"my_result raised ValueError: boom \(called with \(0, 'arranged-side'\), "
                       r"\(0, 'collection-side'\)\)"):
        naiad.execute(lambda comp: program(comp, "result"))


def test_an_arrangement_where_a_collection_is_needed_says_to_use_its_collection():
    def program(comp):
        a = dd.new_input(comp, name="a").collection
        by = a.arrange(key=_first)
        for use in (lambda: a.concat(by), lambda: a.semijoin(by, key=_first),
                    lambda: a.iterate(lambda loop, x: loop.enter(by))):
            with pytest.raises(TypeError, match=r"got an Arrangement: its records are "
                                                r"arrangement.collection"):
                use()
        return True
    assert naiad.execute(program) == [True]
