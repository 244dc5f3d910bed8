"""A row hash of Arrow key columns that is the same in every process and run, computed by column.

Exchanging a table sends each row to the worker ``hash(row keys) % workers``, so the hash must
not depend on the process (Python's ``hash`` of ``str`` is salted) nor on how a column happens
to be stored: equal values hash equal whatever their integer width, an integral float hashes
as the integer it equals (as :func:`naiad.key_hash` does for Python values), and a decimal as
the float nearest to it, whatever its scale.  Numbers are mixed
with splitmix64 in numpy; strings and binaries hash each *distinct* value once (CRC-32 of its
bytes, after a dictionary encoding) and the rows take their value's hash by index, so the cost
per row stays a few vectorised operations.  Nulls hash to a constant.

Exchanges route by :func:`route_hash`: for one integer, boolean or floating key column (node
ids, bucket numbers) that is a Fibonacci hash of the integer value (one multiply: the high bits
of ``value * 2**64 / golden ratio`` spread consecutive and strided keys evenly), and the row
hash otherwise; :func:`destinations` takes the high bits of either.  :func:`route_destinations`
does both, and for one integer key column without nulls it works through the rows in blocks
whose temporary stays in the CPU's cache (no hash array as large as the column: in a fresh
process that would be new memory to fault in), so a 1-million-row table of integer keys is
routed in a few milliseconds.

>>> import pyarrow as pa
>>> t = pa.table({"a": pa.array([1, 2, 1], pa.int8()), "b": ["x", "y", "x"]})
>>> h = row_hash(t, ["a", "b"])
>>> bool(h[0] == h[2]) and bool(h[0] != h[1])
True
>>> wide = pa.table({"a": pa.array([1, 2, 1], pa.int64()), "b": ["x", "y", "x"]})
>>> bool((row_hash(wide, ["a", "b"]) == h).all())
True
"""

from __future__ import annotations

from typing import Any, List, Sequence
from zlib import crc32

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["row_hash", "column_hash", "route_hash", "destinations", "route_destinations",
           "check_key_types", "key_names"]

_NULL = np.uint64(0x6A09E667F3BCC908)
_SEED = np.uint64(0x345678)
_MUL = np.uint64(1000003)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _int_hash(values: np.ndarray) -> np.ndarray:
    return _mix(values.astype(np.int64, copy=False).view(np.uint64))


