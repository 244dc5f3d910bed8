"""Optional dependencies, imported at first use rather than with naiad.

Every process of a computation imports naiad; numpy's import alone takes about 60 ms, which
would be part of every child's start even for programs that never meet a numeric batch.

>>> np = numpy()
>>> np is None or int(np.arange(3).sum()) == 3
True
>>> numpy() is np                       # imported once
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["numpy"]

_numpy: Any = None              # the module, False when it is missing, None before the first call


def numpy() -> Any:
    """The numpy module, or None when it is not installed."""
    global _numpy
    if _numpy is None:
        try:
            import numpy as module
        except ImportError:
            _numpy = False
        else:
            _numpy = module
    return _numpy or None
