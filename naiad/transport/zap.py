"""The ZAP handler of a ZeroMQ context: which CURVE clients may connect to its servers.

libzmq asks the ZeroMQ Authentication Protocol handler of a context (ZAP, RFC 27: a socket bound
to ``inproc://zeromq.zap.01``) about every CURVE handshake one of its server sockets completes:
a request names the mechanism and, for CURVE, the client's 32-byte public key; the answer is
``200`` (admitted) or ``400`` (refused), and a refused peer's connection is dropped before any of
its messages reaches the socket.  :class:`ZapHandler` answers on a plain thread: a CURVE client
whose key is in the allowed set is admitted, every other request (another key, another
mechanism, a malformed request) is refused.

It is bound before the call returns, so a server socket created afterwards is never without it
(libzmq admits every CURVE client that completed the handshake when no handler is bound), and it
must be stopped after the context's server sockets are closed.  :meth:`ZapHandler.stop` wakes
the thread through a pipe and joins it with a bound; terminating the context ends it too.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable, List

import zmq
from zmq.utils import z85

__all__ = ["ZapHandler", "ZAP_ENDPOINT"]

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_VERSION = b"1.0"


class ZapHandler:
    """Admit the CURVE clients whose public key (Z85, as ``zmq.curve_public`` returns it, or
    the 32 raw bytes) is in ``allowed``; refuse everyone else.  One per context."""

    def __init__(self, ctx: zmq.Context, allowed: Iterable[bytes], stop_timeout: float = 5.0):
        self.allowed = frozenset(z85.decode(k) if len(k) == 40 else bytes(k) for k in allowed)
        self.stop_timeout = stop_timeout
        self.admitted = 0
        self.refused = 0
        self._refusal = threading.Condition()
        self._sock = ctx.socket(zmq.REP)
        self._sock.linger = 0
        try:
            self._sock.bind(ZAP_ENDPOINT)
        except zmq.ZMQError:
            self._sock.close()
            raise
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="naiad-zap", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if self._wake_r in ready:
                    return
                if self._sock in ready:
                    self._sock.send_multipart(self._answer(self._sock.recv_multipart()))
        except zmq.ContextTerminated:
            return
        finally:
            self._sock.close(linger=0)

    def _answer(self, request: List[bytes]) -> List[bytes]:
        """The reply to one request: version, request id, status code and text, user id,
        metadata."""
        request_id = request[1] if len(request) > 1 else b""
        if len(request) < 6 or request[0] != _VERSION:
            return self._refuse(request_id, b"malformed ZAP request")
        mechanism, credentials = request[5], request[6:]
        if mechanism != b"CURVE" or len(credentials) != 1:
            return self._refuse(request_id, b"CURVE required")
        if credentials[0] not in self.allowed:
            return self._refuse(request_id, b"unknown CURVE key")
        self.admitted += 1
        return [_VERSION, request_id, b"200", b"OK", z85.encode(credentials[0]), b""]

    def _refuse(self, request_id: bytes, why: bytes) -> List[bytes]:
        with self._refusal:
            self.refused += 1
            self._refusal.notify_all()
        return [_VERSION, request_id, b"400", why, b"", b""]

    def wait_for_refusals(self, count: int, timeout: float) -> bool:
        """Whether ``count`` connections have been refused, waiting up to ``timeout`` s."""
        with self._refusal:
            return self._refusal.wait_for(lambda: self.refused >= count, timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Wake the thread, wait for it (at most ``stop_timeout`` s) and release the pipe; the
        thread closes its socket on the way out."""
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"!")
        except OSError:  # pragma: no cover - the pipe cannot be full with one byte
            pass
        self._thread.join(self.stop_timeout)
        if self._thread.is_alive():  # pragma: no cover - the thread only blocks in poll
            import logging
            logging.getLogger("naiad.transport").warning(
                "the ZAP handler thread did not stop within %g s", self.stop_timeout)
            return      # it still polls the pipe: leave it open
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._wake_r = self._wake_w = -1
