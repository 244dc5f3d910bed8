"""Differential dataflow: samples against oracles recomputed from scratch, bounded state, errors,
and recovery from SIGKILL during incremental updates."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import naiad
from linq import differential as dd
from linq.core import UserFunctionError
from linq.differential import Collection
from linq.differential.testing import arrangement_sizes, arrangements, run_dd
from naiad.testing import shard
from samples import dd_bfs, dd_components, dd_scc, dd_wordcount
from samples.graphs import random_edges
from samples.textdata import stdlib_import_graph, stdlib_text_files
from tests.test_recovery import kill_stage

CONFIGS = [(1, 1), (1, 2), (2, 1)]


# ---- samples, every epoch against a from-scratch oracle ----------------------------------------
@pytest.mark.parametrize("processes,workers", CONFIGS)
def test_bfs_with_edge_insertions_and_removals(processes, workers):
    edges, updates = dd_bfs.changes(300, 600, epochs=6, per_epoch=4, seed=processes * 10 + workers)
    results = dd_bfs.run([0, 1], edges, updates, processes, workers)
    dd_bfs.check([0, 1], edges, updates, results)


@pytest.mark.parametrize("processes,workers", CONFIGS + [(2, 2)])
def test_components_with_rewirings(processes, workers):
    edges = random_edges(400, 380, seed=processes + 3 * workers)
    updates = dd_components.rewirings(edges, 8, seed=workers)
    dd_components.run(edges, updates, processes, workers, check=True)


def test_components_on_the_import_graph():
    edges = sorted(set(stdlib_import_graph()))
    dd_components.run(edges, dd_components.rewirings(edges, 4, seed=2), check=True)


@pytest.mark.parametrize("processes,workers", [(1, 1), (1, 2), (2, 1)])
def test_strongly_connected_components_nested_loops(processes, workers):
    edges = sorted(set(random_edges(60, 110, seed=5 + workers)))
    updates = dd_scc.rewire(edges, 4, seed=processes)
    dd_scc.check(edges, updates, dd_scc.run(edges, updates, processes, workers))


@pytest.mark.parametrize("processes,workers", [(1, 1), (2, 1)])
def test_incremental_wordcount_over_stdlib_files(processes, workers):
    initial, updates = dd_wordcount.epochs_of_files(stdlib_text_files(limit=8), 4, 1, seed=3)
    dd_wordcount.check(initial, updates, dd_wordcount.run(initial, updates, processes, workers))


# ---- state follows the live collection -------------------------------------------------------
def test_arrangements_hold_only_live_records_after_1000_epochs():
    records = list(range(40))
    flipping = records[:25]

    def program(comp):
        inp = dd.new_input(comp, name="xs")
        static = dd.new_input(comp, name="static")
        c = inp.collection
        out = (c.distinct().concat(c.count(lambda r: r % 7).map(lambda kn: kn[0]))
                .concat(c.join(static.collection, key=lambda r: r % 5, other_key=lambda s: s,
                               result=lambda r, s: r)))
        got = out.collect()
        probe = out.probe()
        comp.activate()
        inp.on_next(records)
        static.on_next(range(5))
        for epoch in range(1, 1001):
            inp.update([(r, -1 if epoch % 2 else 1) for r in flipping])
            static.on_next()
        inp.on_next()               # one more epoch: the frontier passes epoch 1000
        static.on_next()
        probe.wait(1001, timeout=120)
        sizes = arrangement_sizes(comp)
        inp.on_completed()
        static.on_completed()
        comp.join(timeout=60)
        return sizes, got.at(1001)

    [(sizes, final)] = naiad.execute(program)
    live = len(records)            # epoch 1000 re-inserted the flipping records
    assert sizes, "no arrangement found"
    for stage, keys, updates in sizes:
        assert updates <= live, f"{stage}: {updates} updates held for {live} live records"
    assert sum(n for r, n in final.items() if isinstance(r, int)) > 0


@pytest.mark.parametrize("processes", [1, 2])
def test_a_sliding_window_keeps_its_traces_the_size_of_the_window(processes):
    """50 records live at a time over 1,000 epochs, counted by key and closed under a loop:
    every trace kept each time it had ever seen (1,000 and more; about 15 per epoch under the
    loop), though its updates stayed those of the window.  Results against plain Python."""
    window, epochs = 50, 1000

    def program(comp):
        inp = dd.new_input(comp, name="window")
        c = inp.collection
        counts = c.count(lambda r: r % 10)
        # Each record and its successors up to the next multiple of 10, through a loop.
        closed = c.iterate(lambda x: x.concat(x.filter(lambda r: (r + 1) % 10 != 0)
                                              .map(lambda r: r + 1)).distinct())
        got_counts, got_closed = counts.collect(), closed.collect()
        probe = closed.probe()
        comp.activate()
        mine = comp.process_index
        for e in range(epochs):
            change = [(e, 1)] if e % comp.processes == mine else []
            if e >= window and (e - window) % comp.processes == mine:
                change.append((e - window, -1))
            inp.update(change)
        inp.on_next()
        probe.wait(epochs, timeout=120)
        kept = max(len(tr.times) for _, tr in arrangements(comp))
        inp.on_completed()
        comp.join(timeout=60)
        return kept, got_counts.at(epochs), got_closed.at(epochs)

    parts = naiad.execute(program, processes=processes)
    live = range(epochs - window, epochs)
    counts: dict = {}
    for r in live:
        counts[r % 10] = counts.get(r % 10, 0) + 1
    closure = {s for r in live for s in range(r, r + 10 - r % 10)}
    assert {kn: n for _, got, _ in parts for kn, n in got.items()} == \
        {(k, n): 1 for k, n in counts.items()}
    assert {r: n for _, _, got in parts for r, n in got.items()} == {r: 1 for r in closure}
    for kept, _, _ in parts:
        assert kept <= 400, f"a trace keeps {kept} times for a window of {window} records"


# ---- errors -----------------------------------------------------------------------------------
def test_negative_count_into_distinct_names_operator_and_key():
    with pytest.raises(naiad.VertexError) as err:
        run_dd(lambda c: c.distinct(), ["a"], [[("b", -1)]])
    msg = str(err.value)
    assert "distinct" in msg and "'b'" in msg and "negative count" in msg


def test_negative_count_into_min_names_the_user_function():
    def score(r):
        return r[1]
    with pytest.raises(naiad.VertexError) as err:
        run_dd(lambda c: c.min(lambda r: r[0], score), [("k", 1)], [[(("k", 2), -1)]])
    assert "min(<lambda>, score)" in str(err.value) and "'k'" in str(err.value)


def test_negative_count_into_group_by():
    with pytest.raises(naiad.VertexError) as err:
        run_dd(lambda c: c.group_by(lambda r: r % 2, lambda k, rs: [len(rs)]), [], [[(3, -1)]])
    assert "group_by" in str(err.value) and "negative" in str(err.value)


def test_unhashable_key_is_named():
    def bad_key(r):
        return [r]
    with pytest.raises(naiad.VertexError) as err:
        run_dd(lambda c: c.count(bad_key), [1, 2])
    assert "bad_key" in str(err.value) and "unhashable" in str(err.value)


def _first(r):
    return r["id"]          # records here are ints: raises


def _as_list(r):
    return [r]


def _first_item(r):
    return r[0]


def _odd_str(r):
    return r if r % 2 else str(r)


def _odd_none(r):
    return r if r % 2 else None


@pytest.mark.parametrize("build, names", [
    (lambda c: c.sum(key=lambda r: 0, value=_first), ["sum(<lambda>, _first)", "the value _first",
                                                      "TypeError", "called with 1"]),
    (lambda c: c.min(key=lambda r: 0, value=_first), ["min(<lambda>, _first)", "the value _first"]),
    (lambda c: c.map(_as_list).count(), ["count: a record of type list is unhashable",
                                         "convert lists to tuples"]),
    (lambda c: c.map(_as_list).distinct(), ["distinct: a record of type list is unhashable"]),
    (lambda c: c.antijoin(c, key=_as_list), ["antijoin(_as_list)", "the key _as_list returned "
                                             "unhashable list"]),
    # The record itself, not its value (count's None, sum's 1), is what the key was called with.
    (lambda c: c.map(lambda r: (r, 1)).count(key=_as_list),
     ["count(_as_list): the key _as_list returned unhashable list [(1, 1)]",
      "called with (1, 1)"]),
    (lambda c: c.map(lambda r: (r, 1)).sum(key=_as_list, value=lambda r: r[1]),
     ["the key _as_list returned unhashable list", "called with (1, 1)"]),
    # An unhashable value: a UserFunctionError naming the value function and the record.
    (lambda c: c.min(key=lambda r: 0, value=_as_list),
     ["min(<lambda>, _as_list): the value _as_list returned unhashable list [1]",
      "called with 1"]),
    # Values the reduction cannot combine: named with the value function and the values.
    (lambda c: c.sum(key=lambda r: 0, value=_odd_str),
     ["sum(<lambda>, _odd_str): the value _odd_str returned values sum cannot combine for key 0",
      "'2'", "make the value function return one type"]),
    (lambda c: c.min(key=lambda r: 0, value=_odd_none),
     ["min(<lambda>, _odd_none): the value _odd_none returned values min cannot combine", "None"]),
    (lambda c: c.arrange(lambda r: 0).max(_odd_str),
     ["max(<lambda>, _odd_str): the value _odd_str returned values max cannot combine"]),
    # A join keeps list records for epochs, then failed compacting them ("in subscribe").
    (lambda c: c.map(lambda r: [r, r]).join(c.map(lambda r: [r, r]), _first_item, _first_item,
                                            lambda a, b: a[1]),
     ["a record of type list is unhashable (called with [1, 1])", "failed in on_recv"]),
])
def test_value_functions_and_unhashable_records_are_named(build, names):
    """A value function that raises, and records a reduction must hash, are named with the
    operator and the record (not a bare 'failed on a batch'); antijoin names itself."""
    with pytest.raises(naiad.VertexError) as err:
        run_dd(build, [1, 2])
    assert isinstance(err.value.__cause__, UserFunctionError), err.value
    for name in names:
        assert name in str(err.value), (name, str(err.value))


def test_body_returning_something_else():
    def body(loop, x):
        return [x]
    with pytest.raises(TypeError, match="body body must return a differential Collection"):
        run_dd(lambda c: c.iterate(body), [1])


@pytest.mark.parametrize("body", [lambda: None, lambda loop, x, extra: x])
def test_a_body_of_the_wrong_arity_is_named(body):
    """As in the record and frame layers: the body's signature is named, and what to write."""
    import pyarrow as pa
    from linq import frames
    from naiad.testing import run
    with pytest.raises(TypeError, match=r"iterate: the body <lambda>\(.*\) takes neither \(x\) "
                                        r"nor \(loop, x\)"):
        run_dd(lambda c: c.iterate(body), [1])
    with pytest.raises(TypeError, match=r"iterate: the body <lambda>"):
        run(lambda comp, s: s.iterate(body, 2), [[1]])
    with pytest.raises(TypeError, match=r"iterate: the body <lambda>"):
        run(lambda comp, s: frames.of(s).iterate(body, 2).stream, [[pa.table({"a": [1]})]])


