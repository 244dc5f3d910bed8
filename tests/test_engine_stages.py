"""Stages: routing by partition_by (or not), concat, binary stages, sinks and the general builder."""

from __future__ import annotations

import functools
import random
from collections import Counter, defaultdict
from typing import Dict, List

import pytest

import naiad
import naiad.testing
import stages
from naiad import key_hash
from naiad.testing import shard


def merged(parts, index=None):
    """``{epoch: sorted records}`` over all processes (``index`` picks one of several results)."""
    out: Dict[int, list] = {}
    for part in parts:
        part = part if index is None else part[index]
        for e, recs in part.items():
            out.setdefault(e, []).extend(recs)
    return {e: sorted(recs) for e, recs in sorted(out.items())}


def feed(comp, inp, epochs):
    for recs in epochs:
        inp.on_next(shard(recs, comp.process_index, comp.processes))


class Where(naiad.Vertex):
    """Sends ``(tag, key, record, this vertex's index)``."""

    def __init__(self, tag, key=None):
        super().__init__()
        self.tag, self.key = tag, key

    def on_recv(self, edge, message, time):
        key = self.key(message) if self.key else None
        self.send_by(0, (self.tag, key, message, self.index), time)


class Local(naiad.Vertex):
    """After a stage without partition_by: ``(upstream vertex, this vertex)``."""

    def on_recv(self, edge, message, time):
        self.send_by(0, (message[3], self.index), time)


# ---- routing --------------------------------------------------------------------------------

def routing_program(comp, epochs):
    inp = comp.new_input()
    by_int = functools.partial(Where, "int", lambda r: r % 13)
    by_str = functools.partial(Where, "str", lambda r: f"key-{r % 7}")
    keyed = stages.unary(inp.stream, by_int, partition_by=lambda r: r % 13)
    named = stages.unary(inp.stream, by_str, partition_by=lambda r: f"key-{r % 7}")
    tagged = stages.unary(inp.stream, functools.partial(Where, "here"))
    local = stages.unary(tagged, Local)
    got_keyed, got_local = keyed.concat(named).collect(), local.collect()
    comp.activate()
    feed(comp, inp, epochs)
    inp.on_completed()
    comp.join(timeout=60)
    return got_keyed.results, got_local.results


ROUTING_EPOCHS = [[random.Random(5).randrange(10_000) for _ in range(200)], [], list(range(50))]


@functools.lru_cache(maxsize=None)
def routed(processes, workers):
    """One run of the routing program per configuration, shared by the two tests below."""
    return naiad.testing.Cluster(processes, workers).execute(
        functools.partial(routing_program, epochs=ROUTING_EPOCHS))


def test_partition_by_routes_equal_keys_to_one_vertex(cluster):
    epochs = ROUTING_EPOCHS
    parts = routed(cluster.processes, cluster.workers)
    total = cluster.processes * cluster.workers
    keyed = merged(parts, 0)
    where: Dict[object, set] = defaultdict(set)
    for e, recs in keyed.items():
        assert Counter(r for tag, _, r, _ in recs if tag == "int") == Counter(epochs[e])
        assert Counter(r for tag, _, r, _ in recs if tag == "str") == Counter(epochs[e])
        for tag, key, _, index in recs:
            where[key].add(index)
    for key, indexes in where.items():
        assert indexes == {key_hash(key) % total}, key
    if total > 1:
        assert len({i for s in where.values() for i in s}) > 1   # keys were spread


def test_records_without_partition_by_stay_on_their_worker(cluster):
    local = merged(routed(cluster.processes, cluster.workers), 1)
    assert {e: len(recs) for e, recs in local.items()} == {
        e: len(recs) for e, recs in enumerate(ROUTING_EPOCHS)}
    for recs in local.values():
        for upstream, here in recs:
            assert upstream == here


# ---- concat, binary stages, sinks -------------------------------------------------------------

class HashJoin(naiad.Vertex):
    """Per-time equi-join on the first field; emits at notification."""

    def __init__(self):
        super().__init__()
        self.sides: Dict[naiad.Timestamp, tuple] = {}

    def on_recv(self, edge, message, time):
        if time not in self.sides:
            self.sides[time] = (defaultdict(list), defaultdict(list))
            self.notify_at(time)
        self.sides[time][edge][message[0]].append(message[1])

    def on_notify(self, time):
        left, right = self.sides.pop(time)
        for key, lvals in left.items():
            for lv in lvals:
                for rv in right.get(key, ()):
                    self.send_by(0, (key, lv, rv), time)


