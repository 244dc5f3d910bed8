"""The core samples against plain-Python and networkx oracles, in every cluster configuration."""

from __future__ import annotations

import functools

import networkx as nx
import pytest

import naiad
from naiad import key_hash
from samples import collatz, components_vertex, hello, textdata, wordcount_vertex


def merge_results(parts):
    """``{epoch: records}`` of every process, merged and sorted."""
    merged = {}
    for part in parts:
        for epoch, records in part.items():
            merged.setdefault(epoch, []).extend(records)
    return {epoch: sorted(records) for epoch, records in sorted(merged.items())}


# ---- hello ----------------------------------------------------------------------------------

def test_hello_exchanges_by_value(cluster):
    parts = cluster.execute(functools.partial(hello.program, rounds=12))
    seen = sorted(pair for part in parts for pair in part)
    total = cluster.processes * cluster.workers
    assert sorted(x for _, x in seen) == list(range(12))
    for worker, x in seen:
        assert worker == key_hash(x) % total


def test_hello_prints_what_each_worker_sees(capsys):
    assert hello.main(["-t", "2", "--rounds", "4"]) == 0
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == sorted(f"worker {key_hash(x) % 2}:\thello {x}" for x in range(4))


# ---- collatz --------------------------------------------------------------------------------

def collatz_expectations(limit):
    expected = {n: collatz.collatz_steps(n) for n in range(1, limit + 1)}
    # The notification of iteration k counts the numbers still travelling at k.
    alive = {k: sum(1 for s in expected.values() if s >= k)
             for k in range(max(expected.values()) + 1)}
    return expected, alive


def test_collatz_counts_steps_and_iterations(cluster):
    # Few iterations (at most 20) under the progress checker of every configuration ...
    parts = cluster.execute(functools.partial(collatz.program, limit=20))
    assert collatz.merge(parts) == collatz_expectations(20)


def test_collatz_long_runs(monkeypatch):
    # ... and long ones (up to 178 iterations) without it.
    monkeypatch.setenv("NAIAD_DEBUG_PROGRESS", "0")
    parts = naiad.execute(functools.partial(collatz.program, limit=1000), workers=2,
                          debug_progress=False)
    assert collatz.merge(parts) == collatz_expectations(1000)


def test_collatz_bounded_by_max_iterations():
    from naiad.testing import run

    def build(comp, numbers):
        done, _ = collatz.collatz(comp, collatz.prepare(numbers), max_iterations=20)
        return done

    got = run(build, [list(range(1, 60))], workers=2)
    assert got[0] == [(n, s) for n in range(1, 60) if (s := collatz.collatz_steps(n)) < 20]


def test_collatz_main(capsys):
    assert collatz.main(["--limit", "30"]) == 0
    assert "the longest is 27 with 111 steps" in capsys.readouterr().out


# ---- word count -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stdlib_epochs():
    epochs = wordcount_vertex.epochs_of_files(textdata.stdlib_text_files(limit=9), 3)
    epochs.insert(1, [])          # an empty epoch in the middle
    return epochs


def test_wordcount_on_stdlib_sources(cluster, stdlib_epochs):
    parts = cluster.execute(functools.partial(wordcount_vertex.program, epochs=stdlib_epochs))
    got = merge_results(parts)
    assert got == wordcount_vertex.oracle(stdlib_epochs)
    assert got[1] == [] and sum(c for _, c in got[0]) > 500


def test_wordcount_per_time_counts():
    from naiad.testing import run
    epochs = [["to be or not to be"], ["that is", "the question"], [], ["be be"]]
    assert run(wordcount_vertex.count_words, epochs, workers=3) == wordcount_vertex.oracle(epochs)


def test_wordcount_main(capsys):
    assert wordcount_vertex.main(["-t", "2", "--files", "4", "--per-epoch", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("epoch 0:") and "epoch 1:" in out


# ---- connected components -------------------------------------------------------------------

def nx_components(edges):
    """networkx: ``(node, least node of its component)``, sorted."""
    g = nx.Graph()
    g.add_edges_from(edges)
    return sorted((node, min(cc)) for cc in nx.connected_components(g) for node in cc)


@pytest.fixture(scope="module")
def import_graph():
    return textdata.stdlib_import_graph()


def test_import_graph_is_real(import_graph):
    modules = {m for m, _ in import_graph}
    assert {"os", "json", "json.decoder", "email.message"} <= modules
    assert ("os", "sys") in import_graph and ("email.message", "email.utils") in import_graph
    assert import_graph == sorted(set(import_graph))


def test_components_oracle_matches_networkx(import_graph):
    assert components_vertex.oracle(import_graph) == nx_components(import_graph)


def test_components_random_and_import_graphs(cluster, import_graph):
    """One epoch per graph: random graphs of several sizes, an empty one, the import graph."""
    graphs = [components_vertex.random_graph(nodes, edges, seed)
              for seed, (nodes, edges) in enumerate([(30, 20), (300, 250), (2000, 1500)])]
    graphs += [[], import_graph, [(5, 5), (5, 6)]]
    parts = cluster.execute(functools.partial(components_vertex.program, graphs=graphs))
    got = merge_results(parts)
    assert got == {e: nx_components(g) for e, g in enumerate(graphs)}
    assert len({label for _, label in got[4]}) >= 2


def test_components_state_is_released():
    """After the END notification every vertex has forgotten the epoch."""
    holders = []

    class Watched(components_vertex.Propagate):
        def __init__(self):
            super().__init__()
            holders.append(self)

    def program(comp):
        inp = comp.new_input()
        original = components_vertex.Propagate
        components_vertex.Propagate = Watched
        try:
            got = components_vertex.components(comp, inp.stream).collect()
        finally:
            components_vertex.Propagate = original
        comp.activate()
        for seed in range(3):
            inp.on_next(components_vertex.random_graph(50, 40, seed))
        inp.on_completed()
        comp.join(timeout=30)
        return got.results

    naiad.execute(program, workers=2)
    assert len(holders) == 2 and all(v.epochs == {} for v in holders)


def test_components_main(capsys):
    assert components_vertex.main(["-t", "2", "--random", "200", "--seed", "3"]) == 0
    assert "component(s)" in capsys.readouterr().out