def test_body_returning_an_outer_collection():
    with pytest.raises(naiad.GraphError, match="not of its loop"):
        run_dd(lambda c: c.iterate(lambda loop, x: c), [1])


def test_bad_updates_are_refused():
    def program(comp):
        inp = dd.new_input(comp, name="xs")
        inp.collection.collect()
        comp.activate()
        errors = []
        for bad in (lambda: inp.update([("a", 0)]), lambda: inp.update(["a"]),
                    lambda: inp.on_next("abc"), lambda: inp.update([("a", 1.5)])):
            try:
                bad()
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        inp.on_completed()
        comp.join()
        return errors
    [errors] = naiad.execute(program)
    assert len(errors) == 4 and all("'xs'" in e for e in errors)


def test_join_needs_a_collection():
    def build(c):
        return c.join([1, 2], key=lambda r: r, other_key=lambda r: r, result=lambda a, b: a)
    with pytest.raises(TypeError, match="needs a differential Collection"):
        run_dd(build, [1])


def test_max_iterations_stops_the_loop():
    step = lambda loop, x: x.map(lambda v: v + 1).concat(x).distinct()   # never a fixed point
    out = run_dd(lambda c: c.iterate(step, max_iterations=4), [0])
    assert out[0] == [(v, 1) for v in range(5)]     # the body's output at iteration 3


