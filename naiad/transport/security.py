"""CURVE keys derived from a shared secret, and the rule for when a computation must use them.

Every process derives the same server and client key pairs from the secret, so processes on
different hosts authenticate each other without exchanging key files; a peer that does not know
the secret cannot complete the CURVE handshake, and the ZAP handler admits only the client key
derived from it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
from typing import Iterable, Optional, Tuple

import zmq
from zmq.utils import z85

__all__ = ["CurveKeys", "needs_authentication", "resolve_secret", "is_loopback"]


def _keypair(secret: bytes, role: bytes) -> Tuple[bytes, bytes]:
    seed = hashlib.sha256(b"naiad-curve-v1\0" + role + b"\0" + secret).digest()
    secret_key = z85.encode(seed)
    return zmq.curve_public(secret_key), secret_key


class CurveKeys:
    """The server and client key pairs of one computation."""

    def __init__(self, secret: bytes):
        if not secret:
            raise ValueError("the CURVE secret must not be empty")
        self.server_public, self.server_secret = _keypair(secret, b"server")
        self.client_public, self.client_secret = _keypair(secret, b"client")

    def serve(self, sock: zmq.Socket) -> None:
        """Make a bound socket a CURVE server."""
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def connect_as_client(self, sock: zmq.Socket) -> None:
        """Make a connecting socket a CURVE client of our servers."""
        sock.curve_secretkey = self.client_secret
        sock.curve_publickey = self.client_public
        sock.curve_serverkey = self.server_public

    def callback(self, domain: str, client_key: bytes) -> bool:
        """ZAP credentials provider: only our client key is admitted."""
        return client_key == self.client_public


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address."""
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


def needs_authentication(hosts: Iterable[str]) -> bool:
    """True when any endpoint listens beyond loopback."""
    return any(not is_loopback(h.rsplit(":", 1)[0].strip("[]")) for h in hosts)


def resolve_secret(option: Optional[object]) -> Optional[bytes]:
    """The shared secret from the ``secret`` option or the ``NAIAD_SECRET`` environment variable."""
    value = option if option is not None else os.environ.get("NAIAD_SECRET")
    if value is None or value == "":
        return None
    return value.encode() if isinstance(value, str) else bytes(value)
