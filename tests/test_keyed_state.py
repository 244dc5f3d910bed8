"""KeyedState: checkpoints that hold only the keys written since the previous one.

* Random mutations through every mutating method of a dict, checkpointed at random points:
  every checkpoint, read back through its chain of deltas, equals a plain dict that saw the
  same mutations (the oracle), at several sizes; the deltas are smaller than the full copies.
* Tables anywhere in a vertex's state (two attributes, inside a list, the same table twice)
  come back as tables, shared where they were shared, and go on chaining after a restore.
* A delta whose chain is broken is a clear error naming the table and the epochs.
* Through real processes and a SIGKILL: a word count whose running totals are a KeyedState
  resumes from a checkpoint that is a delta on older ones, and delivers every epoch exactly once;
  a damaged part in the middle of a chain makes every process resume from a checkpoint before
  it; pruning keeps what the newest checkpoints' chains read.
"""

from __future__ import annotations

import json
import pickle
import random
import warnings
from pathlib import Path

import pytest

import naiad
from naiad.recovery import snapshot
from naiad.recovery.directory import directory_key
from naiad.recovery.journal import COMMIT, PART, journal_files, read_record, scan
from naiad.recovery.store import CheckpointWarning
from naiad.state import MAX_DELTAS, KeyedState
from samples import wordcount_vertex
from tests.test_recovery import (assert_delivered_exactly_once, damage, merge, records,
                                 resumable_program, running_totals, text_epochs,
                                 wordcount_program)

SEED = 20261125


def mutate(rng: random.Random, table: dict, keys: int) -> None:
    """One random mutation, applied the same way to a KeyedState or to the dict oracle."""
    k = rng.randrange(keys)
    op = rng.randrange(10)
    if op == 0:
        table[k] = rng.random()
    elif op == 1 and k in table:
        del table[k]
    elif op == 2:
        table.update({rng.randrange(keys): rng.random() for _ in range(rng.randrange(5))})
    elif op == 3:
        table.update([(k, "pair")], extra=k)
    elif op == 4:
        table.setdefault(k, [k])
    elif op == 5:
        table.pop(k, None)
    elif op == 6 and table:
        table.popitem()
    elif op == 7 and rng.random() < 0.02:
        table.clear()
    elif op == 8:
        table |= {k: (k, k)}
    else:
        table[k] = table.get(k, 0) if not isinstance(table.get(k, 0), int) else \
            table.get(k, 0) + 1


def read_back(containers: dict, epoch: int) -> object:
    """The state of the checkpoint at ``epoch``, its chain resolved from the older ones."""
    states = {0: {7: containers[epoch]}}
    snapshot.resolve_chains(states, lambda e: {0: {7: containers[e]}})
    return snapshot.decode(states[0][7], "totals")


@pytest.mark.parametrize("keys,steps", [(5, 300), (60, 2000), (800, 6000)])
def test_every_checkpoint_reads_back_equal_to_the_oracle(keys, steps):
    rng = random.Random(SEED + keys)
    table, oracle = KeyedState(), {}
    containers, expected = {}, {}
    epoch = 0
    for _ in range(steps):
        state = rng.getstate()
        mutate(rng, table, keys)
        rng.setstate(state)
        mutate(rng, oracle, keys)
        assert table == oracle
        if rng.random() < 0.05:
            epoch += rng.randrange(1, 4)
            containers[epoch] = snapshot.encode({"totals": table, "other": [epoch]}, epoch)
            expected[epoch] = dict(oracle)
    assert len(containers) >= steps // 40
    for e in containers:
        got = read_back(containers, e)
        assert got["totals"] == expected[e] and got["other"] == [e]
        assert type(got["totals"]) is KeyedState
    kinds = [c["tables"][0]["prev"] is None for c in containers.values()]
    assert any(kinds) and not all(kinds), "no deltas, or no full copies"
    chains = [e - c["tables"][0]["base"] for e, c in containers.items()]
    assert max(c["tables"][0]["epoch"] for c in containers.values()) == epoch
    assert all(n >= 0 for n in chains)


def test_a_delta_holds_the_changed_keys_only():
    table = KeyedState({f"word{i}": i for i in range(20_000)})
    full = snapshot.encode({"t": table}, 10)
    table.update({f"word{i}": -i for i in range(0, 20_000, 100)})
    del table["word1"]
    delta = snapshot.encode({"t": table}, 20)
    assert delta["tables"][0]["prev"] == 10
    assert len(delta["tables"][0]["data"]) * 50 < len(full["tables"][0]["data"])
    assert read_back({10: full, 20: delta}, 20)["t"] == dict(table)


