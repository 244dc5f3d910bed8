"""Every command a user is shown works: those in README.md and docs/*.md, and `naiad --help`'s.

Commands are found mechanically: every line of a ``sh``/``console``/``bash`` code block and every
inline code span that starts with ``naiad``, ``.venv/bin/naiad``, ``python -m`` or ``make``.  A
new document is covered without touching this file.  Each command runs as a subprocess with a
bound; processes started by hand (``-p I -n N`` in the same block) run together, on free ports.
The few commands that cannot run inside a test are listed in SKIP with the reason, and the
ones too big for a test run in the reduced form REDUCED gives.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from naiad.cli import COMMANDS, build_parser, samples
from naiad.testing import free_ports

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
TIMEOUT = 180

# Commands that cannot run inside the test suite, by prefix, and why.
SKIP: Dict[str, str] = {
    "make test": "the test suite itself",
    "make bench": "minutes of benchmarks; each `python -m tests.benchmarks NAME` is checked below",
    "make install": "installs into .venv, which this run already uses",
    "spark-submit": "submits to a YARN or Kubernetes cluster, which a test machine does not have",
    "python -m venv env": "packs an environment for cluster executors from the package index",
    "...": "an elision in an example, not a command",
    "umask 077": "writes a secret into your home directory",
    "scp ": "copies a file to another machine",
    "$SPARK_HOME/bin/spark-class": "starts a long-running Spark daemon; tests/test_spark_cluster.py "
                                   "starts the same standalone cluster",
}
# Commands that cannot run inside the test suite, by program (after VAR=value assignments).
SKIP_PROGRAMS: Dict[str, str] = {
    "ip": "creates network namespaces as root; tests/test_hosts_netns.py does the same",
    "kubectl": "needs a Kubernetes cluster",
    "docker": "builds an image for a Kubernetes cluster",
}

# Commands that run in a smaller form: same code path, smaller input.
REDUCED: Dict[str, List[str]] = {
    # make run = .venv/bin/python -m samples.main; two iterations on the same graph.
    "make run": [sys.executable, "-m", "samples.main", "--iterations", "2", "--top", "3"],
}

_START = re.compile(r"^(\.venv/bin/naiad|naiad|python3? -m|make) ")


def doc_commands() -> List[Tuple[str, str, int]]:
    """``(document, command, block)``: every command shown; ``block`` groups the lines of one
    code block (-1 for inline spans)."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for b, m in enumerate(re.finditer(r"```(?:sh|console|bash|shell)\n(.*?)```", text, re.S)):
            body = m.group(1).replace("\\\n", " ")
            for line in body.splitlines():
                line = line.strip().removeprefix("$ ")
                line = re.sub(r"\s+#.*$", "", line)
                if line and not line.startswith("#"):
                    found.append((doc.name, line, b))
        for m in re.finditer(r"`([^`\n]+)`", text):
            span = m.group(1)
            if _START.match(span):
                found.append((doc.name, span, -1))
    return found


def help_commands() -> List[str]:
    """The examples that `naiad --help` and `naiad COMMAND --help` print."""
    shown = build_parser().format_help() + "\n".join(c.example for c in COMMANDS)
    return sorted({line.strip() for line in shown.splitlines()
                   if line.strip().startswith("naiad ") and "COMMAND" not in line})


def placeholder(command: str) -> bool:
    """A form to fill in: NAME, MODULE:FUNCTION, [options], an elided ``...``."""
    return bool(re.search(r"\b[A-Z]{3,}\b|\[[a-z -]+\]|(^|\s)\.\.\.(\s|$)",
                          command.replace("NAIAD_", "")))


