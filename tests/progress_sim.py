"""The progress protocol at scale, simulated without sockets: how many progress messages and bytes.

A real dataflow graph (built by a sample's own code, never activated) is expanded over
``processes x workers`` simulated workers that run in synchronous rounds.  In a round every
worker first takes the notifications that the shared view allows, then handles every batch that
reached it in the round before, producing exactly the occurrence-count updates the engine makes
(``naiad/worker.py``): ``+1`` per batch sent at the connector, ``-1`` per batch received, ``+1``
per notification requested and ``-1`` when it is delivered, and the inputs' ``+1`` at the next
epoch with ``-1`` at the sealed one.  The updates go through the real
:class:`~naiad.progress.ProgressBuffer` and are applied to a real
:class:`~naiad.progress.Tracker`.  Every broadcast of a round reaches every view before the next
round, so all views agree at round boundaries and one tracker stands for them (held
retirements are simply missing from it, as from every real view).

Vertices are modelled from the graph: a stage whose vertex overrides ``on_notify`` requests a
notification at the first batch of a time and sends on notification; any other stage sends at
once.  A loop stage sends on the outputs that lead to the feedback at every iteration and on its
other outputs at the last one; feedback stages drop times at the loop's bound.  An exchange
connector carries a batch from every sender to every worker (enough records), a pipeline
connector one to the sender's own worker.

Three ways to broadcast are counted:

* ``none``: every callback's updates go out at once (the engine with ``accumulate=False``);
* ``unheld``: a worker accumulates a round's updates and broadcasts them all at the end of it;
* ``worker``: the same, with retirements behind the frontier held back (the engine's default:
  :meth:`~naiad.progress.ProgressBuffer.drain` with ``hold``);
* ``process``: the workers of a process accumulate into one buffer and the process broadcasts
  once per round to every other process (Naiad's per-process accumulation; the engine does not
  do this yet: each worker broadcasts on its own).

A progress message is one send from a process to a remote worker (the first three: every
broadcast is sent to each of the ``(P - 1) x W`` remote workers) or to a remote process
(``process``: one per remote process).  Bytes are the pickled update lists times those sends.
Batching is as good as it gets: the engine flushes when its queue of batches runs dry or after
1,024 batches, and real batches arrive spread over time, so a real worker broadcasts more often
than once per round.  Oracle checks: every requested notification is delivered exactly once,
none is delivered while the ground truth (all events, nothing held) still has an event that
could result in it, and the view ends empty.
"""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

import naiad
from naiad.graph import EGRESS, FEEDBACK, INGRESS, INPUT, LogicalGraph
from naiad.progress import ProgressBuffer, Timestamp, Tracker
from naiad.vertex import Vertex

__all__ = ["MODES", "Traffic", "simulate", "graph_of"]

MODES = ("none", "unheld", "worker", "process")
Pointstamp = Tuple[int, Timestamp]
Update = Tuple[Pointstamp, int]


@dataclass
class Traffic:
    """What one simulated run broadcast."""

    mode: str
    processes: int
    workers: int
    epochs: int
    broadcasts: int = 0          # update batches produced
    updates: int = 0             # updates in them
    messages: int = 0            # sends over the network (to remote workers or processes)
    bytes: int = 0               # pickled bytes over the network
    rounds: int = 0
    notifications: int = 0
    callbacks: int = 0
    held: int = 0                # drains that kept a retirement back
    sizes: Dict[tuple, int] = field(default_factory=dict, repr=False)


def graph_of(build: Callable[[naiad.Computation, naiad.Stream], object]) -> LogicalGraph:
    """The logical graph that ``build(comp, input_stream)`` makes (never activated)."""
    comp = naiad.Computation()
    inp = comp.new_input(name="input")
    build(comp, inp.stream)
    return comp.graph