def _bytes_hash(column: pa.ChunkedArray) -> np.ndarray:
    encoded = pc.dictionary_encode(column).combine_chunks()
    uniques = encoded.dictionary.to_pylist()
    per_value = np.fromiter(
        (crc32(v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v) ^ (len(v) << 32)
         for v in uniques), np.uint64, len(uniques))
    per_value = _mix(per_value)
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    return per_value[indices] if len(per_value) else np.zeros(len(indices), np.uint64)


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """A float or decimal column (without nulls) as float64: a decimal hashes as the float it
    is nearest to, so equal decimals of any scale hash equal, and as a float of equal value
    (values a float cannot tell apart just share a hash)."""
    if pa.types.is_decimal(column.type):
        column = column.cast(pa.float64(), safe=False)
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def column_hash(column: pa.ChunkedArray) -> np.ndarray:
    """A uint64 hash per value of ``column``; equal values hash equal across types of a kind."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.cast(t.value_type)
        t = column.type
    if pa.types.is_boolean(t):
        out = _int_hash(column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64))
    elif pa.types.is_integer(t):
        out = _int_hash(column.fill_null(0).to_numpy(zero_copy_only=False))
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        values = _floats(column.fill_null(0))
        integral = np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) < 2.0 ** 63)
        as_int = _int_hash(np.where(integral, values, 0).astype(np.int64))
        as_bits = _mix(values.view(np.uint64) ^ np.uint64(0x9E3779B97F4A7C15))
        out = np.where(integral, as_int, as_bits)
    elif pa.types.is_temporal(t) and not pa.types.is_interval(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        out = _int_hash(column.cast(width).fill_null(0).to_numpy(zero_copy_only=False))
    elif (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
          or pa.types.is_large_binary(t)):
        out = _bytes_hash(column)
    elif pa.types.is_fixed_size_binary(t):
        out = _bytes_hash(column.cast(pa.binary()))
    elif pa.types.is_null(t):
        return np.full(len(column), _NULL, np.uint64)
    elif pa.types.is_struct(t):
        out = np.concatenate([_struct_hash(c) for c in column.chunks]) if column.num_chunks \
            else np.zeros(0, np.uint64)
    elif (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
          or pa.types.is_map(t)):
        out = np.concatenate([_list_hash(c) for c in column.chunks]) if column.num_chunks \
            else np.zeros(0, np.uint64)
    else:
        out = _python_hash(column)
    if column.null_count:
        out = np.where(column.is_null().to_numpy(zero_copy_only=False), _NULL, out)
    return out


def _struct_hash(chunk: pa.StructArray) -> np.ndarray:
    """Field by field, as :func:`row_hash` combines key columns."""
    h = np.full(len(chunk), _SEED ^ np.uint64(len(chunk.type)), np.uint64)
    with np.errstate(over="ignore"):
        for i in range(chunk.type.num_fields):
            h = _mix((h * _MUL) ^ column_hash(chunk.field(i)))
    return h


_LIST = np.uint64(0xA0761D6478BD642F)


def _list_hash(chunk: Any) -> np.ndarray:
    """A list's elements hashed with their positions and summed (one vectorised pass over all
    the elements of the chunk), mixed with its length: equal lists hash equal whatever the
    element type's width, and a list as the same values in another order differs."""
    n = len(chunk)
    if pa.types.is_fixed_size_list(chunk.type):
        size = chunk.type.list_size
        offsets = (np.arange(n + 1, dtype=np.int64) + chunk.offset) * size
    else:
        offsets = chunk.offsets.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if n == 0:
        return np.zeros(0, np.uint64)
    lo, hi = offsets[:-1], offsets[1:]
    start = int(offsets[0])
    values = chunk.values.slice(start, int(offsets[-1]) - start)
    lengths = hi - lo
    with np.errstate(over="ignore"):
        positions = np.arange(len(values), dtype=np.int64) - np.repeat(lo - start, lengths)
        terms = _mix(column_hash(values) ^ _mix(positions.view(np.uint64) + _LIST))
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        total = sums[hi - start] - sums[lo - start]
        return _mix(total + _mix(lengths.view(np.uint64) ^ _LIST))


def _python_hash(column: pa.ChunkedArray) -> np.ndarray:
    """Any other type (intervals, unions, extension types): each distinct value's Python
    form hashed by :func:`naiad.key_hash`, as a record key is."""
    from naiad.partition import key_hash
    values = column.to_pylist()
    seen: dict = {}
    try:
        return np.fromiter((seen[v] if v in seen else seen.setdefault(v, key_hash(v))
                            for v in values), np.uint64, len(values))
    except TypeError as exc:
        raise TypeError(_unsupported(column.type) + f" ({exc})") from None


def _unsupported(t: pa.DataType) -> str:
    return (f"cannot hash a key column of Arrow type {t}: its values are not hashable "
            "as Python values")


def key_names(keys: Any, op: str = "frames") -> List[str]:
    """``keys`` as a list of column names: a name, or a non-empty list or tuple of names (a
    TypeError naming ``op`` otherwise).

    >>> key_names("k"), key_names(("a", "b"))
    (['k'], ['a', 'b'])
    >>> key_names(3, "group_by")
    Traceback (most recent call last):
    ...
    TypeError: group_by: the key columns must be a column name or a non-empty list of names; got int 3
    """
    names = [keys] if isinstance(keys, str) else keys
    if not isinstance(names, (list, tuple)) or not names or \
            not all(isinstance(k, str) for k in names):
        msg = (f"{op}: the key columns must be a column name or a non-empty list of names; "
               f"got {type(keys).__name__} {keys!r}")
        raise TypeError(msg)
    return list(names)


def check_key_types(op: str, table: pa.Table, keys: Sequence[str]) -> None:
    """A TypeError naming ``op`` and the column when a key column's type cannot be a key.

    >>> check_key_types("group_by(k)", pa.table({"k": [[1], [2]]}), ["k"])
    Traceback (most recent call last):
    ...
    TypeError: group_by(k): column 'k' of Arrow type list<item: int64> cannot be a key here; ...
    """
    for name in keys:
        t = table.schema.field(name).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if (pa.types.is_nested(t) or pa.types.is_interval(t)
                or not (pa.types.is_primitive(t) or pa.types.is_decimal(t)
                        or pa.types.is_string(t) or pa.types.is_large_string(t)
                        or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                        or pa.types.is_fixed_size_binary(t) or pa.types.is_null(t))):
            raise TypeError(f"{op}: column {name!r} of Arrow type {t} cannot be a key here; "
                            "group_by and join keys may be integers, floats, decimals, "
                            "booleans, strings, binaries (fixed-size too), dates, times, "
                            "timestamps or durations: Arrow cannot group or join by nested "
                            "types such as lists and structs (exchange() can route by them)")


