"""Compiled reachability on hand-built graphs: chains, loops, nested loops, and malformed graphs."""

from __future__ import annotations

import pytest

from naiad.progress import GraphBuilder, GraphError, PathSummary, Reachability, Timestamp

ID0 = PathSummary.identity(0)
ID1 = PathSummary.identity(1)
ID2 = PathSummary.identity(2)


def build(locations: list[tuple[int, str]], edges: list[tuple[int, int, PathSummary]]) -> Reachability:
    builder = GraphBuilder()
    for loc, (depth, name) in enumerate(locations):
        builder.add_location(loc, depth, name)
    for src, dst, summary in edges:
        builder.add_edge(src, dst, summary)
    return builder.build()


def T(epoch: int, *counters: int) -> Timestamp:
    return Timestamp(epoch, counters)


def test_chain() -> None:
    reach = build([(0, "a"), (0, "b"), (0, "c")], [(0, 1, ID0), (1, 2, ID0)])
    assert reach.summaries(0, 2) == (ID0,)
    assert reach.summaries(2, 0) == ()
    assert reach.summaries(1, 1) == (ID0,)
    assert reach.targets(0) == {0: (ID0,), 1: (ID0,), 2: (ID0,)}
    assert reach.targets(2) == {2: (ID0,)}
    assert reach.could_result_in((0, T(1)), (2, T(1)))
    assert reach.could_result_in((0, T(1)), (2, T(4)))
    assert not reach.could_result_in((0, T(2)), (2, T(1)))
    assert not reach.could_result_in((2, T(0)), (0, T(5)))
    assert reach.locations() == [0, 1, 2]
    assert (reach.depth(1), reach.name(1)) == (0, "b")


def loop_graph() -> Reachability:
    """input -> ingress -> body -> feedback -> body; body -> egress -> output."""
    return build(
        [(0, "input"), (0, "ingress"), (1, "body"), (1, "feedback"), (1, "egress"), (0, "output")],
        [
            (0, 1, ID0),
            (1, 2, PathSummary.ingress(0)),  # the ingress stage's summary sits on its out-edge
            (2, 3, ID1),
            (3, 2, PathSummary.feedback(1)),
            (2, 4, ID1),
            (4, 5, PathSummary.egress(1)),
        ],
    )


def test_loop() -> None:
    reach = loop_graph()
    assert reach.summaries(0, 2) == (PathSummary.ingress(0),)
    assert reach.summaries(2, 2) == (ID1,)
    assert reach.summaries(3, 2) == (PathSummary.feedback(1),)
    assert reach.summaries(3, 3) == (ID1,)
    assert reach.summaries(2, 5) == (PathSummary(0),)
    assert reach.summaries(5, 0) == ()
    # Within the loop, the body at iteration 3 can lead to iteration 3 or later only.
    assert reach.could_result_in((2, T(0, 3)), (2, T(0, 5)))
    assert not reach.could_result_in((2, T(0, 3)), (2, T(0, 2)))
    # The feedback at iteration 3 leads to the body at iteration 4, not 3.
    assert reach.could_result_in((3, T(0, 3)), (2, T(0, 4)))
    assert not reach.could_result_in((3, T(0, 3)), (2, T(0, 3)))
    # Leaving the loop forgets the iteration, entering starts from 0.
    assert reach.could_result_in((2, T(1, 9)), (5, T(1)))
    assert reach.could_result_in((0, T(1)), (4, T(1, 0)))
    assert not reach.could_result_in((2, T(2, 0)), (5, T(1)))


