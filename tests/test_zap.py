"""The ZAP handler over real sockets: only the allowed CURVE key gets data through.

A stranger is given more than an attacker would have: the server's public key, so it completes
the CURVE handshake and only the ZAP handler stands in its way.  Other strangers (a key pair of
another secret, no CURVE at all) fail earlier, in the handshake.  Every test checks what arrived
against what the rightful peer sent, and that the handler's thread ends with its fabric.
"""

from __future__ import annotations

import random
import threading

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from naiad.messages import DATA
from naiad.progress.timestamp import Timestamp
from naiad.transport.security import CurveKeys
from naiad.transport.wire import encode
from naiad.transport.zap import ZapHandler
from tests.test_transport import BOUND, close_all, drain, zmq_fabrics

_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def _zap_threads():
    return [t for t in threading.enumerate() if t.name == "naiad-zap" and t.is_alive()]


def _stranger(ctx: zmq.Context, kind: str, keys: CurveKeys) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.linger = 0
    if kind == "unknown client key":          # knows the server key, not the client key
        public, secret = zmq.curve_keypair()
        sock.curve_publickey, sock.curve_secretkey = public, secret
        sock.curve_serverkey = keys.server_public
    elif kind == "another secret":
        CurveKeys(b"not the secret").connect_as_client(sock)
    return sock


def _wait_for_failed_handshake(monitor: zmq.Socket) -> int:
    """The first failed-handshake event on ``monitor`` (bounded)."""
    monitor.rcvtimeo = int(BOUND * 1000)
    while True:
        event = recv_monitor_message(monitor)["event"]
        if event & _FAILED:
            return event


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["unknown client key", "another secret", "no CURVE"])
@pytest.mark.parametrize("seed", [1, 2])
def test_only_the_allowed_key_gets_data_through(kind, seed):
    rng = random.Random(seed)
    keys = CurveKeys(b"the secret %d" % seed)
    ctx = zmq.Context()
    zap = ZapHandler(ctx, [keys.client_public])
    server = ctx.socket(zmq.PULL)
    server.linger = 0
    keys.serve(server)
    server.bind("tcp://127.0.0.1:*")
    endpoint = server.getsockopt_string(zmq.LAST_ENDPOINT)
    monitor = server.get_monitor_socket()
    friend = ctx.socket(zmq.PUSH)
    friend.linger = 0
    keys.connect_as_client(friend)
    stranger = _stranger(ctx, kind, keys)
    try:
        stranger.connect(endpoint)
        for _ in range(rng.randrange(1, 20)):
            stranger.send(b"stranger " + rng.randbytes(rng.randrange(0, 100)), zmq.NOBLOCK)
        event = _wait_for_failed_handshake(monitor)
        if kind == "unknown client key":
            assert event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
            assert zap.wait_for_refusals(1, BOUND)
        sent = [b"friend %d " % i + rng.randbytes(rng.randrange(0, 1000))
                for i in range(rng.randrange(1, 50))]
        friend.connect(endpoint)
        for m in sent:
            friend.send(m)
        friend.send(b"end")
        server.rcvtimeo = int(BOUND * 1000)
        got = []
        while (m := server.recv()) != b"end":
            got.append(m)
        assert got == sent
        assert zap.admitted >= 1
    finally:
        for s in (stranger, friend, monitor, server):
            s.close(linger=0)
        zap.stop()
        ctx.term()
    assert not zap.running


@pytest.mark.timeout(60)
@pytest.mark.parametrize("order", ["stop, then term", "term, then stop"])
def test_the_handler_thread_ends_either_way(order):
    before = len(_zap_threads())
    ctx = zmq.Context()
    zap = ZapHandler(ctx, [CurveKeys(b"s").client_public])
    assert zap.running and len(_zap_threads()) == before + 1
    if order == "stop, then term":
        zap.stop()
        assert not zap.running
    terminated = threading.Thread(target=ctx.term)
    terminated.start()
    terminated.join(BOUND)
    assert not terminated.is_alive(), "the context did not terminate: a socket was left open"
    zap.stop()
    assert not zap.running and len(_zap_threads()) == before


def test_one_handler_per_context():
    ctx = zmq.Context()
    zap = ZapHandler(ctx, [])
    try:
        with pytest.raises(zmq.ZMQError):
            ZapHandler(ctx, [])
    finally:
        zap.stop()
        ctx.term()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("seed", [3, 4])
def test_a_fabric_reads_nothing_from_a_stranger_who_knows_the_server_key(seed):
    """A stranger sends a well-formed data message to a worker's socket; the worker receives
    only what the peer process sent, and no handler thread outlives the fabrics."""
    rng = random.Random(seed)
    before = len(_zap_threads())
    fabrics = zmq_fabrics(2, 1, secret=f"fabric secret {seed}")
    ctx = zmq.Context()
    try:
        assert len(_zap_threads()) == before + 2
        keys = fabrics[1].keys
        assert keys is not None and fabrics[1].auth is not None
        stranger = _stranger(ctx, "unknown client key", keys)
        stranger.connect(fabrics[1].worker_endpoints[1])
        forged = [(DATA, 7, Timestamp(0), ["forged", rng.random()])]
        payload, buffers = encode(forged)
        stranger.send_multipart([b"D", payload, *buffers])
        assert fabrics[1].auth.wait_for_refusals(1, BOUND)
        stranger.close(linger=0)
        batches = [[rng.randrange(10 ** 6) for _ in range(rng.randrange(1, 300))]
                   for _ in range(rng.randrange(1, 20))]
        for b in batches:
            fabrics[0].send(0, 1, 7, Timestamp(0), b)
        fabrics[0].flush(0)
        got = drain(fabrics[1], 0, len(batches))
        assert [m[3] for m in got if m[0] == DATA] == batches
    finally:
        ctx.term()
        close_all(fabrics)
    assert len(_zap_threads()) == before
