"""FrameStream: a stream whose messages are ``pyarrow.Table`` batches, with columnar operators.

Per time, as the record operators: tables at different timestamps never mix.  Exchanges cut
tables by a hash of their key columns (:mod:`linq.frames.hashing`), the same in every
process; aggregations and joins run as Arrow kernels over whole tables, and ``group_by``
combines each worker's tables locally before anything crosses the network.

>>> import pyarrow as pa
>>> from naiad.testing import run
>>> from linq import frames
>>> def build(comp, s):
...     words = frames.of(s).group_by("word", n=("word", "count"), total=("x", "sum"))
...     return words.to_records()
>>> batches = [pa.table({"word": ["a", "b", "a"], "x": [1, 2, 3]}), pa.table({"word": ["b"], "x": [5]})]
>>> run(build, [batches], workers=2)
{0: [('a', 2, 4), ('b', 2, 7)]}
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import pyarrow as pa
import pyarrow.compute as pc

import stages
from naiad.graph import Stream
from naiad.partition import route_keys
from linq.frames.dense import aggregate
from linq.frames.hashing import check_key_types as key_types, key_names
from linq.frames.held import HeldJoin, check_clash, check_key_types
from linq.frames.loop import iterate as _iterate
from linq.frames.spread import PartialSums, SpreadVertex, sum_by
from linq.frames.vertices import (Accumulate, FrameError, MapTables, Split, _Checked, call_on_table,
                                  require_columns)
from linq.invariant import held, inherit, last_of
from naiad.errors import GraphError

__all__ = ["FrameStream", "of", "AGGREGATIONS"]

AGGREGATIONS = ("sum", "count", "min", "max", "mean")
_JOINS = {"inner": "inner", "left": "left outer", "right": "right outer", "outer": "full outer"}
Keys = Union[str, Sequence[str]]


def _keys(keys: Keys, op: str = "frames") -> List[str]:
    return key_names(keys, op)


def _route(tagged: tuple) -> int:
    return tagged[0]


def of(stream: Stream) -> "FrameStream":
    """The stream of ``pyarrow.Table`` messages ``stream`` carries, as a FrameStream."""
    if isinstance(stream, FrameStream):
        return stream
    if not isinstance(stream, Stream):
        msg = f"frames.of needs a naiad Stream of pyarrow.Table; got {type(stream).__name__}"
        raise TypeError(msg)
    return FrameStream(stream)


class FrameStream:
    """Columnar operators over a stream of tables; ``.stream`` is the underlying Stream."""

    def __init__(self, stream: Stream):
        self.stream = stream

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def _workers(self) -> int:
        return self.stream.graph.computation.workers

    def _map(self, op: str, fn: Callable, rows: bool = False, user: bool = False) -> Stream:
        out = stages.unary(self.stream, lambda: MapTables(op, fn, rows, user), name=op)
        return inherit(op, [self.stream], out)

    def _split(self, op: str, keys: List[str], every: bool = False) -> Stream:
        routes = route_keys(self._workers)
        out = stages.unary(self.stream, lambda: Split(op, keys, routes, every),
                           name=f"{op}.split")
        return inherit(op, [self.stream], out)

    # -- stateless ---------------------------------------------------------------------------------
    def map_batches(self, fn: Callable[[pa.Table], pa.Table]) -> "FrameStream":
        """``fn(table) -> table`` for every table (None drops it)."""
        _callable("map_batches", fn)
        return FrameStream(self._map(f"map_batches({_name(fn)})", fn, user=True))

    def filter(self, fn: Callable[[pa.Table], Any]) -> "FrameStream":
        """The rows where ``fn(table)`` (a boolean array or expression result) is true."""
        _callable("filter", fn)
        op = f"filter({_name(fn)})"

        def keep(table: pa.Table) -> pa.Table:
            mask = call_on_table(op, fn, table)
            try:
                return table.filter(mask)
            except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                msg = (f"{op}: the function must return a boolean array of {table.num_rows} "
                       f"values; got {type(mask).__name__} ({exc})")
                raise FrameError(msg) from exc
        return FrameStream(self._map(op, keep))

    def concat(self, *others: "FrameStream") -> "FrameStream":
        """The tables of this stream and of ``others``, each at its own time."""
        out = self.stream.concat(*(of(o).stream for o in others))
        held(out)                   # refuses to mix loop-invariant and varying tables
        return FrameStream(out)

    def to_records(self) -> Stream:
        """A Stream of row tuples (in column order), for the record operators of ``linq``."""
        def rows(table: pa.Table) -> list:
            return list(zip(*(c.to_pylist() for c in table.columns)))
        return self._map("to_records", rows, rows=True)

    # -- exchange ----------------------------------------------------------------------------------
    def exchange(self, key: Keys) -> "FrameStream":
        """Rows with equal values in the ``key`` columns meet on one worker."""
        keys = _keys(key, "exchange")
        tagged = self._split(f"exchange({', '.join(keys)})", keys)
        op = f"exchange({', '.join(keys)})"
        out = stages.unary(tagged, _Untag, partition_by=_route, name=op)
        return FrameStream(inherit(op, [tagged], out))

    # -- per-time combinations ---------------------------------------------------------------------
    def group_by(self, keys: Keys, **aggs: Tuple[str, str]) -> "FrameStream":
        """One row per distinct ``keys`` per time, with ``name=(column, how)`` aggregations,
        ``how`` one of sum, count, min, max, mean.  Each worker combines its own tables first;
        only the partial results are exchanged."""
        keys = _keys(keys, "group_by")
        if not aggs:
            msg = "group_by needs at least one aggregation, e.g. n=('word', 'count')"
            raise TypeError(msg)
        clash = [name for name in aggs if name in keys]
        if clash:
            msg = (f"group_by({', '.join(keys)}): the aggregation {clash[0]}= would replace the "
                   f"key column {clash[0]!r} in the output; give the aggregation another name")
            raise ValueError(msg)
        partial: List[Tuple[str, str, str]] = []      # (column, kernel, partial name)
        final: List[Tuple[str, str, List[str]]] = []  # (output name, how, partial names)
        # The partial results travel beside the key columns: their names must differ from
        # every key's (and each other's), whatever the user named the keys.
        prefix = "__p"
        while any(k.startswith(prefix) for k in keys):
            prefix = "_" + prefix
        for name, spec in aggs.items():
            if (not isinstance(spec, tuple) or len(spec) != 2 or spec[1] not in AGGREGATIONS):
                msg = (f"group_by: aggregation {name}={spec!r} must be (column, how) with how "
                       f"one of {', '.join(AGGREGATIONS)}")
                raise TypeError(msg)
            column, how = spec
            # A mean sums in float64 (as Arrow's and pandas' do): an integer sum may wrap.
            kernels = ["fsum", "count"] if how == "mean" else [how]
            names = []
            for kernel in kernels:
                pname = next((p for c, k, p in partial if (c, k) == (column, kernel)),
                             f"{prefix}{len(partial)}")
                if (column, kernel, pname) not in partial:
                    partial.append((column, kernel, pname))
                names.append(pname)
            final.append((name, how, names))
        columns = sorted({c for c, _, _ in partial} | set(keys))
        op = f"group_by({', '.join(keys)})"
        routes = route_keys(self._workers)
        alone = self.stream.graph.computation.workers_per_process == 1

        def combine_local(tables: List[Optional[pa.Table]]) -> Optional[pa.Table]:
            table = tables[0]
            key_types(op, table, keys)
            specs = []
            try:
                for c, k, p in partial:
                    if k == "fsum":          # the float64 column summed for a mean
                        k = "sum"
                        if _numeric(table.schema.field(c).type):   # (not text: no parsing)
                            f = f"{p}f"
                            while f in table.column_names:
                                f = "_" + f
                            table = table.append_column(
                                f, pc.cast(table.column(c), pa.float64(), safe=False))
                            c = f
                    specs.append((c, k))
                ks, vs = aggregate(table, keys, specs, _threads(alone, table, specs))
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise _unaggregatable(op, table, keys, aggs, exc) from exc
            return pa.table(dict(zip([*keys, *(p for _, _, p in partial)], [*ks, *vs])))

        kinds = {p: ("sum" if k in ("sum", "count", "fsum") else k) for _, k, p in partial}

        def finish(got: pa.Table) -> pa.Table:
            out = {k: got.column(k) for k in keys}
            for name, how, names in final:
                cols = [got.column(n) for n in names]
                if how == "mean":              # a float64 sum over a count
                    out[name] = pc.divide(cols[0], cols[1])
                else:
                    out[name] = cols[0]
            return pa.table(out)

        def combine_final(tables: List[Optional[pa.Table]]) -> Optional[pa.Table]:
            table = tables[0]
            specs = [(p, kinds[p]) for _, _, p in partial]
            ks, vs = aggregate(table, keys, specs, _threads(alone, table, specs))
            return finish(pa.table(dict(zip([*keys, *(p for _, _, p in partial)], [*ks, *vs]))))

        def only_final(table: pa.Table) -> pa.Table:
            # The one partial table of a time: one worker's combine, its keys already distinct.
            return finish(table)

        local = stages.unary(
            self.stream, lambda: Accumulate(f"{op}.combine", 1, False, combine_local,
                                            [columns], keys, routes, streaming=True),
            name=f"{op}.combine")
        inherit(op, [self.stream], local)
        merged = stages.unary(local, lambda: Accumulate(op, 1, True, combine_final,
                                                        single=only_final),
                              partition_by=_route, name=op)
        return FrameStream(inherit(op, [local], merged))

    def join(self, other: "FrameStream", on: Keys, right_on: Optional[Keys] = None,
             how: str = "inner") -> "FrameStream":
        """Per time, the rows of this stream and ``other`` whose ``on`` (and ``right_on``)
        columns are equal, joined by Arrow's hash join; ``how``: inner, left, right, outer."""
        if how not in _JOINS:
            msg = f"join: how={how!r} must be one of {', '.join(_JOINS)}"
            raise ValueError(msg)
        left_keys = _keys(on, "join")
        right_keys = _keys(right_on, "join") if right_on is not None else left_keys
        if len(left_keys) != len(right_keys):
            msg = f"join: {len(left_keys)} key column(s) on the left, {len(right_keys)} on the right"
            raise ValueError(msg)
        other = of(other)
        op = f"join({', '.join(left_keys)} = {', '.join(right_keys)})"
        # Every worker must know both sides' schemas: to lay out its rows as the others do
        # (nulls for the side it got no rows of), and to refuse key columns of different
        # types whichever rows it got.  So each split sends the workers it has no rows for an
        # empty table of the schema.
        outer = how != "inner"
        left = self._split(f"{op}.left", left_keys, every=True)
        right = other._split(f"{op}.right", right_keys, every=True)
        kind = _JOINS[how]
        marks = [held(left), held(right)]
        if (marks[0] is None) != (marks[1] is None):
            return FrameStream(self._held_join(op, left, right, marks, [left_keys, right_keys],
                                               how))

        def combine(tables: List[Optional[pa.Table]]) -> Optional[pa.Table]:
            a, b = tables
            if a is None or b is None:
                if how == "inner" or (a is None and how == "left") or (b is None and how == "right"):
                    return None
                return a if b is None else b
            check_key_types(op, a, b, left_keys, right_keys)
            check_clash(op, a, b, left_keys, right_keys, how)
            return a.join(b, keys=left_keys, right_keys=right_keys, join_type=kind,
                          use_threads=False)

        out = stages.binary(left, right,
                            lambda: Accumulate(op, 2, True, combine, [left_keys, right_keys],
                                               fill=outer),
                            partition_by_left=_route, partition_by_right=_route, name=op)
        return FrameStream(inherit(op, [left, right], out))

    def _held_join(self, op: str, left: Stream, right: Stream, marks: list,
                   keys: List[List[str]], how: str) -> Stream:
        held_edge = 0 if marks[0] is not None else 1
        scope, last = marks[held_edge][0], last_of(op, marks[held_edge])
        if scope is not left.scope:
            msg = (f"{op}: the loop-invariant input belongs to loop {scope.path()}, but the "
                   f"join runs in {left.scope.path()}; enter the stream in the loop that uses it")
            raise GraphError(msg)
        st = stages.new_stage(lambda: HeldJoin(op, held_edge, last, keys, how), name=op)
        st.new_input(left, _route)
        st.new_input(right, _route)
        return st.new_output()

    def spread(self, edges: "FrameStream", on: str, src: str = "src", dst: str = "dst",
               weight: Optional[str] = None) -> "FrameStream":
        """Per time, every row sends its value columns (all but ``on``) along the rows of
        ``edges`` whose ``src`` equals its ``on`` (times the edge's ``weight`` column, when
        named); each ``dst`` gets the sums: one row ``(on=dst, values...)`` per target reached.
        With ``edges`` from ``loop.enter`` the edges are indexed into integer positions once
        per epoch and an iteration is a gather and a bincount (:mod:`linq.frames.spread`);
        otherwise it is ``join``, a ``map_batches`` and a sum per ``dst``."""
        for name, value in (("on", on), ("src", src), ("dst", dst), ("weight", weight)):
            if not isinstance(value, str) and not (name == "weight" and value is None):
                msg = f"spread: {name} must be a column name (str); got {value!r}"
                raise TypeError(msg)
        other = of(edges)
        op = f"spread({on} -> {dst})"
        routes = route_keys(self._workers)
        mark = held(other.stream)
        if mark is not None and held(self.stream) is None:
            scope, last = mark[0], last_of(op, mark)
            if scope is not self.stream.scope:
                msg = (f"{op}: the edges belong to loop {scope.path()}, but spread runs in "
                       f"{self.stream.scope.path()}; enter the stream in the loop that uses it")
                raise GraphError(msg)
            left = self._split(f"{op}.left", [on])
            # Every worker gets the edges' schema (once per epoch), to refuse a key type
            # that differs from ``on``'s whichever rows it got, as the composed form does.
            right = other._split(f"{op}.edges", [src], every=True)
            st = stages.new_stage(lambda: SpreadVertex(op, last, on, src, dst, weight, routes),
                                  name=op)
            st.new_input(left, _route)
            st.new_input(right, _route)
            # One output and one final-sums stage per destination worker (see the module's
            # docstring of linq.frames.spread: no progress round trip per iteration).
            locals_ = [st.new_output() for _ in routes]
        else:
            last = None
            locals_ = [self._spread_composed(other, op, on, src, dst, weight, routes)]
        sums = [stages.unary(local, lambda: PartialSums(op, on, last),
                             partition_by=_route,
                             name=f"{op}.sum" if len(locals_) == 1 else f"{op}.sum[{d}]")
                for d, local in enumerate(locals_)]
        merged = sums[0].concat(*sums[1:])
        return FrameStream(inherit(op, locals_, merged))

    def _spread_composed(self, edges: "FrameStream", op: str, on: str, src: str, dst: str,
                         weight: Optional[str], routes: List[int]) -> Stream:
        """join, shares, and the local sums before the exchange (tagged by route)."""
        t_src, t_dst, t_w = "__spread_src", "__spread_dst", "__spread_w"

        def pick(t: pa.Table) -> pa.Table:
            require_columns(op, t, [src, dst] + ([weight] if weight is not None else []))
            columns = {t_src: t[src], t_dst: t[dst]}
            if weight is not None:
                columns[t_w] = t[weight]
            return pa.table(columns)

        def shares(t: pa.Table) -> pa.Table:
            values = [c for c in t.column_names if c not in (on, t_dst, t_w)]
            columns = {on: t[t_dst]}
            for c in values:
                columns[c] = pc.multiply(t[c], t[t_w]) if weight is not None else t[c]
            return pa.table(columns)

        def local_sums(tables: List[Optional[pa.Table]]) -> Optional[pa.Table]:
            t = tables[0]
            return sum_by(t, on, [c for c in t.column_names if c != on], op)

        joined = self.join(edges.map_batches(pick), on=on, right_on=t_src).map_batches(shares)
        out = stages.unary(joined.stream, lambda: Accumulate(
            f"{op}.combine", 1, False, local_sums, [[on]], [on], routes, streaming=True),
            name=f"{op}.combine")
        return inherit(op, [joined.stream], out)

    # -- loops -------------------------------------------------------------------------------------
    def iterate(self, body: Callable, iterations: int, *, name: Optional[str] = None
                ) -> "FrameStream":
        """``body`` applied ``iterations`` times; the result is the body's output at the last.

        ``body(f)`` or ``body(loop, f)`` gets the iterated tables as a FrameStream and returns
        the next iteration's; ``loop.enter(other)`` brings a frame stream in as a
        loop-invariant input, present at every iteration and shipped once
        (:mod:`linq.frames.loop`).  Iterated tables stay on their worker between iterations.
        """
        return FrameStream(_iterate(self, body, iterations, FrameStream,
                                    name or "frames.iterate"))

    # -- outputs -----------------------------------------------------------------------------------
    def collect(self):
        """``.results``: ``{epoch: [tables reaching this process]}``
        (``pa.concat_tables`` makes one table of an epoch)."""
        return self.stream.collect()

    def subscribe(self, fn: Callable[[int, List[pa.Table]], Any]):
        """``fn(epoch, tables)`` once per completed epoch, in epoch order, in each process."""
        return self.stream.subscribe(fn)

    def __repr__(self) -> str:
        return f"FrameStream({self.stream!r})"


