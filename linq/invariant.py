"""Loop-invariant inputs: data that holds at every iteration of an epoch, sent once.

In ``s.iterate(lambda loop, x: ..., n)`` the body receives a :class:`Loop` as well as the
iterated stream.  ``loop.enter(other)`` brings a stream from outside the loop in; its records at
epoch ``e`` hold at every iteration of ``e`` (they arrive once, at iteration 0).  Stateless
operators (``select``, ``where``, ``select_many``) and operators whose inputs are all invariant
give invariant streams again (computed once).  ``join`` and ``cogroup_by`` meet an invariant
side with a varying one: the vertex keeps the invariant side's records by key for the whole
epoch (until the notification of its last iteration) and matches every iteration against them,
so the invariant side is keyed and exchanged once per epoch, not once per iteration.  Any other
way of mixing an invariant stream with a varying one (``concat``, ``union``, ...) is a
:class:`~naiad.errors.GraphError` at graph construction.

A join with an invariant side waits, at each epoch, until the invariant side is complete (the
notification of the first iteration that carries varying records); from then on it matches
each varying record as it arrives and keeps none of them.

>>> import linq
>>> from naiad.testing import run
>>> def build(comp, s):
...     weights = s.where(lambda r: r[0] == "w").select(lambda r: r[1:])      # (key, factor)
...     start = s.where(lambda r: r[0] == "x").select(lambda r: r[1:])        # (key, value)
...     return start.iterate(lambda loop, x: x.join(loop.enter(weights), lambda r: r[0],
...                          lambda w: w[0], lambda r, w: (r[0], r[1] * w[1])), 3)
>>> run(build, [[("w", "a", 2), ("w", "b", 10), ("x", "a", 1), ("x", "b", 1)]], workers=2)
{0: [('a', 8), ('b', 1000)]}
"""

from __future__ import annotations

from collections import defaultdict
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Callable, Optional, Tuple, Union

from naiad.errors import GraphError
from naiad.graph import Stream
from naiad.loops import LoopContext
from naiad.progress.timestamp import Timestamp
from linq.core import LinqVertex, UserFunctionError, emit, explained

__all__ = ["Loop", "held", "mark_held", "last_of", "inherit", "check_mix", "HeldVertex", "held_stage", "checked_concat"]

_KEY = "linq.invariant"      # StageDef.params: (loop scope, last iteration) of an invariant output


class Loop:
    """The loop a two-argument body receives: ``loop.enter(other)`` brings an invariant input."""

    def __init__(self, context: LoopContext, iterations: int):
        self.context = context
        self.iterations = iterations
        self.entered_varying = False      # whether the body entered a stream that varies

    @property
    def name(self) -> str:
        return self.context.name

    def enter(self, stream: Stream) -> Stream:
        """``stream`` (from outside the loop) inside it, its records holding at every iteration."""
        ctx = self.context
        if not isinstance(stream, Stream):
            msg = (f"loop {ctx.name!r} enter needs a Stream; got {type(stream).__name__} "
                   f"{stream!r} (did you pass an input handle instead of its .stream?)")
            raise TypeError(msg)
        if stream.scope is not ctx.scope.parent:
            msg = (f"loop {ctx.name!r} enter: the stream is in scope {stream.scope.path()}, not "
                   f"in the scope the loop was entered from ({ctx.scope.parent.path()}); enter "
                   "streams built outside the loop, and use the body's own argument for the "
                   "iterated one")
            raise GraphError(msg)
        outer = held(stream)
        lasts: Tuple[int, ...] = (self.iterations - 1,)
        if outer is None:
            self.entered_varying = True
        else:
            # Invariant in the enclosing loop too: its records, at that loop's first
            # iteration, hold at every iteration of both (a join keeps them by epoch).
            lasts = outer[1] + lasts
        out = ctx.enter(stream)
        mark_held(out, (ctx.scope, lasts))
        return out


def mark_held(stream: Stream, value) -> Stream:
    """Mark ``stream`` invariant in a loop: ``value`` is ``(loop scope, last iterations)``,
    the last iteration of that loop and, first, of every enclosing loop it is invariant in."""
    for sid, _ in stream.sources:
        stream.graph.stages[sid].params[_KEY] = value
    return stream


def held(stream: Stream) -> Optional[tuple]:
    """``(loop scope, last iterations)`` when every source of ``stream`` is invariant, ``None``
    when none is; a GraphError when the stream mixes both (a concat of the two kinds)."""
    marks = [stream.graph.stages[sid].params.get(_KEY) for sid, _ in stream.sources]
    if all(m is None for m in marks):
        return None
    if any(m is None for m in marks):
        raise GraphError("a stream concatenates a loop-invariant stream (from loop.enter) with "
                         "a varying one; the invariant records would hold at the first "
                         "iteration only. Combine them with join or cogroup_by instead")
    _same_loops("concat", marks)
    return marks[0]


