"""The tracker and the update buffer against a brute-force could-result-in oracle on random graphs."""

from __future__ import annotations

import random
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naiad.progress import (
    GraphBuilder,
    GraphError,
    PathSummary,
    ProgressBuffer,
    Timestamp,
    Tracker,
)
from naiad.progress.tracker import DEBUG_ENV, debug_enabled

Pointstamp = tuple[int, Timestamp]


@pytest.fixture(autouse=True, scope="module")
def _debug_progress():
    """Every tracker in this module checks its invariants after each update."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DEBUG_ENV, "1")
        yield


@contextmanager
def counting(owner: object, name: str) -> Iterator[list]:
    """Count the calls of ``owner.name`` while the block runs: ``calls[0]``."""
    calls = [0]
    real = getattr(owner, name)

    def counted(*args):
        calls[0] += 1
        return real(*args)
    setattr(owner, name, counted)
    try:
        yield calls
    finally:
        setattr(owner, name, real)


# -- random graphs ------------------------------------------------------------------------------


@dataclass
class RandomGraph:
    """Locations ``(depth, name)`` and edges ``(src, dst, kind, amount)`` of a loop-structured graph.

    ``amount`` is the step of a feedback edge, the first counter value of an ingress edge
    (standard ingress starts at 0), or the value a reset edge sets the innermost counter to.
    Resets give pairs of locations several incomparable path summaries.
    """

    locations: list[tuple[int, str]] = field(default_factory=list)
    edges: list[tuple[int, int, str, int]] = field(default_factory=list)

    def new(self, depth: int) -> int:
        loc = len(self.locations)
        self.locations.append((depth, f"n{loc}@{depth}"))
        return loc

    def summary(self, src: int, kind: str, amount: int) -> PathSummary:
        depth = self.locations[src][0]
        if kind == "feedback":
            return PathSummary.feedback(depth, amount)
        if kind == "ingress":
            return PathSummary(depth, 0, (amount,))
        if kind == "reset":
            return PathSummary(depth - 1, 0, (amount,))
        return getattr(PathSummary, kind)(depth)

    def builder(self) -> GraphBuilder:
        builder = GraphBuilder()
        for loc, (depth, name) in enumerate(self.locations):
            builder.add_location(loc, depth, name)
        for src, dst, kind, amount in self.edges:
            builder.add_edge(src, dst, self.summary(src, kind, amount))
        return builder


def random_graph(rng: random.Random, size: int = 10, max_depth: int = 2) -> RandomGraph:
    """A random DAG of identity edges in which loops (ingress, body, feedback, egress) nest."""
    graph = RandomGraph()

    def scope(depth: int, entry: int, budget: int) -> list[int]:
        nodes = [entry]
        while budget > 0:
            budget -= 1
            if depth < max_depth and budget >= 1 and rng.random() < 0.35:
                head = graph.new(depth + 1)
                for src in rng.sample(nodes, min(len(nodes), rng.randint(1, 2))):
                    start = rng.choice([0, 0, 0, 1, 2])
                    graph.edges.append((src, head, "ingress", start))
                inner_budget = rng.randint(0, budget)
                budget -= inner_budget
                inner = scope(depth + 1, head, inner_budget)
                for _ in range(rng.randint(1, 2)):
                    back_from = rng.randrange(len(inner))
                    back_to = rng.randrange(back_from + 1)
                    graph.edges.append((inner[back_from], inner[back_to], "feedback", rng.randint(1, 2)))
                out = graph.new(depth)
                for src in rng.sample(inner, min(len(inner), rng.randint(1, 2))):
                    graph.edges.append((src, out, "egress", 0))
                nodes.append(out)
            else:
                node = graph.new(depth)
                for src in rng.sample(nodes, min(len(nodes), rng.randint(1, 2))):
                    graph.edges.append((src, node, "identity", 0))
                nodes.append(node)
        return nodes

    first = graph.new(0)
    nodes = scope(0, first, size)
    if rng.random() < 0.5:  # a second input joining the first
        second = graph.new(0)
        graph.edges.append((second, rng.choice(nodes), "identity", 0))
    links = nx.DiGraph()
    links.add_nodes_from(range(len(graph.locations)))
    links.add_edges_from((src, dst) for src, dst, _, _ in graph.edges)
    inside = [loc for loc, (depth, _) in enumerate(graph.locations) if depth]
    for _ in range(rng.randint(0, 3) if inside else 0):  # resets, off every cycle
        src = rng.choice(inside)
        depth = graph.locations[src][0]
        dst = rng.choice([loc for loc in inside if graph.locations[loc][0] == depth])
        if src != dst and not nx.has_path(links, dst, src):
            graph.edges.append((src, dst, "reset", rng.randint(0, 2)))
            links.add_edge(src, dst)
    return graph


# -- the oracle ---------------------------------------------------------------------------------


def step(kind: str, amount: int, counters: tuple[int, ...]) -> tuple[int, ...]:
    """What one edge does to loop counters, written out by hand."""
    if kind == "identity":
        return counters
    if kind == "ingress":
        return counters + (amount,)
    if kind == "egress":
        return counters[:-1]
    if kind == "reset":
        return counters[:-1] + (amount,)
    return counters[:-1] + (counters[-1] + amount,)


class Oracle:
    """could-result-in by breadth-first search over explicit ``(location, counters)`` states.

    Dropping a cycle from a path can only lower the time it produces, so simple paths suffice;
    on a simple path no counter exceeds the start's largest counter (or the largest ingress
    or reset value) plus the sum of all feedback steps, and states beyond that bound are pruned.
    """

    def __init__(self, graph: RandomGraph) -> None:
        self.graph = graph
        self.outgoing: dict[int, list[tuple[int, str, int]]] = {}
        for src, dst, kind, amount in graph.edges:
            self.outgoing.setdefault(src, []).append((dst, kind, amount))
        self.slack = sum(amount for _, _, kind, amount in graph.edges if kind == "feedback")
        self.start = max((a for _, _, kind, a in graph.edges if kind in ("ingress", "reset")), default=0)
        self._cache: dict[tuple[int, tuple[int, ...]], dict[int, set[tuple[int, ...]]]] = {}

    def reached(self, loc: int, counters: tuple[int, ...], *, strict: bool = False) -> dict[int, set]:
        """Counters reachable at each location from state ``(loc, counters)``.

        With ``strict``, only by paths of at least one edge.
        """
        key = (loc, counters, strict)
        if key not in self._cache:
            bound = max(counters + (self.start,)) + self.slack
            found: dict[int, set[tuple[int, ...]]] = {}
            queue: deque[tuple[int, tuple[int, ...]]] = deque()
            if strict:
                queue.extend(self._next(loc, counters, bound))
            else:
                queue.append((loc, counters))
            while queue:
                here, state = queue.popleft()
                if state in found.setdefault(here, set()):
                    continue
                found[here].add(state)
                queue.extend(self._next(here, state, bound))
            self._cache[key] = found
        return self._cache[key]

    def _next(self, loc: int, counters: tuple[int, ...], bound: int):
        for dst, kind, amount in self.outgoing.get(loc, ()):
            after = step(kind, amount, counters)
            if max(after, default=0) <= bound:
                yield dst, after

    def could_result_in(self, p: Pointstamp, q: Pointstamp) -> bool:
        (l1, t1), (l2, t2) = p, q
        return any(
            Timestamp(t1.epoch, c).less_equal(t2) for c in self.reached(l1, t1.counters).get(l2, ())
        )

    def frontier_at(self, active: list[Pointstamp], loc: int) -> list[Timestamp]:
        times = {
            Timestamp(t.epoch, c) for l, t in active for c in self.reached(l, t.counters).get(loc, ())
        }
        return sorted(t for t in times if not any(u.less_than(t) for u in times))

    def has_stuck_cycle(self) -> bool:
        """Whether some location returns to its time or earlier by a non-empty path.

        Starting from counters all equal to the largest ingress start or reset value suffices: a cycle that
        adds nothing to the counters it keeps maps such a time to one at most as large, and a
        cycle that adds something maps every time to a strictly larger one.
        """
        for loc, (depth, _) in enumerate(self.graph.locations):
            top = (self.start,) * depth
            if any(c <= top for c in self.reached(loc, top, strict=True).get(loc, ())):
                return True
        return False


def random_pointstamp(rng: random.Random, graph: RandomGraph) -> Pointstamp:
    loc = rng.randrange(len(graph.locations))
    depth = graph.locations[loc][0]
    return loc, Timestamp(rng.randint(0, 1), tuple(rng.randint(0, 2) for _ in range(depth)))


# -- reachability against the oracle ------------------------------------------------------------


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_reachability_matches_oracle(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng)
    reach = graph.builder().build()
    oracle = Oracle(graph)
    pool = [random_pointstamp(rng, graph) for _ in range(12)]
    for p in pool:
        for q in pool:
            assert reach.could_result_in(p, q) == oracle.could_result_in(p, q), (p, q)
    for src, (depth, _) in enumerate(graph.locations):
        reached = oracle.reached(src, (0,) * depth)
        assert set(reach.targets(src)) == set(reached)


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_stuck_cycles_rejected_exactly(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng)
    for _ in range(rng.randint(1, 2)):
        src = rng.randrange(len(graph.locations))
        same = [loc for loc, (d, _) in enumerate(graph.locations) if d == graph.locations[src][0]]
        dst = rng.choice(same)
        kind = "feedback" if graph.locations[src][0] and rng.random() < 0.3 else "identity"
        graph.edges.append((src, dst, kind, 1))
    builder = graph.builder()
    if Oracle(graph).has_stuck_cycle():
        with pytest.raises(GraphError, match="does not advance") as info:
            builder.build()
        assert "@" in str(info.value)  # names the locations
    else:
        builder.build()


# -- the tracker against the oracle -------------------------------------------------------------


def check_tracker(tracker: Tracker, counts: Counter, oracle: Oracle, graph: RandomGraph) -> None:
    active = [p for p, n in counts.items() if n > 0]
    assert tracker.active() == {p: counts[p] for p in active}
    assert tracker.is_empty() == (not active)
    frontier = []
    for p in active:
        expected = sum(1 for q in active if q != p and oracle.could_result_in(q, p))
        assert tracker.precursors(*p) == expected, p
        assert tracker.is_active(*p)
        if not expected:
            frontier.append(p)
    assert tracker.frontier() == sorted(frontier, key=lambda p: (p[1], p[0]))
    for p in frontier:
        assert tracker.in_frontier(*p)
    for loc in range(len(graph.locations)):
        assert tracker.frontier_at(loc) == oracle.frontier_at(active, loc), loc


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_tracker_matches_oracle(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng)
    reach = graph.builder().build()
    oracle = Oracle(graph)
    tracker = Tracker(reach)
    assert tracker.debug
    pool = [random_pointstamp(rng, graph) for _ in range(rng.randint(2, 10))]
    counts: Counter = Counter()
    for _ in range(rng.randint(1, 25)):
        batch = [(rng.choice(pool), rng.choice([-2, -1, -1, 1, 1, 1, 2])) for _ in range(rng.randint(1, 3))]
        before_active, before_version = set(tracker.active()), tracker.version
        if len(batch) == 1:
            (p, delta), = batch
            tracker.update(p[0], p[1], delta)
        else:
            tracker.update_many(batch)
        for p, delta in batch:
            counts[p] += delta
        for p in pool:
            assert tracker.occurrence(*p) == counts[p]
        if set(tracker.active()) != before_active:
            assert tracker.version > before_version
        else:
            assert tracker.version >= before_version
        check_tracker(tracker, counts, oracle, graph)
        for p in pool:  # precursor counts of inactive pointstamps are counted afresh
            active = [q for q, n in counts.items() if n > 0 and q != p]
            assert tracker.precursors(*p) == sum(oracle.could_result_in(q, p) for q in active)
            # behind: what the buffer holds retirements by, as the frontier would tell it
            frontier = tracker.frontier()
            assert tracker.behind(*p) == any(f != p and oracle.could_result_in(f, p)
                                             for f in frontier)


def chain_tracker() -> Tracker:
    builder = GraphBuilder()
    for loc in range(3):
        builder.add_location(loc, 0, f"s{loc}")
    builder.add_edge(0, 1, PathSummary.identity(0))
    builder.add_edge(1, 2, PathSummary.identity(0))
    return Tracker(builder.build())


def test_transient_negative_counts() -> None:
    tracker = chain_tracker()
    p = (1, Timestamp(0))
    tracker.update(*p, -1)
    assert tracker.occurrence(*p) == -1 and not tracker.is_active(*p) and tracker.is_empty()
    assert tracker.version == 0
    tracker.update(*p, +1)
    assert tracker.occurrence(*p) == 0 and tracker.active() == {} and tracker.version == 0
    tracker.update(*p, +2)
    assert tracker.in_frontier(*p) and tracker.version == 1
    tracker.update(*p, +1)
    assert tracker.version == 1  # still active, same frontier


@pytest.mark.parametrize("deltas, active", [
    ((-1, +2), True),              # heard the decrement first, then a larger increment: -1 -> +1
    ((-1, +3), True),              # -1 -> +2
    ((-2, +1), False),             # still negative
    ((-2, +1, +2), True),          # -2 -> -1 -> +1
    ((+1, -2), False),             # positive straight to negative: -> -1
    ((+1, -2, +2), True),          # +1 -> -1 -> +1
    ((+2, -3, +1), False),         # +2 -> -1 -> 0
    ((-1, +2, -2, +1), False),     # -1 -> +1 -> -1 -> 0
])
def test_counts_that_jump_across_zero(deltas, active) -> None:
    """Counts may be heard out of order and jump over zero in one step, in either direction; a
    pointstamp is active exactly while its count is positive, and the frontier downstream and
    the precursor counts follow (validate() recomputes them from scratch)."""
    tracker = chain_tracker()
    tracker.debug = True
    p = (1, Timestamp(0))
    for delta in deltas:
        tracker.update(*p, delta)
        tracker.validate()
    assert tracker.occurrence(*p) == sum(deltas)
    assert tracker.is_active(*p) == active == tracker.in_frontier(*p)
    assert tracker.is_empty() != active
    # Downstream pointstamp: in the frontier only when nothing upstream is active.
    tracker.update(2, Timestamp(0), +1)
    assert tracker.in_frontier(2, Timestamp(0)) == (not active)
    tracker.update(2, Timestamp(0), -1)
    # Cancel what is left: the tracker is empty again, whatever path the count took.
    tracker.update(*p, -sum(deltas))
    tracker.validate()
    assert tracker.is_empty() and tracker.active() == {}


def test_validate_names_the_broken_pointstamp() -> None:
    tracker = chain_tracker()
    tracker.update_many([((0, Timestamp(0)), 1), ((2, Timestamp(0)), 1)])
    tracker._precursors[(2, Timestamp(0))] = 5  # corrupt the maintained count
    with pytest.raises(AssertionError, match=r"\(2, Timestamp\(0\)\) has precursor count 5 but 1"):
        tracker.validate()


def test_debug_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEBUG_ENV, "0")
    assert not debug_enabled() and not chain_tracker().debug
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert debug_enabled() and chain_tracker().debug


def test_rejects_malformed_pointstamps() -> None:
    tracker = chain_tracker()
    with pytest.raises(ValueError, match="has 0 loop counters but the time has 1"):
        tracker.update(1, Timestamp(0, (3,)), 1)
    with pytest.raises(ValueError, match="not part of the graph"):
        tracker.update(9, Timestamp(0), 1)
    with pytest.raises(TypeError, match="needs a Timestamp"):
        tracker.update(1, (0, ()), 1)  # type: ignore[arg-type]


class _CountingDict(dict):
    """A dict that counts the reads of its items."""

    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return super().__getitem__(key)


def test_a_location_with_thousands_of_epochs_is_not_rescanned_at_every_change() -> None:
    """Fed thousands of epochs ahead (max_epochs_in_flight=None), a stage holds a pointstamp
    in each; the staircase of its location was rebuilt from all of them whenever the least
    time of one epoch changed, so retiring the epochs took time quadratic in their number."""
    tracker = chain_tracker()
    tracker.debug = False
    tracker.update_many([((1, Timestamp(e)), 1) for e in range(20_000)])
    tracker._least[1] = _CountingDict(tracker._least[1])
    for e in range(100):                                  # the oldest epochs complete
        tracker.update(1, Timestamp(e), -1)
        assert tracker.frontier() == [(1, Timestamp(e + 1))]
    assert _CountingDict.reads <= 1_000, _CountingDict.reads   # 2,000,000 rebuilding
    for e in (20_005, 19_999, 100):                       # a new epoch, the last, the first
        tracker.update(1, Timestamp(e), 1 if e == 20_005 else -1)
    tracker.validate()
    assert tracker.frontier() == [(1, Timestamp(101))]


# -- the buffer ---------------------------------------------------------------------------------


def test_buffer_accumulates_and_orders() -> None:
    tracker = chain_tracker()
    buffer = ProgressBuffer(tracker.reach)
    buffer.add(0, Timestamp(1), 1)
    buffer.add(0, Timestamp(1), -1)
    assert not buffer and buffer.pending() == 0
    buffer.add_many([((2, Timestamp(0)), -1), ((1, Timestamp(2)), 2), ((0, Timestamp(0)), 1)])
    assert buffer.drain(tracker) == [((0, Timestamp(0)), 1), ((1, Timestamp(2)), 2), ((2, Timestamp(0)), -1)]
    assert not buffer


def test_buffer_holds_only_retirements_behind_the_frontier() -> None:
    tracker = chain_tracker()
    tracker.update_many([((0, Timestamp(0)), 1), ((2, Timestamp(0)), 1), ((1, Timestamp(3)), 1)])
    buffer = ProgressBuffer(tracker.reach)
    buffer.add_many([((2, Timestamp(0)), -1), ((1, Timestamp(3)), -1), ((0, Timestamp(0)), -1)])
    buffer.add(2, Timestamp(5), 1)
    assert buffer.drain(tracker) == [((2, Timestamp(5)), 1), ((0, Timestamp(0)), -1)]
    assert buffer.pending() == 2
    assert buffer.drain(tracker, hold=False) == [((2, Timestamp(0)), -1), ((1, Timestamp(3)), -1)]
    assert buffer.pending() == 0


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_buffer_drains_what_a_fresh_look_would(seed: int) -> None:
    """Held retirements are looked at again only when the frontier has changed: every drain
    must still return exactly the positives and the retirements not behind the frontier, as a
    buffer looking at everything afresh would, and keep the rest."""
    rng = random.Random(seed)
    graph = random_graph(rng, size=6)
    reach = graph.builder().build()
    tracker = Tracker(reach)
    buffer = ProgressBuffer(reach)
    pool = [random_pointstamp(rng, graph) for _ in range(rng.randint(3, 12))]
    for _ in range(rng.randint(0, 12)):       # many times at a few locations: covered ones
        loc, time = rng.choice(pool)
        pool.append((loc, Timestamp(rng.randint(0, 4), tuple(rng.randint(0, 3) for _ in time[1]))))
    counts: Counter = Counter()
    pending: Counter = Counter()
    for _ in range(rng.randint(5, 50)):
        action = rng.random()
        p, delta = rng.choice(pool), rng.choice([-2, -1, -1, 1, 1, 2])
        if action < 0.4:
            tracker.update(p[0], p[1], delta)
            counts[p] += delta
        elif action < 0.8:
            buffer.add(p[0], p[1], delta)
            pending[p] += delta
        else:
            hold = rng.random() < 0.8
            expected = sorted(((q, d) for q, d in pending.items() if d > 0), key=lambda u: (u[0][1], u[0][0]))
            expected += sorted(((q, d) for q, d in pending.items()
                                if d < 0 and not (hold and tracker.behind(*q))),
                               key=lambda u: (u[0][1], u[0][0]))
            assert buffer.drain(tracker, hold=hold) == expected
            for q, d in expected:
                del pending[q]
        pending = Counter({q: d for q, d in pending.items() if d})
        assert buffer.pending() == len(pending) and bool(buffer) == bool(pending)


def test_held_retirements_wait_for_the_frontier_to_move() -> None:
    """Every drain asked the tracker again about every held retirement (a worker running ahead
    holds hundreds), though the answer depends on the frontier alone: a held one is now looked
    at again only once the frontier has changed."""
    tracker = chain_tracker()
    tracker.debug = False                                # validate() would be counted too
    tracker.update(0, Timestamp(0), 1)
    buffer = ProgressBuffer(tracker.reach)
    buffer.add_many([((2, Timestamp(e)), -1) for e in range(100)])
    assert buffer.drain(tracker) == [] and buffer.pending() == 100
    with counting(tracker.reach, "could_result_in") as calls:
        for e in range(10):
            tracker.update(1, Timestamp(e), 1)            # behind (0, 0): the frontier stays
            buffer.add(1, Timestamp(e), -1)
            assert buffer.drain(tracker) == []
    assert calls[0] <= 30, calls[0]                        # 1,055 when all were asked
    tracker.update(0, Timestamp(0), -1)                  # the frontier moves: all go out,
    drained = []                                         # each once nothing precedes it
    for _ in range(20):
        out = buffer.drain(tracker)
        tracker.update_many(out)
        drained += out
    assert len(drained) == 110 and not buffer and tracker.is_empty()


def test_held_retirements_many_epochs_ahead_are_not_asked_about_one_by_one() -> None:
    """A worker running thousands of epochs ahead holds a retirement for each, and the
    frontier moves with every epoch completed: asking the tracker about each held one at every
    move took time quadratic in the epochs in flight.  One found behind covers the later
    epochs at its location."""
    tracker = chain_tracker()
    tracker.debug = False
    tracker.update(0, Timestamp(0), 1)                    # the input, at epoch 0
    buffer = ProgressBuffer(tracker.reach)
    buffer.add_many([((2, Timestamp(e)), -1) for e in range(1, 2001)])
    tracker.update_many([((2, Timestamp(e)), 1) for e in range(1, 2001)])
    assert buffer.drain(tracker) == []
    with counting(tracker, "behind") as asked:
        for e in range(0, 100):                          # the input moves on, epoch by epoch
            tracker.update_many([((0, Timestamp(e + 1)), 1), ((0, Timestamp(e)), -1)])
            out = buffer.drain(tracker)
            assert out == ([((2, Timestamp(e)), -1)] if e else []), (e, out)
            tracker.update_many(out)
    assert asked[0] <= 300, asked[0]                      # 100 moves x 2,000 held before
    assert buffer.pending() == 1901


# The buffered protocol under random interleavings runs on the real worker state machine:
# tests/test_worker_state.py (test_random_interleavings_..., test_holding_back_...).


def test_a_change_looks_only_at_pointstamps_it_could_be_related_to() -> None:
    """A graph of 1,000 parallel branches into one stage, every branch active: a change on one
    branch compared itself with every active pointstamp (and the buffer each retirement with
    the whole frontier), so wide graphs ran in time quadratic in their width."""
    width = 1000
    builder = GraphBuilder()
    sink = 2 * width
    builder.add_location(sink, 0, "sink")
    for b in range(width):
        builder.add_location(b, 0, f"input{b}")
        builder.add_location(width + b, 0, f"branch{b}")
        builder.add_edge(b, width + b, PathSummary.identity(0))
        builder.add_edge(width + b, sink, PathSummary.identity(0))
    reach = builder.build()
    tracker = Tracker(reach, debug=False)
    tracker.update_many([((b, Timestamp(1)), 1) for b in range(width)])
    with counting(reach, "could_result_in") as calls:
        tracker.update(width + 7, Timestamp(1), 1)       # a message on branch 7
        tracker.update(width + 7, Timestamp(1), -1)
        buffer = ProgressBuffer(reach)
        buffer.add(width + 9, Timestamp(0), -1)          # a retirement on branch 9
        assert buffer.drain(tracker) == [((width + 9, Timestamp(0)), -1)]
    assert calls[0] <= 10, calls[0]
    tracker.validate()


def test_the_trackers_of_one_graph_share_its_related_locations():
    """Each worker's tracker built its own map of which locations reach which: for a chain of
    1,000 stages, 500 MB more per process at 4 workers.  They now share the graph's."""
    from naiad.progress.reachability import GraphBuilder
    from naiad.progress.summary import PathSummary
    g = GraphBuilder()
    for loc in range(4):
        g.add_location(loc, 0, f"stage{loc}")
    for loc in range(3):
        g.add_edge(loc, loc + 1, PathSummary.identity(0))
    reach = g.build()
    first, second = Tracker(reach), Tracker(reach)
    assert first._targets is second._targets and first._sources is second._sources
    assert first._targets[1] == frozenset({1, 2, 3}) and first._sources[1] == frozenset({0, 1})


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_tracker_matches_oracle_with_many_times_per_location(seed: int) -> None:
    """Many epochs and counters at the same locations: the staircases (the least time of each
    epoch at a location, below every earlier epoch's) change shape in every way, and the
    frontier must stay the oracle's."""
    rng = random.Random(seed)
    graph = random_graph(rng, size=6)
    oracle = Oracle(graph)
    tracker = Tracker(graph.builder().build())
    locs = rng.sample(range(len(graph.locations)), min(3, len(graph.locations)))
    pool = []
    for _ in range(rng.randint(5, 30)):
        loc = rng.choice(locs)
        depth = graph.locations[loc][0]
        pool.append((loc, Timestamp(rng.randint(0, 4), tuple(rng.randint(0, 3) for _ in range(depth)))))
    counts: Counter = Counter()
    for _ in range(rng.randint(5, 60)):
        p, delta = rng.choice(pool), rng.choice([-1, -1, 1, 1, 1, 2])
        tracker.update(p[0], p[1], delta)
        counts[p] += delta
        check_tracker(tracker, counts, oracle, graph)
        for q in pool:
            assert tracker.behind(*q) == any(f != q and oracle.could_result_in(f, q)
                                             for f in tracker.frontier())


