"""Flow control between workers within an epoch: bounded queues and a send that waits.

Three bounds keep a fast producer from filling memory when the worker it sends to is behind:

* **Queues.** A worker's data PUSH socket to another process holds at most :data:`SEND_HWM`
  messages and its PULL socket at most :data:`RECEIVE_HWM` (ZeroMQ high-water marks); the
  kernel's TCP buffers hold a few MB more.  A message leaves once its records reach about
  :data:`MESSAGE_BYTES` (estimated from the last message to the same worker; the first one
  to a worker leaves with its first batch, whose size is then known), and batches are cut to
  about :data:`naiad.partition.BATCH_BYTES`, so what waits between two workers is a few
  messages of about 1 MB, however large the epoch and its records.
* **Receiving.** A worker reads its socket only while fewer than
  :data:`naiad.worker_state.PENDING_BEFORE_RECEIVE` batches wait for delivery, and about
  :data:`RECEIVE_BYTES` at a time, so it
  works through its backlog in steps and leaves the rest in the (bounded) queue, where it holds
  back the sender.
* **Sending.** A send that finds the queue full waits (:func:`wait_to_send`) until it has room;
  only the sending worker waits, and it names the destination worker and process when the wait
  exceeds ``send_timeout`` seconds, and fails at once when the computation failed (a peer that
  is gone is reported by the control plane) or the destination process has ended.

Why this cannot deadlock.  A worker waits in a send only for a worker that does not read its
socket.  A worker that is not itself waiting in a send reads its socket as soon as its pending
batches fall below ``PENDING_BEFORE_RECEIVE``, and delivering a pending batch to its vertex
needs nothing from any other worker, so it gets there in finite time (slowly, if the vertex is
slow, which is the point).  A worker that *is* waiting in a send keeps reading its own socket
all the while (into a stash that the next receive hands to the worker first), so it never holds
back anyone that sends to it.  A chain of waits therefore always ends at a worker that is
computing or reading, and a cycle of workers each waiting for the next (two processes sending
large batches to each other at once) drains: each reads what the other sent.  Progress updates
travel on the same FIFO channel as data (the protocol's order per pair of workers), so progress
to a destination waits only behind data to that same destination; the waiting worker's own
updates to others leave once its step's sends are through, and no worker needs another's
progress to drain its queue, so a blocked data path never stops the protocol.

The price of the argument: what a worker reads while it waits in a send is not bounded by
these rules, only by what its peers can send in that time (their own queues are bounded, and
they wait too).  Workers of one process exchange batches by reference through their inboxes
(no copy, no bound).
"""

from __future__ import annotations

import time
from typing import Any, Callable, List

import zmq

from naiad.errors import NaiadError

__all__ = ["SEND_HWM", "RECEIVE_HWM", "MESSAGE_BYTES", "RECEIVE_BYTES", "wait_to_send"]

SEND_HWM = 16
"""Messages a data PUSH socket queues for its destination before a send waits."""
RECEIVE_HWM = 16
"""Messages a data PULL socket queues before ZeroMQ stops reading the connection."""
MESSAGE_BYTES = 1 << 20
"""Bytes (estimated) after which a worker's buffered items for one destination leave."""
RECEIVE_BYTES = 4 << 20
"""One receive stops taking messages from the socket after this many bytes (the rest waits
there, bounded)."""

_POLL_MS = 200


def wait_to_send(sock: zmq.Socket, frames: List[Any], copy: bool, own: zmq.Socket,
                 read: Callable[[], None], check: Callable[[], None], timeout: float,
                 describe: Callable[[], str]) -> None:
    """Send ``frames`` on ``sock`` without blocking, or wait until it has room.

    While waiting, ``read()`` is called whenever the worker's own socket ``own`` has messages
    (it must take them all), and ``check()`` raises when the computation failed or the
    destination is gone.  After ``timeout`` seconds a :class:`naiad.NaiadError` says who does
    not drain (``describe()``).
    """
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
        return
    except zmq.Again:
        pass
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLOUT)
    poller.register(own, zmq.POLLIN)
    t0 = time.monotonic()
    while True:
        events = dict(poller.poll(_POLL_MS))
        if own in events or own.get(zmq.EVENTS) & zmq.POLLIN:  # type: ignore[arg-type, operator]
            read()
        check()
        if sock in events or sock.get(zmq.EVENTS) & zmq.POLLOUT:  # type: ignore[arg-type, operator]
            try:
                sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
                return
            except zmq.Again:
                pass
        waited = time.monotonic() - t0
        if waited > timeout:
            msg = (f"{describe()} has made no room in its queue for {waited:.0f} s (the queue "
                   f"is full; the process is alive): a vertex there may be stuck, or be slower "
                   f"than that per batch it takes; if it is only slow, raise the option "
                   f"send_timeout (now {timeout:g} s)")
            raise NaiadError(msg)