def env_of(command: str) -> Dict[str, str]:
    """The environment a command runs in: ours, the venv first on PATH, and the ``VAR=value``
    assignments the command starts with."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for word in shlex.split(command):
        if not re.fullmatch(r"[A-Z_]+=\S*", word):
            break
        name, _, value = word.partition("=")
        env[name] = value
    return env


def argv_of(command: str) -> List[str]:
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if words[0] in (".venv/bin/naiad", "naiad"):
        return [str(BIN / "naiad"), *words[1:]]
    if words[0] in ("python", "python3"):
        return [sys.executable, *words[1:]]
    return words


def run(argv: List[str], timeout: float = TIMEOUT, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (f"{shlex.join(argv)} exited {proc.returncode}\n"
                                  f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}")
    return proc


def skip_reason(command: str) -> Optional[str]:
    for prefix, why in SKIP.items():
        if command.startswith(prefix):
            return why
    words = [w for w in command.split() if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    if words and words[0] in SKIP_PROGRAMS:
        return SKIP_PROGRAMS[words[0]]
    return None


_RENDERED = re.compile(r"^(.*)\.(svg|png|pdf)$")


def without_graphviz(argv: List[str]) -> Optional[List[str]]:
    """For ``naiad graph ... -o FILE.svg`` (or .png, .pdf) on a machine without Graphviz's
    ``dot``: the same command writing DOT text instead (what it renders); else None."""
    if shutil.which("dot") is not None or "graph" not in argv[1:2] or "-o" not in argv:
        return None
    at = argv.index("-o") + 1
    m = _RENDERED.match(argv[at]) if at < len(argv) else None
    if m is None:
        return None
    return argv[:at] + [m.group(1) + ".dot"] + argv[at + 1:]


def run_or_render_dot(argv: List[str], cwd: Path = ROOT) -> None:
    """Run ``argv``; without Graphviz, run its DOT form and then skip, saying why."""
    dot = without_graphviz(argv)
    if dot is None:
        run(argv, cwd=cwd)
        return
    run(dot, cwd=cwd)
    pytest.skip(f"{shlex.join(argv)}: ran as {shlex.join(dot[1:])} (DOT text): Graphviz is not "
                "installed: sudo apt-get install graphviz")


def spark_missing() -> Optional[str]:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'naiad[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime for Spark"
    return None


# A command shown in several documents runs once (under the first document naming it).
SINGLE = sorted({cmd: (doc, cmd) for doc, cmd, block in reversed(doc_commands())
                 if not re.search(r"(^|\s)-p \d", cmd)}.values())
HAND_STARTED = sorted({(doc, block) for doc, cmd, block in doc_commands()
                       if re.search(r"(^|\s)-p \d", cmd) and block >= 0})


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("doc, command", SINGLE, ids=[f"{d}:{c}" for d, c in SINGLE])
def test_documented_command(doc, command):
    why = skip_reason(command)
    if why:
        pytest.skip(f"{command!r} ({doc}): {why}")
    if placeholder(command):
        # A form such as `naiad run MODULE:FUNCTION`: the command must describe itself, and
        # `python -m samples.NAME` must list the names it takes.
        words = [w for w in shlex.split(command) if not placeholder(w)]
        if any(w.startswith("samples.") for w in shlex.split(command)):
            assert "samples (run one" in run(argv_of("naiad sample")).stdout
        elif words[:3] != ["python", "-m", "tests.benchmarks"]:
            run(argv_of(" ".join(words)) + ["--help"], timeout=60)
        return
    words = shlex.split(command)
    if words[:3] == ["python", "-m", "tests.benchmarks"]:
        # Benchmarks never run inside make test: each one named must exist and import.
        for name in words[3:]:
            importlib.import_module(f"tests.benchmarks.bench_{name}")
        return
    argv = REDUCED.get(command.split("  ")[0].strip()) or argv_of(command)
    if "samples.main" in argv or "spark_kmeans" in " ".join(argv):
        missing = spark_missing()
        if missing:
            pytest.skip(missing)
    run_or_render_dot(argv)


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("doc, block", HAND_STARTED, ids=[f"{d}:block{b}" for d, b in HAND_STARTED])
def test_processes_started_by_hand_as_documented(doc, block):
    """The lines of one block that start processes by hand (-p 0, -p 1, ...) run together."""
    lines = [cmd for d, cmd, b in doc_commands() if d == doc and b == block
             and re.search(r"(^|\s)-p \d", cmd)]
    for line in lines:
        why = skip_reason(line)
        if why:
            pytest.skip(f"{line!r}: {why}")
        if re.search(r"\d+\.\d+\.\d+\.\d+:\d+", line.replace("127.0.0.1:", "")):
            pytest.skip(f"{line!r} names other hosts; tests/test_hosts_netns.py runs such a "
                        "pair in two network namespaces")
    ports = {}
    for line in lines:
        for port in re.findall(r"127\.0\.0\.1:(\d+)", line):
            ports.setdefault(port, None)
    fresh = dict(zip(ports, map(str, free_ports(len(ports)))))
    procs = []
    for line in lines:
        for old, new in fresh.items():
            line = line.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
        procs.append(subprocess.Popen(argv_of(line), cwd=ROOT, env=env_of(line), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for line, p, (out, err) in zip(lines, procs, outs):
        assert p.returncode == 0, f"{line} exited {p.returncode}\n{out[-2000:]}\n{err[-3000:]}"
        assert out.strip(), f"{line} printed nothing"


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("command", help_commands())
def test_naiad_help_examples(command, tmp_path):
    words = shlex.split(command)
    if words[1:3] == ["trace", "summarize"]:
        # The example reads a trace: write one first, as the docs show.
        run(argv_of(f"naiad sample wordcount --files 10 -n 2 --trace {words[3]}"))
    run_or_render_dot(argv_of(command), cwd=tmp_path)   # files an example writes land there


# Small inputs for the samples whose defaults take more than a few seconds.
SMALL: Dict[str, List[str]] = {
    "main": ["--graph", "imports", "--iterations", "2", "--top", "3"],
    "spark_kmeans": ["--points", "2000", "-i", "2"],
    "kmeans": ["--points", "2000", "-i", "3"],
    "components": ["--random", "300"],
    "components_vertex": ["--random", "300", "-t", "2"],
    "pagerank": ["--rmat", "8", "-n", "2", "--invariant"],
    "mapreduce": ["--files", "20", "--per-epoch", "10"],
    "wordcount": ["--files", "20", "-n", "2"],
    "frames_wordcount": ["--files", "20", "-n", "2", "--per-epoch", "7"],
    "frames_pagerank": ["--rmat", "8", "-n", "2"],
    "wordcount_vertex": ["--files", "20", "-t", "2"],
    "collatz": ["--limit", "100"],
    "dd_bfs": ["--nodes", "300", "--edges", "600", "--epochs", "3"],
    "dd_components": ["--random", "300", "--updates", "4", "--check"],
    "dd_scc": ["--random", "60", "--epochs", "2"],
    "dd_wordcount": ["--files", "8", "--epochs", "3"],
}


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("name", sorted(samples()))
def test_every_sample_runs_from_the_command_line(name):
    if name in ("main", "spark_kmeans") and spark_missing():
        pytest.skip(spark_missing())
    out = run([str(BIN / "naiad"), "sample", name, *SMALL.get(name, [])]).stdout
    assert out.strip(), f"naiad sample {name} printed nothing"


@pytest.mark.parametrize("name", sorted(samples()))
def test_every_sample_describes_its_options(name):
    via_cli = run([str(BIN / "naiad"), "sample", name, "--help"], timeout=60).stdout
    via_module = run([sys.executable, "-m", f"samples.{name}", "--help"], timeout=60).stdout
    assert "usage:" in via_cli and "usage:" in via_module
    # The usage line names the command that runs it, not the `naiad` command's own.
    assert via_cli.startswith(f"usage: naiad sample {name} "), via_cli.splitlines()[0]


def test_exit_codes_and_messages():
    naiad = str(BIN / "naiad")
    env = dict(os.environ)

    def call(*args):
        return subprocess.run([naiad, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env=env)

    assert call("--help").returncode == 0
    usage = call("sample", "no_such_sample")
    assert usage.returncode == 2 and "the samples are:" in usage.stderr
    assert call("frobnicate").returncode == 2
    assert call("run", "no.such.module:program").returncode == 2
    bare = call("run")            # the flags are optional: only the program is asked for
    assert bare.returncode == 2 and "run: name the program, MODULE:FUNCTION" in bare.stderr
    assert "flags" not in bare.stderr.split("e.g.")[0].replace("Naiad's flags if any", "")
    failed = call("run", "tests.dist_programs:failing")
    assert failed.returncode == 1, failed.stderr
    assert "no such key" in failed.stderr and "Traceback" not in failed.stderr
    debug = call("--debug", "run", "tests.dist_programs:failing")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    # A flag no one knows is a usage error naming it, not a run with the defaults.
    for args, bad in ((("run", "samples.hello:program", "--treads", "2"), "--treads 2"),
                      (("run", "samples.hello:program", "extra"), "extra"),
                      (("sample", "hello", "--bogus"), "--bogus"),
                      (("sample", "collatz", "--limit", "5", "--procs", "2"), "--procs 2"),
                      (("sample", "components_vertex", "--nodes"), "--nodes"),
                      (("sample", "wordcount_vertex", "-x"), "-x"),
                      # before the command argparse only said that COMMAND is required
                      (("--bogus",), "--bogus"),
                      (("--debug", "--bogus", "run", "samples.hello:program"), "--bogus")):
        wrong = call(*args)
        assert wrong.returncode == 2 and f"unrecognized arguments: {bad}" in wrong.stderr, (
            args, wrong.returncode, wrong.stderr)
    assert call("sample", "hello", "-t", "2").returncode == 0


def test_pyspark_imports_without_warnings():
    """The pins of the spark extra satisfy pyspark: importing it warns about nothing."""
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("pyspark is not installed (pip install 'naiad[spark]')")
    run([sys.executable, "-W", "error", "-c",
         "import pyspark.sql.pandas.utils as u; u.require_minimum_pandas_version(); "
         "u.require_minimum_pyarrow_version(); import pyspark.sql, pyspark.pandas"], timeout=120)


def test_samples_refuse_impossible_values_with_a_usage_error():
    """Counts that cannot be (a negative epoch size, no workers, a one-node random graph for
    SCC rewiring, a huge RMAT scale, more clusters than points) are usage errors naming the
    argument, exit code 2, before anything runs (one hung, others printed wrong results as
    checked, or tracebacks)."""
    naiad = str(BIN / "naiad")
    for args, named in ((("sample", "dd_scc", "--random", "1"), "argument --random"),
                        (("sample", "wordcount", "--files", "5", "--per-epoch", "-3"),
                         "argument --per-epoch: -3 is not an integer of at least 1"),
                        (("sample", "mapreduce", "--per-epoch", "0"), "argument --per-epoch"),
                        (("sample", "kmeans", "-k", "0"), "argument -k"),
                        (("sample", "kmeans", "-k", "5", "--points", "3"), "more clusters"),
                        (("sample", "pagerank", "--rmat", "100"), "at most 28"),
                        (("sample", "wordcount", "-n", "0"), "argument -n/--processes"),
                        (("sample", "wordcount", "-n", "5000"),
                         "-n x -t (processes x workers): at most 4096 workers"),
                        (("sample", "components", "-n", "64", "-t", "65"),
                         "-n x -t (processes x workers): at most 4096 workers"),
                        (("sample", "frames_pagerank", "--rmat", "4", "-n", "2", "-t", "3000"),
                         "-n x -t (processes x workers): at most 4096 workers"),
                        (("sample", "wordcount", "--monitor", "99999"), "is not a port"),
                        (("sample", "hello", "--rounds", "-1"), "argument --rounds"),
                        (("graph", "samples.hello:program", "-o", "picture.txt"),
                         "cannot draw a .txt file")):
        got = subprocess.run([naiad, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        assert got.returncode == 2 and named in got.stderr, (args, got.returncode, got.stderr)


def test_components_counts_a_node_whose_only_edge_is_a_self_loop():
    """The sample's check is networkx over the edges as generated: a node with only a self
    loop is a component of its own (it was dropped from both the run and the check)."""
    import networkx as nx
    from samples.components import main as components_main
    from samples.graphs import random_edges
    g = nx.Graph()
    g.add_edges_from(random_edges(3000, 3000, seed=7))
    out = subprocess.run([str(BIN / "naiad"), "sample", "components", "--random", "3000",
                          "--seed", "7", "-t", "2"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"{nx.number_connected_components(g)} components over "
                            f"{g.number_of_nodes()} nodes") and "equal to networkx" in first
    assert components_main(["--random", "1"]) == 0


def test_process_flags_and_module_names_out_of_range_are_usage_errors():
    """A layout that cannot be (no processes, billions of them or of threads, one address for
    two processes, a port beyond 65535) and a module name that is not one: usage errors naming
    the flag or the name, before anything runs (before: a MemoryError after gigabytes, a
    KeyError, a port wrapped around to 4464, a bare ValueError)."""
    naiad = str(BIN / "naiad")
    env = dict(os.environ, NAIAD_SECRET="s3cret")
    a, b = (f"127.0.0.1:{p}" for p in free_ports(2))
    for args, named in (
            (("run", "samples.hello:program", "-n", "0"), "--numprocs must be at least 1"),
            (("run", "samples.hello:program", "--connect-timeout", "inf"),
             "--connect-timeout must be a positive, finite number of seconds; got inf"),
            (("sample", "hello", "--connect-timeout", "1e400"),
             "--connect-timeout must be a positive, finite number of seconds; got inf"),
            (("run", "samples.hello:program", "-n", "99999999999"), "at most 4096 workers"),
            (("run", "samples.hello:program", "-t", "99999999999999999999"),
             "at most 4096 workers"),
            (("run", "samples.hello:program", "-p", "0", "-n", "2", "-h", a, a),
             f"--hosts lists {a} twice"),
            (("run", "samples.hello:program", "-n", "2", "-h", a, a.replace("127.0.0.1", "localhost")),
             f"--hosts lists {a} and {a.replace('127.0.0.1', 'localhost')}, one endpoint"),
            (("sample", "hello", "-p", "0", "-n", "2", "-h", "127.0.0.1:70000", b),
             "'127.0.0.1:70000' is not host:port with a port 1..65535"),
            (("run", ":program"), "':program' does not name a module"),
            (("graph", ".myprog:program"), "'.myprog:program' does not name a module")):
        got = subprocess.run([naiad, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, env=env)
        assert got.returncode == 2 and named in got.stderr, (args, got.returncode, got.stderr)


@pytest.mark.parametrize("args", [("sample", "mapreduce"), ("sample", "hello", "--rounds", "2000")])
def test_output_piped_into_head_from_a_vertex_is_not_a_failure(args):
    """A subscriber or a vertex that prints into a closed pipe: exit 0 and nothing on stderr,
    as when the program itself prints (its BrokenPipeError came wrapped in a VertexError)."""
    naiad = str(BIN / "naiad")
    got = subprocess.run(f"{shlex.join([naiad, *args])} | head -1; "
                         "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stderr == "", (got.returncode, got.stderr[-500:])
    assert len(got.stdout.splitlines()) == 1
