"""How a process's outcome travels back to the launcher: ``marshal`` where it can, else pickle.

A child of ``naiad.execute`` ends by sending its outcome, ``("ok", value, "")`` or an error, over
its private link (:mod:`naiad.launch`).  Results are often large collections of plain values (a
word count returns hundreds of thousands of ``(str, int)`` pairs), and pickle's memo makes
encoding them slow: 60-100 ms for 185 K pairs, where ``marshal`` takes under 10 ms.  So an
outcome made only of the built-in types marshal knows (exact ``str``, ``bytes``, ``int``,
``float``, ``complex``, ``bool``, ``None``, and ``tuple``, ``list``, ``dict``, ``set``,
``frozenset`` of them) travels by marshal, version 4, which keeps shared and cyclic references;
anything else (a subclass such as a named tuple, an instance, an exception, nesting deeper than
marshal's limit) travels by pickle, or cloudpickle for what only that can encode (a lambda, a
class of the program's script), exactly as before.  The first byte says which.

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
"""

from __future__ import annotations

import marshal
import pickle
from typing import Any

__all__ = ["encode", "decode"]

_MARSHAL, _PICKLE = b"M", b"P"
_VERSION = 4        # marshal's format with references: shared and cyclic structure survives


def encode(outcome: Any) -> bytes:
    """``outcome`` as bytes: marshal when every part is a plain built-in, else pickle."""
    try:
        return _MARSHAL + marshal.dumps(outcome, _VERSION)
    except ValueError:          # an unmarshallable part, or nested beyond marshal's limit
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
