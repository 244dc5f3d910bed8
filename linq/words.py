"""Word counts by Arrow kernels: the pre-combine of ``select_many(str.split).count()``.

The local pre-combine of a fused ``select_many(str.split).count()`` is
``Counter(chain.from_iterable(map(str.split, batch)))`` (:mod:`linq.fusion`), which makes a
Python string for every word and looks each one up in a dict.  With pyarrow installed, a
large batch of ``str`` lines is counted by Arrow kernels instead, and only the distinct words
become Python strings: the lines are joined by ``"\\n"`` into one UTF-8 string (a word never
spans a separator, since ``"\\n"`` is whitespace), split by ``ascii_split_whitespace`` or
``utf8_split_whitespace``, flattened and counted by ``value_counts``.

The result is exactly ``Counter``'s, in the same order (first occurrence):

* ``utf8_split_whitespace`` splits on the code points ``str.isspace()`` accepts, no more, no
  fewer (checked over every code point by ``tests/test_linq_words.py``; pyarrow 26, the
  version required).  It also returns empty strings (around leading, trailing and repeated
  separators), which ``str.split()`` never does: the empty word is dropped from the counts.
* ``ascii_split_whitespace`` splits on ASCII whitespace except ``\\x1c``-``\\x1f``, which
  ``str.isspace()`` accepts.  It counts a batch whose text holds none of those four and whose
  non-ASCII lines hold no non-ASCII whitespace (:data:`WIDE_SPACES`): the bytes of a UTF-8
  sequence are never ASCII, so it cuts the text where ``str.split`` does.  Otherwise the
  UTF-8 kernel counts the batch.
* Anything else (a record that is not a ``str``, a lone surrogate, which has no UTF-8 form,
  another pyarrow, a small batch) returns None, and the caller counts with ``Counter``, which
  raises the errors it always raised.

The compute functions are called through ``pyarrow._compute.call_function``: importing
``pyarrow.compute`` would also build a Python wrapper for every kernel (about 25 ms), and
``pyarrow.array`` would import pandas on its first call; the text array is made from buffers.

>>> got = count_words(["to be  or", "not to be"], at_least=0)
>>> got is None or [c.to_pylist() for c in got] == [["to", "be", "or", "not"], [2, 2, 1, 1]]
True
"""

from __future__ import annotations

import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

from naiad.optional import arrow, numpy
from naiad.partition import destinations

__all__ = ["count_words", "split_blocks", "merge_blocks", "is_arrow", "ARROW", "MIN_LINES",
           "MIN_LINES_IMPORT", "WIDE_SPACES"]

_MODE = os.environ.get("NAIAD_LINQ_ARROW", "1")
ARROW = _MODE != "0"
"""Whether large batches are counted by Arrow kernels (``NAIAD_LINQ_ARROW=0`` turns it off;
``NAIAD_LINQ_ARROW=always`` counts batches of any size so, for tests)."""

MIN_LINES = 1 if _MODE == "always" else 4096
"""Smaller batches are counted by ``Counter``: the kernels' fixed costs would not pay."""

MIN_LINES_IMPORT = 1 if _MODE == "always" else 100_000
"""Before pyarrow is imported in this process, only a batch of this many lines pays for the
import (about 0.1 s, numpy included)."""