def nested_graph() -> Reachability:
    """An outer loop (depth 1) around an inner loop (depth 2)."""
    ing1 = PathSummary.ingress(0)
    ing2 = PathSummary.ingress(1)
    return build(
        [
            (0, "input"),  # 0
            (1, "outer head"),  # 1
            (2, "inner head"),  # 2
            (2, "inner feedback"),  # 3
            (1, "outer tail"),  # 4
            (1, "outer feedback"),  # 5
            (0, "output"),  # 6
        ],
        [
            (0, 1, ing1),
            (1, 2, ing2),
            (2, 3, ID2),
            (3, 2, PathSummary.feedback(2)),
            (2, 4, PathSummary.egress(2)),
            (4, 5, ID1),
            (5, 1, PathSummary.feedback(1)),
            (4, 6, PathSummary.egress(1)),
        ],
    )


def test_nested_loops() -> None:
    reach = nested_graph()
    assert reach.summaries(0, 2) == (PathSummary(0, 0, (0, 0)),)
    # Going around the outer loop is dominated by staying: the identity is the only summary.
    assert reach.summaries(2, 2) == (ID2,)
    assert reach.summaries(3, 2) == (PathSummary.feedback(2),)  # the outer route is later
    assert reach.summaries(4, 2) == (PathSummary(1, 1, (0,)),)
    assert reach.summaries(5, 4) == (PathSummary(1, 1, ()),)
    assert reach.summaries(2, 6) == (PathSummary(0),)
    # Inner feedback at (outer 2, inner 7): the next inner iteration and anything after it.
    p = (3, T(0, 2, 7))
    assert reach.could_result_in(p, (2, T(0, 2, 8)))
    assert reach.could_result_in(p, (2, T(0, 3, 0)))
    assert not reach.could_result_in(p, (2, T(0, 2, 7)))
    assert not reach.could_result_in(p, (2, T(0, 1, 9)))
    assert reach.could_result_in((4, T(0, 2)), (2, T(0, 3, 0)))
    assert not reach.could_result_in((4, T(0, 2)), (2, T(0, 2, 5)))


def test_parallel_paths_keep_incomparable_summaries() -> None:
    # Two routes into a loop: one entering at 0, another leaving a second loop and re-entering
    # after a feedback.  Both summaries matter, neither dominates.
    reach = build(
        [(1, "a"), (1, "b"), (0, "c")],
        [
            (0, 1, PathSummary(0, 0, (5,))),
            (0, 1, PathSummary(1, 1, ())),
            (1, 2, PathSummary.egress(1)),
        ],
    )
    assert set(reach.summaries(0, 1)) == {PathSummary(0, 0, (5,)), PathSummary(1, 1, ())}
    assert reach.could_result_in((0, T(0, 9)), (1, T(0, 5)))
    assert reach.could_result_in((0, T(0, 2)), (1, T(0, 3)))
    assert not reach.could_result_in((0, T(0, 2)), (1, T(0, 2)))


def test_cycle_without_feedback_names_its_locations() -> None:
    builder = GraphBuilder()
    builder.add_location(0, 0, "source")
    builder.add_location(1, 1, "select")
    builder.add_location(2, 1, "where")
    builder.add_edge(0, 1, PathSummary.ingress(0))
    builder.add_edge(1, 2, ID1)
    builder.add_edge(2, 1, ID1)
    with pytest.raises(GraphError, match="does not advance") as info:
        builder.build()
    message = str(info.value)
    assert "'select'" in message and "'where'" in message and "'source'" not in message
    assert "feedback" in message


def test_self_loop_and_top_level_cycle_rejected() -> None:
    with pytest.raises(GraphError, match="'spin'"):
        build([(1, "spin")], [(0, 0, ID1)])
    with pytest.raises(GraphError, match="'a'.*'b'"):
        build([(0, "a"), (0, "b")], [(0, 1, ID0), (1, 0, ID0)])


def test_cycle_through_egress_and_ingress_rejected() -> None:
    # Leaving a loop and re-entering it resets the counter without passing the feedback.
    with pytest.raises(GraphError, match="'inside'.*'outside'|'outside'.*'inside'"):
        build(
            [(1, "inside"), (0, "outside")],
            [(0, 1, PathSummary.egress(1)), (1, 0, PathSummary.ingress(0))],
        )


