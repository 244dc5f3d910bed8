"""User functions that raise or return the wrong shape: errors name operator, function, shape."""

import pytest

import linq  # noqa: F401 - installs the Stream methods
import naiad
from linq import UserFunctionError
from naiad.testing import run


def _add(a, b):
    return a + b


_add.__name__ = "add"


def parse(r):
    return int(r)


def total(k, rs):
    len(rs)            # forgot the return


def first_letter(w):
    return w[0]


def as_list(r):
    return [r, r]


def explode(r):
    return len(r)


def pairs_key(r):
    return r[0]


def bad_combine(a, b):
    return a / 0


def bad_result(a, b):
    raise KeyError("boom")


def bad_key(r):
    return {}[r]


class _Ambiguous:
    """A predicate's result without a truth value (as a numpy array of two elements)."""

    def __bool__(self):
        raise ValueError("the truth value of this object is ambiguous")


class _Opaque:
    """A hashable key that cannot be pickled, so the exchange cannot hash it by value."""

    def __reduce_ex__(self, protocol):
        raise TypeError("not picklable")


def gen_reducer(k, rs):
    yield k
    raise ValueError("half way")


CASES = {
    "select raises": (
        lambda comp, s: s.select(parse), [["1", "x"]],
        ["select(parse)", "selector parse", "ValueError", "'x'"]),
    "reducer returns None": (
        lambda comp, s: s.group_by(first_letter, total), [["ab"]],
        ["group_by(first_letter, total)", "reducer total", "returned None",
         "expected an iterable", "return statement"]),
    "key raises": (
        lambda comp, s: s.group_by(first_letter, lambda k, rs: [k]), [["ab", ""]],
        ["group_by(first_letter, <lambda>)", "key first_letter", "IndexError", "''"]),
    "key unhashable": (
        lambda comp, s: s.count().select(lambda kv: kv[0]).group_by(as_list, lambda k, rs: [1]),
        [["a"]],
        ["group_by(as_list", "key as_list", "unhashable list", "expected a hashable key"]),
    "select_many not iterable": (
        lambda comp, s: s.select_many(explode), [["abc"]],
        ["select_many(explode)", "selector explode", "not iterable", "expected an iterable"]),
    "aggregate combine raises": (
        lambda comp, s: s.aggregate(pairs_key, len, bad_combine), [["ab", "ac"]],
        ["aggregate(pairs_key, len, bad_combine)", "combine bad_combine", "ZeroDivisionError"]),
    "min value incomparable": (
        lambda comp, s: s.min(lambda r: 0), [[1, "a"]],
        ["min(<lambda>, _identity)", "comparison min", "TypeError"]),
    "join result raises": (
        lambda comp, s: s.join(s, abs, abs, bad_result), [[1]],
        ["join(abs, abs, bad_result)", "result bad_result", "KeyError", "(called with 1, 1)"]),
    "distinct unhashable": (
        lambda comp, s: s.select(lambda r: [r]).distinct(), [[1]],
        ["distinct", "record", "unhashable", "hashable records"]),
    "partition key raises": (
        lambda comp, s: s.partition_by(bad_key), [[1, 2]],
        ["partition_by(bad_key)", "key bad_key", "KeyError"]),
    "reducer generator raises": (
        lambda comp, s: s.group_by(abs, gen_reducer), [[1]],
        ["group_by(abs, gen_reducer)", "reducer gen_reducer", "ValueError: half way"]),
    # A generator read by the operator, raising as it is read: blamed on the selector (it was
    # a RuntimeError naming nothing; fused with count, a bare error in 'count.local').
    "select_many generator raises": (
        lambda comp, s: s.select_many(lambda x: (1 / 0 for _ in [1])), [[1, 2, 3]],
        ["select_many(<lambda>)", "returned an iterable that raised ZeroDivisionError",
         "while it was read"]),
    "select_many generator raises, fused": (
        lambda comp, s: s.select_many(lambda x: (1 / 0 for _ in [1])).count(), [[1, 2, 3]],
        ["count", "select_many(<lambda>): the selector <lambda> returned an iterable that "
         "raised ZeroDivisionError"]),
    # spread's inputs of the wrong shape: named as such (bare TypeErrors from the routing and
    # the plan before).
    "spread iterated records not pairs": (
        lambda comp, s: s.iterate(lambda loop, x: x.spread(
            loop.enter(s.select(lambda v: (v, (v % 3 + 1,)))), lambda v, t: v, _add), 2),
        [[1, 2, 3]], ["spread(<lambda>, add)", "a record of the iterated stream is not (key, "
                      "value) with a hashable key"]),
    "spread targets not iterable": (
        lambda comp, s: s.select(lambda v: (v, 1.0)).iterate(lambda loop, x: x.spread(
            loop.enter(s.select(lambda v: (v, v))), lambda v, t: v, _add), 2),
        [[1, 2, 3]], ["spread(<lambda>, add)", "a record of the edges is not (key, targets)",
                      "'int' object is not iterable"]),
    "spread targets unhashable": (
        lambda comp, s: s.select(lambda v: (v, 1.0)).iterate(lambda loop, x: x.spread(
            loop.enter(s.select(lambda v: (v, ([v],)))), lambda v, t: v, _add), 2),
        [[1, 2, 3]], ["spread(<lambda>, add)", "unhashable type: 'list'"]),
    # From the LINQ audit: a predicate whose result has no truth value was a RuntimeError
    # naming no record; a key the exchange refuses (a set) blamed partition_by, never called;
    # a loop's partition_by that raised was a bare exception naming no function.
    "where result has no truth value": (
        lambda comp, s: s.where(lambda r: (r, r) if False else _Ambiguous()), [[1, 2]],
        ["where(<lambda>)", "predicate <lambda>", "whose truth value raised ValueError",
         "expected a result with a truth value"]),
    "group_by key a set": (
        lambda comp, s: s.group_by(lambda r: {r}, lambda k, rs: [len(rs)]), [[1, 2, 3]],
        ["group_by(<lambda>, <lambda>)", "key <lambda>", "returned unhashable set {",
         "(called with "]),
    "join other key not exchangeable": (
        lambda comp, s: s.join(s, abs, lambda r: _Opaque(), lambda a, b: a), [[1, 2, 3]],
        ["join(abs, <lambda>, <lambda>)", "key <lambda>", "returned _Opaque", "cannot be exchanged"]),
    "iterate partition_by raises": (
        lambda comp, s: s.iterate(lambda x: x.select(abs), 2, partition_by=bad_key), [[1, 2]],
        ["iterate", "iterate(partition_by=bad_key)", "key bad_key", "KeyError"]),
    "cogroup reducer returns int": (
        lambda comp, s: s.cogroup_by(s, abs, abs, lambda k, a, b: len(a)), [[1]],
        ["cogroup_by(abs, abs, <lambda>)", "returned int", "not iterable"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_names_operator_function_and_expectation(case):
    build, epochs, fragments = CASES[case]
    with pytest.raises(naiad.VertexError) as info:
        run(build, epochs, workers=2)
    err = info.value
    assert isinstance(err.__cause__, UserFunctionError), repr(err.__cause__)
    message = str(err)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert err.stage.startswith(fragments[0].split("(")[0])


def test_error_crosses_processes_with_its_message():
    with pytest.raises(naiad.VertexError) as info:
        run(lambda comp, s: s.group_by(first_letter, total), [["ab", "cd"]], processes=2)
    assert "reducer total returned None" in str(info.value)
    assert "group_by(first_letter, total)" in str(info.value)


def test_user_function_error_fields():
    with pytest.raises(naiad.VertexError) as info:
        run(lambda comp, s: s.select(parse), [["x"]])
    cause = info.value.__cause__
    assert (cause.operator, cause.role, cause.function) == ("select(parse)", "selector", "parse")
    assert cause.expected is None and cause.record == "'x'"
    import pickle
    again = pickle.loads(pickle.dumps(cause))
    assert str(again) == str(cause) and again.function == "parse"


@pytest.mark.parametrize("call, message", [
    (lambda s: s.select(3), "select needs a callable selector"),
    (lambda s: s.group_by(abs, None), "group_by needs a callable reducer"),
    (lambda s: s.join([1], abs, abs, max), "join needs a Stream"),
    (lambda s: s.iterate(lambda x: 5, 2), "must return a stream"),
    (lambda s: s.iterate(lambda x: x, 0), "positive integer"),
    (lambda s: s.min("k"), "min needs a callable key"),
])
def test_bad_arguments_fail_at_graph_construction(call, message):
    comp = naiad.Computation()
    s = comp.new_input().stream
    with pytest.raises((TypeError, ValueError)) as info:
        call(s)
    assert message in str(info.value)


def test_body_returning_outer_stream_is_a_graph_error():
    comp = naiad.Computation()
    s = comp.new_input().stream
    with pytest.raises(naiad.GraphError, match="must return a stream computed from its argument"):
        s.iterate(lambda x: s, 2)


def test_distinct_takes_no_key_function():
    """distinct(key) took the key for its stage's name: a silent whole-record distinct in one
    process, a graph mismatch across processes (the lambda's address in the name)."""
    comp = naiad.Computation()
    s = comp.new_input().stream
    with pytest.raises(TypeError, match="distinct takes no arguments.*group_by"):
        s.distinct(lambda r: r[0])


@pytest.mark.parametrize("combine", ["concat", "dd_concat", "dd_join"])
def test_a_stream_of_another_computation_is_named_as_such(combine):
    """It was "streams from different scopes (top and top)", with advice about loops."""
    from linq import differential as dd
    comp, other = naiad.Computation(), naiad.Computation()
    with pytest.raises(naiad.GraphError, match="belongs to another computation"):
        if combine == "concat":
            comp.new_input().stream.concat(other.new_input().stream)
        else:
            ca, cb = dd.new_input(comp).collection, dd.new_input(other).collection
            if combine == "dd_concat":
                ca.concat(cb)
            else:
                ca.join(cb, abs, abs, max)


def test_streams_from_different_loops_do_not_mix():
    comp = naiad.Computation()
    s = comp.new_input().stream
    with pytest.raises(naiad.GraphError):
        s.iterate(lambda x: x.join(s, abs, abs, max), 2)


def _route(n, r):
    return r % n


def test_a_guarded_loop_partition_keeps_the_graphs_fingerprint_of_its_function():
    """The fingerprint names a feedback's partition function; guarding it (for its errors)
    must not change that name, or checkpoints written before would be refused on resume: a
    plain function and a functools.partial both keep their function's name."""
    import functools
    from naiad.graph import _qualified
    for key in (abs, functools.partial(_route, 3)):
        comp = naiad.Computation()
        comp.new_input().stream.iterate(lambda x: x.select(abs), 2, partition_by=key)
        keys = [c.exchange.key for c in comp.graph.connectors
                if c.exchange is not None and c.exchange.key is not None]
        want = "builtins.abs" if key is abs else f"{__name__}._route"
        assert want in [_qualified(k) for k in keys], [_qualified(k) for k in keys]
