"""Fluent queries in the style of Naiad's Lindi: ``import linq`` adds operator methods to Stream.

Every operator is a thin function over the generic stage builders (``linq.core`` holds the two
generic vertices they share); this module only installs them as methods of
:class:`naiad.Stream`, explicitly.  ``concat``, ``subscribe`` and ``collect`` are the Stream's
own methods.  Every operator works per time: records at different timestamps never mix.

>>> import linq
>>> from naiad.testing import run
>>> lines = [["a rose is a rose"], ["is it"]]
>>> run(lambda comp, s: s.select_many(str.split).count(), lines)
{0: [('a', 2), ('is', 1), ('rose', 2)], 1: [('is', 1), ('it', 1)]}
"""

from naiad.graph import Stream as _Stream
from linq.core import UserFunctionError
from linq.invariant import Loop, checked_concat as _checked_concat
from linq.iteration import iterate, iterate_and_accumulate
from linq.join import join
from linq.keyed import aggregate, cogroup_by, count, group_by, max, min
from linq.sets import distinct, except_, intersect, union
from linq.spread import spread
from linq.streaming import partition_by, select, select_many, where

__all__ = ["UserFunctionError", "Loop", "OPERATORS", "select", "where", "select_many", "partition_by",
           "distinct", "union", "intersect", "except_", "count", "group_by", "cogroup_by",
           "join", "min", "max", "aggregate", "spread", "iterate", "iterate_and_accumulate"]

# The methods ``import linq`` adds to Stream, by name.
OPERATORS = {
    "select": select,
    "where": where,
    "select_many": select_many,
    "partition_by": partition_by,
    "distinct": distinct,
    "union": union,
    "intersect": intersect,
    "except_": except_,
    "count": count,
    "group_by": group_by,
    "cogroup_by": cogroup_by,
    "join": join,
    "min": min,
    "max": max,
    "aggregate": aggregate,
    "spread": spread,
    "iterate": iterate,
    "iterate_and_accumulate": iterate_and_accumulate,
}

for _name, _fn in OPERATORS.items():
    setattr(_Stream, _name, _fn)
del _name, _fn
# concat stays the Stream's own; it only refuses to mix loop-invariant and varying streams.
_Stream.concat = _checked_concat(_Stream.concat)  # type: ignore[method-assign]
