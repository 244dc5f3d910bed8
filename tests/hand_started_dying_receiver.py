"""Processes started by hand where process 1 dies while process 0 waits to send to it (for
test_flow_queues).

Run as ``python hand_started_dying_receiver.py INDEX PORT0 PORT1``; process 1 exits with status
3 one second into its first batch; process 0 prints one line: its index, the error type and
message, and how long it took.
"""

import os
import sys
import time

import naiad
import stages


class Dies(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time_):
        time.sleep(1.0)        # let the sender fill its queue and wait in its send
        os._exit(3)


def main(index: int, ports) -> None:
    comp = naiad.Computation(process_index=index, processes=2, secret="s3cret", send_timeout=120,
                             hosts=[f"127.0.0.1:{p}" for p in ports])
    inp = comp.new_input()
    stages.sink(inp.stream, Dies, partition_by=lambda r: 1, name="dies")
    t0 = time.monotonic()
    try:
        comp.activate()
        blobs = [i.to_bytes(4, "big") * 256 for i in range(60_000)]
        inp.on_next(blobs if index == 0 else [])
        inp.on_completed()
        comp.join(timeout=100)
        print(index, "ok", flush=True)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        print(index, type(exc).__name__, str(exc)[:300], "after",
              round(time.monotonic() - t0, 1), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:4])
