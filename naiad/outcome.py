"""How a process's outcome travels back to the launcher: ``marshal`` where it can, else pickle.

A child of ``naiad.execute`` ends by sending its outcome, ``("ok", value, "")`` or an error, over
its private link (:mod:`naiad.launch`).  Results are often large collections of plain values (a
word count returns hundreds of thousands of ``(str, int)`` pairs), and pickle's memo makes
encoding them slow: 60-100 ms for 185 K pairs, where ``marshal`` takes under 10 ms.  So an
outcome made only of the built-in types marshal knows (exact ``str``, ``bytes``, ``int``,
``float``, ``complex``, ``bool``, ``None``, and ``tuple``, ``list``, ``dict``, ``set``,
``frozenset`` of them) travels by marshal, version 4, which keeps shared and cyclic references;
anything else (a subclass such as a named tuple, an instance, an exception, a numpy array,
deep nesting) travels by pickle, or cloudpickle for what only that can encode (a lambda, a class
of the program's script), exactly as before.  The first byte says which.

The types are checked before marshal is called, level by level with ``map(type, ...)`` at C
speed: marshal itself would write any object with the buffer protocol (a numpy array, a
``bytearray``) as plain ``bytes``.

Both ends are the same installation, and the link is a socket pair nobody else holds, so the
bytes come from the launcher's own child.

>>> decode(encode(("ok", [("word", 3)], "")))
('ok', [('word', 3)], '')
>>> encode(("ok", [("word", 3)], ""))[:1]
b'M'
>>> from collections import namedtuple
>>> Pair = namedtuple("Pair", "word n")
>>> encode(("ok", [Pair("word", 3)], ""))[:1]
b'P'
>>> decode(encode(("ok", [Pair("word", 3)], "")))[1]
[Pair(word='word', n=3)]
>>> decode(encode(("ok", bytearray(b"ab"), "")))[1]
bytearray(b'ab')
"""

from __future__ import annotations

import marshal
import pickle
from itertools import chain
from typing import Any, List

__all__ = ["encode", "decode", "plain"]

_MARSHAL, _PICKLE = b"M", b"P"
_VERSION = 4        # marshal's format with references: shared and cyclic structure survives
_ATOMS = frozenset({str, bytes, int, float, complex, bool, type(None)})
_SEQUENCES = frozenset({tuple, list, set, frozenset})
_DEPTH = 64         # deeper (or cyclic) structures go by pickle
_ITEMS = 10_000_000  # and so do those with more parts (or shared ones, counted once per path)


def plain(value: Any) -> bool:
    """Whether ``value`` is made only of the exact built-in types marshal keeps as they are.

    >>> plain([("a", 1), {"b": {2.5, None}}]), plain([("a", 1), bytearray()])
    (True, False)
    """
    level: List[Any] = [value]
    types = {type(value)}
    seen = 0
    for _ in range(_DEPTH):
        if types <= _ATOMS:
            return True
        if not types <= _ATOMS | _SEQUENCES | {dict}:
            return False
        if types <= _SEQUENCES:
            # Often the last level (a list of tuples of atoms): typed without a list of it.
            types = set(map(type, chain.from_iterable(level)))
            if types <= _ATOMS:
                return True
            seen += sum(map(len, level))
            if seen > _ITEMS:
                return False
            inner = list(chain.from_iterable(level))
        else:
            inner = []
            for item in level:
                kind = type(item)
                if kind is dict:
                    inner.extend(item.keys())
                    inner.extend(item.values())
                elif kind in _SEQUENCES:
                    inner.extend(item)
                if len(inner) > _ITEMS:
                    return False
            seen += len(inner)
            if seen > _ITEMS:
                return False
            types = set(map(type, inner))
        level = inner
    return False


def encode(outcome: Any) -> bytes:
    """``outcome`` as bytes: marshal when every part is a plain built-in, else pickle."""
    if plain(outcome):
        try:
            return _MARSHAL + marshal.dumps(outcome, _VERSION)
        except ValueError:      # nested beyond marshal's own limit
            pass
    try:
        return _PICKLE + pickle.dumps(outcome, protocol=5)
    except Exception:  # noqa: BLE001 - a lambda, a class of the program's script
        import cloudpickle
        return _PICKLE + cloudpickle.dumps(outcome, protocol=5)


def decode(data: bytes) -> Any:
    """The outcome :func:`encode` made ``data`` from."""
    kind, body = data[:1], memoryview(data)[1:]
    if kind == _MARSHAL:
        return marshal.loads(body)
    if kind == _PICKLE:
        return pickle.loads(body)
    raise ValueError(f"an outcome must start with {_MARSHAL!r} or {_PICKLE!r}, not {kind!r}")
