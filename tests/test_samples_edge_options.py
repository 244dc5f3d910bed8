"""The samples at the edges of their options, run as a user runs them (a subprocess each).

* ``dd_bfs`` refuses more ``--edges`` than ``--nodes`` allow (a usage error; it hung drawing
  edges that could not exist) and skips, saying so, the rewirings of a complete graph.
* ``dd_scc`` and ``dd_components`` on tiny random graphs whose edges have nowhere to move (every
  edge a self-loop, or every edge between two nodes present): the epoch has no change, said
  so, and every epoch still equals the oracle (it hung, or failed with ``ValueError: empty
  range for randrange()``).
* ``mapreduce`` says how many epochs and modules it read (it printed ``--per-epoch``).
* ``python -m samples.NAME ARGS`` is ``naiad sample NAME ARGS``: the same messages and exit
  codes (it printed raw tracebacks for a missing secret, a bad ``--trace``, Ctrl-C, a closed
  pipe), and ``samples/hello.py``'s hand-started commands carry the secret they need.

Every subprocess has a bound, so a hang fails its test instead of hanging the suite.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

import networkx as nx
import pytest

from naiad.cli import samples
from naiad.testing import free_ports

ROOT = Path(__file__).resolve().parents[1]
BOUND = 60                                # seconds: a hang fails the test
SLACK = 120                               # for pytest-timeout: reporting on a loaded machine

Edge = Tuple[Hashable, Hashable]


def _env(**changes: Optional[str]) -> Dict[str, str]:
    """Our environment, with this checkout first on the path and ``changes`` (None: unset)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _run(argv: Sequence[str], env: Optional[Dict[str, str]] = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=BOUND, env=env or _env(), stdin=subprocess.DEVNULL)


