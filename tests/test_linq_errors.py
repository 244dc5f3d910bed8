"""User functions that raise or return the wrong shape: errors name operator, function, shape."""

import pytest

import linq  # noqa: F401 - installs the Stream methods
import naiad
from linq import UserFunctionError
from naiad.testing import run


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


def test_streams_from_different_loops_do_not_mix():
    comp = naiad.Computation()
    s = comp.new_input().stream
    with pytest.raises(naiad.GraphError):
        s.iterate(lambda x: x.join(s, abs, abs, max), 2)
