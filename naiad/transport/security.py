"""CURVE keys derived from a shared secret: every process of a computation authenticates every peer.

Every multi-process computation uses CURVE on every socket, control and data alike: ``execute``
makes a random secret per run and hands it to its children privately, Spark's ``execute`` does
the same per call, and processes started by hand must be given one (``secret=``,
``NAIAD_SECRET``, or ``NAIAD_SECRET_FILE`` naming a file readable only by its owner).  Every
process derives the same server and client key pairs from the secret with scrypt (a slow key
derivation, so a passphrase cannot be guessed quickly from a captured handshake); a peer that
does not know the secret cannot complete the CURVE handshake, the ZAP handler admits only the
client key derived from it, and nothing is read, let alone unpickled, from a socket before that.
A secret that a launcher drew itself (:func:`random_secret`: 256 random bits, never typed by
anyone) has nothing to stretch: its keys are derived with one SHA-256, without scrypt's 16 MB
and 50-200 ms per process at the start of every run.

>>> a, b = random_secret(), random_secret()
>>> CurveKeys(a).client_public == CurveKeys(bytes(a)).client_public   # scrypt for plain bytes
False
>>> CurveKeys(a).client_public == CurveKeys(RandomSecret(bytes(a))).client_public
True
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import socket
from typing import Iterable, Optional, Tuple

import zmq
from zmq.utils import z85

__all__ = ["CurveKeys", "RandomSecret", "random_secret", "needs_authentication", "resolve_secret", "read_secret_file",
           "is_loopback", "SECRET_HELP"]


_SALT = b"naiad-curve-v2"


def _keypair(master: bytes, role: bytes) -> Tuple[bytes, bytes]:
    seed = hashlib.sha256(_SALT + b"\0" + role + b"\0" + master).digest()
    secret_key = z85.encode(seed)
    return zmq.curve_public(secret_key), secret_key


class RandomSecret(bytes):
    """A secret of 256 random bits drawn by a launcher for one run (see :func:`random_secret`)."""

    def __reduce__(self):
        return RandomSecret, (bytes(self),)


def random_secret() -> RandomSecret:
    """A fresh random secret for one run, to be handed to its processes privately."""
    return RandomSecret(secrets.token_bytes(32))


class CurveKeys:
    """The server and client key pairs of one computation."""

    def __init__(self, secret: bytes):
        if not secret:
            raise ValueError("the CURVE secret must not be empty")
        if isinstance(secret, RandomSecret) and len(secret) >= 32:
            master = hashlib.sha256(_SALT + b"\0random\0" + bytes(secret)).digest()
        else:               # possibly a passphrase: a slow derivation
            master = hashlib.scrypt(secret, salt=_SALT, n=2 ** 14, r=8, p=1, dklen=32)
        self.server_public, self.server_secret = _keypair(master, b"server")
        self.client_public, self.client_secret = _keypair(master, b"client")

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


SECRET_HELP = ("every process of a multi-process computation must be given the same secret, "
               "from which they derive ZeroMQ CURVE keys so that no one else can connect and "
               "send data: set NAIAD_SECRET (for example NAIAD_SECRET=$(python -c 'import "
               "secrets; print(secrets.token_hex(32))')), or NAIAD_SECRET_FILE to a file only "
               "you can read, or pass secret=... (naiad.execute makes one itself)")


def resolve_secret(option: Optional[object]) -> Optional[bytes]:
    """The shared secret: the ``secret`` option, else ``NAIAD_SECRET``, else the contents of
    the file ``NAIAD_SECRET_FILE`` names (refused when others may read it)."""
    value = option if option is not None else os.environ.get("NAIAD_SECRET")
    if (value is None or value == "") and os.environ.get("NAIAD_SECRET_FILE"):
        value = read_secret_file(os.environ["NAIAD_SECRET_FILE"])
    if value is None or value == "":
        return None
    if isinstance(value, RandomSecret):
        return value
    return value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[call-overload]


def read_secret_file(path: str) -> bytes:
    """The secret in ``path``, which must belong to this user and be closed to others."""
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        msg = (f"secret file {path} must belong to you and be readable by you only "
               f"(chmod 600 {path}); its mode is {oct(st.st_mode & 0o777)}")
        raise PermissionError(msg)
    with open(path, "rb") as f:
        return f.read().strip()
