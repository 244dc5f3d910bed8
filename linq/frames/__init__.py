"""Columnar frames: Apache Arrow tables through the dataflow (``from linq import frames``).

Each message of a :class:`FrameStream` is a whole ``pyarrow.Table``: operators map, filter,
exchange, aggregate and join whole columns with Arrow's kernels, and tables cross processes as
Arrow buffers, never as Python rows.  ``frames.of(stream)`` views a stream of tables as frames;
``FrameStream.to_records()`` goes back to row tuples for the record operators of :mod:`linq`.
``frames.share(table, keys, comp)`` keeps the rows this process's workers own by ``keys``, so
a program that reads its own input feeds rows that an exchange by ``keys`` keeps local.
See docs/frames.md.
"""

from linq.frames.hashing import column_hash, row_hash
from linq.frames.share import owned, owners, share
from linq.frames.stream import AGGREGATIONS, FrameStream, of
from linq.frames.vertices import FrameError

__all__ = ["of", "FrameStream", "FrameError", "AGGREGATIONS", "row_hash", "column_hash",
           "owners", "owned", "share"]
