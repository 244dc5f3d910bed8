"""The ZeroMQ fabric's data plane: workers in other processes reached over PUSH/PULL sockets.

Every worker binds its own PULL socket and owns one PUSH socket per remote worker; it sends
there, in order, everything it addresses to that worker: data batches and progress updates,
accumulated during a step and pickled together as one message, so the channel between two
workers is FIFO and no message is sent per record.  An idle worker blocks on its socket and on a
wake-up pipe that local senders write to, so remote messages reach it without a thread hop.
Workers of this process are reached through their inboxes, by reference.  The queues between
processes are bounded and a full one makes its sender wait, reading its own socket meanwhile
(:mod:`naiad.transport.backpressure` states the bounds and argues the absence of deadlock).

Start-up, heartbeats, barriers, failure relay and the final goodbye are the control plane's
(:class:`naiad.transport.control.ControlPlane`).  The fabric implements
:class:`naiad.transport.protocol.Fabric`; it is given its options and a
:class:`~naiad.transport.protocol.FabricHooks`, never the computation.
"""

from __future__ import annotations

import os
import pickle
from queue import SimpleQueue
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import zmq

from naiad.errors import ComputationFailed, NaiadError
from naiad.messages import DATA, PROGRESS, STOP
from naiad.transport.backpressure import (MESSAGE_BYTES, RECEIVE_BYTES, RECEIVE_HWM,
                                          SEND_HWM, wait_to_send)
from naiad.transport.control import ControlPlane, connect_push
from naiad.transport.pieces import bound, join, split
from naiad.transport.protocol import FabricHooks
from naiad.transport.security import (SECRET_HELP, CurveKeys, needs_authentication,
                                      resolve_secret)
from naiad.transport.wire import decode, encode, prepare
from naiad.transport.zap import ZapHandler

__all__ = ["ZmqFabric"]

BATCH = b"D"         # the frame tag of a message of batches and progress updates (then the
                     # sending worker's index, 4 bytes, for an error naming it)
_ITEMS_BEFORE_FLUSH = 64
COPY_BELOW = 1 << 19
"""Bytes: a message smaller than this is copied into ZeroMQ when sent.  A frame sent without a
copy must stay alive until libzmq has sent it, which pyzmq learns through its garbage-collector
thread (started on the first such send, then woken once per frame to drop the reference): a
thread wake-up and a turn of the GIL per message, against a copy of 20-50 us for a few hundred
KB.  Larger messages (the parts of about 1 MB that batches are cut into, whole tables of
edges) are sent without a copy: copied, each part's bytes lived twice for a while, and a
sender outrunning its receiver peaked some 5 MB higher."""
PRECONNECT = 16
"""At most this many data sockets (local workers x remote workers) are connected before the
first message, by a fabric made while the program builds its graph; beyond, each is connected
at its first message (a worker of a wide computation may never send to most of the others)."""


def _bind_address(host_port: str) -> str:
    host, _, port = host_port.rpartition(":")
    if host in ("localhost", ""):
        host = "127.0.0.1"
    return f"tcp://{host}:{port}"