class Keep(naiad.Vertex):
    """A sink vertex: keeps what it receives; the program reads it after join()."""

    def __init__(self, kept: list):
        super().__init__()
        self.kept = kept

    def on_recv(self, edge, message, time):
        self.kept.append((time.epoch, message, self.index))


def shapes_program(comp, lefts, rights):
    left, right = comp.new_input(name="left"), comp.new_input(name="right")
    a = stages.unary(left.stream, functools.partial(Where, "a"), name="a")
    b = stages.unary(right.stream, functools.partial(Where, "b"), name="b")
    both = a.concat(b).collect()
    twice = a.concat(a).collect()
    joined = stages.binary(left.stream, right.stream, HashJoin, partition_by_left=lambda r: r[0],
                           partition_by_right=lambda r: r[0], name="join").collect()
    kept: list = []
    sink = stages.sink(right.stream, functools.partial(Keep, kept), partition_by=lambda r: r[0])
    comp.activate()
    for lrecs, rrecs in zip(lefts, rights):
        left.on_next(shard(lrecs, comp.process_index, comp.processes))
        right.on_next(shard(rrecs, comp.process_index, comp.processes))
    left.on_completed()
    right.on_completed()
    comp.join(timeout=60)
    assert isinstance(sink, stages.Stage)
    return both.results, twice.results, joined.results, {0: kept}


def test_concat_binary_and_sink(cluster):
    rng = random.Random(9)
    lefts = [[(rng.randrange(10), i) for i in range(40)] for _ in range(3)]
    rights = [[(rng.randrange(10), -i) for i in range(30)] for _ in range(3)]
    lefts[1] = []
    parts = cluster.execute(functools.partial(shapes_program, lefts=lefts, rights=rights))
    both, twice, joined, kept = (merged(parts, i) for i in range(4))
    for e in range(3):
        assert sorted(r for tag, _, r, _ in both.get(e, []) if tag == "a") == sorted(lefts[e])
        assert sorted(r for tag, _, r, _ in both.get(e, []) if tag == "b") == sorted(rights[e])
        assert Counter(r for _, _, r, _ in twice.get(e, [])) == Counter(lefts[e] * 2)
        want = sorted((k, lv, rv) for k, lv in lefts[e] for k2, rv in rights[e] if k == k2)
        assert joined.get(e, []) == want
    total = cluster.processes * cluster.workers
    kept_records = kept[0]
    assert sorted((e, m) for e, m, _ in kept_records) == sorted(
        (e, r) for e, recs in enumerate(rights) for r in recs)
    assert all(index == key_hash(m[0]) % total for _, m, index in kept_records)


# ---- the general builder ----------------------------------------------------------------------

class Sorter(naiad.Vertex):
    """Two inputs, two outputs: numbers from port 0 and lengths of words from port 1 go to output
    0 when even, to output 1 when odd; each output also reports the port it came from."""

    def on_recv(self, edge, message, time):
        assert (self.stage.inputs, self.stage.outputs) == (2, 2)
        value = message if edge == 0 else len(message)
        self.send_by(value % 2, (edge, value), time)


def builder_program(comp, numbers, words):
    nums, text = comp.new_input(name="numbers"), comp.new_input(name="words")
    st = stages.new_stage(Sorter, name="sorter")
    assert st.new_input(nums.stream, partition_by=lambda n: n) == 0
    assert st.new_input(text.stream) == 1
    evens, odds = st.new_output(), st.new_output()
    got_evens, got_odds = evens.collect(), odds.collect()
    comp.activate()
    nums.on_next(shard(numbers, comp.process_index, comp.processes))
    text.on_next(shard(words, comp.process_index, comp.processes))
    nums.on_completed()
    text.on_completed()
    comp.join(timeout=60)
    return got_evens.results, got_odds.results


def test_general_builder_two_inputs_two_outputs(cluster):
    numbers = list(range(25))
    words = "the quick brown fox jumps over the lazy dog".split()
    parts = cluster.execute(functools.partial(builder_program, numbers=numbers, words=words))
    evens, odds = merged(parts, 0), merged(parts, 1)
    values = [(0, n) for n in numbers] + [(1, len(w)) for w in words]
    assert evens == {0: sorted(v for v in values if v[1] % 2 == 0)}
    assert odds == {0: sorted(v for v in values if v[1] % 2 == 1)}


