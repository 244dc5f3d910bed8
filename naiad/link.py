"""The private link between the launcher of ``execute(processes=N)`` and each child: a socket
pair the child alone inherits, carrying framed messages (a kind byte, a length, the body).

The launcher sends the run's options (with its secret) first; the child sends its endpoint,
its entering ``activate``, lines of progress and its result; the launcher sends everyone's
endpoints.

>>> import socket
>>> a, b = socket.socketpair()
>>> send_message(a, OPTIONS, b"{}")
>>> read_first(b, MessageReader())
(b'O', b'{}')
"""

from __future__ import annotations

import socket
import struct
from typing import Any, List, Optional, Tuple

__all__ = ["send_message", "MessageReader", "read_first", "ENDPOINT", "ENDPOINTS", "ACTIVE",
           "RESULT", "OPTIONS", "PROGRESS"]

ENDPOINT, ENDPOINTS, ACTIVE, RESULT, OPTIONS, PROGRESS = b"E", b"A", b"V", b"R", b"O", b"P"
"""Kinds of message on a link: a child's endpoint (sent when its computation is made, which
starts connecting at once), everyone's endpoints, a child's entering ``activate``, a child's
result, the run's options (with its secret: the first message to a child, so that the
secret never touches the disk), and a line of the default progress, which process 0 sends for
the launcher to log where the application's logging is configured."""

_HEADER = struct.Struct("!cQ")      # kind, length of the body


def send_message(link: socket.socket, kind: bytes, body: bytes) -> None:
    """One framed message on a link."""
    link.sendall(_HEADER.pack(kind, len(body)) + body)


class MessageReader:
    """Reassembles the framed messages of a link from whatever ``recv`` returned.  The pieces of
    a body are kept as received (views, not copies) and joined once, when it is complete: a
    result of several megabytes is copied once, not at every piece."""

    def __init__(self) -> None:
        self.pieces: List[Any] = []     # bytes or memoryviews of received bytes
        self.held = 0                   # bytes in self.pieces
        self.kind: Optional[bytes] = None   # the current message's kind, once its header is read
        self.size = 0                   # and its body's size

    def feed(self, data: bytes) -> List[Tuple[bytes, bytes]]:
        """Add received bytes; return the messages now complete, as ``(kind, body)``."""
        self.pieces.append(data)
        self.held += len(data)
        out = []
        while True:
            if self.kind is None:
                if self.held < _HEADER.size:
                    break
                buffer = self._take(self.held)
                self.kind, self.size = _HEADER.unpack_from(buffer)
                rest = memoryview(buffer)[_HEADER.size:]
                self.pieces, self.held = ([rest] if len(rest) else []), len(rest)
            if self.held < self.size:
                break
            buffer = self._take(self.held)
            out.append((self.kind, bytes(buffer[:self.size])))
            rest = memoryview(buffer)[self.size:]
            self.pieces, self.held, self.kind = ([rest] if len(rest) else []), len(rest), None
        return out

    def _take(self, n: int) -> Any:
        """All pieces as one bytes-like object (joined only if there are several)."""
        return self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)


def read_first(link: socket.socket, reader: MessageReader) -> Tuple[bytes, bytes]:
    """The first message of a link, read before anything else is (EOFError if it closes)."""
    while True:
        data = link.recv(1 << 16)
        if not data:
            raise EOFError("the link closed before its first message")
        got = reader.feed(data)
        if got:
            return got[0]
