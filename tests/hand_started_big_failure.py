"""Processes started by hand where a vertex of process 1 fails with a message of 9 MB (for
test_frame_limit): its error pickles to more than a frame the other process accepts.

Run as ``python hand_started_big_failure.py INDEX PORT0 PORT1``; each process prints one line:
its index, the error type and the start of its message without the long run of x's, and how long
it took.
"""

import sys
import time

import naiad
import stages

SIZE = 9_000_000


class Boom(naiad.Vertex):
    def on_recv(self, edge, record, time_):
        raise ValueError("bad record: " + "x" * SIZE)


def main(index: int, ports) -> None:
    comp = naiad.Computation(process_index=index, processes=2, secret="s3cret",
                             hosts=[f"127.0.0.1:{p}" for p in ports])
    inp = comp.new_input()
    stages.sink(inp.stream, Boom, partition_by=lambda r: 1, name="boom")
    t0 = time.monotonic()
    try:
        comp.activate()
        inp.on_next([1] if index == 0 else [])
        inp.on_completed()
        comp.join(timeout=60)
        print(index, "ok", flush=True)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        text = str(exc).replace("x" * 64, "")
        print(index, type(exc).__name__, text[:600].replace("\n", " "), "after",
              round(time.monotonic() - t0, 1), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:4])