class _Untag(_Checked):
    """The tables of an exchange, their routes dropped; tables from the other workers and
    processes are checked against the first schema seen (a process feeding its columns in
    another order would otherwise mix two layouts in one stream)."""

    def __init__(self) -> None:
        super().__init__("exchange")

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [self._check(edge, m[1]) for m in messages], time)


def _callable(op: str, fn: Any) -> None:
    if not callable(fn):
        msg = f"{op} needs a function of a pyarrow.Table; got {type(fn).__name__}"
        raise TypeError(msg)


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _numeric(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _unaggregatable(op: str, table: pa.Table, keys: List[str], aggs: dict,
                    exc: Exception) -> FrameError:
    """The FrameError for an aggregation Arrow has no kernel for, naming it and its column."""
    sample = table.slice(0, 1)
    for name, (column, how) in aggs.items():
        try:
            aggregate(sample, keys, [(column, k) for k in (["sum", "count"] if how == "mean"
                                                             else [how])], False)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            ctype = table.schema.field(column).type
            msg = (f"{op}: the aggregation {name}=({column!r}, {how!r}) cannot run on the "
                   f"column {column!r} of type {ctype} ({str(exc).splitlines()[0]}); cast it "
                   "first (map_batches with table.cast(schema)), or choose an aggregation "
                   "its type supports")
            return FrameError(msg)
    return FrameError(f"{op}: {exc}")


def _threads(alone: bool, table: pa.Table, specs: Sequence[Tuple[str, str]]) -> bool:
    """Whether a ``group_by`` may use Arrow's threads: only in a process of one worker (with
    more, the workers' threads share the CPUs already) and only when every aggregation is exact
    in any order (count, min, max, and sums of integers: a float sum's last bits would depend
    on how the rows were divided among the threads).

    >>> t = pa.table({"k": [1], "i": [2], "f": [2.5]})
    >>> _threads(True, t, [("i", "sum"), ("f", "max")]), _threads(True, t, [("f", "sum")])
    (True, False)
    >>> _threads(False, t, [("i", "count")])
    False
    """
    if not alone:
        return False
    return all(kind in ("count", "min", "max")
               or (kind == "sum" and (pa.types.is_integer(table.schema.field(column).type)
                                      or pa.types.is_boolean(table.schema.field(column).type)))
               for column, kind in specs)