def test_cycle_advancing_only_an_inner_counter_rejected() -> None:
    # The inner feedback is dropped by the egress; the outer counter never advances.
    with pytest.raises(GraphError, match="does not advance"):
        build(
            [(1, "outer"), (2, "inner")],
            [
                (0, 1, PathSummary.ingress(1)),
                (1, 1, PathSummary.feedback(2)),
                (1, 0, PathSummary.egress(2)),
            ],
        )


def test_edge_depth_mismatch() -> None:
    builder = GraphBuilder()
    builder.add_location(0, 0, "outside")
    builder.add_location(1, 1, "inside")
    with pytest.raises(GraphError, match=r"'outside' \(0\) -> 'inside' \(1\).*ingress\(0\)"):
        builder.add_edge(0, 1, ID0)
    builder.add_edge(0, 7, ID0)  # locations may be declared after their edges
    with pytest.raises(GraphError, match="edge 0 -> 7 names location 7, which was never added"):
        builder.build()
    with pytest.raises(GraphError, match="declared twice"):
        builder.add_location(1, 1, "again")
    with pytest.raises(GraphError, match="PathSummary"):
        builder.add_edge(0, 0, (0, 0, ()))  # type: ignore[arg-type]


def test_edges_before_locations() -> None:
    builder = GraphBuilder()
    builder.add_edge(0, 1, PathSummary.ingress(0))
    builder.add_edge(1, 1, PathSummary.feedback(1))
    builder.add_location(1, 1, "loop")
    builder.add_location(0, 0, "input")
    assert builder.build().summaries(0, 1) == (PathSummary.ingress(0),)
    with pytest.raises(GraphError, match="'loop' \\(1\\) -> 'input' \\(0\\).*egress\\(1\\)"):
        builder.add_edge(1, 0, ID1)
    late = GraphBuilder()
    late.add_edge(0, 1, ID0)
    late.add_location(0, 0, "outside")
    late.add_location(1, 1, "inside")
    with pytest.raises(GraphError, match="'outside' \\(0\\) -> 'inside' \\(1\\).*ingress\\(0\\)"):
        late.build()


def test_unknown_location_queries() -> None:
    reach = loop_graph()
    with pytest.raises(GraphError, match="not part of this graph"):
        reach.summaries(99, 0)
    with pytest.raises(GraphError, match="not part of this graph"):
        reach.depth(99)


def test_antichains_are_minimal_and_include_identity() -> None:
    for reach in (loop_graph(), nested_graph()):
        for src in reach.locations():
            targets = reach.targets(src)
            assert PathSummary.identity(reach.depth(src)) in targets[src]
            for dst, found in targets.items():
                assert found == reach.summaries(src, dst)
                for a in found:
                    assert a.output_depth == reach.depth(dst)
                    assert not any(b != a and b.less_equal(a) for b in found)


def test_a_long_chain_shares_its_summaries():
    """A chain of n locations has n^2/2 pairs, each with the same one summary: every pair had
    its own summary, antichain and set entries (a chain of 1,000 stages held 720 MB per
    process).  Equal summaries and antichains are now made once, and a location's targets are
    its row's own keys."""
    import tracemalloc
    n = 600
    builder = GraphBuilder()
    for loc in range(n):
        builder.add_location(loc, 0, f"stage{loc}")
    for loc in range(n - 1):
        builder.add_edge(loc, loc + 1, PathSummary.identity(0))
    tracemalloc.start()
    try:
        reach = builder.build()
        targets, sources = reach.related()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 30 << 20, held >> 20          # 51 MB before, 17 MB now
    assert targets[0] == frozenset(range(n)) and sources[n - 1] == frozenset(range(n))
    assert reach.summaries(0, n - 1) == (PathSummary.identity(0),)
    assert reach.could_result_in((3, Timestamp(1)), (500, Timestamp(1)))
    assert not reach.could_result_in((500, Timestamp(1)), (3, Timestamp(1)))