class _Model:
    """The graph's stages as the simulation sees them."""

    def __init__(self, graph: LogicalGraph, iterations: int) -> None:
        self.graph = graph
        self.reach = graph.compile()
        self.iterations = iterations
        self.stages = [st for st in graph.stages if not st.unused]
        self.notifying: Set[int] = set()
        self.bound: Dict[int, int] = {}
        for st in self.stages:
            if st.kind == FEEDBACK:
                bound = st.params.get("max_iterations")
                self.bound[st.id] = iterations if bound is None else min(bound, iterations)
            elif st.kind not in (INPUT, INGRESS, EGRESS) and st.factory is not None:
                v = st.factory()
                if type(v).on_notify is not Vertex.on_notify:
                    self.notifying.add(st.id)
        self.inputs = [st for st in self.stages if st.kind == INPUT]

    def outputs_at(self, st, time: Timestamp) -> List:
        """The connectors a vertex of ``st`` sends on at ``time``."""
        conns = [c for port in st.outputs for c in port if not c.unused]
        if st.scope.depth == 0 or st.kind in (INGRESS, EGRESS, FEEDBACK):
            return conns
        last = time.counters[-1] + 1 >= self.iterations
        stages = self.graph.stages
        return [c for c in conns if last or stages[c.dst].kind == FEEDBACK]

    def out_time(self, st, time: Timestamp) -> Optional[Timestamp]:
        if st.kind == INGRESS:
            return Timestamp(time.epoch, time.counters + (0,))
        if st.kind == EGRESS:
            return Timestamp(time.epoch, time.counters[:-1])
        if st.kind == FEEDBACK:
            nxt = time.counters[-1] + 1
            if nxt >= self.bound[st.id]:
                return None
            return Timestamp(time.epoch, time.counters[:-1] + (nxt,))
        return time