def _same_loops(op: str, marks: list) -> None:
    """A GraphError when invariant inputs hold in different loops: one entered into an inner
    loop from a stream invariant in the enclosing one too (its records come at the enclosing
    loop's first iteration only), another entered from a stream of the enclosing loop's body
    (its records come anew at each of that loop's iterations)."""
    if any(m != marks[0] for m in marks):
        msg = (f"{op}: its loop-invariant inputs hold in different loops (one is invariant in "
               "the enclosing loop as well, another changes with that loop's iterations), "
               "which no operator combines; join each with the iterated stream instead, or "
               "combine them in the enclosing loop's body and enter the result")
        raise GraphError(msg)


def last_of(op: str, mark: tuple) -> int:
    """The last iteration of the loop an invariant input (``mark``, from :func:`held`) belongs
    to; a GraphError for an input invariant in an enclosing loop as well, which only the
    record join keeps across both loops."""
    lasts = mark[1]
    if len(lasts) > 1:
        msg = (f"{op}: the loop-invariant input is invariant in the enclosing loop as well, "
               "which only a join of records keeps across both loops; join with it, or use "
               "it in the enclosing loop's body")
        raise GraphError(msg)
    return lasts[0]


def inherit(op: str, inputs, out: Stream) -> Stream:
    """The output of a stage over ``inputs`` is invariant when all of them are; an operator
    that cannot keep an invariant side apart from a varying one refuses the mix."""
    marks = [held(s) for s in inputs]
    if all(m is None for m in marks):
        return out
    if any(m is None for m in marks):
        check_mix(op)
    _same_loops(op, marks)
    return mark_held(out, marks[0])


def check_mix(op: str) -> None:
    msg = (f"{op}: one input is loop-invariant (from loop.enter) and another varies with the "
           "iteration; only join and cogroup_by keep an invariant side for the whole epoch. "
           "Join or cogroup with the invariant stream, or enter it with the iterated stream")
    raise GraphError(msg)


