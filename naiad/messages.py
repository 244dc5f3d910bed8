"""The message tags of the worker protocol: one enum for the worker, the transports and inputs.

A message to a worker is a tuple whose first element is its tag:

==============  ================================================  =============================
tag             tuple                                             sent by
==============  ================================================  =============================
``DATA``        ``(DATA, connector_id, time, records)``           another worker (a transport)
``PROGRESS``    ``(PROGRESS, sender_worker, updates)``            another worker (a transport)
``INPUT_EPOCH`` ``(INPUT_EPOCH, stage_id, epoch, records)``       an input handle
``INPUT_CLOSE`` ``(INPUT_CLOSE, stage_id)``                       an input handle
``STOP``        ``(STOP, reason)``                                the computation (a failure)
``CHECKPOINT``  ``(CHECKPOINT, epoch)``                           the checkpoint coordinator
==============  ================================================  =============================

The module-level names are the plain ``int`` values of :class:`Tag`: messages carry those (an
enum member costs more to pickle and to compare on the hot path), and ``Tag(msg[0])`` names a
tag in a diagnostic.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Tag", "DATA", "PROGRESS", "INPUT_EPOCH", "INPUT_CLOSE", "STOP", "CHECKPOINT"]


class Tag(IntEnum):
    """The first element of every message a worker receives."""

    DATA = 0
    PROGRESS = 1
    INPUT_EPOCH = 2
    INPUT_CLOSE = 3
    STOP = 4
    CHECKPOINT = 5


DATA: int = Tag.DATA.value
PROGRESS: int = Tag.PROGRESS.value
INPUT_EPOCH: int = Tag.INPUT_EPOCH.value
INPUT_CLOSE: int = Tag.INPUT_CLOSE.value
STOP: int = Tag.STOP.value
CHECKPOINT: int = Tag.CHECKPOINT.value
