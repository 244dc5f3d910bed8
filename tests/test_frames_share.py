"""``frames.owners``, ``owned`` and ``share``: the rows a process keeps are the rows that an
exchange by the same keys delivers to its own workers, on seeded random tables, over every
cluster configuration."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

import naiad  # noqa: E402
import stages  # noqa: E402
from linq import frames  # noqa: E402
from linq.frames import FrameError  # noqa: E402
from linq.frames.vertices import split_table  # noqa: E402
from naiad.partition import key_hash, route_keys  # noqa: E402

KEYS = [["k"], ["s"], ["f"], ["k", "s"]]


def random_table(seed: int, rows: int) -> pa.Table:
    rng = random.Random(seed)
    return pa.table({"row": list(range(rows)),
                     "k": pa.array([rng.randrange(-30, 200) for _ in range(rows)], pa.int32()),
                     "s": [f"n{rng.randrange(50)}" for _ in range(rows)],
                     "f": [float(rng.randrange(40)) / rng.choice((1, 2)) for _ in range(rows)]})


class _Where(naiad.Vertex):
    """Emits ``(row, worker)`` for every row it receives."""

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [(r, self.index) for t in messages
                               for r in t["row"].to_pylist()], time)


@pytest.mark.parametrize("seed", [1, 2])
def test_share_feeds_each_row_to_its_owner_and_the_exchange_keeps_it_local(cluster, seed):
    table = random_table(seed, 300)

    def program(comp):
        inputs = [comp.new_input() for _ in KEYS]
        outs = [stages.unary(frames.of(i.stream).exchange(keys).stream, _Where, name="where")
                .collect() for i, keys in zip(inputs, KEYS)]
        comp.activate()
        fed = []
        for inp, keys in zip(inputs, KEYS):
            mine = frames.share(table, keys, comp)
            fed.append(mine["row"].to_pylist())
            inp.on_next([mine])
            inp.on_completed()
        comp.join(timeout=60)
        first = comp.process_index * comp.workers_per_process
        local = range(first, first + comp.workers_per_process)
        return comp.process_index, local, fed, [o.results.get(0, []) for o in outs]

    parts = cluster.execute(program)
    workers = cluster.processes * cluster.workers
    for n, keys in enumerate(KEYS):
        want = frames.owners(table, keys, workers).tolist()
        fed = sorted(r for part in parts for r in part[2][n])
        assert fed == list(range(table.num_rows)), keys        # each row fed exactly once
        for _, local, fed_lists, got_lists in parts:
            fed_here, got = fed_lists[n], got_lists[n]
            assert all(want[r] in local for r in fed_here), keys
            # What this process fed reached its own workers, each row the one owners names.
            assert sorted(got) == sorted((r, want[r]) for r in fed_here), keys


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 7])
def test_owners_is_the_worker_an_exchange_sends_each_row_to(workers):
    table = random_table(workers, 500)
    routes = route_keys(workers)
    for keys in KEYS:
        want = frames.owners(table, keys, workers)
        for route, part in split_table(table, keys, routes):
            worker = key_hash(route) % workers
            assert (want[part["row"].to_numpy()] == worker).all(), keys


def test_owned_errors_and_single_process():
    table = random_table(3, 20)

    class One:
        processes, process_index, workers_per_process = 1, 0, 3
    assert frames.owned(table, "k", One()).all() and frames.share(table, "k", One()) is table
    with pytest.raises(FrameError, match=r"frames.owners: no column 'x'.*\['row', 'k', 's', 'f'\]"):
        frames.owners(table, "x", 2)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        frames.owners(table, "k", 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_split_recalls_the_workers_share_found(seed):
    """A table ``share`` kept is routed by the workers remembered for its key array (the same
    destinations as hashing), and an equal array elsewhere in memory is hashed afresh."""
    from linq.frames import routes
    from linq.frames.vertices import Split
    table = random_table(seed, 400)
    layout = route_keys(4)

    class Second:                         # process 1 of 2, 2 workers each
        processes, process_index, workers_per_process = 2, 1, 2
    kept = frames.share(table, "k", Second())
    remembered = routes.recall(kept.column("k").chunk(0), 4)
    copy = pa.table({"k": pa.array(kept["k"].to_pylist(), pa.int32()), "row": kept["row"]})
    assert routes.recall(copy.column("k").chunk(0), 4) is None
    assert remembered is not None
    assert remembered.tolist() == frames.owners(copy, "k", 4).tolist()     # hashed afresh
    for t in (kept, copy):
        split = Split("exchange(k)", ["k"], layout)
        sent: list = []
        split.send_batch_by = lambda port, parts, time: sent.extend(parts)
        split.on_recv_batch(0, [t], None)
        got = {route: part["row"].to_pylist() for route, part in sent}
        want = {route: part["row"].to_pylist() for route, part in split_table(t, ["k"], layout)}
        assert got == want and set(got) <= {layout[2], layout[3]}


def test_remembered_routes_are_bounded_and_keep_their_arrays_alive():
    from linq.frames import routes
    routes.forget()
    arrays = [pa.array(np.arange(10) + i) for i in range(routes.ENTRIES + 2)]
    for a in arrays:
        routes.remember(a, 2, np.zeros(10, np.uint16))
    assert routes.recall(arrays[0], 2) is None and routes.recall(arrays[1], 2) is None
    assert all(routes.recall(a, 2) is not None for a in arrays[2:])
    with pytest.raises(ValueError, match="3 workers for an array of 10 values"):
        routes.remember(arrays[0], 2, np.zeros(3, np.uint16))
    routes.forget()
    assert routes.recall(arrays[-1], 2) is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_share_keeps_exactly_the_owned_rows_of_every_column_type(seed):
    """Tables of plain numbers are selected by numpy, others by Arrow's filter: either way the
    kept table is ``table.filter(owned)``, schema (metadata included) and values alike."""
    from linq.frames import routes
    rng = np.random.default_rng(seed)
    n = 2_000
    ints = {t: pa.array(rng.integers(0, 100, n), t) for t in
            (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
             pa.uint32(), pa.uint64())}
    plain = pa.table({"k": pa.array(rng.integers(-10**12, 10**12, n)),
                      **{str(t): a for t, a in ints.items()},
                      "f32": pa.array(rng.random(n), pa.float32()), "f64": rng.random(n)}
                     ).replace_schema_metadata({"source": "test"})
    with_nulls = plain.set_column(1, "int8", pa.array(
        [None if i % 7 == 0 else int(v) for i, v in enumerate(ints[pa.int8()].to_pylist())],
        pa.int8()))
    strings = plain.append_column("s", pa.array([f"v{v}" for v in rng.integers(0, 50, n)]))
    chunked = pa.concat_tables([plain.slice(0, 700), plain.slice(700)])
    for processes, index, per in ((2, 0, 1), (2, 1, 1), (3, 2, 2)):
        layout = SimpleNamespace(processes=processes, process_index=index,
                                 workers_per_process=per)
        for table in (plain, with_nulls, strings, chunked):
            mask = frames.owned(table, "k", layout)
            routes.forget()          # no remembered array is let go of during the share
            before = pa.total_allocated_bytes()
            got = frames.share(table, "k", layout)
            if table is plain:       # numpy selected the rows: nothing from Arrow's memory pool
                assert pa.total_allocated_bytes() == before
            kept = got
            assert kept.schema == table.schema and kept.schema.metadata == table.schema.metadata
            assert kept.equals(table.filter(pa.array(mask))), (processes, index)
