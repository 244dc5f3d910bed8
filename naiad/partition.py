"""Partitioning contracts and a deterministic key hash that agrees across processes and runs.

Python's ``hash()`` of ``str`` and ``bytes`` is salted per process, so it cannot route records:
equal keys must reach the same vertex in every process.  :func:`key_hash` is stable everywhere.

>>> key_hash("naiad") == key_hash("naiad") and key_hash(7) != key_hash(8)
True
>>> parts = partition(list(range(10)), lambda r: r, 3)
>>> sorted(r for part in parts for r in part) == list(range(10))
True
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence
from zlib import crc32

__all__ = ["key_hash", "partition", "Exchange", "Pipeline"]

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_pack_double = struct.Struct("<d").pack


def _mix(x: int) -> int:
    """A 64-bit finaliser (splitmix64) so strided integer keys spread over vertices."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def key_hash(key: Hashable) -> int:
    """A non-negative 64-bit hash of ``key`` that is equal in every process and run.

    Supports ints, strings, bytes, floats, bools, None and tuples/frozensets of these; other
    objects are hashed through their pickled form, which must itself be deterministic.
    """
    t = type(key)
    if t is int:
        return _mix(key & _MASK64)
    if t is str:
        return crc32(key.encode("utf-8", "surrogatepass"))
    if t is tuple:
        h = 0x345678
        for item in key:
            h = _mix((h * 1000003) ^ key_hash(item))
        return h
    if t is bytes:
        return _mix(crc32(key) ^ (len(key) << 32))
    if t is float:
        if key.is_integer():
            return key_hash(int(key))
        return _mix(crc32(_pack_double(key)))
    if key is None:
        return 0x2545F4914F6CDD1D
    if t is bool:
        return key_hash(int(key))
    if isinstance(key, int):
        return key_hash(int(key))
    if isinstance(key, str):
        return key_hash(str(key))
    if isinstance(key, tuple):
        return key_hash(tuple(key))
    if isinstance(key, frozenset):
        h = 0
        for item in key:
            h ^= key_hash(item)
        return _mix(h)
    try:
        data = pickle.dumps(key, protocol=4)
    except Exception as exc:  # noqa: BLE001 - re-raised with advice
        msg = (f"cannot hash partition key {key!r} of type {t.__name__}: {exc}; "
               "return an int, str, bytes, float or tuple of these from partition_by")
        raise TypeError(msg) from exc
    return _mix(crc32(data) ^ (len(data) << 32))


# Destination caches, one per number of parts: real keys repeat (words, node ids), so the hash
# is computed once per distinct key.  Bounded; cleared when full.  Equal keys (1, 1.0, True)
# share an entry, which is right since key_hash gives them the same value.
_CACHE_LIMIT = 1 << 20
_caches: Dict[int, Dict[Any, int]] = {}


def partition(records: Sequence[Any], key: Callable[[Any], Hashable], parts: int) -> List[list]:
    """Split ``records`` into ``parts`` lists by ``key_hash(key(record)) % parts``."""
    out: List[list] = [[] for _ in range(parts)]
    if not records:
        return out
    appends = [o.append for o in out]
    cache = _caches.get(parts)
    if cache is None or len(cache) > _CACHE_LIMIT:
        cache = _caches[parts] = {}
    get = cache.get
    try:
        for r in records:
            k = key(r)
            d = get(k)
            if d is None:
                if type(k) is str:
                    d = cache[k] = crc32(k.encode("utf-8", "surrogatepass")) % parts
                else:
                    d = cache[k] = key_hash(k) % parts
            appends[d](r)
    except TypeError:
        # An unhashable key (a list, a dict): hash every record the slow way.
        out = [[] for _ in range(parts)]
        appends = [o.append for o in out]
        for r in records:
            appends[key_hash(key(r)) % parts](r)
    return out


class Pipeline:
    """The trivial contract: records stay on the worker that produced them."""

    key: Optional[Callable] = None

    def __repr__(self) -> str:
        return "Pipeline()"


class Exchange:
    """Records go to vertex ``key_hash(key(record)) % workers``: equal keys meet in one vertex."""

    def __init__(self, key: Callable[[Any], Hashable]):
        if not callable(key):
            msg = f"partition_by must be a callable record -> key; got {type(key).__name__}"
            raise TypeError(msg)
        self.key = key

    def __repr__(self) -> str:
        return f"Exchange({getattr(self.key, '__name__', self.key)!r})"
