"""A bound on every frame a listening socket accepts, and large frames sent as pieces.

libzmq reads a whole frame, of whatever size its sender declares, before the CURVE handshake
has judged the sender: without a bound, anyone who can reach a port could make the process
hold gigabytes.  Every socket a process listens on takes frames of at most
:data:`FRAME_LIMIT` bytes (``ZMQ_MAXMSGSIZE``; a peer sending a larger one is disconnected).
A message of the computation's own with a larger frame (a record pickled in band beyond it, a
NumPy array or Arrow buffer out of band) is sent as pieces under a tag of its own and joined
again on arrival, at the cost of one copy of each such frame.

>>> frames = [b"D\\x00\\x00\\x00\\x00", b"p" * 10, bytes(25)]
>>> sent = split(frames, limit=8)
>>> assert sent[0][:1] == PIECES
>>> [len(f) for f in sent[2:]]        # 10 bytes in 2 pieces, 25 in 4
[8, 2, 8, 8, 8, 1]
>>> tag, joined = join([memoryview(f) for f in sent])
>>> tag == frames[0] and [bytes(f) for f in joined] == frames[1:]
True
>>> split(frames, limit=64) is frames       # nothing over the limit: sent as it is
True
"""

from __future__ import annotations

import struct
from typing import Any, List, Sequence, Tuple

import zmq

__all__ = ["FRAME_LIMIT", "PIECES", "bound", "split", "join"]

FRAME_LIMIT = 16 << 20
"""Bytes: the largest frame a listening socket accepts, and the size of the pieces larger
frames are sent in."""

PIECES = b"P"
"""The first byte of the first frame of a message sent as pieces (then the original tag)."""


_OVERHEAD = 1 << 12
"""Bytes a frame grows by on the wire: CURVE sends each one inside a MESSAGE command (a
nonce, an authenticator and flags), and libzmq compares the size on the wire with the bound."""


def bound(sock: zmq.Socket, limit: int = FRAME_LIMIT) -> None:
    """Make ``sock`` (a socket that binds) refuse frames larger than ``limit`` bytes (and their
    CURVE envelope)."""
    sock.setsockopt(zmq.MAXMSGSIZE, limit + _OVERHEAD)


def _size(frame: Any) -> int:
    return frame.raw().nbytes if hasattr(frame, "raw") else memoryview(frame).nbytes


def split(frames: List[Any], limit: int = FRAME_LIMIT) -> List[Any]:
    """``frames`` unchanged when none is larger than ``limit``; else the message as pieces:
    ``[PIECES + tag, counts, *pieces]`` where ``counts`` says how many pieces each frame after
    the tag became."""
    if all(_size(f) <= limit for f in frames):
        return frames
    counts: List[int] = []
    pieces: List[Any] = []
    for frame in frames[1:]:
        view = frame.raw() if hasattr(frame, "raw") else memoryview(frame).cast("B")
        n = max(1, -(-view.nbytes // limit))
        counts.append(n)
        pieces.extend(view[i * limit:(i + 1) * limit] for i in range(n))
    return [PIECES + bytes(frames[0]), struct.pack(f"<{len(counts)}Q", *counts), *pieces]


def join(frames: Sequence[Any]) -> Tuple[bytes, List[Any]]:
    """``(tag, frames after it)`` of a message received, its pieces joined if it came as
    pieces (each joined frame is a writable ``bytearray``)."""
    tag = bytes(frames[0])
    if not tag.startswith(PIECES):
        return tag, list(frames[1:])
    counts = struct.unpack(f"<{len(frames[1]) // 8}Q", bytes(frames[1]))
    out: List[Any] = []
    at = 2
    for n in counts:
        out.append(bytearray().join(frames[at:at + n]))
        at += n
    return tag[len(PIECES):], out