# ---- recovery -----------------------------------------------------------------------------------
def _cc_program(edges, updates, kill=None):
    sym = dd_components.symmetric(edges)

    def program(comp):
        inp = dd.new_input(comp, name="edges")
        stream = inp.collection.stream
        if kill is not None:
            stream = kill_stage(stream, *kill)
        got = dd_components.components(Collection(stream)).collect()
        comp.activate()
        me, n = comp.process_index, comp.processes
        inp.on_next(shard(sym, me, n))
        for u in updates:
            inp.update(shard(u, me, n))
        inp.on_completed()
        comp.join(timeout=120)
        return got.results
    return program


def _merged(parts):
    out = {}
    for p in parts:
        for e, changes in p.items():
            out.setdefault(e, []).extend(changes)
    return {e: sorted(c, key=repr) for e, c in out.items()}


@pytest.mark.timeout(180)
def test_components_survive_sigkill_during_updates(tmp_path: Path):
    rng = random.Random(7)
    edges = random_edges(300, 300, seed=11)
    updates = dd_components.rewirings(edges, 14, seed=3)
    kill_epoch = rng.randrange(6, 13)
    marker = tmp_path / "killed"
    parts = naiad.execute(_cc_program(edges, updates, (marker, kill_epoch, 1)), processes=2,
                          checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=3)
    assert marker.exists(), f"no process was killed at epoch {kill_epoch}"
    clean = naiad.execute(_cc_program(edges, updates), processes=2)
    assert _merged(parts) == _merged(clean)
    assert len(_merged(parts)) == len(updates) + 1


