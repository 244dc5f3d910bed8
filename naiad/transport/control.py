"""The control plane between processes: handshake, heartbeats, barriers, failure relay, goodbye.

Each process binds one control socket (PULL) and connects one PUSH socket to every peer's; a
communication thread serves them.  At start-up every process sends HELLO with its graph's
fingerprint, its layout and its workers' data endpoints, and waits (bounded) for everyone's; a
process that connects before its graph exists sends the fingerprint later, as an ARRIVE at
``activate`` (:meth:`ControlPlane.post_arrival`, :meth:`ControlPlane.arrivals`).
ZeroMQ's own heartbeats run on the control connections (in its I/O thread, without the GIL): a
peer that is stopped or gone is disconnected, and if it did not say goodbye (DONE) within a
grace period it is reported as a :class:`naiad.RemoteFailure`.  A failure of this process is
relayed to every peer (FAIL), which reports it through its hooks as a RemoteFailure of this
process.  Barriers (ARRIVE) return process 0's value; a gather is an ARRIVE sent to process 0
alone, which waits for every other process's while they go on.  The data plane
(:mod:`naiad.transport.zmq_fabric`) sends no control messages and this module no batches.
"""

from __future__ import annotations

import errno
import os
import pickle
import queue
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import zmq

from naiad.errors import ComputationFailed, NaiadError, RemoteFailure
from naiad.transport.pieces import FRAME_LIMIT, bound
from naiad.transport.protocol import FabricHooks
from naiad.transport.security import CurveKeys
from naiad.transport.wire import dump_failure, load_failure

__all__ = ["ControlPlane", "connect_push", "HELLO", "FAIL", "DONE", "ARRIVE"]


# Control frame tags.
HELLO, FAIL, DONE, ARRIVE = b"H", b"F", b"E", b"A"
ARRIVE_AT_ZERO = b"a"     # queued for the communication thread only: sent as ARRIVE to process 0
_GONE_GRACE = 0.5   # seconds a disconnected peer has to show it had finished (its DONE)


def connect_push(ctx: zmq.Context, keys: Optional[CurveKeys], endpoint: str,
                 heartbeat_timeout: Optional[float] = None, hwm: int = 0) -> zmq.Socket:
    """A PUSH socket to ``endpoint`` (with CURVE when ``keys``; with ZeroMQ heartbeats when
    ``heartbeat_timeout`` is given; queueing at most ``hwm`` messages, 0: no bound)."""
    sock = _push_socket(ctx, keys, heartbeat_timeout, hwm)
    sock.connect(endpoint)
    return sock


def connect_watched(ctx: zmq.Context, keys: Optional[CurveKeys], endpoint: str,
                    heartbeat_timeout: float, events: int) -> Tuple[zmq.Socket, zmq.Socket]:
    """:func:`connect_push`, and a monitor of its ``events``, watching from before the connect:
    libzmq tells a monitor only the events after it is attached, so a handshake that completed
    before would never be seen (and the peer never known to have been connected)."""
    sock = _push_socket(ctx, keys, heartbeat_timeout, 0)
    monitor = sock.get_monitor_socket(events)
    sock.connect(endpoint)
    return sock, monitor