@pytest.mark.parametrize("change", ["none", "one key", "written", "deleted"])
def test_deltas_of_every_shape_read_back(change):
    table = KeyedState({i: str(i) for i in range(50)})
    full = snapshot.encode({"t": table}, 10)
    if change == "one key":
        table[7] = "seven"
    elif change == "written":
        table.update({i: -i for i in range(40, 60)})
    elif change == "deleted":
        table[3] = "three"
        del table[5], table[6]
    delta = snapshot.encode({"t": table}, 20)
    assert delta["tables"][0]["prev"] == 10
    assert read_back({10: full, 20: delta}, 20)["t"] == dict(table)


def test_a_delta_in_the_earlier_layout_is_read():
    """Checkpoints written before deltas held keys and values apart pickled (items, gone)."""
    table = KeyedState({"a": 1, "b": 2, "c": 3})
    full = snapshot.encode({"t": table}, 10)
    table["a"] = 10
    del table["b"]
    delta = snapshot.encode({"t": table}, 20)
    delta["tables"][0]["data"] = pickle.dumps(({"a": 10}, ["b"]))
    assert read_back({10: full, 20: delta}, 20)["t"] == {"a": 10, "c": 3}


def test_the_chain_is_bounded():
    table = KeyedState({i: i for i in range(1000)})
    prevs = []
    for epoch in range(1, 3 * MAX_DELTAS):
        table[epoch] = -epoch
        prevs.append(snapshot.encode(table, epoch)["tables"][0]["prev"])
    fulls = [i for i, p in enumerate(prevs) if p is None]
    assert fulls[0] == 0 and all(b - a == MAX_DELTAS + 1 for a, b in zip(fulls, fulls[1:]))


def test_tables_anywhere_in_a_state_come_back_shared_where_they_were():
    a, b = KeyedState(x=1), KeyedState(y=2)
    state = {"a": a, "both": [a, b], "n": 3}
    containers = {1: snapshot.encode(state, 1)}
    assert len(containers[1]["tables"]) == 2          # a once, though it appears twice
    a["x"] = 10
    b.pop("y")
    containers[2] = snapshot.encode(state, 2)
    got = read_back(containers, 2)
    assert got["a"] is got["both"][0] and got["a"] == {"x": 10} and got["both"][1] == {}
    got["a"]["z"] = 5                                 # a restored table goes on chaining
    containers[3] = snapshot.encode(got, 3)
    assert containers[3]["tables"][0]["prev"] == 2
    assert read_back(containers, 3)["a"] == {"x": 10, "z": 5}


def test_a_table_with_a_lambda_in_the_state_is_pickled_by_value():
    table = KeyedState(k=1)
    containers = {1: snapshot.encode({"t": table, "f": lambda x: x + 1}, 1)}
    table["k"] = 2
    containers[2] = snapshot.encode({"t": table, "f": lambda x: x + 2}, 2)
    got = read_back(containers, 2)
    assert got["t"] == {"k": 2} and got["f"](1) == 3


def test_a_broken_chain_names_the_table_and_the_epochs():
    table = KeyedState(k=1)
    snapshot.encode({"t": table}, 4)
    table["k"] = 2
    delta = snapshot.encode({"t": table}, 6)
    with pytest.raises(snapshot.ChainBroken, match=r"at epoch 6 builds on the checkpoint at "
                                                   r"epoch 4, which does not hold that table"):
        snapshot.resolve_chains({0: {3: delta}}, lambda e: {0: {3: {"format": 1}}})
    with pytest.raises(naiad.NaiadError, match="came without the checkpoints it builds on"):
        snapshot.decode(delta, "totals")


def test_keyed_state_is_a_dict_to_everything_else():
    t = KeyedState.fromkeys("ab", 0)
    assert t == {"a": 0, "b": 0} and isinstance(t, dict) and repr(t).startswith("KeyedState(")
    assert pickle.loads(pickle.dumps(t)) == t and type(pickle.loads(pickle.dumps(t))) is KeyedState
    c = t.copy()
    c["c"] = 1
    assert "c" not in t and type(c) is KeyedState


