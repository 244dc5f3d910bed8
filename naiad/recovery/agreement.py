"""The processes of a run agree, at activation, on where they resume.

Each process finds the checkpoint it resumes from on its own (every process reads every part,
so processes that see one directory pick the same one).  Processes that do not see one directory
would not: a host where the shared file system is not mounted makes a fresh, empty directory and
starts from epoch 0 while the others restore epoch 9, and their progress states then never agree
(the run waits for ever, or until a checkpoint boundary's bound).  So, once connected, every
process sends the others its :func:`resume_point` (whether it has a checkpoint directory, which
one, by an identity derived from the directory's key, and the epoch it resumes from), and
:func:`check_resume_points` fails the run at once, in every process, naming the difference.

>>> check_resume_points(0, (True, "d1", 9), {1: (True, "d1", 9)})
>>> check_resume_points(0, (True, "d1", 9), {1: (True, "d2", None)})
Traceback (most recent call last):
...
naiad.recovery.agreement.ResumeMismatch: process 1 uses another checkpoint directory than \
process 0 (it resumes from no checkpoint, process 0 from epoch 9): every process must see the \
same checkpoint_dir (one machine, or a file system shared by every host and mounted on each)
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Dict, Optional, Tuple

from naiad.errors import NaiadError

__all__ = ["ResumeMismatch", "agree_on_resume", "resume_point", "check_resume_points",
           "RESUME"]

RESUME = "resume"
"""The name of the control plane's exchange of resume points."""

Point = Tuple[bool, Optional[str], Optional[int]]


class ResumeMismatch(NaiadError):
    """The processes of a run would resume from different checkpoints (or directories)."""


def agree_on_resume(comp: Any) -> None:
    """Exchange resume points with the other processes of ``comp`` (connected, restored) and
    check them.  A peer restoring a large state arrives late: with a checkpoint directory the
    wait is bounded as a checkpoint's is (``comp.coordinator.bound``), else by
    ``connect_timeout``; a peer that dies meanwhile is found by the heartbeats at once."""
    point = resume_point(comp.store, comp.restored)
    bound = comp.coordinator.bound if comp.coordinator is not None else \
        float(comp.options["connect_timeout"])
    theirs = comp.fabric.exchange(RESUME, point, bound)
    check_resume_points(comp.process_index, point, theirs)


def resume_point(store: Any, restored: Any) -> Point:
    """``(has a checkpoint directory, the directory's identity, the epoch resumed from)``; the
    identity is an HMAC of a fixed text under the directory's key (the key itself never leaves
    the process)."""
    if store is None:
        return (False, None, None)
    ident = hmac.new(store.key, b"naiad checkpoint directory", hashlib.sha256).hexdigest()[:16]
    return (True, ident, None if restored is None else int(restored.epoch))


def _from(epoch: Optional[int]) -> str:
    return "no checkpoint" if epoch is None else f"epoch {epoch}"


def check_resume_points(me: int, mine: Point, theirs: Dict[int, Point]) -> None:
    """Raise :class:`ResumeMismatch` naming the first process whose point differs from
    ``mine`` (this is process ``me``)."""
    has, ident, epoch = mine
    for p, (other_has, other_ident, other_epoch) in sorted(theirs.items()):
        if other_has != has:
            with_, without = (me, p) if has else (p, me)
            msg = (f"process {with_} has a checkpoint_dir but process {without} has none: give "
                   "every process the same checkpoint_dir")
            raise ResumeMismatch(msg)
        if other_ident != ident:
            msg = (f"process {p} uses another checkpoint directory than process {me} (it "
                   f"resumes from {_from(other_epoch)}, process {me} from {_from(epoch)}): "
                   "every process must see the same checkpoint_dir (one machine, or a file "
                   "system shared by every host and mounted on each)")
            raise ResumeMismatch(msg)
        if other_epoch != epoch:
            msg = (f"process {p} resumes from {_from(other_epoch)} but process {me} from "
                   f"{_from(epoch)}, in the same checkpoint directory: a checkpoint was "
                   "committed or damaged while they started; start them again")
            raise ResumeMismatch(msg)
