"""A checkpoint directory on a full file system: a clear error, then an exact resume.

The directory lives on a small tmpfs the test mounts (root only): the run fails with an OSError
that names the file it was writing and says what to do; once the file system is grown, the same
program resumes from its last checkpoint and every epoch reaches the subscriber exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import naiad
import stages

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")

EPOCHS = 40


class _Count(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        self.send_batch_by(0, [len(messages)], time)


def _program(out: Path):
    def program(comp):
        inp = comp.new_input(name="blob")
        counted = stages.unary(inp.stream, _Count, name="count")

        def deliver(epoch, records):
            with (out / f"sub-{comp.process_index}.jsonl").open("a") as f:
                f.write(json.dumps([epoch, sum(records)]) + "\n")
        counted.subscribe(deliver)
        comp.activate()
        for e in range(EPOCHS):
            inp.on_next([f"{e:04d}" * 500 for _ in range(4)])
        inp.on_completed()
        comp.join(timeout=60)
    return program


@pytest.fixture
def small_fs(tmp_path):
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("size", ["96k", "160k"])
def test_a_full_disk_is_named_and_the_run_resumes_exactly_once(small_fs, tmp_path, size):
    subprocess.run(["mount", "-o", f"remount,size={size}", str(small_fs)], check=True)
    out = tmp_path / "out"
    out.mkdir()
    ckpt = small_fs / "ckpt"
    with pytest.raises(Exception) as err:
        naiad.execute(_program(out), processes=2, checkpoint_dir=str(ckpt), checkpoint_every=5,
                      max_restarts=0)
    text = str(err.value)
    assert "No space left on device: writing" in text and str(ckpt) in text, text
    assert "free space on its file system" in text, text
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    naiad.execute(_program(out), processes=2, checkpoint_dir=str(ckpt), checkpoint_every=5)
    for p in range(2):
        lines = [json.loads(line) for line in (out / f"sub-{p}.jsonl").read_text().splitlines()]
        assert [e for e, _ in lines] == list(range(EPOCHS)), (p, [e for e, _ in lines])