def sample(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """``naiad sample ARGS``, as the console script runs it."""
    return _run(["-m", "naiad.cli", "sample", *args], env)


def module(name: str, *args: str, env: Optional[Dict[str, str]] = None
           ) -> subprocess.CompletedProcess:
    """``python -m samples.NAME ARGS``."""
    return _run(["-m", f"samples.{name}", *args], env)


def _shown(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}"


# ---- dd_bfs: --edges within what --nodes allow ----------------------------------------------------
@pytest.mark.timeout(BOUND + SLACK)
@pytest.mark.parametrize("args, most", [(["--nodes", "50"], 2500),
                                        (["--nodes", "2", "--edges", "5"], 4),
                                        (["--nodes", "1", "--edges", "2"], 1)])
def test_dd_bfs_refuses_more_edges_than_the_nodes_allow(args: List[str], most: int) -> None:
    got = sample("dd_bfs", *args)
    edges = args[args.index("--edges") + 1] if "--edges" in args else "4000"
    nodes = args[args.index("--nodes") + 1]
    want = f"--edges {edges} is more than the {most} edges --nodes {nodes} allows"
    assert got.returncode == 2, _shown(got)
    assert "usage: naiad sample dd_bfs" in got.stderr and want in got.stderr, _shown(got)
    assert "Traceback" not in got.stderr


@pytest.mark.timeout(2 * BOUND + SLACK)
def test_dd_bfs_skips_the_rewirings_of_a_complete_graph_and_stays_right() -> None:
    complete = sample("dd_bfs", "--nodes", "2", "--edges", "4", "--epochs", "3", "--changes", "2")
    assert complete.returncode == 0, _shown(complete)
    assert "6 rewirings skipped: the graph has every possible edge" in complete.stdout
    assert "every epoch equal to a breadth-first search from scratch" in complete.stdout
    # One edge short of complete: every rewiring moves an edge into the one free place.
    dense = sample("dd_bfs", "--nodes", "3", "--edges", "8", "--epochs", "4", "--changes", "3")
    assert dense.returncode == 0, _shown(dense)
    assert "every epoch equal" in dense.stdout and "skipped" not in dense.stdout, _shown(dense)


# ---- dd_scc and dd_components: rewiring with nowhere to go -----------------------------------------
def _assert_rewirings_are_moves(edges: Sequence[Edge], updates: Sequence[Sequence[Tuple[Edge, int]]],
                                undirected: bool = False) -> None:
    """Each epoch is empty or moves one edge: a present one goes, an absent one between two
    different nodes comes (both directions of each for an undirected graph)."""
    present = Counter(edges)
    for epoch in updates:
        if epoch:
            gone = {e for e, d in epoch if d < 0}
            new = {e for e, d in epoch if d > 0}
            assert len(gone) == len(new) == (2 if undirected else 1), epoch
            assert all(present[e] for e in gone) and not any(present[e] for e in new), epoch
            assert all(u != v for u, v in new) and not gone & new, epoch
        for e, d in epoch:
            present[e] += d
        present = +present


@pytest.mark.timeout(BOUND + SLACK)
@pytest.mark.parametrize("seed", [2, 4, 5])
def test_dd_scc_on_a_two_node_graph_ends_and_equals_networkx(seed: int) -> None:
    got = sample("dd_scc", "--random", "2", "--seed", str(seed))
    assert got.returncode == 0, _shown(got)
    assert "every epoch equal to networkx" in got.stdout, _shown(got)
    assert "no edge between two different nodes was free to rewire to" in got.stdout


@pytest.mark.timeout(BOUND)                  # in this process: a hang ends at the bound
def test_dd_scc_rewirings_move_edges_or_say_none_can() -> None:
    from samples.dd_scc import rewire
    full = [(0, 0), (0, 1), (1, 0)]                  # both edges between different nodes there
    _assert_rewirings_are_moves(full, rewire(full, 6, seed=2))
    assert rewire([(3, 3)], 4, seed=1) == [[], [], [], []]
    nearly = [(u, v) for u in range(4) for v in range(4) if u != v][1:]   # (0, 1) is free
    updates = rewire(nearly, 12, seed=3)
    _assert_rewirings_are_moves(nearly, updates)
    assert all(updates), "one edge was free in every epoch"


def _networkx_labels(current: Counter) -> Dict[Tuple[Hashable, Hashable], int]:
    graph = nx.Graph(list(current))
    return {(n, min(c)): 1 for c in nx.connected_components(graph) for n in c}


@pytest.mark.timeout(BOUND + SLACK)
def test_dd_components_with_only_self_loops_ends_and_equals_union_find() -> None:
    got = sample("dd_components", "--random", "2", "--seed", "3", "--updates", "3", "--check")
    assert got.returncode == 0, _shown(got)
    assert "3 of the 3 epochs rewire no edge" in got.stdout, _shown(got)
    assert "every epoch equal to union-find" in got.stdout


@pytest.mark.timeout(BOUND)                  # in this process: a hang ends at the bound
@pytest.mark.parametrize("edges, moves", [
    ([(0, 1), (1, 2), (0, 2), (3, 3)], False),      # a triangle: no pair of nodes is free
    ([(0, 1), (1, 2), (0, 2), (2, 3), (1, 3)], True),  # K4 less one edge: one pair is free
])
def test_dd_components_rewirings_equal_networkx(edges: List[Edge], moves: bool) -> None:
    from linq.differential.testing import replay
    from samples.dd_components import rewirings, run, symmetric
    updates = rewirings(edges, 6, seed=1)
    _assert_rewirings_are_moves(symmetric(edges), updates, undirected=True)
    assert all(updates) if moves else not any(updates), updates
    out = run(edges, updates, check=True)
    results = [o["results"] for o in out]
    for epoch, current, labels in replay(symmetric(edges), updates, results):
        assert labels == _networkx_labels(current), epoch


# ---- mapreduce: the counts it read -----------------------------------------------------------------
@pytest.mark.timeout(2 * BOUND + SLACK)
@pytest.mark.parametrize("args, said", [
    (["--files", "1"], "1 epoch of 1 module,"),
    (["--files", "5", "--per-epoch", "2"], "3 epochs of 2 modules (the last 1),"),
])
def test_mapreduce_says_the_epochs_and_modules_it_read(args: List[str], said: str) -> None:
    got = sample("mapreduce", *args)
    assert got.returncode == 0, _shown(got)
    assert said in got.stdout and "equal to the plain-Python MapReduce" in got.stdout, _shown(got)


# ---- python -m samples.NAME is naiad sample NAME ---------------------------------------------------
def test_every_sample_runs_as_naiad_sample_when_run_as_a_module() -> None:
    """Each sample's ``if __name__ == "__main__"`` block hands over to ``naiad sample NAME``
    (so the messages and exit codes of naiad.cli's main apply), under its own name."""
    wrong = {}
    for name in samples():
        tree = ast.parse((ROOT / "samples" / f"{name}.py").read_text(encoding="utf-8"))
        blocks = [n for n in tree.body if isinstance(n, ast.If)
                  and "__main__" in ast.unparse(n.test)]
        body = " ".join(ast.unparse(s) for b in blocks for s in b.body)
        if body != f"sys.exit(naiad_sample({name!r}))":
            wrong[name] = body
    assert not wrong, wrong


@pytest.mark.timeout(2 * BOUND + SLACK)
@pytest.mark.parametrize("args, unset, said, code", [
    (["hello", "-n", "2", "-p", "0"], ("NAIAD_SECRET", "NAIAD_SECRET_FILE"),
     "naiad: NaiadError: process 0 has no secret", 1),
    (["wordcount", "--files", "3", "--trace", "/etc/passwd"], (),
     "naiad: PermissionError: trace directory /etc/passwd is not a directory", 1),
    (["dd_bfs", "--nodes", "50"], (), "--edges 4000 is more than the 2500 edges", 2),
], ids=["no-secret", "trace-not-a-directory", "usage-error"])
def test_module_run_reports_as_naiad_sample_does(args: List[str], unset: Tuple[str, ...],
                                                 said: str, code: int) -> None:
    env = _env(**{name: None for name in unset})
    via_module = module(*args, env=env)
    via_cli = sample(*args, env=env)
    assert via_module.returncode == code and said in via_module.stderr, _shown(via_module)
    assert "Traceback" not in via_module.stderr, _shown(via_module)
    assert (via_module.returncode, via_module.stdout, via_module.stderr) == \
        (via_cli.returncode, via_cli.stdout, via_cli.stderr)


def _started(argv: List[str]) -> subprocess.Popen:
    """A running sample that has printed its first line."""
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("worker "), (first, proc.poll())
    return proc


@pytest.mark.timeout(BOUND + SLACK)
def test_module_run_interrupted_says_so_with_exit_code_130() -> None:
    proc = _started(["-m", "samples.hello", "--rounds", "100000000"])
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip() == "naiad: interrupted", (proc.returncode, err)


def _into_closed_pipe(argv: List[str]) -> Tuple[int, str]:
    """``argv | head -1``: the exit code and standard error after the reader has gone."""
    proc = _started(argv)
    try:
        assert proc.stdout is not None
        proc.stdout.close()
        _, err = proc.communicate(timeout=BOUND)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.timeout(2 * BOUND + SLACK)
def test_module_run_into_a_closed_pipe_ends_as_naiad_sample_does() -> None:
    code, err = _into_closed_pipe(["-m", "samples.hello", "--rounds", "100000"])
    cli_code, cli_err = _into_closed_pipe(["-m", "naiad.cli", "sample", "hello",
                                           "--rounds", "100000"])
    assert "Traceback" not in err and "Traceback" not in cli_err, (err, cli_err)
    assert code == cli_code, (code, err, cli_code, cli_err)


# ---- hello's docstring: processes started by hand need a secret ------------------------------------
@pytest.mark.timeout(BOUND + SLACK)
def test_hello_docstring_commands_started_by_hand_run() -> None:
    import samples.hello
    lines = [line.split("#")[0].strip().rstrip("&").strip()
             for line in (samples.hello.__doc__ or "").splitlines()
             if "python -m samples.hello" in line and re.search(r"\s-p \d", line)]
    assert len(lines) == 2, lines
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    procs = []
    for line in lines:
        words = shlex.split(line)
        assigned = {w.split("=", 1)[0]: w.split("=", 1)[1]
                    for w in words[:words.index("python")]}
        assert "NAIAD_SECRET" in assigned, line
        argv = words[words.index("python") + 1:] + ["--rounds", "3", "-h", *hosts]
        procs.append(subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=_env(NAIAD_SECRET_FILE=None, **assigned)))
    try:
        outs = [p.communicate(timeout=BOUND) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for line, p, (out, err) in zip(lines, procs, outs):
        assert p.returncode == 0 and "hello" in out, (line, p.returncode, out, err[-2000:])