def loop_graph() -> tuple:
    """input (0) -> ingress -> body (1) <- feedback; body -> egress -> output (2)."""
    builder = GraphBuilder()
    builder.add_location(0, 0, "input")
    builder.add_location(1, 1, "body")
    builder.add_location(2, 1, "feedback")
    builder.add_location(3, 0, "output")
    builder.add_edge(0, 1, PathSummary.ingress(0))
    builder.add_edge(1, 2, PathSummary.identity(1))
    builder.add_edge(2, 1, PathSummary.feedback(1))
    builder.add_edge(1, 3, PathSummary.egress(1))
    return builder.build()


def test_pending_notifications_of_a_loop_do_not_slow_every_change() -> None:
    """A vertex asking for a notification at every (epoch, iteration) of a loop fed 20 epochs
    ahead keeps thousands of requests active, each waiting for the earlier epochs to reach its
    iteration.  Every message pointstamp that came and went was compared with all of them
    (13.5 s for 10 epochs at 2 workers); only the least time of each epoch at a location, and
    only when below the earlier epochs', can matter, so a change now looks at a few."""
    reach = loop_graph()
    tracker = Tracker(reach, debug=False)
    pending = [((1, Timestamp(e, (i,))), 1) for e in range(20) for i in range(e, 120)]
    tracker.update_many(pending)
    tracker.update_many([((2, Timestamp(e, (e,))), 1) for e in range(20)])
    with counting(reach, "could_result_in") as calls:
        for e in (0, 5):                     # epochs 0 and 5 work through 20 iterations
            for i in range(e, e + 20):
                tracker.update(2, Timestamp(e, (i + 1,)), 1)
                tracker.update(2, Timestamp(e, (i,)), -1)
    assert calls[0] <= 400, calls[0]      # 118 here; 267,600 when every change compared with all
    tracker.validate()
    assert tracker.in_frontier(1, Timestamp(0, (0,)))
    assert not tracker.in_frontier(1, Timestamp(5, (5,)))        # epoch 0 could still get there
    tracker.update_many([((1, Timestamp(0, (i,))), -1) for i in range(120)])
    tracker.update(2, Timestamp(0, (20,)), -1)
    tracker.validate()
    assert tracker.in_frontier(1, Timestamp(1, (1,)))


