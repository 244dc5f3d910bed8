"""Collatz in a loop: how many steps each number takes to reach 1 (the timely book's exercise).

Every number enters a loop context and circulates through one custom vertex with two outputs:
numbers not yet at 1 go round the feedback edge, finished ones leave the loop.  The loop
counter of a record's timestamp *is* its number of steps, so records carry no counter of their
own.  The vertex also asks for a notification at every iteration it sees and reports, once the
iteration is complete, how many numbers were still travelling then: the iteration's barrier.

    python -m samples.collatz                # numbers 1..1000, one worker
    python -m samples.collatz -t 2 --limit 20000

>>> import naiad
>>> [(steps, alive)] = naiad.execute(functools.partial(program, limit=30), workers=2)
>>> steps[27], steps[1], max(steps.values())
(111, 0, 111)
>>> alive[0], alive[111]
(30, 1)
"""

from __future__ import annotations

import functools
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import naiad
import stages
from samples._options import naiad_sample, positive, spmd_args, spmd_parser

__all__ = ["CollatzStep", "Pair", "prepare", "collatz", "collatz_steps", "program", "merge",
           "main"]


class CollatzStep(naiad.Vertex):
    """Input ``(origin, value)``.  Output 0: the next value (to the feedback); output 1: finished
    ``(origin, steps)``; output 2: ``(iteration, numbers handled)`` once the iteration is complete."""

    def __init__(self):
        super().__init__()
        self.handled: Dict[naiad.Timestamp, int] = {}

    def on_recv_batch(self, edge, messages, time):
        steps = time.counters[-1]
        for origin, value in messages:
            if value == 1:
                self.send_by(1, (origin, steps), time)
            elif value % 2 == 0:
                self.send_by(0, (origin, value // 2), time)
            else:
                self.send_by(0, (origin, 3 * value + 1), time)
        if time not in self.handled:
            self.handled[time] = 0
            self.notify_at(time)
        self.handled[time] += len(messages)

    def on_notify(self, time):
        self.send_by(2, (time.counters[-1], self.handled.pop(time)), time)


def collatz(comp: naiad.Computation, numbers: naiad.Stream,
            max_iterations: Optional[int] = None) -> Tuple[naiad.Stream, naiad.Stream]:
    """``(origin, steps)`` for every number of ``numbers``, and ``(iteration, count)`` per vertex."""
    loop = stages.LoopContext(comp, name="collatz")
    start = loop.enter(numbers)
    fb = loop.feedback(max_iterations=max_iterations)
    step = stages.new_stage(CollatzStep, name="step")
    step.new_input(start.concat(fb.stream))
    again, done, alive = step.new_output(), step.new_output(), step.new_output()
    fb.connect(again)
    return loop.exit(done), loop.exit(alive)


class Pair(naiad.Vertex):
    """``n`` becomes ``(n, n)``: the origin and the current value."""

    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [(n, n) for n in messages], time)


def prepare(stream: naiad.Stream) -> naiad.Stream:
    """Numbers as ``(origin, value)`` pairs, spread over the workers by value."""
    return stages.unary(stream, Pair, partition_by=lambda n: n, name="pair")


def collatz_steps(n: int) -> int:
    """The oracle: plain Python."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def program(comp: naiad.Computation, limit: int = 1000) -> Tuple[Dict[int, int], Dict[int, int]]:
    """Steps for 1..limit (each process supplies its share); returns this process's findings:
    ``({number: steps}, {iteration: numbers alive at it})``."""
    inp = comp.new_input(name="numbers")
    done, alive = collatz(comp, prepare(inp.stream))
    got, counts = done.collect(), alive.collect()
    comp.activate()
    inp.on_next(range(1 + comp.process_index, limit + 1, comp.processes))
    inp.on_completed()
    comp.join()
    per_iteration: Dict[int, int] = {}
    for k, n in counts.results.get(0, []):
        per_iteration[k] = per_iteration.get(k, 0) + n
    return dict(got.results.get(0, [])), per_iteration


def merge(parts: List[Tuple[Dict[int, int], Dict[int, int]]]) -> Tuple[Dict[int, int], Dict[int, int]]:
    """Combine the return values of all processes."""
    steps: Dict[int, int] = {}
    alive: Dict[int, int] = {}
    for s, a in parts:
        steps.update(s)
        for k, n in a.items():
            alive[k] = alive.get(k, 0) + n
    return steps, alive


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run with Naiad's flags (-p, -n, -t, -h); ``--limit N`` (default 1000)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = spmd_parser("naiad sample collatz", __doc__.split("\n")[0])
    parser.add_argument("--limit", type=positive, default=1000)
    args, naiad_flags = spmd_args(parser, argv)
    comp = naiad.Computation.from_args(naiad_flags)
    from naiad.execute import run_program
    steps, alive = run_program(functools.partial(program, limit=args.limit), comp)
    if steps:
        longest = max(steps, key=lambda n: (steps[n], -n))
        print(f"process {comp.process_index}: {len(steps)} numbers; the longest is {longest} "
              f"with {steps[longest]} steps")
    for k in sorted(alive)[:: max(1, len(alive) // 10)]:
        print(f"  iteration {k:4d}: {alive[k]} numbers still travelling")
    return 0


if __name__ == "__main__":
    sys.exit(naiad_sample("collatz"))
