"""Partitioning contracts and a deterministic key hash that agrees across processes and runs.

Python's ``hash()`` of ``str`` and ``bytes`` is salted per process, so it cannot route records:
equal keys must reach the same vertex in every process.  :func:`key_hash` is stable everywhere.

>>> key_hash("naiad") == key_hash("naiad") and key_hash(7) != key_hash(8)
True
>>> parts = partition(list(range(10)), lambda r: r, 3)
>>> sorted(r for part in parts for r in part) == list(range(10))
True
>>> all(key_hash(r) % 3 == d for d, part in enumerate(parts) for r in part)
True
"""

from __future__ import annotations

import datetime
import decimal
import numbers
import operator
import pickle
import struct
from itertools import compress, repeat
from operator import mod as _mod, not_ as _not
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence
from zlib import crc32

from naiad.optional import numpy as _numpy

__all__ = ["key_hash", "partition", "destinations", "Exchange", "Explained", "Pipeline", "release_caches",
           "route_keys", "batch_cut", "BATCH_BYTES"]

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

    Ints, strings, bytes, floats, bools, None and tuples/frozensets of these are hashed
    directly, numbers of other types (numpy scalars, Decimal, Fraction, complex) as the int or
    float they equal, or as their exact ratio when they equal none, aware datetimes as the
    instant they name, and subclasses of bytes as bytes.  Other objects (dataclasses, named classes, enums, lists) are hashed from
    what they are made of (:func:`_structure_hash`): equal keys must be made of equal parts,
    which holds unless a class's ``__eq__`` ignores part of its state.  Sets and dicts as keys
    are refused (TypeError).

    >>> import dataclasses
    >>> @dataclasses.dataclass(frozen=True)
    ... class Tagged:
    ...     name: str
    ...     tags: frozenset
    >>> key_hash(Tagged("a", frozenset("xyz"))) == key_hash(Tagged("a", frozenset("zyx")))
    True
    >>> key_hash(1 + 0j) == key_hash(1)
    True
    >>> from decimal import Decimal
    >>> from fractions import Fraction
    >>> key_hash(Decimal("0.10")) == key_hash(Decimal("0.1")) == key_hash(Fraction(1, 10))
    True
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
    if isinstance(key, bytes):                          # numpy.bytes_ and other subclasses
        return key_hash(bytes(key))
    if t is _Ratio:
        return _mix(key_hash(tuple(key)) ^ 0x5A7105)
    if isinstance(key, datetime.datetime) and key.utcoffset() is not None:
        # Aware datetimes are equal when they name the same instant, whatever their zones.
        u = key.astimezone(datetime.timezone.utc)
        return _mix(key_hash((u.year, u.month, u.day, u.hour, u.minute, u.second,
                              u.microsecond)) ^ 0xA3A5E)
    if isinstance(key, frozenset):
        h = 0
        for item in key:
            h ^= key_hash(item)
        return _mix(h)
    number = _as_builtin_number(key)
    if number is not None:
        return key_hash(number)
    if isinstance(key, (set, dict)):
        msg = (f"partition key {key!r:.80} is a {t.__name__}, whose order (and so its hash) is "
               "not the same in every process; return a tuple, frozenset, str, bytes or "
               "number from partition_by (or, where the records themselves are the keys, as "
               "in distinct, union or a count of records, make the records such values)")
        raise TypeError(msg)
    return _structure_hash(key, 0)


def _structure_hash(value: Any, depth: int) -> int:
    """The hash of any other value from what it is made of, as pickling would take it apart
    (``__reduce_ex__``): its class's module and qualified name, the arguments that rebuild
    it and its state, with the items of dicts and sets combined in no order.  Nothing is
    pickled, so a class defined in the program's ``__main__`` hashes alike in every process,
    and a frozenset or dict inside a dataclass hashes alike whatever its iteration order."""
    if depth > _DEPTH:
        msg = f"partition key nested more than {_DEPTH} levels deep ({type(value).__name__})"
        raise TypeError(msg)
    t = type(value)
    if t in _LEAVES or value is None or _as_builtin_number(value) is not None:
        return key_hash(value)
    depth += 1
    if isinstance(value, (tuple, list)):
        return _sequence_hash(value, depth, 0x7475706C)
    if isinstance(value, (dict, set, frozenset)):
        items = value.items() if isinstance(value, dict) else value
        h = 0x5E7
        for item in items:
            h ^= _structure_hash(item, depth)
        return _mix(h ^ len(value))
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        name = f"{getattr(value, '__module__', '')}.{value.__qualname__}"
        return _mix(crc32(name.encode("utf-8", "surrogatepass")) ^ 0x7E)
    try:
        parts = value.__reduce_ex__(4)
    except Exception as exc:  # noqa: BLE001 - re-raised with advice
        msg = (f"cannot hash partition key {value!r:.80} of type {t.__name__}: {exc}; return "
               "an int, str, bytes, float or tuple of these from partition_by (or, where the "
               "records themselves are the keys, as in distinct, union or a count of records, "
               "make the records such values)")
        raise TypeError(msg) from exc
    if isinstance(parts, str):                      # a module-level singleton, by its name
        return _structure_hash(f"{getattr(value, '__module__', '')}.{parts}", depth)
    parts = tuple(p if p is None or not hasattr(p, "__next__") else
                  (dict(p) if i == 4 else list(p)) for i, p in enumerate(parts))
    return _sequence_hash(parts, depth, crc32(t.__qualname__.encode()))