def _push_socket(ctx: zmq.Context, keys: Optional[CurveKeys],
                 heartbeat_timeout: Optional[float], hwm: int) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.linger = 0
    sock.sndhwm = hwm
    if heartbeat_timeout is not None:
        ms = max(100, int(heartbeat_timeout * 1000))
        ivl = max(50, min(1000, ms // 4))
        sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
        # A ping's answer is awaited from when the ping leaves, up to an interval after the
        # silence began: so the wait is the rest of heartbeat_timeout, not all of it again.
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(50, ms - ivl))
        sock.setsockopt(zmq.HEARTBEAT_TTL, ms)
    if keys is not None:
        keys.connect_as_client(sock)
    return sock


_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_REFUSALS = 3       # handshakes a peer's endpoint drops before this process gives up on it


def _monitor_event(frames: List[bytes]) -> int:
    """The event number of a socket monitor's message (16 bits of event, 32 of value, then the
    endpoint); ``zmq.utils.monitor`` does the same but imports ``asyncio``."""
    return struct.unpack_from("=H", frames[0])[0]


class ControlPlane:
    """One process's control connections and the thread that serves them."""

    def __init__(self, ctx: zmq.Context, keys: Optional[CurveKeys], process_index: int,
                 processes: int, heartbeat_timeout: float, hooks: FabricHooks):
        self.ctx = ctx
        self.keys = keys
        self.process_index = process_index
        self.processes = processes
        self.heartbeat_timeout = heartbeat_timeout
        self.hooks = hooks
        self.endpoints: List[str] = []
        self.pull: Optional[zmq.Socket] = None
        self.done_from: set = set()           # peers that said goodbye (or failed)
        self._closed = False
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()   # wakes the communication thread at once
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._push: Dict[int, zmq.Socket] = {}
        self._monitors: Dict[zmq.Socket, int] = {}
        self._refused: Dict[int, int] = {}     # peer -> handshakes dropped before connecting
        self._connected: set = set()
        self._gone: Dict[int, float] = {}        # disconnected peers not yet known to be done
        self._hello: Dict[int, tuple] = {}
        self._arrivals: Dict[str, Dict[int, Any]] = {}
        self._arrived: Dict[str, Any] = {}       # barriers this process arrived at, not awaited
        self._arrival_cv = threading.Condition()
        self._hello_cv = threading.Condition()   # notified by each hello and by a peer's failure
        self._finished = threading.Event()
        self._stop_thread = False
        self._thread: Optional[threading.Thread] = None

    def peers(self) -> List[int]:
        return [p for p in range(self.processes) if p != self.process_index]

    # ---- start-up ---------------------------------------------------------------------------
    def bind(self, address: str) -> str:
        """Bind the control socket; returns its endpoint (what the rendezvous announces)."""
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        bound(self.pull)
        if self.keys is not None:
            self.keys.serve(self.pull)
        try:
            self.pull.bind(address)
        except zmq.ZMQError as exc:
            msg = f"process {self.process_index} cannot listen on {address}: {exc}"
            if exc.errno == errno.EADDRINUSE:
                msg += (f"; another program listens there, or another process was started "
                        f"with the same -p {self.process_index}: give each process its own "
                        "index, and each index its own host:port in -h")
            raise NaiadError(msg) from exc
        return self.pull.getsockopt_string(zmq.LAST_ENDPOINT)

    def start(self, endpoints: List[str], hello: Any) -> None:
        """Connect to every peer's control socket and start the communication thread, which
        sends ``hello`` (pickled) to each."""
        self.endpoints = list(endpoints)
        events = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | _HANDSHAKE_FAILED
        for p in self.peers():
            self._push[p], monitor = connect_watched(self.ctx, self.keys, self.endpoints[p],
                                                     self.heartbeat_timeout, events)
            self._monitors[monitor] = p
        self._thread = threading.Thread(target=self._comm_loop, args=(pickle.dumps(hello),),
                                        daemon=True, name=f"naiad-comm-{self.process_index}")
        self._thread.start()

    def wait_for_peers(self, timeout: float,
                       check: Optional[Callable[[Dict[int, Any]], None]] = None
                       ) -> Dict[int, Any]:
        """Every peer's hello, by process (bounded by ``timeout`` seconds).  ``check`` sees the
        hellos as they come and raises for one that cannot work with this process (another
        layout), so a misconfigured process is named at once; a peer that fails or is gone
        meanwhile ends the wait at once with its error."""
        deadline = time.monotonic() + timeout
        with self._hello_cv:
            while True:
                self.hooks.check_failed()
                hellos = dict(self._hello)
                if check is not None:
                    check(hellos)
                if len(hellos) >= self.processes - 1:
                    return hellos
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [f"{p} ({self.endpoints[p]})" for p in self.peers()
                               if p not in hellos]
                    msg = (f"process {self.process_index} waited {timeout:.0f} s for "
                           f"process(es) {', '.join(missing)}; if it was started, it failed or "
                           "stopped before it connected (see its own output); else start "
                           "every process with the same --numprocs and --hosts, or raise "
                           "connect_timeout (--connect-timeout S)")
                    refused = [p for p in self.peers() if p not in hellos and self._refused.get(p)]
                    if refused:
                        msg += (f"; the CURVE handshake with process(es) "
                                f"{', '.join(map(str, refused))} failed: were the processes "
                                "given different secrets (NAIAD_SECRET, NAIAD_SECRET_FILE, "
                                "secret=)?")
                    raise ComputationFailed(msg)
                self._hello_cv.wait(left)

    # ---- requests from this process ---------------------------------------------------------
    def relay_failure(self, exc: BaseException) -> None:
        """Tell every peer that this process failed with ``exc``."""
        self._post(FAIL, exc)

    def arrive(self, name: str, value: Any = None) -> None:
        """Tell every peer that this process reached barrier ``name`` (with ``value``), without
        waiting: :meth:`barrier` with the same name then only waits."""
        self._arrived[name] = value
        self._post(ARRIVE, (name, value))

    def barrier(self, name: str, timeout: float, value: Any = None) -> Any:
        """Wait until every process reached ``name``; returns process 0's ``value`` (the one
        given to :meth:`arrive`, if this process arrived before)."""
        if name in self._arrived:
            value = self._arrived.pop(name)
        else:
            self._post(ARRIVE, (name, value))
        got = self._await(name, timeout)
        return value if self.process_index == 0 else got.get(0)

    def post_arrival(self, name: str, value: Any) -> None:
        """Send ``value`` for ``name`` to every peer; :meth:`arrivals` collects theirs."""
        self._post(ARRIVE, (name, value))

    def arrived_named(self, prefix: str) -> List[Tuple[str, int]]:
        """``(name, process)`` of every arrival so far (not yet awaited) at a barrier whose
        name starts with ``prefix``: what a hook set up late has missed."""
        with self._arrival_cv:
            return [(name, proc) for name, procs in self._arrivals.items()
                    if name.startswith(prefix) for proc in procs]

    def arrivals(self, name: str, timeout: float) -> Dict[int, Any]:
        """Every peer's value for ``name`` (:meth:`post_arrival`), by process, waiting at most
        ``timeout`` s.  A peer that says goodbye first never sends one: that fails at once."""
        return self._await(name, timeout, ended_fails=True)

    def gather(self, name: str, timeout: float, value: Any = None) -> Dict[int, Any]:
        """Process 0 waits until every other process reached ``name`` and returns their
        ``value`` by process; the others only tell process 0 (with ``value``), go on at once
        and get ``{}``."""
        if self.process_index != 0:
            self._post(ARRIVE_AT_ZERO, (name, value))
            return {}
        return self._await(name, timeout)

    def _await(self, name: str, timeout: float, ended_fails: bool = False) -> Dict[int, Any]:
        """Every peer's arrival at ``name``, by process (bounded by ``timeout`` seconds; with
        ``ended_fails``, failing as soon as a peer that has not arrived said goodbye)."""
        deadline = time.monotonic() + timeout
        with self._arrival_cv:
            while True:
                got = self._arrivals.get(name, {})
                if len(got) >= self.processes - 1:
                    del self._arrivals[name]
                    return got
                self.hooks.check_failed()
                ended = [p for p in self.peers() if p in self.done_from and p not in got]
                if ended_fails and ended:
                    msg = (f"process(es) {ended} ended before reaching {name} (the program "
                           f"returned or failed first); process {self.process_index} stops")
                    raise ComputationFailed(msg)
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [p for p in self.peers() if p not in got]
                    msg = (f"process {self.process_index} waited {timeout:.0f} s at {name} for "
                           f"process(es) {missing}")
                    raise ComputationFailed(msg)
                self._arrival_cv.wait(min(left, 0.2))

    def finish(self, timeout: float) -> None:
        """Say goodbye and wait (at most ``timeout`` s) for every peer's."""
        self._post(DONE, None)
        self._finished.wait(timeout)

    def close(self) -> None:
        """Stop the thread and close the control sockets."""
        self._closed = True
        self._stop_thread = True
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        for mon in self._monitors:
            mon.close(linger=0)
        for s in self._push.values():
            s.close(linger=500)   # lets a final DONE or FAIL reach a live peer
        if self.pull is not None:
            self.pull.close(linger=0)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _post(self, tag: bytes, value: Any) -> None:
        self._queue.put((tag, value))
        try:
            os.write(self._wake_w, b"!")
        except OSError:  # pragma: no cover - already closed
            pass

    # ---- the communication thread -------------------------------------------------------------
    def _comm_loop(self, hello: bytes) -> None:
        try:
            self._comm(hello)
        except Exception as exc:  # noqa: BLE001 - must reach the computation
            if not self._closed:
                import logging   # here: the logging package costs each process ~4 ms
                logging.getLogger("naiad.transport").exception("communication thread failed")
                self.hooks.fail(ComputationFailed(f"process {self.process_index}: communication "
                                                  f"thread failed: {exc!r}"))

    def _send_all(self, tag: bytes, payload: bytes) -> None:
        if len(payload) > FRAME_LIMIT:
            msg = (f"process {self.process_index}: a control message ({tag!r}) of "
                   f"{len(payload)} bytes is over the {FRAME_LIMIT} bytes the other processes "
                   "accept; control messages carry the hello, barrier values and failures "
                   "(shortened to fit), all small")
            raise NaiadError(msg)
        me = self.process_index.to_bytes(4, "little")
        for s in self._push.values():
            s.send_multipart([tag, me, payload])

    def _comm(self, hello: bytes) -> None:
        assert self.pull is not None
        self._send_all(HELLO, hello)
        poller = zmq.Poller()
        poller.register(self.pull, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        for mon in self._monitors:
            poller.register(mon, zmq.POLLIN)
        sent_done = False
        while not self._stop_thread:
            sent_done = self._send_posted(sent_done)
            if sent_done and len(self.done_from) == self.processes - 1:
                self._finished.set()
            if self._gone:
                self._check_gone()
            events = dict(poller.poll(100 if self._gone else 1000))
            if self._wake_r in events:
                try:
                    os.read(self._wake_r, 65536)
                except BlockingIOError:
                    pass
            for mon, p in self._monitors.items():
                if mon in events:
                    self._on_monitor(mon, p)
            if self.pull in events:
                self._receive()
        self._send_posted(sent_done)   # a goodbye posted just before close() still leaves

    def _send_posted(self, sent_done: bool) -> bool:
        """Send what this process posted; returns whether DONE has been sent."""
        while True:
            try:
                tag, value = self._queue.get_nowait()
            except queue.Empty:
                return sent_done
            if tag == FAIL:
                self._send_all(FAIL, dump_failure(value, self.process_index, FRAME_LIMIT))
            elif tag == ARRIVE:
                self._send_all(ARRIVE, pickle.dumps(value, protocol=5))
            elif tag == ARRIVE_AT_ZERO:
                self._push[0].send_multipart([ARRIVE, self.process_index.to_bytes(4, "little"),
                                              pickle.dumps(value, protocol=5)])
            elif tag == DONE and not sent_done:
                sent_done = True
                self._send_all(DONE, b"")

    def _receive(self) -> None:
        assert self.pull is not None
        while True:
            try:
                frames = self.pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            tag = frames[0].bytes
            proc = int.from_bytes(frames[1].bytes, "little")
            if tag == HELLO:
                with self._hello_cv:
                    self._hello[proc] = pickle.loads(frames[2].bytes)
                    self._hello_cv.notify_all()
            elif tag == DONE:
                self.done_from.add(proc)
                with self._arrival_cv:
                    self._arrival_cv.notify_all()       # a wait for it in arrivals() ends
            elif tag == ARRIVE:
                name, value = pickle.loads(frames[2].bytes)
                with self._arrival_cv:
                    self._arrivals.setdefault(name, {})[proc] = value
                    self._arrival_cv.notify_all()
                self.hooks.arrived(name, proc)
            elif tag == FAIL:
                exc = load_failure(frames[2].bytes, proc)
                self.done_from.add(proc)
                self.hooks.fail(RemoteFailure(proc, exc))
                self._wake_hello_wait()

    def _wake_hello_wait(self) -> None:
        """A wait for the hellos ends with the failure just recorded."""
        with self._hello_cv:
            self._hello_cv.notify_all()

    def _on_monitor(self, mon: zmq.Socket, p: int) -> None:
        """A connection event of the control socket to process ``p``."""
        while True:
            try:
                event = _monitor_event(mon.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected.add(p)
            elif event & _HANDSHAKE_FAILED and p not in self._connected:
                # The connection was made, and what listens there dropped it in the CURVE
                # handshake, again and again: it refuses this process's key (another secret),
                # or it is not a process of this run. Waiting would not change that.
                self._refused[p] = self._refused.get(p, 0) + 1
                if self._refused[p] == _REFUSALS:
                    msg = (f"process {self.process_index}: what listens at {self.endpoints[p]} "
                           f"(process {p}) refused this process's CURVE handshake "
                           f"{_REFUSALS} times: the processes were given different secrets, or "
                           "another program listens there; give every process the same "
                           "NAIAD_SECRET, NAIAD_SECRET_FILE or secret=, and check --hosts")
                    self.hooks.fail(ComputationFailed(msg))
                    self._wake_hello_wait()
                    return
            elif event == zmq.EVENT_DISCONNECTED and p in self._connected:
                # A peer that ended normally sent DONE before it closed, but on another
                # connection: give that message a moment to arrive before calling it gone.
                self._gone.setdefault(p, time.monotonic())

    def _check_gone(self) -> None:
        now = time.monotonic()
        for p, since in list(self._gone.items()):
            if p in self.done_from or self.hooks.failure() is not None or self._closed:
                del self._gone[p]
            elif now - since > _GONE_GRACE:
                del self._gone[p]
                msg = (f"process {p} ({self.endpoints[p]}) is gone: its connection closed, or "
                       f"answered no heartbeat for {self.heartbeat_timeout:g} s (it exited, was "
                       f"killed or stopped, or its host is unreachable); process "
                       f"{self.process_index} stops")
                self.done_from.add(p)
                self.hooks.fail(RemoteFailure(p, None, msg))
                self._wake_hello_wait()
