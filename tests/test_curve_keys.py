"""CURVE keys from a secret: scrypt for a passphrase, none for key material (``naiad-key:``).

The oracle re-derives the keys from the written rule (security.md): 32 bytes of master key,
scrypt of the secret unless the secret is ``naiad-key:`` and 64 hex digits, then a SHA-256 per
role.  Keys made either way must let the rightful peer through real sockets.
"""

from __future__ import annotations

import hashlib
import random

import pytest
import zmq
from zmq.utils import z85

from naiad.transport.security import KEY_PREFIX, CurveKeys, random_secret
from naiad.transport.zap import ZapHandler


def _oracle(secret: bytes, material: bool):
    master = (bytes.fromhex(secret[len(KEY_PREFIX):].decode()) if material else
              hashlib.scrypt(secret, salt=b"naiad-curve-v2", n=2 ** 14, r=8, p=1, dklen=32))

    def public(role: bytes) -> bytes:
        seed = hashlib.sha256(b"naiad-curve-v2\0" + role + b"\0" + master).digest()
        return zmq.curve_public(z85.encode(seed))
    return public(b"server"), public(b"client")


@pytest.mark.parametrize("seed", range(3))
def test_key_material_is_used_as_it_is_and_a_passphrase_through_scrypt(seed):
    rng = random.Random(seed)
    material = (KEY_PREFIX + rng.randbytes(32).hex()).encode()
    upper = material[:len(KEY_PREFIX)] + material[len(KEY_PREFIX):].upper()
    not_hex = (KEY_PREFIX + "".join(rng.choice("ghijkz") for _ in range(64))).encode()
    short = material[:-2]
    passphrase = rng.randbytes(rng.randrange(1, 40)).hex().encode()
    for secret, is_material in ((material, True), (upper, True), (not_hex, False),
                                (short, False), (passphrase, False)):
        keys = CurveKeys(secret)
        assert (keys.server_public, keys.client_public) == _oracle(secret, is_material), secret
    assert CurveKeys(material).client_public == CurveKeys(upper).client_public


def test_random_secrets_are_key_material_and_differ():
    made = {random_secret() for _ in range(50)}
    assert len(made) == 50
    for s in made:
        assert s.startswith(KEY_PREFIX) and len(s) == len(KEY_PREFIX) + 64
        bytes.fromhex(s[len(KEY_PREFIX):])
    assert len({CurveKeys(s).client_public for s in made}) == 50


@pytest.mark.timeout(60)
@pytest.mark.parametrize("secret", [random_secret(), "a passphrase"])
def test_keys_of_either_kind_connect_and_another_secret_does_not(secret):
    keys, other = CurveKeys(secret), CurveKeys(random_secret())
    ctx = zmq.Context()
    zap = ZapHandler(ctx, [keys.client_public])
    server = ctx.socket(zmq.PULL)
    keys.serve(server)
    server.bind("tcp://127.0.0.1:*")
    endpoint = server.getsockopt_string(zmq.LAST_ENDPOINT)
    socks = []
    try:
        for who in (other, keys):
            sock = ctx.socket(zmq.PUSH)
            sock.linger = 0
            who.connect_as_client(sock)
            sock.connect(endpoint)
            sock.send(b"from the rightful peer" if who is keys else b"from another run")
            socks.append(sock)
        server.rcvtimeo = 20_000
        assert server.recv() == b"from the rightful peer"
        server.rcvtimeo = 300
        with pytest.raises(zmq.Again):
            server.recv()
    finally:
        for s in socks + [server]:
            s.close(linger=0)
        zap.stop()
        ctx.term()
