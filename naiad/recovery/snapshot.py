"""A vertex state in a checkpoint: a plain, versioned container of the pickled state.

A worker's checkpoint file maps each stage id to a container holding only built-in types, so a
checkpoint never names a function of naiad's own modules:

* ``{"format": 1, "state": <bytes>}``, where the bytes are ``vertex.checkpoint()`` pickled with
  protocol 5 (cloudpickle when plain pickle cannot, for instance for a lambda in the state;
  Arrow tables in their IPC form, :mod:`naiad.arrowcodec`, so that a slice holds its own rows
  only, not its parent's);
* ``{"format": 2, "state": <bytes>, "tables": [<record>, ...]}`` when the state holds
  :class:`~naiad.state.KeyedState` tables: the state's pickle refers to each table by its
  position, and each record holds the table in full or as a delta on the checkpoint before
  (``id``, ``epoch``, ``base``: the checkpoint of the last full copy, ``prev``: None for a full
  copy, else the checkpoint the delta applies to, and ``data``: the pickled items, or the
  pickled ``(keys written, their values, keys deleted)``; the earlier layout
  ``(items written, keys deleted)`` is read too).  :func:`resolve_chains` attaches to each delta
  the data of the records it builds on, read from the older checkpoints, before
  :func:`decode`.

The state is pickled when the snapshot is taken, so later mutation by the vertex cannot leak
into the file.  Files written before the container existed pickled each state as a call of
``naiad.worker._unpickled(bytes)``; :func:`load_states` reads them (as format 1) without that
function having to exist.

>>> decode(encode({"a": [1, 2]}, 10), "count")
{'a': [1, 2]}
>>> from naiad.state import KeyedState
>>> t = KeyedState(a=1)
>>> full = encode({"t": t}, 10)                  # the first time: in full
>>> t["b"] = 2
>>> delta = encode({"t": t}, 20)                 # then only what changed
>>> [r["prev"] for r in full["tables"] + delta["tables"]]
[None, 10]
>>> resolve_chains({0: {5: delta}}, lambda epoch: {0: {5: full}})
>>> decode(delta, "count")
{'t': KeyedState({'a': 1, 'b': 2})}
"""

from __future__ import annotations

import io
import pickle
from collections import ChainMap
from itertools import filterfalse
from operator import itemgetter
from typing import Any, Callable, Dict, List

from naiad.errors import NaiadError
from naiad.optional import pickle_dispatch
from naiad.state import MAX_DELTAS, Chain, KeyedState, capture, new_id

__all__ = ["FORMAT", "TABLES", "encode", "decode", "dumps", "load_states", "resolve_chains",
           "base_of", "ChainBroken"]

FORMAT = 1
"""Version of the vertex-state container without tables (documented in docs/recovery.md)."""
TABLES = 2
"""Version of the container whose state holds KeyedState tables."""


class ChainBroken(NaiadError):
    """A delta of a table names an older checkpoint that does not hold what it builds on."""


def dumps(obj: Any) -> bytes:
    """``obj`` pickled (protocol 5), or by cloudpickle when plain pickle cannot (classes of
    ``__main__``, lambdas); Arrow tables in their IPC form."""
    try:
        return _pickled(obj)
    except Exception:
        return _pickled(obj, by_value=True)


def _pickled(obj: Any, by_value: bool = False) -> bytes:
    out = io.BytesIO()
    if by_value:
        import cloudpickle      # classes of __main__, lambdas: by value
        pickler = cloudpickle.CloudPickler(out, protocol=5)
        pickler.dispatch_table = ChainMap(cloudpickle.CloudPickler.dispatch_table,
                                          pickle_dispatch())
    else:
        pickler = pickle.Pickler(out, protocol=5)
        pickler.dispatch_table = pickle_dispatch()
    pickler.dump(obj)
    return out.getvalue()


def encode(state: Any, epoch: int) -> Dict[str, Any]:
    """``state`` pickled now, in the versioned container; its KeyedState tables as records of
    the checkpoint at ``epoch`` (deltas when they are chained)."""
    with capture() as tables:
        try:
            data = _pickled(state)
        except Exception:
            tables.clear()
            try:
                data = _pickled(state, by_value=True)
            except Exception as exc:
                msg = (f"its state cannot be pickled ({type(exc).__name__}: {exc}); give the "
                       "vertex checkpoint() and restore() methods that keep only picklable "
                       "state")
                raise TypeError(msg) from exc
    if not tables:
        return {"format": FORMAT, "state": data}
    return {"format": TABLES, "state": data, "tables": [_record(t, epoch) for t in tables]}


def _record(table: KeyedState, epoch: int) -> Dict[str, Any]:
    """The table's record in the checkpoint at ``epoch``; the table starts a new delta."""
    chain = table._chain
    changed = table._changed
    if chain is None or chain.epoch >= epoch or chain.deltas >= MAX_DELTAS or \
            chain.changes + len(changed) > len(table):
        tid = chain.id if chain is not None else new_id()
        rec = {"id": tid, "epoch": epoch, "base": epoch, "prev": None,
               "data": dumps(dict(table))}
        table._chain = Chain(tid, epoch, epoch, 0, 0)
    else:
        rec = {"id": chain.id, "epoch": epoch, "base": chain.base, "prev": chain.epoch,
               "data": dumps(_delta(table, changed))}
        table._chain = Chain(chain.id, epoch, chain.base, chain.deltas + 1,
                             chain.changes + len(changed))
    table._changed = set()
    return rec