def test_stage_names_are_unique_and_visible():
    seen = []

    class Named(naiad.Vertex):
        def on_recv(self, edge, message, time):
            seen.append(self.stage.name)

    def program(comp):
        inp = comp.new_input()
        stages.sink(inp.stream, Named, name="probe")
        stages.sink(inp.stream, Named, name="probe")
        comp.activate()
        inp.on_next([1])
        inp.on_completed()
        comp.join(timeout=30)

    naiad.execute(program)
    assert sorted(seen) == ["probe", "probe_1"]


def test_a_vertex_subclass_or_a_function_is_a_factory():
    def make():
        return Where("f")

    got = naiad.testing.run(lambda comp, s: stages.unary(stages.unary(s, make), Local), [[1, 2]],
                            workers=2)
    assert [up == here for up, here in got[0]] == [True, True]


@pytest.mark.parametrize("bad", [42, "Where", Where("x")])
def test_factory_must_be_callable(bad):
    comp = naiad.Computation()
    inp = comp.new_input()
    with pytest.raises(TypeError, match="factory"):
        stages.unary(inp.stream, bad)


class _Sizes(naiad.Vertex):
    """Passes its records on and keeps how many it got in each batch."""

    def __init__(self):
        super().__init__()
        self.sizes: List[int] = []

    def on_recv_batch(self, edge, records, time):
        self.sizes.append(len(records))
        self.send_batch_by(0, records, time)


def _exchanges(comp, n=20_000, chain=20):
    """``chain`` exchanges in a row; the batch sizes the last one delivered, and the records."""
    inp = comp.new_input(name="numbers")
    s = inp.stream
    for i in range(chain):
        s = stages.unary(s, _Sizes, partition_by=lambda x, i=i: x * 7 + i, name=f"hop{i}")
    got = s.collect()
    comp.activate()
    inp.on_next(list(range(n))[comp.process_index::comp.processes])
    inp.on_completed()
    comp.join(timeout=60)
    sizes = [v.sizes for w in comp.local_workers for v in w.vertices
             if isinstance(v, _Sizes) and v.stage.name == f"hop{chain - 1}"]
    return sorted(r for rs in got.results.values() for r in rs), sizes


@pytest.mark.parametrize("processes,workers", [(2, 1), (1, 3)])
def test_batches_do_not_shrink_along_a_chain_of_exchanges(processes, workers):
    """Every exchange splits a batch among the workers; the parts of one connector and time are
    delivered together, so after 20 exchanges a batch still holds thousands of records (it
    held one to three, and the chain ran 15 times slower than 10 exchanges)."""
    parts = naiad.execute(functools.partial(_exchanges), processes=processes, workers=workers)
    assert sorted(r for got, _ in parts for r in got) == list(range(20_000))
    sizes = [s for _, per_worker in parts for worker in per_worker for s in worker]
    assert sum(sizes) == 20_000
    assert len(sizes) <= 400, (len(sizes), sorted(sizes)[:20])


class _Ident(naiad.Vertex):
    def on_recv(self, edge, message, time):
        self.send_by(0, message, time)


def test_bad_builder_arguments_name_the_stage_and_leave_no_half_built_stage():
    """Errors said "stage None" for a stage given no name, did not name the stage or port of a
    partition_by that is not callable (after adding the stage to the graph), accepted one on a
    loop's feedback until connect, and gave a bare AttributeError for a bad parent loop."""
    comp = naiad.Computation()
    inp = comp.new_input()
    with pytest.raises(TypeError, match=r"stage '_Ident': new_input needs a Stream"):
        stages.unary(inp, _Ident)
    with pytest.raises(TypeError, match=r"stage 'keyed', input 0: partition_by must be a callable"):
        stages.unary(inp.stream, _Ident, partition_by=5, name="keyed")
    with pytest.raises(TypeError, match=r"a stage's name must be a str"):
        stages.unary(inp.stream, _Ident, name=5)
    loop = stages.LoopContext(comp, name="rounds")
    with pytest.raises(TypeError, match=r"loop 'rounds' feedback: partition_by must be a callable"):
        loop.feedback(partition_by=7)
    with pytest.raises(TypeError, match=r"parent must be the enclosing LoopContext; got int"):
        stages.LoopContext(comp, name="inner", parent=3)
    # The failed calls added nothing: the name is still free, and the graph runs.
    keyed = stages.new_stage(_Ident, name="keyed")
    keyed.new_input(inp.stream, partition_by=lambda r: r)
    assert keyed.name_in_graph == "keyed"
    got = keyed.new_output().collect()
    comp.activate()
    inp.on_next([1, 2])
    inp.on_completed()
    comp.join(timeout=30)
    assert sorted(got.results[0]) == [1, 2]