def simulate(graph: LogicalGraph, processes: int, workers: int, *, epochs: int = 2,
             iterations: int = 5, mode: str = "worker", per_round: Optional[int] = None,
             slow: int = 0, max_rounds: int = 100_000) -> Traffic:
    """Run ``epochs`` epochs of ``graph`` over ``processes x workers`` simulated workers.

    ``per_round`` bounds the batches a worker handles in a round (the rest wait for the next
    one), which spreads a time's arrivals over several rounds as on a real network; the first
    ``slow`` workers act only every other round (stragglers)."""
    if mode not in MODES:
        msg = f"mode must be one of {MODES}; got {mode!r}"
        raise ValueError(msg)
    model = _Model(graph, iterations)
    reach = model.reach
    n = processes * workers
    traffic = Traffic(mode, processes, workers, epochs)
    view = Tracker(reach, debug=False)
    truth: Counter = Counter()          # every event, nothing held: the oracle
    for st in model.inputs:
        view.update(st.loc, Timestamp(0), n)
        truth[(st.loc, Timestamp(0))] += n
    buffers = [ProgressBuffer(reach) for _ in range(n if mode != "process" else processes)]
    inbox: List[Counter] = [Counter() for _ in range(n)]
    later: List[Counter] = [Counter() for _ in range(n)]   # beyond a round's budget
    requested: List[Set[Pointstamp]] = [set() for _ in range(n)]
    delivered: Set[Tuple[int, Pointstamp]] = set()
    remote_workers = (processes - 1) * workers
    sends = remote_workers if mode != "process" else processes - 1
    round_out: List[List[Update]] = []

    def broadcast(updates: List[Update], times: int = 1) -> None:
        if not updates:
            return
        key = tuple(updates)
        size = traffic.sizes.get(key)
        if size is None:
            size = traffic.sizes[key] = len(pickle.dumps(updates, protocol=5))
        traffic.broadcasts += times
        traffic.updates += len(updates) * times
        traffic.messages += sends * times
        traffic.bytes += sends * size * times
        round_out.extend([updates] * times)

    def emit(w: int, changes: Counter, count: int = 1) -> None:
        """A callback's updates (``count`` identical callbacks)."""
        for p, delta in changes.items():
            truth[p] += delta * count
            if not truth[p]:
                del truth[p]
        traffic.callbacks += count
        if mode == "none":
            updates = sorted(((p, d) for p, d in changes.items() if d), key=_order)
            broadcast(updates, count)
        else:
            buf = buffers[w if mode != "process" else w // workers]
            for p, delta in changes.items():
                buf.add(p[0], p[1], delta * count)

    def send(st, w: int, time: Timestamp, changes: Counter, outbox: List,
             times: int = 1) -> None:
        """Batches on ``st``'s outputs at ``time`` (``times`` callbacks' worth, each of which
        adds the same ``changes``)."""
        for c in model.outputs_at(st, time):
            dests = range(n) if c.exchange.key is not None else range(w, w + 1)
            outbox.append((dests, c, time, times))
            changes[(c.loc, time)] += len(dests)

    def safe(p: Pointstamp) -> bool:
        could = reach.could_result_in
        return not any(q != p and could(q, p) for q in truth)

    for epoch in range(epochs + 1):
        outbox: List = []
        for w in range(n):
            for st in model.inputs:
                changes: Counter = Counter()
                if epoch < epochs:
                    send(st, w, Timestamp(epoch), changes, outbox)
                    changes[(st.loc, Timestamp(epoch + 1))] += 1
                changes[(st.loc, Timestamp(epoch))] -= 1
                emit(w, changes)
        _flush(mode, buffers, view, broadcast, traffic)
        _deliver(outbox, inbox)
        for updates in round_out:
            view.update_many(updates)
        round_out.clear()
        while any(inbox) or any(requested) or any(buffers):
            traffic.rounds += 1
            if traffic.rounds > max_rounds:
                msg = f"no quiescence after {max_rounds} rounds: {view!r}"
                raise AssertionError(msg)
            outbox = []
            for w in range(n):
                if w < slow and traffic.rounds % 2:
                    continue
                for p in sorted(requested[w], key=lambda q: (q[1], q[0])):
                    if view.in_frontier(*p):
                        assert safe(p), f"notification {p} delivered while an event precedes it"
                        assert (w, p) not in delivered, f"notification {p} delivered twice"
                        delivered.add((w, p))
                        requested[w].discard(p)
                        traffic.notifications += 1
                        changes = Counter({p: -1})
                        send(graph.stages[_stage_at(model, p[0])], w, p[1], changes, outbox)
                        emit(w, changes)
                budget = per_round
                for (c, time), count in sorted(inbox[w].items(), key=lambda i: i[0][1]):
                    if budget is not None:
                        take = min(count, budget)
                        budget -= take
                        if count > take:
                            later[w][(c, time)] += count - take
                        if not take:
                            continue
                        count = take
                    st = graph.stages[c.dst]
                    first: Counter = Counter({(c.loc, time): -1})
                    if st.id in model.notifying:
                        p = (st.loc, time)
                        if p not in requested[w]:
                            requested[w].add(p)
                            first[p] += 1
                        emit(w, first)
                        if count > 1:
                            emit(w, Counter({(c.loc, time): -1}), count - 1)
                        continue
                    out = model.out_time(st, time)
                    if out is not None:
                        send(st, w, out, first, outbox, count)
                    emit(w, first, count)
                inbox[w].clear()
                if later[w]:
                    inbox[w], later[w] = later[w], inbox[w]
            _flush(mode, buffers, view, broadcast, traffic)
            _deliver(outbox, inbox)
            for updates in round_out:
                view.update_many(updates)
            round_out.clear()
    assert view.is_empty() and not truth, f"the computation did not drain: {view!r}"
    return traffic


def _flush(mode: str, buffers: List[ProgressBuffer], view: Tracker,
           broadcast: Callable[[List[Update]], None], traffic: Traffic) -> None:
    if mode == "none":
        return
    for buf in buffers:
        if buf:
            broadcast(buf.drain(view, hold=mode != "unheld"))
            traffic.held += bool(buf)


def _deliver(outbox: List, inbox: List[Counter]) -> None:
    for dests, c, time, times in outbox:
        key = (c, time)
        for d in dests:
            inbox[d][key] += times


def _stage_at(model: _Model, loc: int) -> int:
    for st in model.stages:
        if st.loc == loc:
            return st.id
    msg = f"no stage at location {loc}"
    raise KeyError(msg)


def _order(update) -> tuple:
    (loc, time), _ = update
    return time, loc
