"""Partition files of pickled records, written by Spark's executors and authenticated.

:func:`naiad.spark.source` has an RDD's executors write each partition to ``part-NNNNN.pkl``
in a directory, and the processes of ``naiad.execute`` read them back.  Unpickling runs code,
so a file must prove it was written for this source: each chunk of records carries an
HMAC-SHA256, keyed by a random key the source made and gave the executors with their task, over
the partition index, the chunk's sequence number and its bytes; the file ends with a keyed end
record, so a file cut short is told apart too.  A chunk is unpickled only once its HMAC is
checked, and the reader opens exactly the partitions the source wrote (a file planted beside
them is never read).

>>> import tempfile, os
>>> key, path = os.urandom(32), os.path.join(tempfile.mkdtemp(), "part-00003.pkl")
>>> write_part(path, key, 3, iter(range(10)), chunk=4)
10
>>> list(read_parts([path], key, [3]))
[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
>>> with open(path, "r+b") as f:
...     _ = f.seek(60); _ = f.write(b"X")
>>> list(read_parts([path], key, [3]))
Traceback (most recent call last):
...
naiad.progress.errors.NaiadError: Spark source file ...part-00003.pkl: chunk 0 does not carry this source's HMAC: it was changed after Spark wrote it, or written by someone else; it is not read
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import reprlib
import struct
from typing import Callable, Iterable, Iterator, List

from naiad.errors import NaiadError

__all__ = ["write_part", "read_parts", "first_unpicklable", "pickle_chunk"]

_HEADER = struct.Struct("<Q32s")        # payload length, HMAC
_END = b"naiad-spark-part-end"
_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


def _mac(key: bytes, index: int, seq: int, payload: bytes) -> bytes:
    return hmac.new(key, struct.pack("<QQ", index, seq) + payload, hashlib.sha256).digest()


def write_part(path: str, key: bytes, index: int, records: Iterable, chunk: int = 4096) -> int:
    """Write partition ``index``'s records to ``path`` (through a temporary file and a rename),
    in authenticated chunks of ``chunk`` records; returns how many were written."""
    tmp = f"{path}.tmp{os.getpid()}"
    n = seq = 0
    with open(tmp, "wb") as fh:
        batch: list = []

        def flush() -> None:
            nonlocal seq
            payload = _dumps(batch, index)
            fh.write(_HEADER.pack(len(payload), _mac(key, index, seq, payload)))
            fh.write(payload)
            seq += 1

        for r in records:
            batch.append(r)
            if len(batch) >= chunk:
                flush()
                n += len(batch)
                batch = []
        if batch:
            flush()
            n += len(batch)
        fh.write(_HEADER.pack(0, _mac(key, index, seq, _END)))
    os.replace(tmp, path)
    return n


def _dumps(batch: list, index: int) -> bytes:
    return pickle_chunk(batch, lambda bad, exc: (
        f"partition {index}: record {_repr.repr(bad)} cannot be pickled "
        f"({type(exc).__name__}: {exc}); records that enter a computation must be "
        "picklable data"))


def pickle_chunk(chunk: list, explain: Callable[[object, Exception], str]) -> bytes:
    """``chunk`` pickled; if it cannot be, a TypeError whose message ``explain(record,
    error)`` makes from the first record that pickle refuses."""
    try:
        return pickle.dumps(chunk, protocol=5)
    except Exception as exc:  # noqa: BLE001 - re-raised naming the record
        raise TypeError(explain(first_unpicklable(chunk), exc)) from None


def first_unpicklable(records: Iterable) -> object:
    """The first of ``records`` that pickle refuses (None if there is none)."""
    for r in records:
        try:
            pickle.dumps(r, protocol=5)
        except Exception:  # noqa: BLE001 - any failure means this one
            return r
    return None


def read_parts(paths: List[str], key: bytes, indexes: List[int]) -> Iterator:
    """The records of the partition files ``paths`` (partition ``indexes[i]`` in ``paths[i]``),
    each chunk checked before it is unpickled."""
    for path, index in zip(paths, indexes):
        yield from _read_part(path, key, index)


def _read_part(path: str, key: bytes, index: int) -> Iterator:
    def refuse(what: str) -> NaiadError:
        return NaiadError(f"Spark source file {path}: {what}; it is not read")

    with open(path, "rb") as fh:
        seq = 0
        while True:
            header = fh.read(_HEADER.size)
            if len(header) < _HEADER.size:
                raise refuse(f"it ends after {seq} chunk(s) without its end record (cut short)")
            length, mac = _HEADER.unpack(header)
            if length == 0:
                if not hmac.compare_digest(mac, _mac(key, index, seq, _END)):
                    raise refuse("its end record does not carry this source's HMAC")
                return
            payload = fh.read(length)
            if len(payload) < length or not hmac.compare_digest(
                    mac, _mac(key, index, seq, payload)):
                raise refuse(f"chunk {seq} does not carry this source's HMAC: it was changed "
                             "after Spark wrote it, or written by someone else")
            yield from pickle.loads(payload)
            seq += 1