# ---- outputs, and only the work a change requires -----------------------------------------------
def test_subscribe_once_per_epoch_with_consolidated_changes():
    def program(comp):
        inp = dd.new_input(comp, name="xs")
        calls = []
        inp.collection.map(lambda r: r % 3).subscribe(lambda e, ch: calls.append((e, sorted(ch))))
        comp.activate()
        inp.on_next([1, 4, 2])
        inp.update([(4, -1), (7, 1)])          # 4 and 7 are both 1 mod 3: no change
        inp.update([(2, -1)])
        inp.on_completed()
        comp.join()
        return calls
    [calls] = naiad.execute(program, workers=2)
    assert calls == [(0, [(1, 2), (2, 1)]), (1, []), (2, [(2, -1)])]


def test_a_reducer_runs_only_for_keys_that_changed():
    calls = []

    def program(comp):
        inp = dd.new_input(comp, name="xs")
        inp.collection.group_by(lambda r: r % 100, lambda k, rs: calls.append((k, len(rs))) or [k]) \
            .collect()
        comp.activate()
        inp.on_next(range(1000))
        inp.update([(5, -1), (1005, 1)])         # key 5 only, its count unchanged
        inp.update([(42, -1)])                   # key 42 only
        inp.on_completed()
        comp.join()
    naiad.execute(program)
    assert len(calls) == 100 + 1 + 1
    assert calls[100:] == [(5, 10), (42, 9)]