# ---- through real processes ------------------------------------------------------------------------
def vocabulary_epochs(seed: int, vocabulary: int, words: int, lines: int, epochs: int) -> list:
    """Epochs of lines of ``words`` words drawn from ``vocabulary`` distinct ones: running
    totals that grow, of which each checkpoint interval changes a part."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    return [[" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(lines)]
            for _ in range(epochs)]


def manifests(ckpt: Path) -> dict:
    out = {}
    for path in journal_files(ckpt / "journal", "commits"):
        for rec in scan(path):
            out[rec.epoch] = json.loads(read_record(path, rec.offset, directory_key(ckpt),
                                                    COMMIT, rec.epoch))
    return out


@pytest.mark.timeout(90)
def test_a_sigkill_resumes_from_a_delta_and_delivers_exactly_once(tmp_path):
    """The running totals (a KeyedState in the sample) over a large vocabulary: checkpoints
    after the first are deltas; process 1 is killed mid-run and every epoch is delivered once."""
    epochs = vocabulary_epochs(SEED, 3000, 8, 20, 30)
    marker = tmp_path / "killed"
    ckpt = tmp_path / "ckpt"
    parts = naiad.execute(wordcount_program(epochs, tmp_path, (marker, 23, 1)), processes=2,
                          checkpoint_dir=str(ckpt), checkpoint_every=3, checkpoint_keep=20)
    assert marker.exists()
    assert merge(parts) == wordcount_vertex.oracle(epochs)
    assert_delivered_exactly_once(tmp_path, 2, running_totals(epochs))
    kept = manifests(ckpt)
    resumed = max(e for e in kept if e <= 23)
    assert kept[resumed]["base"] < resumed, "the checkpoint resumed from was not a delta"


@pytest.mark.timeout(90)
def test_a_damaged_part_inside_a_chain_is_skipped_by_every_process(tmp_path, capfd):
    """A flipped byte in process 1's part at epoch 4, on which the checkpoints at 6 and 8 build:
    both processes reject 8, 6 and 4 (naming the damaged checkpoint) and resume from one before
    4; every epoch is still delivered exactly once."""
    epochs = vocabulary_epochs(SEED + 1, 2000, 6, 10, 14)
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.log"
    want = running_totals(epochs)
    naiad.execute(resumable_program(epochs[:10], tmp_path, seen), processes=2,
                  checkpoint_dir=str(ckpt), checkpoint_every=2, checkpoint_keep=20)
    kept = manifests(ckpt)
    assert kept[8]["base"] <= 4 < 8, kept[8]["base"]
    damage(ckpt, "proc-1", PART, 4, "flip")
    seen.unlink()
    capfd.readouterr()
    again = naiad.execute(resumable_program(epochs, tmp_path, seen), processes=2,
                          checkpoint_dir=str(ckpt), checkpoint_every=2, checkpoint_keep=20)
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if "CheckpointWarning" in line]
    assert len(warned) >= 2 and all("epoch 4" in w for w in warned), warned
    assert min(int(x) for x in seen.read_text().split()) < 4
    assert merge(again) == want
    assert_delivered_exactly_once(tmp_path, 2, want)


@pytest.mark.timeout(90)
def test_pruning_keeps_what_the_kept_checkpoints_chains_read(tmp_path):
    """checkpoint_keep=1: the parts back to the newest checkpoint's base stay on disk, and a
    second run resumes from it (reading its whole chain) with no warning."""
    epochs = vocabulary_epochs(SEED + 2, 3000, 8, 10, 40)
    ckpt = tmp_path / "ckpt"
    seen = tmp_path / "seen.log"
    naiad.execute(resumable_program(epochs[:36], tmp_path, seen), processes=2,
                  checkpoint_dir=str(ckpt), checkpoint_every=1, checkpoint_keep=1)
    kept = manifests(ckpt)
    newest = max(kept)
    assert newest == 35 and kept[newest]["base"] < newest - 1
    for p in (0, 1):
        stored = {r.epoch for _, r in records(ckpt, f"proc-{p}", PART)}
        assert set(range(kept[newest]["base"], newest + 1)) <= stored
    seen.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        again = naiad.execute(resumable_program(epochs, tmp_path, seen), processes=2,
                              checkpoint_dir=str(ckpt), checkpoint_every=1, checkpoint_keep=1)
    assert min(int(x) for x in seen.read_text().split()) == 35
    assert merge(again) == running_totals(epochs)