class ZmqFabric:
    """Local workers by queue, remote workers by ZeroMQ.

    ``options`` are the computation's (``heartbeat_timeout``, ``connect_timeout``, ``secret``,
    ``rendezvous``, ``listen``); ``hosts`` the ``host:port`` of every process when started by
    hand (else a rendezvous callable in the options gives the endpoints); ``fingerprint`` the
    graph's, compared with every peer's at start-up.  A fabric made before the graph is known
    (``fingerprint=None``: it connects while the program builds its graph) is connected to
    every peer, its data sockets too, when the constructor returns, and compares fingerprints
    later, in :meth:`agree`.
    """

    def __init__(self, process_index: int, processes: int, workers_per_process: int,
                 options: Mapping[str, Any], fingerprint: Optional[str],
                 hooks: Optional[FabricHooks] = None, hosts: Optional[Sequence[str]] = None):
        self.process_index = process_index
        self.processes = processes
        self.workers_per_process = workers_per_process
        self.first = process_index * workers_per_process
        self.hooks = hooks or FabricHooks()
        self.fingerprint = fingerprint
        self.inboxes: List[SimpleQueue] = [SimpleQueue() for _ in range(workers_per_process)]
        self.progress_messages = 0
        self.progress_updates = 0
        self.progress_bytes = 0
        self._measure = os.environ.get("NAIAD_PROGRESS_STATS") == "1"
        self.heartbeat_timeout = float(options["heartbeat_timeout"])
        self.ctx = zmq.Context()
        listen = str(options.get("listen") or "")
        if any(h.startswith("[") for h in hosts or ()) or ":" in listen:
            self.ctx.setsockopt(zmq.IPV6, 1)    # IPv6 hosts ([::1]:port): asked for, else IPv4
        self.keys: Optional[CurveKeys] = None
        self.auth: Optional[ZapHandler] = None
        self._closed = False
        n = workers_per_process
        self._push: List[Dict[int, zmq.Socket]] = [{} for _ in range(n)]
        self._out: List[Dict[int, list]] = [{} for _ in range(n)]
        self._out_records: List[Dict[int, int]] = [{} for _ in range(n)]
        self._flush_at: Dict[int, int] = {}   # records per message to a worker, from its last
        self._stash: List[list] = [[] for _ in range(n)]   # read while waiting in a send
        self.send_timeout = float(options.get("send_timeout", 300.0))
        self.send_waits = 0          # sends that found their queue full (for benchmarks)
        self._data_pull: List[zmq.Socket] = []
        self._pollers: List[zmq.Poller] = []
        self._sleeping = [False] * n
        self._worker_wake = [os.pipe() for _ in range(n)]
        for r, w in self._worker_wake:
            os.set_blocking(r, False)
            os.set_blocking(w, False)   # a full pipe already wakes its reader: never block
        self.worker_endpoints: Dict[int, str] = {}
        self.bytes_sent = 0
        self.messages_sent = 0
        self.control: Optional[ControlPlane] = None
        try:
            self._start(options, hosts)
        except BaseException:
            self._teardown()
            raise

    @property
    def endpoints(self) -> List[str]:
        """Every process's control endpoint."""
        return self.control.endpoints if self.control is not None else []

    # ---- start-up ------------------------------------------------------------------------------
    def _start(self, opts: Mapping[str, Any], hosts: Optional[Sequence[str]]) -> None:
        rendezvous = opts.get("rendezvous")
        if hosts is not None:
            bind = _bind_address(hosts[self.process_index])
            listen_hosts = [_bind_address(h)[6:] for h in hosts]
        else:
            listen = opts.get("listen") or "127.0.0.1"
            bind = f"tcp://{listen}:*"
            listen_hosts = [f"{listen}:0"]
        secret = resolve_secret(opts["secret"])
        if secret is None:
            where = ("beyond loopback, where anyone could connect" if
                     needs_authentication(listen_hosts) else
                     "on loopback, where any local user could connect")
            msg = f"process {self.process_index} has no secret and would listen {where}: " \
                  + SECRET_HELP
            raise NaiadError(msg)
        self.keys = CurveKeys(secret)
        # Bound before any server socket exists: only our client key is admitted.
        self.auth = ZapHandler(self.ctx, [self.keys.client_public])
        self.control = ControlPlane(self.ctx, self.keys, self.process_index, self.processes,
                                    self.heartbeat_timeout, self.hooks)
        me = self.control.bind(bind)
        data_bind = me.rsplit(":", 1)[0] + ":*"
        for i in range(self.workers_per_process):
            sock = self.ctx.socket(zmq.PULL)
            sock.linger = 0
            sock.rcvhwm = RECEIVE_HWM
            bound(sock)
            self.keys.serve(sock)
            sock.bind(data_bind)
            self._data_pull.append(sock)
            self.worker_endpoints[self.first + i] = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(self._worker_wake[i][0], zmq.POLLIN)
            self._pollers.append(poller)
        prepare()           # the codec's first-use costs, before the first message
        if rendezvous is not None:
            endpoints = list(rendezvous(me))
        else:
            assert hosts is not None
            endpoints = [_bind_address(h) for h in hosts]
        if len(endpoints) != self.processes:
            msg = f"rendezvous returned {len(endpoints)} endpoints for {self.processes} processes"
            raise NaiadError(msg)
        mine = [self.worker_endpoints[self.first + i] for i in range(self.workers_per_process)]
        self.control.start(endpoints, (self.fingerprint, self.workers_per_process,
                                       self.processes, mine))
        self.control.wait_for_peers(float(opts["connect_timeout"]), self._check_peers)
        if self.fingerprint is None:
            self._connect_data()
        else:   # for a peer that connected early, which compares it in agree()
            self.control.post_arrival("activate", self.fingerprint)

    def _connect_data(self) -> None:
        """Connect every local worker's data socket to every remote worker now (when there are
        at most :data:`PRECONNECT` of them), so that their CURVE handshakes are done before the
        first message instead of delaying it; the worker threads use them afterwards (the
        thread that made them is joined first)."""
        remote = [w for w in self.worker_endpoints
                  if not self.first <= w < self.first + self.workers_per_process]
        if len(remote) * self.workers_per_process > PRECONNECT:
            return
        for socks in self._push:
            for dst in remote:
                socks[dst] = connect_push(self.ctx, self.keys, self.worker_endpoints[dst],
                                          hwm=SEND_HWM)

    def offer(self, fingerprint: str) -> None:
        """Send the graph's ``fingerprint`` to every peer (of a fabric made without one), which
        compares it in :meth:`agree`."""
        assert self.control is not None
        if self.fingerprint is None:
            self.fingerprint = fingerprint
            self.control.post_arrival("activate", fingerprint)

    def agree(self, fingerprint: str, timeout: float) -> None:
        """Compare the graph's ``fingerprint`` with every peer's (of a fabric made without
        one): each process sends its own (:meth:`offer`, if not sent yet) and waits (at most
        ``timeout`` s) for the others', one message each way."""
        assert self.control is not None
        self.offer(fingerprint)
        got = self.control.arrivals("activate", timeout)
        for p, fp in sorted(got.items()):
            if fp != fingerprint:
                raise ComputationFailed(self._differs(p, fp))

    def exchange(self, name: str, value: Any, timeout: float) -> Dict[int, Any]:
        """Send ``value`` for ``name`` to every peer and return theirs, by process (waiting at
        most ``timeout`` s; a peer that says goodbye first fails it at once)."""
        assert self.control is not None
        self.control.post_arrival(name, value)
        return self.control.arrivals(name, timeout)

    def _differs(self, p: int, fp: str) -> str:
        return (f"process {p} built a different dataflow graph (fingerprint {fp}) than "
                f"process {self.process_index} ({self.fingerprint}); every process must "
                "build the same stages in the same order")

    def _check_peers(self, hellos: Dict[int, Any]) -> None:
        for p, (fp, workers, processes, endpoints) in sorted(hellos.items()):
            if (workers, processes) != (self.workers_per_process, self.processes):
                msg = (f"process {p} runs {processes} process(es) x {workers} worker(s) but "
                       f"process {self.process_index} runs {self.processes} x "
                       f"{self.workers_per_process}; give every process the same -n and -t")
                raise ComputationFailed(msg)
            if fp is not None and self.fingerprint is not None and fp != self.fingerprint:
                raise ComputationFailed(self._differs(p, fp))
            for i, ep in enumerate(endpoints):
                self.worker_endpoints[p * workers + i] = ep

    # ---- the worker side ---------------------------------------------------------------------
    def inbox(self, local_index: int) -> SimpleQueue:
        return self.inboxes[local_index]

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
        counts = self._out_records[src - self.first]
        n = counts.get(dst, 0) + len(records)
        if len(items) >= _ITEMS_BEFORE_FLUSH or n >= self._flush_at.get(dst, 1):
            out[dst] = []
            counts[dst] = 0
            self._send_items(src, dst, items)
        else:
            counts[dst] = n

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
        assert self.control is not None
        done = self.control.done_from
        for proc in self.control.peers():
            if proc in done:
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
        self._out_records[src - self.first].clear()
        while out:
            dst, items = out.popitem()
            if items:
                self._send_items(src, dst, items)

    def receive(self, local_index: int) -> Any:
        """Messages waiting on the worker's own socket, in the order their senders sent them:
        what it read while waiting in a send, then about :data:`RECEIVE_BYTES` more."""
        got = self._stash[local_index]
        self._stash[local_index] = []
        self._read(local_index, got, RECEIVE_BYTES)
        return got

    def _read(self, local_index: int, got: list, limit: float) -> None:
        sock = self._data_pull[local_index]
        while limit > 0 and sock.get(zmq.EVENTS) & zmq.POLLIN:  # type: ignore[arg-type, operator]
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:   # readiness can be reported for a handshake (CURVE), not data
                break
            tag, rest = join([f.buffer for f in frames])
            payload, buffers = rest[0], rest[1:]
            try:
                got.extend(decode(payload, buffers))
            except Exception as exc:
                src = int.from_bytes(tag[len(BATCH):], "little")
                self.hooks.explain_undecodable(self.first + local_index, src, payload,
                                               buffers, exc)
                raise
            limit -= sum(len(f) for f in frames)

    def wait(self, local_index: int, timeout: float):
        """Block on the worker's socket and wake-up pipe; the worker then looks at both."""
        self._sleeping[local_index] = True
        try:
            events: Any = self._data_pull[local_index].get(zmq.EVENTS)  # type: ignore[arg-type]
            if (self.inboxes[local_index].empty() and not events & zmq.POLLIN
                    and not self._stash[local_index]):
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
            import cloudpickle
            try:
                payload = cloudpickle.dumps(items, protocol=5)
            except Exception:
                self.hooks.explain_unpicklable(src, items)
                raise
        local = src - self.first
        socks = self._push[local]
        sock = socks.get(dst)
        if sock is None:
            socks[dst] = sock = connect_push(self.ctx, self.keys, self.worker_endpoints[dst],
                                             hwm=SEND_HWM)
        size = len(payload) + sum(b.raw().nbytes for b in buffers)
        records = sum(len(it[3]) for it in items if it[0] == DATA)
        if records:
            # Records for 80% of MESSAGE_BYTES: a part cut to about that size (batch_cut)
            # leaves alone, not with the next one in a message of twice the size.
            self._flush_at[dst] = max(1, MESSAGE_BYTES * 4 // 5 * records // max(size, 1))
        frames: List[Any] = split([BATCH + src.to_bytes(4, "little"), payload, *buffers])
        copy = size < COPY_BELOW
        try:
            sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            self.send_waits += 1
            wait_to_send(sock, frames, copy, self._data_pull[local],
                         lambda: self._read(local, self._stash[local], float("inf")),
                         lambda: self._check_destination(src, dst), self.send_timeout,
                         lambda: self._describe(src, dst))
        self.messages_sent += 1
        self.bytes_sent += size

    def _check_destination(self, src: int, dst: int) -> None:
        """Raise when the computation failed or ``dst``'s process has ended."""
        self.hooks.check_failed()
        assert self.control is not None
        proc = dst // self.workers_per_process
        if proc in self.control.done_from:
            msg = (f"{self._describe(src, dst)} has ended (or failed) with data of worker "
                   f"{src} still to deliver")
            raise ComputationFailed(msg)

    def _describe(self, src: int, dst: int) -> str:
        proc = dst // self.workers_per_process
        return (f"worker {dst} of process {proc} ({self.worker_endpoints.get(dst, '?')}), to "
                f"which worker {src} of process {self.process_index} sends,")

    # ---- stopping -------------------------------------------------------------------------------
    def stop(self, reason: str, relay: Optional[BaseException] = None) -> None:
        for i in range(self.workers_per_process):
            self._put(i, (STOP, reason))
        if relay is not None and self.control is not None:
            self.control.relay_failure(relay)

    def barrier(self, name: str, timeout: float, value=None):
        """Wait until every process reached ``name``; returns process 0's ``value``."""
        assert self.control is not None
        return self.control.barrier(name, timeout, value)

    def arrived_named(self, prefix: str) -> List[Tuple[str, int]]:
        """The peers' arrivals so far at barriers named ``prefix...``."""
        return [] if self.control is None else self.control.arrived_named(prefix)

    def arrive(self, name: str, value=None) -> None:
        """Reach barrier ``name`` without waiting; :meth:`barrier` then only waits."""
        assert self.control is not None
        self.control.arrive(name, value)

    def gather(self, name: str, timeout: float, value=None) -> Dict[int, Any]:
        """Process 0 waits until every other process reached ``name`` and gets their ``value``
        by process; the others go on (and get ``{}``)."""
        assert self.control is not None
        return self.control.gather(name, timeout, value)

    def close(self, wait: Optional[float] = None) -> None:
        """Tell the peers this process is done, wait (at most ``wait`` s; by default the
        heartbeat timeout and 2 s, or 0.5 s after a failure) for theirs, release sockets."""
        if self._closed:
            return
        if self.control is not None:
            if wait is None:
                failed = self.hooks.failure() is not None
                wait = 0.5 if failed else self.heartbeat_timeout + 2.0
            self.control.finish(wait)
        self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        if self.control is not None:
            self.control.close()
        for socks in self._push:
            for s in socks.values():
                s.close(linger=0)
        for sock in self._data_pull:
            sock.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()
        for fd in (f for pair in self._worker_wake for f in pair):
            try:
                os.close(fd)
            except OSError:
                pass
