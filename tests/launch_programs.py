"""Programs for the launch and distributed tests, importable by name in the launched processes.

``BOOK`` is this module's data (2 MB of text, made at import): a program of this module that
reads it travels to the processes as its name, and every process makes ``BOOK`` itself.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Iterator

import naiad
import linq  # noqa: F401  (the fluent operators)

BOOK = [f"line {i} of the book, word{i % 97}" for i in range(60_000)]


def my_lines(index: int, processes: int) -> Iterator[str]:
    """Process ``index``'s share of the book: every ``processes``-th line."""
    return iter(BOOK[index::processes])


def count_words(comp: naiad.Computation) -> dict:
    """Word count over the book, each process feeding its own share of the lines."""
    inp = comp.new_input(name="lines")
    got = inp.stream.select_many(str.split).count().collect()
    comp.activate()
    inp.on_next(my_lines(comp.process_index, comp.processes))
    inp.on_completed()
    comp.join(timeout=60)
    return dict(got.records())


def expected_counts() -> Counter:
    return Counter(w for line in BOOK for w in line.split())


def late_to_activate(comp: naiad.Computation) -> None:
    """Process 1 joins the rendezvous only after 60 s."""
    if comp.process_index == 1:
        time.sleep(60)
    comp.activate()
    comp.join(timeout=60)


def never_activates_in_one(comp: naiad.Computation) -> int:
    """Process 1 returns without activating; process 0 waits for it."""
    if comp.process_index == 1:
        return os.getpid()
    comp.activate()
    comp.join(timeout=60)
    return os.getpid()


def fails_before_activate_in_one(comp: naiad.Computation) -> None:
    """Process 1 raises while it reads its input, before activate; process 0 waits for it."""
    inp = comp.new_input(name="lines")
    inp.stream.collect()
    if comp.process_index == 1:
        raise ValueError("no input for process 1")
    comp.activate()
    inp.on_completed()
    comp.join(timeout=60)


def returns_at_its_own_pace(comp: naiad.Computation) -> int:
    """No process activates; process i returns after i * 0.3 s."""
    time.sleep(0.3 * comp.process_index)
    return comp.process_index


def forks_a_sleeper(comp: naiad.Computation) -> int:
    """Leave a forked process (holding this process's link to the launcher) running 60 s."""
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return pid


def differing_graphs(comp: naiad.Computation) -> None:
    """Each process names its input differently: the processes build different graphs, which
    they must find out at ``activate``."""
    inp = comp.new_input(name="a" if comp.process_index == 0 else "b")
    inp.stream.collect()
    comp.activate()
    inp.on_completed()
    comp.join(timeout=20)


def raises_after_activate_in_one(comp: naiad.Computation) -> None:
    """Process 1's program raises after activate; process 0 waits in join for the epochs."""
    inp = comp.new_input(name="lines")
    inp.stream.collect()
    comp.activate()
    if comp.process_index == 1:
        raise ValueError("process 1's program gave up after activate")
    inp.on_next(["a"])
    inp.on_completed()
    comp.join(timeout=60)