WIDE_SPACES = frozenset("\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
"""The code points above ASCII that ``str.isspace()`` accepts."""

_VERSION = 26                       # the pyarrow whose kernels were checked, see above
_CONTROLS = (b"\x1c", b"\x1d", b"\x1e", b"\x1f")     # str.isspace(); not the ASCII kernel's
_MOSTLY_WIDE = 16                   # 1 line in this many not ASCII: the whole text as UTF-8


def count_words(lines: Sequence[Any], at_least: Optional[int] = None) -> Optional[tuple]:
    """``(words, counts)`` of ``chain.from_iterable(map(str.split, lines))`` in the order of
    first occurrence, as Arrow arrays (strings and int64), or None when the batch is not one
    Arrow can count exactly (see the module documentation) or is smaller than ``at_least``
    lines (by default :data:`MIN_LINES`, or :data:`MIN_LINES_IMPORT` while pyarrow is not
    imported yet)."""
    if not ARROW:
        return None
    if at_least is None:
        at_least = MIN_LINES if "pyarrow._compute" in sys.modules else MIN_LINES_IMPORT
    if not lines or len(lines) < at_least:
        return None
    try:
        ascii_flags = list(map(str.isascii, lines))       # also: every record is a str
    except TypeError:
        return None
    pa = arrow()
    if pa is None or not _checked(pa):
        return None
    call = pa._compute.call_function
    try:
        data, ascii_kernel = _text(lines, ascii_flags)
    except UnicodeEncodeError:                              # a lone surrogate
        return None
    if ascii_kernel and any(c in data for c in _CONTROLS):
        ascii_kernel = False
    kernel = "ascii_split_whitespace" if ascii_kernel else "utf8_split_whitespace"
    width = 4 if len(data) < 1 << 31 else 8
    offsets = pa.py_buffer((0).to_bytes(width, sys.byteorder)
                           + len(data).to_bytes(width, sys.byteorder))
    text = pa.Array.from_buffers(pa.string() if width == 4 else pa.large_string(), 1,
                                 [None, offsets, pa.py_buffer(data)])
    try:
        counted = call("value_counts", [call("list_flatten", [call(kernel, [text])])])
    except pa.ArrowException:                       # out of memory, say: Counter's turn
        return None
    keys, counts = counted.field(0), counted.field(1)
    lengths = call("binary_length", [keys]).to_pylist()
    try:
        empty = lengths.index(0)                    # str.split() never returns ""
    except ValueError:
        return keys, counts
    return (pa.concat_arrays([keys[:empty], keys[empty + 1:]]),
            pa.concat_arrays([counts[:empty], counts[empty + 1:]]))


def split_blocks(routes: List[int], keys: Any, counts: Any) -> List[tuple]:
    """The blocks of Arrow columns for ``len(routes)`` workers (:mod:`linq.blocks`): each
    destination's words and counts as Arrow arrays, which cross processes as buffers (lists
    without numpy)."""
    workers = len(routes)
    if workers == 1:
        return [(routes[0], keys, counts)]
    np = numpy()
    words = keys.to_pylist()
    dests = destinations(words, workers)
    if np is None:
        parts: List[Tuple[list, list]] = [([], []) for _ in range(workers)]
        for word, count, d in zip(words, counts.to_pylist(), dests):
            parts[d][0].append(word)
            parts[d][1].append(count)
        return [(routes[d], ks, cs) for d, (ks, cs) in enumerate(parts) if ks]
    pa = arrow()
    dests = np.array(dests, dtype=np.int64)
    out = []
    for d in range(workers):
        at = np.flatnonzero(dests == d).astype(np.int64, copy=False)
        if len(at):
            take = pa.Array.from_buffers(pa.int64(), len(at), [None, pa.py_buffer(at)])
            out.append((routes[d], pa._compute.call_function("take", [keys, take]),
                        pa._compute.call_function("take", [counts, take])))
    return out


def is_arrow(values: Any) -> bool:
    """Whether ``values`` is an Arrow array (without importing pyarrow)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(values, pa.Array)


def merge_blocks(blocks: List[tuple]) -> list:
    """The ``(word, n)`` pairs of blocks of Arrow columns made by :func:`split_blocks`, the
    counts of a word in several blocks added: ``dictionary_encode`` numbers the words (in the
    order of first occurrence, as a dict would) and ``numpy.bincount`` adds their counts."""
    pa = arrow()
    if len(blocks) == 1:
        _, keys, counts = blocks[0]
        return list(zip(keys.to_pylist(), counts.to_pylist()))
    np = numpy()
    if np is None or len({b[1].type for b in blocks}) > 1 or any(b[2].null_count for b in blocks) \
            or sum(_ints(np, b[2]).sum(dtype=np.float64) for b in blocks) >= 2 ** 53:
        acc: dict = {}          # no numpy, strings and large strings, or float64 not exact
        get = acc.get
        for _, keys, counts in blocks:
            for k, n in zip(keys.to_pylist(), counts.to_pylist()):
                acc[k] = get(k, 0) + n
        return list(acc.items())
    keys = pa.concat_arrays([b[1] for b in blocks])
    counts = pa.concat_arrays([b[2] for b in blocks])
    encoded = pa._compute.call_function("dictionary_encode", [keys])
    sums = np.bincount(_ints(np, encoded.indices), weights=_ints(np, counts),
                       minlength=len(encoded.dictionary))
    return list(zip(encoded.dictionary.to_pylist(), sums.astype(np.int64).tolist()))


def _ints(np: Any, array: Any) -> Any:
    """The numpy view of an Arrow integer array without nulls (``to_numpy`` would import
    pandas)."""
    dtype = np.dtype(f"=i{array.type.bit_width // 8}")
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * dtype.itemsize)


def _checked(pa: Any) -> bool:
    """Whether this pyarrow is the version whose kernels were checked."""
    try:
        return int(pa.__version__.split(".")[0]) == _VERSION
    except ValueError:
        return False


def _text(lines: Sequence[str], ascii_flags: List[bool]) -> Tuple[bytes, bool]:
    """The lines joined by ``"\\n"`` in UTF-8, and whether the ASCII kernel may split them
    (no non-ASCII whitespace; the control characters are checked by the caller)."""
    wide = ascii_flags.count(False)
    if wide == 0:
        return "\n".join(lines).encode("ascii"), True
    if wide * _MOSTLY_WIDE > len(ascii_flags):
        return "\n".join(lines).encode("utf-8"), False
    # Runs of ASCII lines joined and encoded at C speed; the few other lines one by one.
    pieces: List[bytes] = []
    ascii_kernel = True
    start = 0
    for _ in range(wide):
        i = ascii_flags.index(False, start)
        if i > start:
            pieces.append("\n".join(lines[start:i]).encode("ascii"))
        line = lines[i]
        pieces.append(line.encode("utf-8"))
        if ascii_kernel and not WIDE_SPACES.isdisjoint(line):
            ascii_kernel = False
        start = i + 1
    if start < len(lines):
        pieces.append("\n".join(lines[start:]).encode("ascii"))
    return b"\n".join(pieces), ascii_kernel