def _sequence_hash(items: Any, depth: int, seed: int) -> int:
    h = seed
    for item in items:
        h = _mix((h * 1000003) ^ _structure_hash(item, depth))
    return h


_DEPTH = 64
_LEAVES = frozenset({int, str, bytes, float, bool})


def _as_builtin_number(key: Any) -> Any:
    """The int or float equal to a numeric key of another type (numpy scalars, Decimal,
    Fraction, float subclasses, numpy bools, complex numbers without an imaginary part), so
    that keys equal in Python hash equal everywhere; None when ``key`` is not such a number."""
    t = type(key)
    if t.__module__ == "numpy" and t.__name__ in ("bool", "bool_"):
        return int(bool(key))
    if isinstance(key, numbers.Complex) and not isinstance(key, numbers.Real):
        try:
            return _as_builtin_number(key.real) if key.imag == 0 else None
        except (TypeError, ValueError):
            return None
    if hasattr(key, "__index__"):                       # numpy and other integer types
        try:
            return operator.index(key)
        except TypeError:
            return None
    if isinstance(key, numbers.Real) or isinstance(key, decimal.Decimal):
        try:
            as_float = float(key)
        except (TypeError, ValueError, OverflowError):
            return None
        if as_float.is_integer() and key == int(as_float):
            return int(as_float)
        if key == as_float or as_float != as_float:
            return as_float
        if isinstance(key, decimal.Decimal) and key == key.to_integral_value():
            return int(key)
        if isinstance(key, (decimal.Decimal, numbers.Rational)):
            # Equal to no float (Decimal('0.1'), Decimal('0.10'), Fraction(1, 10)): the exact
            # ratio, the same for every form of the number.
            try:
                n, d = key.as_integer_ratio()           # type: ignore[union-attr]
            except (AttributeError, ValueError, OverflowError):
                return None
            return _Ratio((n, d))
    return None


class _Ratio(tuple):
    """A number equal to no float, as its exact ratio ``(numerator, denominator)``."""

    __slots__ = ()


def route_keys(workers: int) -> List[int]:
    """For each worker ``w``, an int key that an exchange sends to ``w``
    (``key_hash(key) % workers == w``): how a vertex addresses a message to one worker.

    >>> keys = route_keys(4)
    >>> [key_hash(k) % 4 for k in keys]
    [0, 1, 2, 3]
    """
    keys: List[Optional[int]] = [None] * workers
    k, missing = 0, workers
    while missing:
        w = key_hash(k) % workers
        if keys[w] is None:
            keys[w] = k
            missing -= 1
        k += 1
    return keys  # type: ignore[return-value]


def release_caches() -> None:
    """Forget the destination caches (called when a computation ends)."""
    _caches.clear()
    _repeats.clear()


# Destination caches, one per number of parts: real keys repeat (words, node ids), so the hash
# is computed once per distinct key.  Bounded; cleared when full and when a computation ends.
# Keys equal in Python (1, 1.0, True, numpy.int64(1), Decimal(1)) share an entry, which is right
# because key_hash gives equal keys the same value, whatever their type.
_CACHE_LIMIT = 1 << 20
_caches: Dict[int, Dict[Any, int]] = {}


BATCH_BYTES = 1 << 20
"""A batch for another worker is cut into parts of about this many bytes (:func:`batch_cut`),
so that the bounded queues between workers (:mod:`naiad.transport.backpressure`) bound bytes,
not only messages."""


