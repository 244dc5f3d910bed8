"""numpy and pyarrow imported at first use (naiad.optional) by several worker threads at once.

Two threads importing numpy at the same moment, one through ``naiad.optional.numpy()`` and one
by unpickling an array in ``naiad.transport.wire.decode``, saw numpy's modules half initialised
(ImportError, a _DeadlockError, or numpy recorded as missing); the same with pyarrow, through
``naiad.optional.arrow()`` (linq.words) and an Arrow array unpickled (``cannot import name
'BuildInfo' from partially initialized module 'pyarrow.lib'``). Each run needs a fresh
interpreter, where the module is not imported yet.
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
from naiad.optional import arrow, numpy
from naiad.transport.wire import decode
{before}
blob = sys.stdin.buffer.read()
assert {module!r} not in sys.modules
errors, start = [], threading.Barrier(4)
def work(i):
    start.wait()
    try:
        if i % 2:
            {imported}
        else:
            {decoded}
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(errors)
"""


def _race(blob: bytes, **parts: str) -> None:
    """Four threads of a fresh interpreter, two importing through naiad.optional and two
    unpickling ``blob``, eight times: none may fail."""
    script = RACE.format(**parts)
    for _ in range(8):
        out = subprocess.run([sys.executable, "-c", script], input=blob, capture_output=True,
                             cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout.decode().strip() == "[]"


def test_threads_importing_numpy_at_once_all_get_it_whole():
    _race(pickle.dumps([np.arange(10.0)], protocol=5), before="", module="numpy",
          imported="assert int(numpy().flatnonzero(numpy().array([False, True]))[0]) == 1",
          decoded="assert float(decode(blob)[0].sum()) == 45.0")


def test_threads_importing_pyarrow_at_once_all_get_it_whole():
    pa = pytest.importorskip("pyarrow")
    # numpy imported already, as after a process's first numeric batch
    _race(pickle.dumps([pa.array(["a", "b"])], protocol=5), before="numpy()",
          module="pyarrow", imported="assert len(arrow().array([1, 2])) == 2",
          decoded='assert decode(blob)[0].to_pylist() == ["a", "b"]')
