"""Path summaries: normal form, composition, and the soundness of their order, by brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naiad.progress import PathSummary, Timestamp

SMALL = 3  # counters of brute-force timestamps range over 0..SMALL


def summaries(source_depth: int) -> st.SearchStrategy[PathSummary]:
    """Summaries that apply to timestamps of ``source_depth`` counters."""

    def build(keep: int, delta: int, extra: list[int]) -> PathSummary:
        return PathSummary(keep, delta if keep else 0, extra)

    return st.builds(
        build,
        st.integers(0, source_depth),
        st.integers(0, 2),
        st.lists(st.integers(0, 2), max_size=2),
    )


def timestamps(depth: int) -> st.SearchStrategy[Timestamp]:
    return st.builds(Timestamp, st.integers(0, 3), st.tuples(*[st.integers(0, 5)] * depth))


def all_timestamps(depth: int, top: int = SMALL) -> list[Timestamp]:
    return [Timestamp(0, c) for c in itertools.product(range(top + 1), repeat=depth)]


@st.composite
def chains(draw: st.DrawFn) -> tuple[Timestamp, list[PathSummary]]:
    """A timestamp and a sequence of summaries, each applicable to the output of the one before."""
    depth = draw(st.integers(0, 3))
    t = draw(timestamps(depth))
    path = []
    for _ in range(draw(st.integers(1, 4))):
        summary = draw(summaries(depth))
        path.append(summary)
        depth = summary.output_depth
    return t, path


@given(chains())
@settings(max_examples=150, deadline=None)
def test_then_agrees_with_applying_in_sequence(case: tuple[Timestamp, list[PathSummary]]) -> None:
    t, path = case
    composed = path[0]
    expected = path[0].apply(t)
    for summary in path[1:]:
        composed = composed.then(summary)
        expected = summary.apply(expected)
    assert composed.apply(t) == expected
    assert composed.output_depth == expected.depth


@given(chains())
@settings(max_examples=100, deadline=None)
def test_then_is_associative(case: tuple[Timestamp, list[PathSummary]]) -> None:
    _, path = case
    if len(path) < 3:
        path = path + [PathSummary.identity(path[-1].output_depth)] * (3 - len(path))
    a, b, c = path[:3]
    assert a.then(b).then(c) == a.then(b.then(c))


@given(st.integers(0, 3), st.data())
@settings(max_examples=150, deadline=None)
def test_less_equal_is_sound_and_exact(depth: int, data: st.DataObject) -> None:
    a = data.draw(summaries(depth))
    b = data.draw(summaries(depth))
    domain = all_timestamps(depth, top=4)
    pointwise = a.output_depth == b.output_depth and all(
        a.apply(t).less_equal(b.apply(t)) for t in domain
    )
    if a.less_equal(b):
        assert pointwise, f"{a} <= {b} claimed, but a timestamp separates them"
    else:
        # Extras and deltas are at most 2, so a counterexample exists among counters up to 4.
        assert not pointwise, f"{a} <= {b} holds on all small timestamps but was denied"


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        (PathSummary(2, 0, ()), PathSummary(2, 1, ())),  # same keep, smaller delta
        (PathSummary(1, 1, (0,)), PathSummary(1, 1, (3,))),  # same keep and delta, smaller extra
        (PathSummary.identity(2), PathSummary(1, 1, (0,))),  # identity below an outer cycle
        (PathSummary.identity(1), PathSummary.feedback(1)),  # identity below the loop
        (PathSummary(0, 0, (0, 0)), PathSummary(2, 0, ())),  # resetting below keeping
    ],
)
def test_less_equal_needed_cases(lower: PathSummary, upper: PathSummary) -> None:
    assert lower.less_equal(upper)
    assert not upper.less_equal(lower)


def test_less_equal_incomparable() -> None:
    reset = PathSummary(1, 0, (5,))
    keep = PathSummary.identity(2)
    assert not reset.less_equal(keep) and not keep.less_equal(reset)
    assert not PathSummary.identity(1).less_equal(PathSummary.identity(2))


@given(st.integers(0, 3), st.data())
@settings(max_examples=100, deadline=None)
def test_advances_matches_brute_force(depth: int, data: st.DataObject) -> None:
    summary = data.draw(summaries(depth))
    if summary.output_depth != depth:
        return
    strictly = all(t.less_than(summary.apply(t)) for t in all_timestamps(depth))
    assert summary.advances() == strictly


def test_constructors() -> None:
    t = Timestamp(7, (2, 5))
    assert PathSummary.identity(2).apply(t) is t
    assert PathSummary.ingress(2).apply(t) == Timestamp(7, (2, 5, 0))
    assert PathSummary.egress(2).apply(t) == Timestamp(7, (2,))
    assert PathSummary.feedback(2, step=3).apply(t) == Timestamp(7, (2, 8))
    assert PathSummary.feedback(1).advances() and not PathSummary.identity(1).advances()
    assert PathSummary(1, 2, [0]) == PathSummary(keep=1, delta=2, extra=(0,))
    assert eval(repr(PathSummary(1, 2, (0,)))) == PathSummary(1, 2, (0,))
    assert hash(PathSummary.egress(1)) == hash(PathSummary.identity(0))
    assert (PathSummary(2).keep, PathSummary(2).delta, PathSummary(2).extra) == (2, 0, ())


def test_frozen() -> None:
    summary = PathSummary.feedback(1)
    with pytest.raises(AttributeError):
        summary.delta = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        summary.note = "x"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((-1,), "keep must be >= 0"),
        ((1, -1), "delta must be >= 0"),
        ((0, 1), "delta must be 0 when keep == 0"),
        ((1, 0, (-2,)), "extra counters must be >= 0"),
    ],
)
def test_invalid_summaries(args: tuple, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        PathSummary(*args)


def test_invalid_uses() -> None:
    with pytest.raises(ValueError, match="depth inside the loop"):
        PathSummary.egress(0)
    with pytest.raises(ValueError, match="step must be >= 1"):
        PathSummary.feedback(1, step=0)
    with pytest.raises(ValueError, match="reads 2 loop counters"):
        PathSummary.identity(2).apply(Timestamp(0, (1,)))
    with pytest.raises(ValueError, match="different depths"):
        PathSummary.identity(1).then(PathSummary.identity(3))


def test_public_surface() -> None:
    import naiad.progress as progress

    assert sorted(progress.__all__) == [
        "GraphBuilder",
        "GraphError",
        "PathSummary",
        "ProgressBuffer",
        "Reachability",
        "Timestamp",
        "Tracker",
    ]
    assert all(hasattr(progress, name) for name in progress.__all__)
