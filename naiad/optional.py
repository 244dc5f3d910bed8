"""Optional dependencies, imported at first use rather than with naiad.

Every process of a computation imports naiad; numpy's import alone takes about 60 ms, which
would be part of every child's start even for programs that never meet a numeric batch.
pyarrow and its compute functions (about 0.1 s, numpy included) are imported the same way.

>>> np = numpy()
>>> np is None or int(np.arange(3).sum()) == 3
True
>>> numpy() is np                       # imported once
True
"""

from __future__ import annotations

import copyreg
import importlib
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["numpy", "arrow", "importing", "pickle_dispatch"]

_numpy: Any = None              # the module, False when it is missing, None before the first call
_arrow: Any = None              # pyarrow, the same way
# Worker threads meet their first numeric batch at about the same moment; two threads importing
# numpy at once (one by numpy(), another by unpickling an array) can see its modules half
# initialised (CPython breaks the import cycle that way), so until numpy is imported, both
# happen under one lock.
_lock = threading.RLock()
_dispatch: dict = {}            # copyreg's reductions and Arrow's, once pyarrow is loaded


def numpy() -> Any:
    """The numpy module, or None when it is not installed."""
    global _numpy
    if _numpy is None:
        with _lock:
            if _numpy is None:
                try:
                    import numpy as module
                except ImportError:
                    _numpy = False
                else:
                    _numpy = module
    return _numpy or None


def arrow() -> Any:
    """The ``pyarrow`` module with its compute functions (``pyarrow._compute``; not the
    wrappers of ``pyarrow.compute``), or None when pyarrow is not installed.  pyarrow imports
    numpy when it is installed: both are imported under the lock of :func:`numpy`."""
    global _arrow
    if _arrow is None:
        with _lock:
            if _arrow is None:
                try:
                    import pyarrow as module
                    import pyarrow._compute  # noqa: F401
                except ImportError:
                    _arrow = False
                else:
                    _arrow = module
                if "numpy" in sys.modules:
                    numpy()
    return _arrow or None


@contextmanager
def importing() -> Iterator[None]:
    """Holds the import lock around work that may import numpy or pyarrow (unpickling a
    batch), until both are imported (or known missing); after that it costs nothing.  Without
    it, an Arrow array unpickled while another thread imports pyarrow through :func:`arrow`
    met ``pyarrow.lib`` half initialised."""
    if _numpy is not None and _arrow is not None:
        yield
        return
    with _lock:
        yield
        if "numpy" in sys.modules:          # imported by that work: complete now
            numpy()
        if "pyarrow" in sys.modules:
            arrow()


def pickle_dispatch() -> dict:
    """The reductions for a pickler's ``dispatch_table``: copyreg's, plus Arrow's IPC form of
    tables and record batches (:mod:`naiad.arrowcodec`) once pyarrow is loaded in this process
    (no table can exist before; the codec, which needs pyarrow, is imported only then).  Plain
    pickling of a sliced table carries its parent's whole buffers; the IPC form only its rows.
    """
    if not _dispatch and "pyarrow" in sys.modules:
        codec = importlib.import_module("naiad.arrowcodec")
        with _lock:
            _dispatch.update(copyreg.dispatch_table)
            _dispatch.update(codec.DISPATCH)
    return _dispatch or copyreg.dispatch_table
