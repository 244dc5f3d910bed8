"""numpy imported at first use (naiad.optional) by several worker threads at once.

Two threads importing numpy at the same moment, one through ``naiad.optional.numpy()`` and one
by unpickling an array in ``naiad.transport.wire.decode``, saw numpy's modules half initialised
(ImportError, a _DeadlockError, or numpy recorded as missing). Each run needs a fresh
interpreter, where numpy is not imported yet.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
ROOT = Path(__file__).resolve().parent.parent

RACE = """
import sys, threading
from naiad.optional import numpy
from naiad.transport.wire import decode
blob = sys.stdin.buffer.read()
assert "numpy" not in sys.modules
errors, start = [], threading.Barrier(4)
def work(i):
    start.wait()
    try:
        if i % 2:
            np = numpy()
            assert int(np.flatnonzero(np.array([False, True]))[0]) == 1
        else:
            assert float(decode(blob)[0].sum()) == 45.0
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(errors)
"""


def test_threads_importing_numpy_at_once_all_get_it_whole():
    blob = pickle.dumps([np.arange(10.0)], protocol=5)
    for _ in range(8):
        out = subprocess.run([sys.executable, "-c", RACE], input=blob, capture_output=True,
                             cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout.decode().strip() == "[]"
