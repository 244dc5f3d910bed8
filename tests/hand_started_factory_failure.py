"""A process started by hand whose vertex factory fails in process 1 only (for test_distributed).

Run as ``python hand_started_factory_failure.py INDEX PORT0 PORT1``; prints one line: the index,
the error type and message, and how long it took.
"""

import sys
import time

import naiad
import stages


def main(index: int, ports) -> None:
    class Fragile(naiad.Vertex):
        def __init__(self):
            super().__init__()
            if index == 1:
                raise RuntimeError("factory exploded")

        def on_recv(self, edge, message, time_):
            pass

    comp = naiad.Computation(process_index=index, processes=2, secret="s3cret",
                             hosts=[f"127.0.0.1:{p}" for p in ports])
    inp = comp.new_input()
    stages.unary(inp.stream, Fragile, name="fragile").collect()
    t0 = time.monotonic()
    try:
        comp.activate()
        inp.on_next([1])
        inp.on_completed()
        comp.join(timeout=60)
        print(index, "ok")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        print(index, type(exc).__name__, str(exc)[:200], "after",
              round(time.monotonic() - t0, 1), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:4])