def _delta(table: KeyedState, changed: set) -> tuple:
    """``(keys written, their values, keys deleted)``: C loops, no Python one; two sequences
    pickle in about half the time of a dict."""
    keys = list(changed)
    try:
        values = itemgetter(*keys)(table) if len(keys) > 1 else [table[k] for k in keys]
        return keys, values, []
    except KeyError:                    # some were deleted
        present = list(filter(table.__contains__, keys))
        gone = list(filterfalse(table.__contains__, keys))
        return present, list(map(table.__getitem__, present)), gone


def base_of(container: Any, epoch: int) -> int:
    """The oldest checkpoint that restoring ``container`` (of the checkpoint at ``epoch``)
    reads: the last full copy of its oldest table chain."""
    if isinstance(container, dict) and container.get("format") == TABLES:
        return min([epoch] + [rec["base"] for rec in container["tables"]])
    return epoch


def resolve_chains(states: Dict[int, Dict[Any, Any]],
                   older: Callable[[int], Dict[int, Dict[Any, Any]]]) -> None:
    """Attach to every delta record of ``states`` (worker -> stage id -> container) the data
    of the records it builds on, oldest (the full copy) first, as ``chain``; ``older(epoch)``
    is this process's states at an older checkpoint.  :class:`ChainBroken` if one is not
    there."""
    for worker, stages_ in states.items():
        for sid, container in stages_.items():
            if not isinstance(container, dict) or container.get("format") != TABLES:
                continue
            for rec in container["tables"]:
                chain: List[bytes] = []
                r = rec
                while r["prev"] is not None:
                    prev = older(r["prev"]).get(worker, {}).get(sid)
                    found = [x for x in (prev or {}).get("tables", ()) if x["id"] == r["id"]] \
                        if isinstance(prev, dict) else []
                    if not found:
                        msg = (f"the delta of table {r['id']} (stage {sid}, worker {worker}) at "
                               f"epoch {r['epoch']} builds on the checkpoint at epoch "
                               f"{r['prev']}, which does not hold that table")
                        raise ChainBroken(msg)
                    r = found[0]
                    chain.append(r["data"])
                rec["chain"] = chain[::-1]


class _TablesUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, tables: List[KeyedState]):
        super().__init__(io.BytesIO(data))
        self.tables = tables

    def find_class(self, module: str, name: str) -> Any:
        if module == "naiad.state" and name == "_stored":
            return self.tables.__getitem__
        return super().find_class(module, name)


def _table(rec: Dict[str, Any], stage: str) -> KeyedState:
    """The table a record (and the chain resolve_chains attached) stands for."""
    if rec["prev"] is None:
        full, deltas = rec["data"], []
    elif "chain" in rec and rec["chain"]:
        full, deltas = rec["chain"][0], rec["chain"][1:] + [rec["data"]]
    else:
        msg = (f"stage {stage!r}: the delta of table {rec['id']} at epoch {rec['epoch']} came "
               "without the checkpoints it builds on")
        raise NaiadError(msg)
    contents = pickle.loads(full)
    changes = 0
    for data in deltas:
        delta = pickle.loads(data)
        if len(delta) == 3:
            keys, values, gone = delta
            contents.update(zip(keys, values))
        else:                                   # the earlier layout: (items, gone)
            keys, gone = delta
            contents.update(keys)
        for k in gone:
            contents.pop(k, None)
        changes += len(keys) + len(gone)
    table = KeyedState(contents)
    table._chain = Chain(rec["id"], rec["epoch"], rec["base"], len(deltas), changes)
    return table


def decode(container: Any, stage: str) -> Any:
    """The state in ``container``; a clear error naming ``stage`` for an unknown format."""
    if isinstance(container, dict):
        version = container.get("format")
        if version == FORMAT:
            return pickle.loads(container["state"])
        if version == TABLES:
            tables = [_table(rec, stage) for rec in container["tables"]]
            return _TablesUnpickler(container["state"], tables).load()
        msg = (f"stage {stage!r}: the checkpoint holds its state in format version {version!r}; "
               f"this release reads vertex-state format versions {FORMAT} and {TABLES}")
        raise NaiadError(msg)
    msg = (f"stage {stage!r}: the checkpoint holds its state as {type(container).__name__}, not "
           f"a vertex-state container (format version {FORMAT} or {TABLES})")
    raise NaiadError(msg)


def _legacy(data: bytes) -> Dict[str, Any]:
    return {"format": FORMAT, "state": data}


class _StatesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "naiad.worker" and name == "_unpickled":
            return _legacy
        return super().find_class(module, name)


def load_states(data: bytes) -> Any:
    """A worker's checkpoint file (stage id -> container), older files included."""
    return _StatesUnpickler(io.BytesIO(data)).load()
