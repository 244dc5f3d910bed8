"""Programs that tests/test_hosts_netns.py starts by hand, one process per network namespace.

``naiad run tests.netns_programs:wordcount -p I -n 2 -t 2 -h A:PORT B:PORT`` runs the word count;
``python -m tests.netns_programs FUNCTION --connect-timeout S [flags]`` runs a function with a
short start-up wait (the refusal tests), and prints the result as a Python literal.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import naiad
import stages
from naiad.computation import run_program

__all__ = ["lines", "oracle", "wordcount", "slow", "main"]

EPOCHS = 4


def lines(epoch: int) -> List[str]:
    """The deterministic input lines of ``epoch`` (the same in every process)."""
    rng = random.Random(epoch)
    vocabulary = [f"w{i}" for i in range(60)]
    return [" ".join(rng.choice(vocabulary) for _ in range(12)) for _ in range(200)]


def oracle() -> Dict[int, List[Tuple[str, int]]]:
    """Plain Python: the sorted word counts of every epoch."""
    out = {}
    for e in range(EPOCHS):
        counts: Dict[str, int] = {}
        for line in lines(e):
            for w in line.split():
                counts[w] = counts.get(w, 0) + 1
        out[e] = sorted(counts.items())
    return out


class _Count(naiad.Vertex):
    """Counts words per time; sends the counts when the time completes."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Dict[naiad.Timestamp, Dict[str, int]] = {}

    def on_recv_batch(self, edge, messages, time):
        if time not in self.counts:
            self.counts[time] = {}
            self.notify_at(time)
        d = self.counts[time]
        for w in messages:
            d[w] = d.get(w, 0) + 1

    def on_notify(self, time):
        self.send_batch_by(0, sorted(self.counts.pop(time).items()), time)


class _Split(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [w for line in messages for w in line.split()], time)


def wordcount(comp: naiad.Computation) -> Dict[int, List[Tuple[str, int]]]:
    """Each process feeds its share of every epoch; returns the counts its workers own."""
    inp = comp.new_input(name="lines")
    words = stages.unary(inp.stream, _Split, name="split")
    got = stages.unary(words, _Count, partition_by=lambda w: w, name="count").collect()
    comp.activate()
    for e in range(EPOCHS):
        inp.on_next(lines(e)[comp.process_index::comp.processes])
    inp.on_completed()
    comp.join(timeout=120)
    return {e: sorted(r) for e, r in got.results.items()}


def slow(comp: naiad.Computation) -> int:
    """Epochs fed for up to a minute, one every 0.2 s: a run long enough to kill a process in."""
    inp = comp.new_input(name="ticks")
    stages.unary(inp.stream, _Count, partition_by=lambda w: w, name="count").collect()
    comp.activate()
    print("running", flush=True)
    for e in range(300):
        inp.on_next([f"t{e}"] if comp.process_index == 0 else [])
        time.sleep(0.2)
    inp.on_completed()
    comp.join(timeout=120)
    return 300


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``FUNCTION --connect-timeout S --heartbeat-timeout S`` and Naiad's flags."""
    parser = argparse.ArgumentParser(prog="python -m tests.netns_programs", add_help=False)
    parser.add_argument("function", choices=["wordcount", "slow"])
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=6.0)
    args, flags = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    comp = naiad.Computation.from_args(flags, connect_timeout=args.connect_timeout,
                                       heartbeat_timeout=args.heartbeat_timeout)
    print(repr(run_program(globals()[args.function], comp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
