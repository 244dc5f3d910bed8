"""Frames before authentication are bounded; the computation's own large frames go as pieces.

A stranger who can reach a port speaks ZMTP with the CURVE mechanism and announces a frame of
8 GB: libzmq read such a frame whole before the handshake judged its sender, so anyone on the
host could make a process hold as much memory as they cared to send.  Every listening socket
now refuses frames over ``FRAME_LIMIT`` and drops the connection; the computation's own records
beyond it (in band, a NumPy array, an Arrow column) cross between processes as pieces.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import zmq

import naiad
import stages
from naiad.transport.pieces import FRAME_LIMIT
from naiad.messages import DATA
from naiad.partition import route_keys
from naiad.testing import free_ports
from tests.test_transport import close_all, drain, zmq_fabrics

PUSH_AT_MOST = 256 << 20


def _greeting() -> bytes:
    """A ZMTP 3.0 greeting asking for the CURVE mechanism."""
    return b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + bytes(32)


def _flood(endpoint: str) -> int:
    """Announce a command frame of 8 GB and push bytes of it until the peer stops reading or
    hangs up; returns how many bytes were accepted."""
    host, port = endpoint.rsplit("/", 1)[1].rsplit(":", 1)
    pushed = 0
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_greeting())
        s.recv(64)
        s.sendall(struct.pack(">BQ", 0x06, 8 << 30))      # a long command frame
        chunk = bytes(1 << 20)
        s.settimeout(3)
        try:
            while pushed < PUSH_AT_MOST:
                s.sendall(chunk)
                pushed += len(chunk)
        except OSError:         # reset, broken pipe, or a timeout: nobody reads any more
            pass
    return pushed


@pytest.mark.timeout(120)
def test_a_stranger_cannot_make_a_socket_hold_a_huge_frame():
    fabrics = zmq_fabrics(2, 1, secret="frame limit")
    try:
        data = fabrics[1].worker_endpoints[1]
        control = fabrics[1].control.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        for endpoint in (data, control):
            t0 = time.monotonic()
            pushed = _flood(endpoint)
            # Loopback buffers take a few MB whoever reads; an unbounded socket took all 256.
            assert pushed < 64 << 20, (endpoint, pushed >> 20)
            assert time.monotonic() - t0 < 30
        # The rightful peer still gets through.
        fabrics[0].send(0, 1, 7, naiad.Timestamp(0), ["after the stranger"])
        fabrics[0].flush(0)
        got = drain(fabrics[1], 0, 1)
        assert [m[3] for m in got if m[0] == DATA] == [["after the stranger"]]
    finally:
        close_all(fabrics)


class _Digest(naiad.Vertex):
    """Sends, for every record, its kind, size and SHA-256."""

    def on_recv(self, edge, record, time):
        if isinstance(record, pa.Table):
            column = record.column("x").combine_chunks()
            raw = column.buffers()[1].to_pybytes()[: column.nbytes]
            self.send_by(0, ("table", record.num_rows, hashlib.sha256(raw).hexdigest()), time)
        elif isinstance(record, np.ndarray):
            self.send_by(0, ("array", record.size, hashlib.sha256(record.tobytes()).hexdigest()),
                         time)
        else:
            self.send_by(0, ("bytes", len(record), hashlib.sha256(record).hexdigest()), time)


def _records():
    rng = np.random.default_rng(7)
    big = int(FRAME_LIMIT * 2.5)
    values = rng.integers(0, 1 << 62, size=big // 8, dtype=np.int64)
    return [rng.bytes(big), values, pa.table({"x": values[::-1].copy()})]


def _expected():
    out = []
    for r in _records():
        if isinstance(r, pa.Table):
            raw = r.column("x").combine_chunks().buffers()[1].to_pybytes()
            out.append(("table", r.num_rows, hashlib.sha256(raw).hexdigest()))
        elif isinstance(r, np.ndarray):
            out.append(("array", r.size, hashlib.sha256(r.tobytes()).hexdigest()))
        else:
            out.append(("bytes", len(r), hashlib.sha256(r).hexdigest()))
    return out


def _program(comp):
    inp = comp.new_input(name="large")
    # Every record goes to the worker of process 1: each crosses the wire.
    to_process_1 = route_keys(2)[1]
    got = stages.unary(inp.stream, _Digest, partition_by=lambda r: to_process_1,
                       name="digest").collect()
    comp.activate()
    inp.on_next(_records() if comp.process_index == 0 else [])
    inp.on_completed()
    comp.join()
    return got.results


@pytest.mark.timeout(240)
def test_records_larger_than_a_frame_cross_between_processes_intact():
    results = naiad.execute(_program, processes=2, workers=1)
    assert results[0] == {} or not any(results[0].values())      # all digested in process 1
    got = sorted(results[1][0])
    assert got == sorted(_expected())
    assert {kind for kind, _, _ in got} == {"bytes", "array", "table"}


@pytest.mark.timeout(120)
def test_an_error_too_large_for_a_frame_still_reaches_the_other_process():
    """A vertex fails with a message quoting a huge record: its error pickled to more than the
    other processes accept, the communication thread died on it, and process 0 learnt only that
    process 1 was gone.  The error now crosses shortened, and process 1 keeps it whole."""
    script = str(Path(__file__).parent / "hand_started_big_failure.py")
    ports = [str(p) for p in free_ports(2)]
    procs = [subprocess.Popen([sys.executable, script, str(i), *ports], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
    (out0, err0), (out1, err1) = outs
    assert "bad record" in out0 and "shortened" in out0 and "is gone" not in out0, (out0, err0)
    assert "stage 'boom'" in out0, out0
    assert out1.startswith("1 VertexError") and "bad record" in out1, out1
    assert "communication thread failed" not in err0 + err1, (err0[-2000:], err1[-2000:])