def row_hash(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """A uint64 hash per row of ``table`` over the columns ``keys``, in order."""
    h = np.full(table.num_rows, _SEED, np.uint64)
    with np.errstate(over="ignore"):
        for name in keys:
            h = _mix((h * _MUL) ^ column_hash(table.column(name)))
    return h


_FIB = np.uint64(0x9E3779B97F4A7C15)


def _fib(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return values.astype(np.int64, copy=False).view(np.uint64) * _FIB


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """``column`` as one numpy array, nulls as 0 or False (the caller marks them)."""
    if column.null_count:
        column = column.fill_null(False if pa.types.is_boolean(column.type) else 0)
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=False)
    return column.to_numpy()


def route_hash(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """A uint64 per row whose high bits choose the row's worker (see :func:`destinations`):
    equal keys give equal values in every process and run, whatever their integer width, and an
    integral float as the integer it equals; one numeric key column is hashed by one multiply,
    other keys by :func:`row_hash`."""
    if len(keys) != 1:
        return row_hash(table, keys)
    column = table.column(keys[0])
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.cast(t.value_type)
        t = column.type
    if pa.types.is_boolean(t):
        out = _fib(_numbers(column).astype(np.int64))
    elif pa.types.is_integer(t):
        out = _fib(_numbers(column))
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        values = (_floats(column.fill_null(0)) if pa.types.is_decimal(t)
                  else _numbers(column).astype(np.float64, copy=False))
        integral = np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) < 2.0 ** 63)
        as_bits = _mix(values.view(np.uint64) ^ np.uint64(0x9E3779B97F4A7C15))
        out = np.where(integral, _fib(np.where(integral, values, 0).astype(np.int64)), as_bits)
    else:
        return row_hash(table, keys)
    if column.null_count:
        out = np.where(column.is_null().to_numpy(zero_copy_only=False), _NULL, out)
    return out


def destinations(hashes: np.ndarray, workers: int, reuse: bool = False) -> np.ndarray:
    """The worker (``0 .. workers-1``) of each hash, from its high 32 bits (as uint16 below
    65,536 workers: small integers sort and compare faster).  With ``reuse`` the work is done
    in ``hashes`` itself (a temporary of the caller's, such as :func:`route_hash`'s result),
    which saves an array as large as it: in a fresh process, a page fault per 4 KB."""
    out = np.right_shift(hashes, np.uint64(32), out=hashes if reuse else None)
    out *= np.uint64(workers)
    out >>= np.uint64(32)
    return out.astype(np.uint16 if workers <= 1 << 16 else np.intp)


_BLOCK = 1 << 15       # rows per block of route_destinations' integer path (256 KB of hashes)


def route_destinations(table: pa.Table, keys: Sequence[str], workers: int) -> np.ndarray:
    """``destinations(route_hash(table, keys), workers)``: the worker of each row; one integer
    key column without nulls is hashed and reduced block by block.

    >>> t = pa.table({"k": pa.array(range(100_000), pa.int32())})
    >>> bool((route_destinations(t, ["k"], 3) == destinations(route_hash(t, ["k"]), 3)).all())
    True
    """
    if len(keys) == 1:
        column = table.column(keys[0])
        if pa.types.is_integer(column.type) and not column.null_count:
            return _integer_destinations(_numbers(column), workers)
    return destinations(route_hash(table, keys), workers, reuse=True)


def _integer_destinations(values: np.ndarray, workers: int) -> np.ndarray:
    out = np.empty(len(values), np.uint16 if workers <= 1 << 16 else np.intp)
    scratch = np.empty(min(len(values), _BLOCK), np.uint64)
    shift, width = np.uint64(32), np.uint64(workers)
    with np.errstate(over="ignore"):
        for start in range(0, len(values), _BLOCK):
            block = values[start:start + _BLOCK].astype(np.int64, copy=False).view(np.uint64)
            h = scratch[:len(block)]
            np.multiply(block, _FIB, out=h)
            h >>= shift
            h *= width
            h >>= shift
            out[start:start + len(block)] = h
    return out
