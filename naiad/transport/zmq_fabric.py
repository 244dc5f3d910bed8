"""The ZeroMQ fabric: workers in other processes reached over PUSH/PULL sockets.

Every worker binds its own PULL socket and owns one PUSH socket per remote worker; it sends
there, in order, everything it addresses to that worker: data batches and progress updates,
accumulated during a step and pickled together as one message, so the channel between two
workers is FIFO and no message is sent per record.  An idle worker blocks on its socket and on a
wake-up pipe that local senders write to, so remote messages reach it without a thread hop.
Each process also binds a control socket, served by a communication thread: the start-up
handshake (which also announces the workers' endpoints), heartbeats, failure notices, barriers
and the final goodbye; it watches for silent peers.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import threading
import time
from typing import Any, Dict, List, Optional

import cloudpickle
import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import recv_monitor_message

from naiad.errors import ComputationFailed, NaiadError
from naiad.transport.inproc import DATA, PROGRESS, STOP, LocalFabric
from naiad.transport.wire import decode, dump_failure, encode, explain_pickling, load_failure
from naiad.transport.security import (SECRET_HELP, CurveKeys, needs_authentication,
                                      resolve_secret)

__all__ = ["ZmqFabric"]

log = logging.getLogger("naiad.transport")

# Frame tags.
BATCH, HELLO, FAIL, DONE, ARRIVE = b"D", b"H", b"F", b"E", b"A"
_GONE_GRACE = 1.0   # seconds a disconnected peer has to show it had finished (its DONE)
_ITEMS_BEFORE_FLUSH = 64


def _bind_address(host_port: str) -> str:
    host, _, port = host_port.rpartition(":")
    if host in ("localhost", ""):
        host = "127.0.0.1"
    return f"tcp://{host}:{port}"


class ZmqFabric(LocalFabric):
    """Local workers by queue, remote workers by ZeroMQ; constructed by ``Computation.activate``."""

    def __init__(self, comp):
        super().__init__(comp.process_index, comp.processes, comp.workers_per_process)
        self.comp = comp
        opts = comp.options
        self.heartbeat_timeout = float(opts["heartbeat_timeout"])
        self.ctx = zmq.Context()
        self.keys: Optional[CurveKeys] = None
        self.auth = None
        self._closed = False
        self._control: "queue.SimpleQueue" = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()   # wakes the communication thread at once
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        n = self.workers_per_process
        self._push: List[Dict[int, zmq.Socket]] = [{} for _ in range(n)]
        self._out: List[Dict[int, list]] = [{} for _ in range(n)]
        self._data_pull: List[zmq.Socket] = []
        self._pollers: List[zmq.Poller] = []
        self._sleeping = [False] * n
        self._worker_wake = [os.pipe() for _ in range(n)]
        for r, w in self._worker_wake:
            os.set_blocking(r, False)
            os.set_blocking(w, False)   # a full pipe already wakes its reader: never block
        self.worker_endpoints: Dict[int, str] = {}
        self._arrivals: Dict[str, Dict[int, Any]] = {}
        self._arrival_cv = threading.Condition()
        self.bytes_sent = 0
        self.messages_sent = 0
        try:
            self._start(comp)
        except BaseException:
            self._teardown()
            raise

    # ---- start-up ------------------------------------------------------------------------------
    def _start(self, comp) -> None:
        opts = comp.options
        rendezvous = opts.get("rendezvous")
        if comp.hosts is not None:
            bind = _bind_address(comp.hosts[comp.process_index])
            listen_hosts = [_bind_address(h)[6:] for h in comp.hosts]
        else:
            listen = opts.get("listen") or "127.0.0.1"
            bind = f"tcp://{listen}:*"
            listen_hosts = [f"{listen}:0"]
        secret = resolve_secret(opts["secret"])
        if secret is not None:
            self.keys = CurveKeys(secret)
            self.auth = ThreadAuthenticator(self.ctx)
            self.auth.start()
            self.auth.configure_curve_callback(domain="*", credentials_provider=self.keys)
        else:
            where = ("beyond loopback, where anyone could connect" if
                     needs_authentication(listen_hosts) else
                     "on loopback, where any local user could connect")
            msg = f"process {comp.process_index} has no secret and would listen {where}: " \
                  + SECRET_HELP
            raise NaiadError(msg)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        if self.keys is not None:
            self.keys.serve(self.pull)
        try:
            self.pull.bind(bind)
        except zmq.ZMQError as exc:
            msg = f"process {comp.process_index} cannot listen on {bind}: {exc}"
            raise NaiadError(msg) from exc
        me = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        data_bind = me.rsplit(":", 1)[0] + ":*"
        for i in range(self.workers_per_process):
            sock = self.ctx.socket(zmq.PULL)
            sock.linger = 0
            if self.keys is not None:
                self.keys.serve(sock)
            sock.bind(data_bind)
            self._data_pull.append(sock)
            self.worker_endpoints[self.first + i] = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(self._worker_wake[i][0], zmq.POLLIN)
            self._pollers.append(poller)
        if rendezvous is not None:
            self.endpoints = list(rendezvous(me))
        else:
            self.endpoints = [_bind_address(h) for h in comp.hosts]
        if len(self.endpoints) != self.processes:
            msg = f"rendezvous returned {len(self.endpoints)} endpoints for {self.processes} processes"
            raise NaiadError(msg)
        self.fingerprint = comp.graph.fingerprint()
        self._ctl_push: Dict[int, zmq.Socket] = {p: self._connect(p, heartbeat=True)
                                                 for p in self._peers()}
        # ZeroMQ's own heartbeats run in its I/O thread, without the GIL: a peer whose vertex
        # holds the GIL for long stays connected, one that is stopped or gone is disconnected.
        self._monitors: Dict[zmq.Socket, int] = {
            s.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED): p
            for p, s in self._ctl_push.items()}
        self._connected: set = set()
        self._gone: Dict[int, float] = {}        # disconnected peers not yet known to be done
        self._hello: Dict[int, tuple] = {}
        self._done_from: set = set()
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._stop_thread = False
        self._thread = threading.Thread(target=self._comm_loop, daemon=True,
                                        name=f"naiad-comm-{self.process_index}")
        self._thread.start()
        self._wait_for_peers(float(opts["connect_timeout"]))

    def _peers(self):
        return [p for p in range(self.processes) if p != self.process_index]

    def _connect(self, proc: int, endpoint: Optional[str] = None,
                 heartbeat: bool = False) -> zmq.Socket:
        sock = self.ctx.socket(zmq.PUSH)
        sock.linger = 0
        sock.sndhwm = 0
        if heartbeat:
            ms = max(100, int(self.heartbeat_timeout * 1000))
            sock.setsockopt(zmq.HEARTBEAT_IVL, max(50, min(1000, ms // 4)))
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, ms)
            sock.setsockopt(zmq.HEARTBEAT_TTL, ms)
        if self.keys is not None:
            self.keys.connect_as_client(sock)
        sock.connect(endpoint or self.endpoints[proc])
        return sock

    def _wait_for_peers(self, timeout: float) -> None:
        if not self._ready.wait(timeout):
            missing = [f"{p} ({self.endpoints[p]})" for p in self._peers() if p not in self._hello]
            msg = (f"process {self.process_index} waited {timeout:.0f} s for process(es) "
                   f"{', '.join(missing)}; start every process with the same --numprocs and "
                   "--hosts, or raise connect_timeout")
            raise ComputationFailed(msg)
        self.comp.check_failed()
        for p, (fp, workers, processes, endpoints) in sorted(self._hello.items()):
            if (workers, processes) != (self.workers_per_process, self.processes):
                msg = (f"process {p} runs {processes} process(es) x {workers} worker(s) but "
                       f"process {self.process_index} runs {self.processes} x "
                       f"{self.workers_per_process}; give every process the same -n and -t")
                raise ComputationFailed(msg)
            if fp != self.fingerprint:
                msg = (f"process {p} built a different dataflow graph (fingerprint {fp}) than "
                       f"process {self.process_index} ({self.fingerprint}); every process must "
                       "build the same stages in the same order")
                raise ComputationFailed(msg)
            for i, ep in enumerate(endpoints):
                self.worker_endpoints[p * workers + i] = ep

    # ---- the worker side ---------------------------------------------------------------------
    def _put(self, local: int, msg: tuple) -> None:
        self.inboxes[local].put(msg)
        if self._sleeping[local]:
            try:
                os.write(self._worker_wake[local][1], b"!")
            except OSError:  # pragma: no cover - the pipe is full: the worker wakes anyway
                pass

    def send(self, src: int, dst: int, conn_id: int, time, records: list) -> None:
        local = dst - self.first
        if 0 <= local < self.workers_per_process:
            self._put(local, (DATA, conn_id, time, records))
            return
        out = self._out[src - self.first]
        items = out.get(dst)
        if items is None:
            out[dst] = items = []
        items.append((DATA, conn_id, time, records))
        if len(items) >= _ITEMS_BEFORE_FLUSH:
            self._send_items(src, dst, items)
            out[dst] = []

    def broadcast_progress(self, src: int, updates: list) -> None:
        self.progress_messages += 1
        self.progress_updates += len(updates)
        if self._measure:
            self.progress_bytes += len(pickle.dumps(updates, protocol=5))
        item = (PROGRESS, src, updates)
        me = src - self.first
        for i in range(self.workers_per_process):
            if i != me:
                self._put(i, item)
        out = self._out[me]
        wpp = self.workers_per_process
        for proc in self._peers():
            if proc in self._done_from:
                continue
            for dst in range(proc * wpp, (proc + 1) * wpp):
                items = out.get(dst)
                if items is None:
                    out[dst] = items = []
                items.append(item)
        self.flush(src)

    def post(self, local_index: int, msg: tuple) -> None:
        self._put(local_index, msg)

    def flush(self, src: int) -> None:
        out = self._out[src - self.first]
        for dst, items in out.items():
            if items:
                self._send_items(src, dst, items)
        out.clear()

    def receive(self, local_index: int) -> Any:
        """Messages waiting on the worker's own socket, in the order their senders sent them."""
        sock = self._data_pull[local_index]
        got: list = []
        while sock.get(zmq.EVENTS) & zmq.POLLIN:  # type: ignore[arg-type]
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:   # readiness can be reported for a handshake (CURVE), not data
                break
            got.extend(decode(frames[1].buffer, [f.buffer for f in frames[2:]]))
        return got

    def wait(self, local_index: int, timeout: float):
        """Block on the worker's socket and wake-up pipe; the worker then looks at both."""
        self._sleeping[local_index] = True
        try:
            events: Any = self._data_pull[local_index].get(zmq.EVENTS)  # type: ignore[arg-type]
            if self.inboxes[local_index].empty() and not events & zmq.POLLIN:
                self._pollers[local_index].poll(int(timeout * 1000))
            try:
                os.read(self._worker_wake[local_index][0], 65536)
            except (BlockingIOError, OSError):
                pass
        finally:
            self._sleeping[local_index] = False
        return None

    def _send_items(self, src: int, dst: int, items: list) -> None:
        try:
            payload, buffers = encode(items)   # large buffers (Arrow tables) out of band
        except Exception:
            buffers = []
            # Records of a class defined in the program's __main__ (or lambdas, closures) are
            # pickled by value instead; the receiver's pickle.loads reads that too.
            try:
                payload = cloudpickle.dumps(items, protocol=5)
            except Exception:
                explain_pickling(self.comp.graph, src, items, self.process_index)
                raise
        socks = self._push[src - self.first]
        sock = socks.get(dst)
        if sock is None:
            socks[dst] = sock = self._connect(dst // self.workers_per_process,
                                              self.worker_endpoints[dst])
        if buffers:
            sock.send_multipart([BATCH, payload, *buffers], copy=False)
        else:
            sock.send_multipart([BATCH, payload], copy=len(payload) < 65536)
        self.messages_sent += 1
        self.bytes_sent += len(payload) + sum(b.raw().nbytes for b in buffers)

    # ---- control ---------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        for i in range(self.workers_per_process):
            self._put(i, (STOP, reason))
        failure = self.comp._failure
        if failure is not None and not getattr(failure, "_naiad_remote", False):
            self._post_control(FAIL, failure)

    def barrier(self, name: str, timeout: float, value=None):
        """Wait until every process reached ``name``; returns process 0's ``value``."""
        self._post_control(ARRIVE, (name, value))
        deadline = time.monotonic() + timeout
        with self._arrival_cv:
            while True:
                got = self._arrivals.get(name, {})
                if len(got) >= self.processes - 1:
                    del self._arrivals[name]
                    return value if self.process_index == 0 else got.get(0)
                self.comp.check_failed()
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [p for p in self._peers() if p not in got]
                    msg = (f"process {self.process_index} waited {timeout:.0f} s at {name} for "
                           f"process(es) {missing}")
                    raise ComputationFailed(msg)
                self._arrival_cv.wait(min(left, 0.2))

    def _post_control(self, tag: bytes, value: Any) -> None:
        self._control.put((tag, value))
        try:
            os.write(self._wake_w, b"!")
        except OSError:  # pragma: no cover - already closed
            pass

    def close(self) -> None:
        """Tell the peers this process is done, wait (bounded) for theirs, release sockets."""
        if self._closed:
            return
        self._post_control(DONE, None)
        self._finished.wait(self.heartbeat_timeout + 2.0 if self.comp._failure is None else 0.5)
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        self._stop_thread = True
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        for socks in self._push:
            for s in socks.values():
                s.close(linger=0)
        for mon in getattr(self, "_monitors", {}):
            mon.close(linger=0)
        for s in getattr(self, "_ctl_push", {}).values():
            s.close(linger=500)   # lets a final DONE or FAIL reach a live peer
        pull = getattr(self, "pull", None)
        if pull is not None:
            pull.close(linger=0)
        for sock in self._data_pull:
            sock.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()
        for fd in (self._wake_r, self._wake_w, *(f for pair in self._worker_wake for f in pair)):
            try:
                os.close(fd)
            except OSError:
                pass

    # ---- the communication thread -------------------------------------------------------------
    def _comm_loop(self) -> None:
        try:
            self._comm()
        except Exception as exc:  # noqa: BLE001 - must reach the computation
            if not self._closed:
                log.exception("communication thread failed")
                self.comp.fail(ComputationFailed(f"process {self.process_index}: communication "
                                                 f"thread failed: {exc!r}"))

    def _comm(self) -> None:
        me = self.process_index
        mine = [self.worker_endpoints[self.first + i] for i in range(self.workers_per_process)]
        hello = pickle.dumps((self.fingerprint, self.workers_per_process, self.processes, mine))
        for p, s in self._ctl_push.items():
            s.send_multipart([HELLO, me.to_bytes(4, "little"), hello])
        poller = zmq.Poller()
        poller.register(self.pull, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        for mon in self._monitors:
            poller.register(mon, zmq.POLLIN)
        sent_done = False
        while not self._stop_thread:
            while True:
                try:
                    tag, value = self._control.get_nowait()
                except queue.Empty:
                    break
                if tag == FAIL:
                    payload = dump_failure(value, me)
                    for p, s in self._ctl_push.items():
                        s.send_multipart([FAIL, me.to_bytes(4, "little"), payload])
                elif tag == ARRIVE:
                    payload = pickle.dumps(value, protocol=5)
                    for p, s in self._ctl_push.items():
                        s.send_multipart([ARRIVE, me.to_bytes(4, "little"), payload])
                elif tag == DONE and not sent_done:
                    sent_done = True
                    for p, s in self._ctl_push.items():
                        s.send_multipart([DONE, me.to_bytes(4, "little"), b""])
            if sent_done and len(self._done_from) == self.processes - 1:
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
            if self.pull not in events:
                continue
            while True:
                try:
                    frames = self.pull.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                tag = frames[0].bytes
                proc = int.from_bytes(frames[1].bytes, "little")
                if tag == HELLO:
                    self._hello[proc] = pickle.loads(frames[2].bytes)
                    if len(self._hello) == self.processes - 1:
                        self._ready.set()
                elif tag == DONE:
                    self._done_from.add(proc)
                elif tag == ARRIVE:
                    name, value = pickle.loads(frames[2].bytes)
                    with self._arrival_cv:
                        self._arrivals.setdefault(name, {})[proc] = value
                        self._arrival_cv.notify_all()
                elif tag == FAIL:
                    exc = load_failure(frames[2].bytes, proc)
                    self._done_from.add(proc)
                    self.comp.fail(exc)

    def _on_monitor(self, mon: zmq.Socket, p: int) -> None:
        """A connection event of the control socket to process ``p``."""
        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected.add(p)
            elif event["event"] == zmq.EVENT_DISCONNECTED and p in self._connected:
                # A peer that ended normally sent DONE before it closed, but on another
                # connection: give that message a moment to arrive before calling it gone.
                self._gone.setdefault(p, time.monotonic())

    def _check_gone(self) -> None:
        now = time.monotonic()
        for p, since in list(self._gone.items()):
            if p in self._done_from or self.comp._failure is not None or self._closed:
                del self._gone[p]
            elif now - since > _GONE_GRACE:
                del self._gone[p]
                exc = ComputationFailed(
                    f"process {p} ({self.endpoints[p]}) is gone: its connection closed, or "
                    f"answered no heartbeat for {self.heartbeat_timeout:g} s (it exited, was "
                    f"killed or stopped, or its host is unreachable); process "
                    f"{self.process_index} stops")
                exc._naiad_remote = True
                self._done_from.add(p)
                self.comp.fail(exc)
