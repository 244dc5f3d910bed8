"""Differential dataflow: collections that change, updated incrementally (``linq.differential``).

A collection is a multiset of records that varies with logical time; what flows between its
operators are consolidated changes ``(record, diff)``.  At every time each operator's output is
its logic applied to its input at that time, the input being the sum of the changes at earlier
or equal times in the product order on ``(epoch, iteration, ...)``.  Operators keep their state
in arrangements (:mod:`linq.differential.trace`), compacted as the frontier advances, and redo
only the work a change requires.

>>> import naiad
>>> from linq import differential as dd
>>> def program(comp):
...     words = dd.new_input(comp, name="words")
...     got = words.collection.count().collect()
...     comp.activate()
...     words.on_next(["to", "be", "or", "not", "to", "be"])
...     words.update([("be", -1), ("question", 1)])
...     words.on_completed()
...     comp.join()
...     return got.results, got.at(1)
>>> [(results, at1)] = naiad.execute(program)
>>> sorted(results[1])
[(('be', 1), 1), (('be', 2), -1), (('question', 1), 1)]
>>> sorted(at1)
[('be', 1), ('not', 1), ('or', 1), ('question', 1), ('to', 2)]
"""

from linq.differential.arrange import Arrangement
from linq.differential.collection import Collected, Collection
from linq.differential.inputs import InputCollection, new_input
from linq.differential.iterate import Loop, iterate

__all__ = ["new_input", "InputCollection", "Collection", "Collected", "Arrangement", "Loop",
           "iterate"]
