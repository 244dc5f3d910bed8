"""CURVE keys derived from a shared secret: every process of a computation authenticates every peer.

Every multi-process computation uses CURVE on every socket, control and data alike: ``execute``
makes a random secret per run and hands it to its children privately, Spark's ``execute`` does
the same per call, and processes started by hand must be given one (``secret=``,
``NAIAD_SECRET``, or ``NAIAD_SECRET_FILE`` naming a file readable only by its owner).  Every
process derives the same server and client key pairs from the secret with scrypt (a slow key
derivation, so a passphrase cannot be guessed quickly from a captured handshake), except from a
secret that is key material already: ``naiad-key:`` and 64 hex digits (32 random bytes, what
:func:`random_secret` makes for ``execute`` and Spark), used as it is.  A peer that
does not know the secret cannot complete the CURVE handshake, the ZAP handler
(:mod:`naiad.transport.zap`) admits only the client key derived from it, and nothing is read,
let alone unpickled, from a socket before that.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
import socket
from typing import Iterable, Optional, Tuple, Union

import zmq
from zmq.utils import z85

__all__ = ["CurveKeys", "derived_key", "needs_authentication", "resolve_secret", "read_secret_file",
           "is_loopback", "random_secret", "KEY_PREFIX", "SECRET_HELP"]


_SALT = b"naiad-curve-v2"

KEY_PREFIX = "naiad-key:"
"""A secret of this prefix and 64 hex digits is 32 bytes of key material, not a passphrase."""


def random_secret() -> str:
    """A fresh secret that is key material (32 random bytes): the processes given it derive
    their keys at once, without scrypt's 16 MB and tens of milliseconds per process."""
    return KEY_PREFIX + os.urandom(32).hex()


@functools.lru_cache(maxsize=4)
def _master(secret: bytes) -> bytes:
    """32 bytes of key material: the secret itself when it is key material, else scrypt of it
    (once per process and secret: the CURVE keys and the monitor's report key share it)."""
    prefix = KEY_PREFIX.encode()
    if secret.startswith(prefix) and len(secret) == len(prefix) + 64:
        try:
            return bytes.fromhex(secret[len(prefix):].decode("ascii"))
        except ValueError:
            pass            # not hex: an ordinary passphrase that happens to start so
    return hashlib.scrypt(secret, salt=_SALT, n=2 ** 14, r=8, p=1, dklen=32)


def _keypair(master: bytes, role: bytes) -> Tuple[bytes, bytes]:
    seed = hashlib.sha256(_SALT + b"\0" + role + b"\0" + master).digest()
    secret_key = z85.encode(seed)
    return zmq.curve_public(secret_key), secret_key


def derived_key(secret: Union[str, bytes], purpose: bytes) -> bytes:
    """32 bytes for ``purpose``, derived from the secret through the same slow derivation as
    the CURVE keys: what is signed or authenticated with it is no quicker a test of a
    passphrase than a captured handshake.

    >>> k = derived_key("naiad-key:" + "ab" * 32, b"monitor-report")
    >>> len(k), k == derived_key("naiad-key:" + "ab" * 32, b"other")
    (32, False)
    """
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.sha256(_SALT + b"\0derived\0" + purpose + b"\0" + _master(secret)).digest()


class CurveKeys:
    """The server and client key pairs of one computation."""

    def __init__(self, secret: Union[str, bytes]):
        if isinstance(secret, str):
            secret = secret.encode()
        if not secret:
            raise ValueError("the CURVE secret must not be empty")
        master = _master(secret)
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
               "send data: set NAIAD_SECRET (for example NAIAD_SECRET=naiad-key:$(python -c "
               "'import secrets; print(secrets.token_hex(32))'), 32 random bytes taken as the "
               "key without a slow derivation), or NAIAD_SECRET_FILE to a file only "
               "you can read, or pass secret=... (naiad.execute makes one itself)")


def resolve_secret(option: Optional[object]) -> Optional[bytes]:
    """The shared secret: the ``secret`` option, else ``NAIAD_SECRET``, else the contents of
    the file ``NAIAD_SECRET_FILE`` names (refused when others may read it)."""
    value = option if option is not None else os.environ.get("NAIAD_SECRET")
    if (value is None or value == "") and os.environ.get("NAIAD_SECRET_FILE"):
        path = os.environ["NAIAD_SECRET_FILE"]
        try:
            value = read_secret_file(path)
        except OSError as exc:
            if exc.errno is None:
                raise                   # the file's mode: its message says how to fix it
            raise type(exc)(exc.errno, f"NAIAD_SECRET_FILE={path}: {exc.strerror}; set it to "
                                       "a file holding the run's secret") from None
        if not value:
            msg = f"NAIAD_SECRET_FILE={path} is empty; write the run's secret into it"
            raise ValueError(msg)
    if value is None or value == "":
        return None
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