def batch_cut(records: Sequence[Any]) -> int:
    """Records per part when ``records`` go to another worker (``len(records)``: no cut): about
    :data:`BATCH_BYTES` a part, the record size being the median of three pickled samples
    (the first, middle and last record; one outlier does not shrink the parts).

    >>> batch_cut([b"x" * 10] * 5000), batch_cut([b"x" * 100_000] * 40)
    (5000, 10)
    """
    n = len(records)
    if n <= 1:
        return n
    try:
        sizes = sorted(len(pickle.dumps(records[i], protocol=5)) for i in (0, n // 2, n - 1))
    except Exception:
        return n
    cut = max(1, BATCH_BYTES // max(sizes[1], 1))
    return n if cut >= n else cut


def partition(records: Sequence[Any], key: Callable[[Any], Hashable], parts: int) -> List[list]:
    """Split ``records`` into ``parts`` lists by ``key_hash(key(record)) % parts``.

    The split runs at C speed: the keys are mapped (``map(key, records)``), their destinations
    found by :func:`destinations`, and each part is taken with ``itertools.compress``; when
    every record goes to one part (the data of a key already on its worker), no part is split.
    """
    if not records:
        return [[] for _ in range(parts)]
    try:
        keys = list(map(key, records))
        dests = destinations(keys, parts)
    except TypeError:
        return _partition_slowly(records, key, parts)
    if parts == 2:
        ones = sum(dests)
        if ones == 0:
            return [list(records), []]
        if ones == len(dests):
            return [[], list(records)]
        return [list(compress(records, map(_not, dests))), list(compress(records, dests))]
    return [list(compress(records, map(d.__eq__, dests))) for d in range(parts)]


def destinations(keys: Sequence[Hashable], parts: int) -> List[int]:
    """``key_hash(k) % parts`` for every key, at C speed where the keys allow.

    A list of keys equal to the last one of its length (a loop's keys, every iteration) gets
    the destinations computed for that one.
    Strings: the CRC-32 of each by ``map`` (faster than looking them up in a cache of
    destinations, whose misses cost more than the hash).  Ints of 64 bits: the same finaliser
    as :func:`key_hash`, in numpy.  Other keys: a cache of destinations by key, looked up by
    ``map(cache.get, keys)``; keys not cached yet are hashed in Python once.  Raises TypeError
    for an unhashable key.

    >>> destinations(["naiad", 7, (1, "a")], 3) == [key_hash(k) % 3 for k in ["naiad", 7, (1, "a")]]
    True
    """
    n = len(keys)
    if n >= _REPEATS_FROM:
        seen = _repeats.get((parts, n))
        if seen is not None and seen[0] == keys:
            return list(seen[1])
        dests = _destinations(keys, parts)
        if len(_repeats) >= _REPEATS_KEPT:
            _repeats.clear()
        _repeats[parts, n] = (list(keys), tuple(dests))
        return dests
    return _destinations(keys, parts)


# The keys of a loop's iterated records come back every iteration in the same order (the
# output of a keyed merge): their last destinations are kept by (parts, len(keys)) and reused
# when the keys are equal (a list comparison, by identity first: well under the hash's cost).
_REPEATS_FROM = 1024
_REPEATS_KEPT = 16
_repeats: Dict[tuple, tuple] = {}


def _destinations(keys: Sequence[Hashable], parts: int) -> List[int]:
    kinds = set(map(type, keys))
    if kinds == _STR:
        try:
            return list(map(_mod, map(crc32, map(str.encode, keys)), repeat(parts)))
        except UnicodeEncodeError:          # lone surrogates: key_hash's own encoding
            pass
    elif kinds == _INT and len(keys) >= 64 and _numpy() is not None:
        np = _numpy()
        try:
            x = np.fromiter(keys, np.int64, len(keys)).view(np.uint64)
        except OverflowError:
            pass
        else:
            return (_mix_array(x) % np.uint64(parts)).tolist()
    cache = _caches.get(parts)
    if cache is None or len(cache) > _CACHE_LIMIT:
        cache = _caches[parts] = {}
    dests: list = list(map(cache.get, keys))
    if None in dests:
        _fill(keys, dests, cache, parts)
    return dests


_STR = {str}
_INT = {int}


def _mix_array(x: Any) -> Any:
    """:func:`_mix` of every element of a uint64 array (products wrap modulo 2**64)."""
    np = _numpy()
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _fill(keys: Sequence, dests: list, cache: dict, parts: int) -> None:
    """Destinations of the keys missing from the cache, hashed one at a time."""
    get = cache.get
    for i, d in enumerate(dests):
        if d is None:
            k = keys[i]
            d = get(k)              # a key repeated within this batch is hashed once
            if d is None:
                if type(k) is str:
                    d = crc32(k.encode("utf-8", "surrogatepass")) % parts
                else:
                    d = key_hash(k) % parts
                cache[k] = d
            dests[i] = d


def _partition_slowly(records: Sequence[Any], key: Callable, parts: int) -> List[list]:
    """An unhashable key (a list, a dict): hash every record through its pickled form."""
    out: List[list] = [[] for _ in range(parts)]
    appends = [o.append for o in out]
    for r in records:
        appends[key_hash(key(r)) % parts](r)
    return out


class Pipeline:
    """The trivial contract: records stay on the worker that produced them."""

    key: Optional[Callable] = None

    def __repr__(self) -> str:
        return "Pipeline()"


class Explained:
    """A partition key (a fast one, ``itemgetter(0)`` say) and ``explain(records)``, which
    raises the clear error for a batch the key failed on (a record that is not a pair)."""

    __slots__ = ("key", "explain")

    def __init__(self, key: Callable[[Any], Hashable], explain: Callable[[list], None]):
        self.key, self.explain = key, explain

    def __call__(self, record: Any) -> Hashable:
        """The key itself (an :class:`Exchange` calls ``key`` directly)."""
        return self.key(record)


class Exchange:
    """Records go to vertex ``key_hash(key(record)) % workers``: equal keys meet in one vertex."""

    def __init__(self, key: Callable[[Any], Hashable]):
        self.explain: Optional[Callable[[list], None]] = None
        if isinstance(key, Explained):
            key, self.explain = key.key, key.explain
        if not callable(key):
            msg = f"partition_by must be a callable record -> key; got {type(key).__name__}"
            raise TypeError(msg)
        self.key = key

    def __repr__(self) -> str:
        return f"Exchange({getattr(self.key, '__name__', self.key)!r})"
