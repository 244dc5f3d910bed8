"""``naiad.execute``: run an SPMD program in this process or in several local processes."""

from __future__ import annotations

from typing import Any, Callable, List

from naiad.computation import Computation, run_program
from naiad.config import check_layout, check_options
from naiad.launch import launch_local, refuse_while_loading
from naiad.observe import watch
from naiad.recovery.restart import execute_with_recovery
from naiad.tracing import clear_attempts
from naiad.transport.security import random_secret, resolve_secret

__all__ = ["execute", "run_program"]


def execute(program: Callable[[Computation], Any], *, processes: int = 1, workers: int = 1,
            **options: Any) -> List[Any]:
    """Run ``program(comp)`` in every process; return the list of their return values.

    ``processes=1`` runs in the calling process; more processes are started locally and
    connected over ZeroMQ on loopback (the program travels by cloudpickle).  ``workers`` is
    worker threads per process.  Raises the first failure of any process.

    >>> import naiad
    >>> def program(comp):
    ...     inp = comp.new_input()
    ...     got = inp.stream.collect()
    ...     comp.activate()
    ...     inp.on_next(range(comp.process_index, 6, comp.processes))
    ...     inp.on_completed()
    ...     comp.join()
    ...     return sorted(got.results[0])
    >>> naiad.execute(program, workers=2)
    [[0, 1, 2, 3, 4, 5]]
    """
    if not callable(program):
        msg = f"execute needs a callable program(comp); got {type(program).__name__}"
        raise TypeError(msg)
    refuse_while_loading()
    check_layout(processes, workers)
    options = check_options(options)
    if options.get("trace"):
        clear_attempts(options["trace"])      # an earlier run's failed attempts
    if processes > 1 and resolve_secret(options.get("secret")) is None:
        # A random secret per run, handed to the children inside the private program file
        # (never in argv or the environment): every socket of the run is CURVE-authenticated,
        # and the monitor's reports are signed with it.
        options = dict(options, secret=random_secret())
    # The monitor page and terminal progress live here, for every attempt of the run; the
    # processes of a multi-process run report to it over loopback.
    options, watching = watch(options, options.get("secret"), in_process=processes == 1)
    try:
        if options.get("checkpoint_dir"):
            restarted = None if watching is None else watching.restarted
            return execute_with_recovery(program, processes=processes, workers=workers,
                                         options=options, restarted=restarted)
        if processes == 1:
            comp = Computation(process_index=0, processes=1, workers=workers, **options)
            return [run_program(program, comp)]
        return launch_local(program, processes=processes, workers=workers, options=options)
    except BaseException as exc:
        if watching is not None:
            watching.ended(exc)
        raise
    finally:
        if watching is not None:
            watching.stop()