class HeldVertex(LinqVertex):
    """``join`` (``reducer is None``) or ``cogroup_by`` of ``(key, record)`` pairs where input
    ``held_edge`` is invariant: its records (at iteration 0) are kept per epoch and outer loop
    counters until the notification of iteration ``last``.  ``last`` may be a tuple, the last
    iterations of the loops the side is invariant in, outermost first: the records are then
    kept per epoch and the counters of the loops around those (a join only)."""

    def __init__(self, op: str, held_edge: int, last: Union[int, Tuple[int, ...]],
                 result: Optional[Callable] = None, reducer: Optional[Callable] = None,
                 diagnose=None):
        super().__init__()
        self.lasts = last if isinstance(last, tuple) else (last,)
        self.op, self.held_edge, self.last = op, held_edge, self.lasts[-1]
        self.result, self.reducer, self.diagnose = result, reducer, diagnose
        self.state = {"held": {}, "ready": set(), "waiting": {}}

    def _epoch(self, time) -> tuple:
        return (time[0], time[1][:-len(self.lasts)])

    def _first_sight(self, ek: tuple, time) -> None:
        held = self.state["held"]
        if ek not in held:
            held[ek] = {}
            self._ask(Timestamp(ek[0], ek[1] + self.lasts))     # drop the held side then
        if self.reducer is not None:
            self._ask(time)            # cogroup: a result at every iteration a message came at

    def _ask(self, time) -> None:
        """``notify_at(time)`` once, however many messages ask for it."""
        asked = self.state.setdefault("asked", set())
        if time not in asked:
            asked.add(time)
            self.notify_at(time)

    def on_recv_batch(self, edge: int, records: list, time) -> None:
        ek = self._epoch(time)
        self._first_sight(ek, time)
        st = self.state
        try:
            if edge == self.held_edge:
                table = st["held"][ek]
                get = table.get
                for k, r in records:
                    lst = get(k)
                    if lst is None:
                        table[k] = [r]
                    else:
                        lst.append(r)
            elif self.reducer is None and ek in st["ready"]:
                out = self._match(st["held"][ek], records)
                if out:
                    self.send_batch_by(0, out, time)
            else:
                waiting = st["waiting"].get(time)
                if waiting is None:
                    waiting = st["waiting"][time] = []
                    self._ask(time)
                waiting.extend(records)
        except UserFunctionError:
            raise
        except Exception as exc:
            self._fail(exc, edge, records)

    def _match(self, table: dict, records: list) -> list:
        single = self.state.get("single")
        if single is None or single[0] is not table:
            # One invariant record per key (an adjacency per node)? Then match in C.  Decided
            # once per held table: it is complete before any match.
            flat = None
            if table and all(len(v) == 1 for v in table.values()):
                flat = dict(zip(table.keys(), map(_first, table.values())))
            single = self.state["single"] = (table, flat)
        if single[1] is not None:
            return self._match_single(single[1], records)
        return self._match_lists(table, records)

    def _match_single(self, flat: dict, records: list) -> list:
        """Records matched against one invariant record per key: lookups and the pairing by
        ``map``/``compress``; only ``result`` is called per pair."""
        keys = list(map(_first, records))
        mine = list(map(_second, records))
        theirs = list(map(flat.get, keys, repeat(_ABSENT)))
        hit = list(map(is_not, theirs, repeat(_ABSENT)))
        a, b = compress(mine, hit), compress(theirs, hit)
        if self.held_edge == 0:
            a, b = b, a
        try:
            return list(map(self.result, a, b))
        except Exception:
            return self._match_lists({k: [v] for k, v in flat.items()}, records)

    def _match_lists(self, table: dict, records: list) -> list:
        out: list = []
        append = out.append
        result = self.result
        get = table.get
        a = b = None
        try:
            if self.held_edge == 1:
                for k, a in records:
                    matches = get(k)
                    if matches:
                        for b in matches:
                            append(result(a, b))
            else:
                for k, b in records:
                    matches = get(k)
                    if matches:
                        for a in matches:
                            append(result(a, b))
        except Exception as exc:
            raise UserFunctionError(self.op, "result", result, (a, b),
                                    f"raised {type(exc).__name__}: {exc}") from exc
        return out

    def on_notify(self, time) -> None:
        st = self.state
        ek = self._epoch(time)
        st.setdefault("asked", set()).discard(time)
        st["ready"].add(ek)
        table = st["held"].get(ek, {})
        waiting = st["waiting"].pop(time, [])
        if self.reducer is None:
            out = self._match(table, waiting) if waiting else None
        else:
            out = self._cogroup(table, waiting)
            c = time[1][-1]
            if (waiting or out) and c < self.last:
                # The reducer runs at every iteration for every key of either side.  An
                # iteration without varying records gives what the invariant side alone
                # gives: when that was nothing, so is every later one until records come
                # (which ask for their own iteration), so the chain stops there instead of
                # running to the last iteration (10**9 for iterate_and_accumulate).
                self._ask(Timestamp(ek[0], ek[1] + (c + 1,)))
        if out:
            self.send_batch_by(0, out, time)
        if time[1][-len(self.lasts):] == self.lasts:
            st["held"].pop(ek, None)
            st["ready"].discard(ek)
            if st.get("single") is not None and st["single"][0] is table:
                del st["single"]

    def _cogroup(self, table: dict, waiting: list) -> list:
        groups: defaultdict = defaultdict(list)
        for k, r in waiting:
            groups[k].append(r)
        out: list = []
        extend = out.extend
        reducer = self.reducer
        empty: list = []
        k = args = None
        try:
            for k in groups.keys() | table.keys():
                varying, fixed = groups.get(k, empty), table.get(k, empty)
                args = (k, varying, fixed) if self.held_edge == 1 else (k, fixed, varying)
                extend(reducer(*args))
        except Exception:
            emit([], self.op, "reducer", reducer, args)
            raise
        return out


def held_stage(op: str, left: Stream, right: Stream, diagnose, result=None,
               reducer=None) -> Stream:
    """A :class:`HeldVertex` stage over keyed ``left`` and ``right``, one of them invariant."""
    import stages
    held_edge = 0 if held(left) is not None else 1
    scope, lasts = held(left if held_edge == 0 else right)
    if scope is not left.scope:
        msg = (f"{op}: the loop-invariant input belongs to loop {scope.path()}, but the operator "
               f"runs in {left.scope.path()}; enter the stream in the loop that uses it")
        raise GraphError(msg)
    if reducer is not None and len(lasts) > 1:
        msg = (f"{op}: the loop-invariant input is invariant in the enclosing loop as well, and "
               "cogroup_by calls its reducer at every iteration of both even where no record "
               "comes; join with it, or cogroup with it in the enclosing loop's body")
        raise GraphError(msg)
    last = lasts if len(lasts) > 1 else lasts[0]
    st = stages.new_stage(lambda: HeldVertex(op, held_edge, last, result, reducer, diagnose),
                          name=op)
    st.new_input(left, explained(_first, diagnose, 0))
    st.new_input(right, explained(_first, diagnose, 1))
    return st.new_output()


_first = itemgetter(0)
_second = itemgetter(1)
_ABSENT = object()


def checked_concat(concat: Callable) -> Callable:
    """``Stream.concat`` that refuses to mix invariant and varying streams (see :func:`held`)."""
    if getattr(concat, "_checks_invariance", False):
        return concat

    def checked(self: Stream, *others: Stream) -> Stream:
        out = concat(self, *others)
        held(out)
        return out
    checked.__doc__ = concat.__doc__
    checked.__name__ = concat.__name__
    checked._checks_invariance = True
    return checked
