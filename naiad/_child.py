"""Entry point of a process started by ``naiad.execute``: run the program, write the result."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Optional
from pathlib import Path

import cloudpickle

from naiad.computation import Computation, run_program
from naiad.files import write_atomic
from naiad.launch import FileRendezvous


def _watch_parent(parent: int) -> None:
    """Exit if the launching process disappears, so no orphan outlives it."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def main(argv) -> int:
    workdir, index, processes, workers, parent = argv
    index, processes, workers, parent = int(index), int(processes), int(workers), int(parent)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


    workdir = Path(workdir)
    try:
        # ``import linq`` in the parent installed the fluent Stream methods; a program pickled
        # by value does not carry that import, so make it here too.
        import linq  # noqa: F401
    except ImportError:  # pragma: no cover - linq is part of the distribution
        pass
    comp: Optional[Computation] = None
    result: tuple
    try:
        program, options = cloudpickle.loads((workdir / "program.pkl").read_bytes())
        options = dict(options)
        options["rendezvous"] = FileRendezvous(str(workdir), index, processes,
                                               timeout=float(options.get("connect_timeout", 30)))
        comp = Computation(process_index=index, processes=processes, workers=workers, **options)
        result = ("ok", run_program(program, comp), "")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        # Whether this process only relays another's failure (the launcher reports the cause).
        relayed = comp is not None and comp.failure_origin is not None
        result = ("error", exc, traceback.format_exc(), relayed)
        code = 1
    try:
        data = cloudpickle.dumps(result)
    except Exception as exc:  # noqa: BLE001
        err: Exception
        if result[0] == "ok":
            err = TypeError(f"process {index}: the program's return value cannot be pickled: {exc}")
        else:
            err = RuntimeError(f"process {index}: {type(result[1]).__name__}: {result[1]}")
        data = cloudpickle.dumps(("error", err, result[2]))
        code = 1
    write_atomic(workdir / f"result.{index}", data)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