class _Finalized:
    """Cyclic garbage whose finalizer runs Python code (and so may hand the GIL over)."""

    def __del__(self) -> None:
        sum(range(50))


def test_active_times_is_safe_to_read_from_another_thread() -> None:
    """The progress line reads a worker's active times from its own thread.  Copying the counts
    item by item made a tuple per entry; a garbage collection started by one of them could run
    a finalizer, hand the GIL to the worker, and the dictionary changed size under the copy."""
    import gc
    import sys
    import threading
    import time
    builder = GraphBuilder()
    builder.add_location(0, 0, "a")
    builder.add_location(1, 0, "b")
    builder.add_edge(0, 1, PathSummary.identity(0))
    tracker = Tracker(builder.build(), debug=False)
    tracker.update_many([((1, Timestamp(e)), 1) for e in range(2000)])
    stop = threading.Event()
    errors: list = []

    def mutate() -> None:
        e = 2000
        while not stop.is_set():
            tracker.update(1, Timestamp(e), 1)
            tracker.update(1, Timestamp(e - 2000), -1)
            e += 1
            garbage = _Finalized()
            garbage.self = garbage  # type: ignore[attr-defined]

    def read() -> None:
        while not stop.is_set():
            try:
                times = tracker.active_times()
                assert len(times) <= 2001 and all(isinstance(t, Timestamp) for t in times)
            except (RuntimeError, AssertionError) as exc:
                errors.append(exc)
                stop.set()

    interval, threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=mutate), threading.Thread(target=read)]
        for t in threads:
            t.start()
        stop.wait(3)
        stop.set()
        for t in threads:
            t.join(10)
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*threshold)
    assert not errors, errors