def test_an_update_flows_around_the_loop_only_as_far_as_it_matters():
    seen = {}

    def count(record, time, diff):
        seen[time.epoch] = seen.get(time.epoch, 0) + 1

    def program(comp):
        inp = dd.new_input(comp, name="edges")
        edges = inp.collection.inspect(lambda r, t, d: None)
        nodes = edges.map(lambda e: e[0]).distinct().map(lambda n: (n, n))
        labels = nodes.iterate(lambda loop, lab: (
            lab.join(loop.enter(edges), key=lambda nl: nl[0], other_key=lambda e: e[0],
                     result=lambda nl, e: (e[1], nl[1]))
               .inspect(count)
               .concat(loop.enter(nodes)).min(key=lambda nl: nl[0], value=lambda nl: nl[1])))
        got = labels.collect()
        comp.activate()
        chain = [(i, i + 1) for i in range(300)] + [(1000, 1001)]
        inp.on_next(dd_components.symmetric(chain))
        inp.update([((1001, 1002), 1), ((1002, 1001), 1)])    # far from the long chain
        inp.on_completed()
        comp.join()
        return got.results
    [results] = naiad.execute(program)
    assert sorted(results[1]) == [((1002, 1000), 1)]
    assert seen[0] > 40000 and seen[1] <= 20, seen    # the chain's labels are not revisited


@pytest.mark.parametrize("readers", ["collect", "collect, distinct", "distinct, count, collect"])
def test_inspect_sees_every_change_once_with_its_time(readers):
    """However many operators read the inspected collection, in whatever order they are built:
    fused into each keyed reader, the inspection ran once per reader, or once, depending on
    which reader was built first."""
    seen = []

    def program(comp):
        inp = dd.new_input(comp, name="xs")
        c = inp.collection.map(str.upper).inspect(lambda r, t, d: seen.append((r, t.epoch, d)))
        for reader in readers.split(", "):
            (c if reader == "collect" else getattr(c, reader)()).collect()
        comp.activate()
        inp.on_next(["a"])
        inp.update([("a", -1), ("b", 2)])
        inp.on_completed()
        comp.join()
    naiad.execute(program)
    assert sorted(seen) == [("A", 0, 1), ("A", 1, -1), ("B", 1, 2)]


@pytest.mark.parametrize("processes,workers", [(1, 4), (3, 1), (3, 2)])
def test_components_at_more_workers_and_processes(processes, workers):
    edges = random_edges(200, 190, seed=processes * workers)
    dd_components.run(edges, dd_components.rewirings(edges, 4, seed=1), processes, workers,
                      check=True)


def test_an_unhashable_record_after_hashable_ones_is_named_by_the_join_that_keeps_it():
    """Only the first triple of a batch is checked where its record is known: a list record
    later in a batch is found when the join compacts its trace, and named as that (it was
    called a subscriber's failure)."""
    def program(comp):
        inp = dd.new_input(comp, name="xs")
        c = inp.collection
        j = c.join(c, _first_item, _first_item, lambda a, b: a[1])
        j.collect()
        probe = j.probe()
        comp.activate()
        inp.on_next([("a", 1), ["b", 5]])
        probe.wait(0)
        inp.update([(("x", 0), 1), (["b", 6], 1)])       # key "b" holds two epochs
        probe.wait(1)
        inp.update([(("x", 1), 1)])                       # the frontier moves: compaction
        probe.wait(2)
        inp.on_completed()
        comp.join()
    with pytest.raises(naiad.VertexError) as err:
        naiad.execute(program)
    assert "failed in compaction of its traces" in str(err.value), err.value
    assert isinstance(err.value.__cause__, UserFunctionError), err.value
    assert "a record or value is unhashable" in str(err.value), err.value
    assert "convert lists to tuples" in str(err.value)


def test_a_failing_join_result_names_the_function_and_the_pair():
    def ratio(a, b):
        return a / (b - 2)

    def build(c):
        return c.join(c, key=lambda r: r % 2, other_key=lambda r: r % 2, result=ratio)
    with pytest.raises(naiad.VertexError) as err:
        run_dd(build, [1, 2, 4])
    msg = str(err.value)
    assert "ratio" in msg and "ZeroDivisionError" in msg and "join(" in msg
