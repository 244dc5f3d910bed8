"""A vertex state in a checkpoint: a plain, versioned container of the pickled state.

A worker's checkpoint file maps each stage id to ``{"format": 1, "state": <bytes>}``, where the
bytes are ``pickle.dumps(vertex.checkpoint(), protocol=5)`` (cloudpickle when plain pickle
cannot, for instance for a lambda in the state).  The state is pickled when the snapshot is
taken, so later mutation by the vertex cannot leak into the file, and the container holds only
built-in types, so a checkpoint never names a function of naiad's own modules.

Files written before the container existed pickled each state as a call of
``naiad.worker._unpickled(bytes)``; :func:`load_states` reads them (as format 1) without that
function having to exist.

>>> decode(encode({"a": [1, 2]}), "count")
{'a': [1, 2]}
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict


from naiad.errors import NaiadError

__all__ = ["FORMAT", "encode", "decode", "load_states"]

FORMAT = 1
"""Version of the vertex-state container (documented in docs/recovery.md)."""


def encode(state: Any) -> Dict[str, Any]:
    """``state`` pickled now, in the versioned container."""
    try:
        data = pickle.dumps(state, protocol=5)
    except Exception:
        import cloudpickle      # classes of __main__, lambdas: by value
        data = cloudpickle.dumps(state)
    return {"format": FORMAT, "state": data}


def decode(container: Any, stage: str) -> Any:
    """The state in ``container``; a clear error naming ``stage`` for an unknown format."""
    if isinstance(container, dict):
        version = container.get("format")
        if version == FORMAT:
            return pickle.loads(container["state"])
        msg = (f"stage {stage!r}: the checkpoint holds its state in format version {version!r}; "
               f"this release reads vertex-state format version {FORMAT}")
        raise NaiadError(msg)
    msg = (f"stage {stage!r}: the checkpoint holds its state as {type(container).__name__}, not "
           f"a vertex-state container (format version {FORMAT})")
    raise NaiadError(msg)


def _legacy(data: bytes) -> Dict[str, Any]:
    return {"format": FORMAT, "state": data}


class _StatesUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "naiad.worker" and name == "_unpickled":
            return _legacy
        return super().find_class(module, name)


def load_states(data: bytes) -> Any:
    """A worker's checkpoint file (stage id -> container), older files included."""
    return _StatesUnpickler(io.BytesIO(data)).load()
