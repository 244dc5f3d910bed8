"""The batches a worker has yet to deliver, gathered by connector and time.

An exchange splits every batch among the workers, so without gathering, batches would shrink at
every exchange of a chain (or every iteration of a loop with ``partition_by``) until each held
a record or two, and every record paid for a whole delivery.  A :class:`BatchQueue` keeps one
entry per connector and time, in the order each first arrived: a batch for an entry already
waiting joins it (its records appended, in arrival order), and the entry is delivered as one
batch that retires the messages it gathered.  Nothing about the order of records of one
connector and time changes; entries of different connectors or times may be delivered in
another order than their batches arrived, as timely dataflow allows.

>>> from types import SimpleNamespace
>>> conn = SimpleNamespace(id=7)
>>> q = BatchQueue()
>>> shared = [1, 2]
>>> q.append(conn, 0, shared); q.append(conn, 1, [9]); q.append(conn, 0, [3])
>>> len(q), list(q)[0][2:], shared
(2, ([1, 2, 3], 2), [1, 2])
>>> q.popleft()[1:], q.popleft()[1:], bool(q)
((0, [1, 2, 3], 2), (1, [9], 1), False)
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Tuple

__all__ = ["BatchQueue"]


class BatchQueue:
    """Queued batches by ``(connector, time)``; :meth:`popleft` gives ``(connector, time,
    records, messages)``, the records of every batch of that connector and time gathered."""

    __slots__ = ("_order", "_waiting")

    def __init__(self) -> None:
        self._order: Deque[Tuple[int, Any]] = deque()
        self._waiting: Dict[Tuple[int, Any], List[Any]] = {}

    def append(self, conn: Any, time: Any, records: list) -> None:
        """Queue a batch of ``records`` for ``conn`` at ``time`` (the list is not changed: a
        gathered entry copies it the first time another batch joins)."""
        key = (conn.id, time)
        entry = self._waiting.get(key)
        if entry is None:
            self._waiting[key] = [conn, time, records, 1]
            self._order.append(key)
            return
        if entry[3] == 1:
            entry[2] = list(entry[2])        # this queue's own list from now on
        entry[2].extend(records)
        entry[3] += 1

    def popleft(self) -> Tuple[Any, Any, list, int]:
        """The entry that arrived first: ``(connector, time, records, messages)``."""
        conn, time, records, n = self._waiting.pop(self._order.popleft())
        return conn, time, records, n

    def __len__(self) -> int:
        return len(self._order)

    def __bool__(self) -> bool:
        return bool(self._order)

    def __iter__(self) -> Iterator[Tuple[Any, Any, list, int]]:
        for key in self._order:
            conn, time, records, n = self._waiting[key]
            yield conn, time, records, n
