"""Configuration: the options of a computation, their defaults, and their checks.

This module imports nothing of the project, so every layer can use it.  :func:`check_options`
fills the defaults and checks each option's type and range at the call (``naiad.execute``,
``naiad.Computation``, ``naiad.spark.execute``), before any process or thread starts: a wrong
value raises ``TypeError`` or ``ValueError`` naming the option and what it takes.

>>> check_options({"checkpoint_dir": "ckpt", "checkpoint_every": 10})["checkpoint_every"]
10
>>> check_options({"checkpoint_every": 10})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: option checkpoint_every needs checkpoint_dir (where the checkpoints go); ...
>>> check_options({"heartbeat_timeout": -1})
Traceback (most recent call last):
...
ValueError: option heartbeat_timeout must be a number > 0 (seconds); got -1
>>> check_options({"send_timeout": float("inf")})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: option send_timeout must be a finite number of seconds (every wait has a bound; ...
>>> check_options({"checkpoint_evry": 10})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
TypeError: unknown option(s) checkpoint_evry; known options: accumulate, ...
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

if TYPE_CHECKING:  # pragma: no cover
    import argparse

__all__ = ["ProcessConfig", "parse_args", "check_layout", "MAX_WORKERS", "unknown_flags", "OPTIONS", "DEBUG_ENV", "check_options", "positive_int", "debug_progress_default",
           "describe"]


def positive_int(name: str, value: Any, minimum: int = 1, what: str = "") -> int:
    """``value`` when it is an int (not a bool) at least ``minimum``; else ValueError naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        msg = f"{what or name} must be {kind}; got {value!r}"
        raise ValueError(msg)
    return value


MAX_WORKERS = 4096
"""The most workers a computation may have in all (processes x workers per process)."""


def check_layout(processes: Any, workers: Any, hosts: Optional[Sequence[str]] = None,
                 process_index: Any = 0) -> None:
    """A ValueError naming the first of the counts, index or addresses that cannot make a
    computation: counts below 1 or beyond :data:`MAX_WORKERS` workers in all, an index out
    of range, hosts not one distinct ``host:port`` (port 1..65535) per process.

    >>> check_layout(2, 3, ["10.0.0.1:2101", "10.0.0.2:2101"], 1)
    >>> check_layout(2, 1, ["127.0.0.1:2301", "127.0.0.1:2301"])
    Traceback (most recent call last):
      ...
    ValueError: hosts lists 127.0.0.1:2301 twice; give each process a host:port of its own
    >>> check_layout(2, 1, ["localhost:2301", "127.0.0.1:2301"])
    Traceback (most recent call last):
      ...
    ValueError: hosts lists localhost:2301 and 127.0.0.1:2301, one endpoint; give each process a host:port of its own
    >>> check_layout(10 ** 11, 1)
    Traceback (most recent call last):
      ...
    ValueError: at most 4096 workers in all (processes x workers); got 100000000000 x 1
    """
    positive_int("processes", processes)
    positive_int("workers", workers)
    positive_int("process_index", process_index, minimum=0)
    if processes * workers > MAX_WORKERS:
        msg = (f"at most {MAX_WORKERS} workers in all (processes x workers); got "
               f"{processes} x {workers}")
        raise ValueError(msg)
    if process_index >= processes:
        msg = f"process_index {process_index} is out of range for {processes} processes"
        raise ValueError(msg)
    if hosts is None:
        return
    if isinstance(hosts, (str, bytes)) or len(hosts) != processes:
        got = "a string" if isinstance(hosts, (str, bytes)) else f"{len(hosts)} address(es)"
        msg = (f"hosts lists {got} for {processes} processes; give one host:port per process, "
               "in process order")
        raise ValueError(msg)
    seen: Dict[Tuple[str, int], str] = {}
    for h in hosts:
        host, _, port = str(h).rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            msg = f"hosts: {h!r} is not host:port with a port 1..65535"
            raise ValueError(msg)
        # localhost is where 127.0.0.1 listens: one endpoint, however it is written
        where = ("127.0.0.1" if host.lower() == "localhost" else host.lower(), int(port))
        if where in seen:
            same = f"{h} twice" if seen[where] == h else f"{seen[where]} and {h}, one endpoint"
            msg = f"hosts lists {same}; give each process a host:port of its own"
            raise ValueError(msg)
        seen[where] = h


def _number(positive: bool, minimum: float = 0.0) -> Callable[[str, Any], None]:
    """Seconds: a finite number (every wait has a bound), > 0 when ``positive``, and at least
    ``minimum``."""
    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            msg = f"option {name} must be a number (seconds); got {type(value).__name__} {value!r}"
            raise TypeError(msg)
        if positive and not value > 0:
            msg = f"option {name} must be a number > 0 (seconds); got {value!r}"
            raise ValueError(msg)
        if not math.isfinite(value):
            msg = (f"option {name} must be a finite number of seconds (every wait has a "
                   f"bound; give a large one to wait long); got {value!r}")
            raise ValueError(msg)
        if value < minimum:
            msg = f"option {name} must be at least {minimum:g} s; got {value!r}"
            raise ValueError(msg)
    return check


def _integer(minimum: int) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            msg = f"option {name} must be an integer; got {type(value).__name__} {value!r}"
            raise TypeError(msg)
        if value < minimum:
            msg = f"option {name} must be an integer >= {minimum}; got {value!r}"
            raise ValueError(msg)
    return check


def _kind(*types: type, text: str) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if not isinstance(value, types):
            msg = f"option {name} must be {text}; got {type(value).__name__} {value!r}"
            raise TypeError(msg)
    return check


def _callable(name: str, value: Any) -> None:
    if not callable(value):
        msg = f"option {name} must be callable; got {type(value).__name__} {value!r}"
        raise TypeError(msg)


def _secret(name: str, value: Any) -> None:
    _kind(str, bytes, text="a string or bytes")(name, value)
    if not value:
        msg = f"option {name} must not be empty (leave it out to use NAIAD_SECRET)"
        raise ValueError(msg)


def _port(name: str, value: Any) -> None:
    _integer(0)(name, value)
    if value > 65535:
        msg = f"option {name} must be a TCP port 0..65535 (0: any free port); got {value!r}"
        raise ValueError(msg)


_PATH = _kind(str, os.PathLike, text="a path (str or os.PathLike)")
_BOOL = _kind(bool, text="True or False")

# name -> (default, check of a value that is not None, whether None is allowed, meaning)
OPTIONS: Dict[str, Tuple[Any, Callable[[str, Any], None], bool, str]] = {
    "accumulate": (True, _BOOL, False,
                   "accumulate progress updates before broadcasting (paper 3.3.2b)"),
    "debug_progress": (False, _BOOL, False, "check every progress invariant as the run goes"),
    "connect_timeout": (30.0, _number(True), False, "seconds to wait for the other processes"),
    "heartbeat_timeout": (6.0, _number(True, 0.5), False,
                          "seconds of silence after which a peer counts as dead (at least 0.5: "
                          "heartbeats go every 50 ms at the most)"),
    "secret": (None, _secret, True, "shared secret for CURVE authentication"),
    "listen": (None, _kind(str, text="a host name or address"), True,
               "address to listen on when hosts are not given (loopback)"),
    "rendezvous": (None, _callable, True, "callable(endpoint) -> all endpoints, for launchers"),
    "checkpoint_dir": (None, _PATH, True, "directory of checkpoints, logs and outputs"),
    "checkpoint_every": (None, _integer(1), True, "checkpoint every this many epochs"),
    "checkpoint_interval": (None, _number(True), True, "checkpoint about every this many s"),
    "checkpoint_keep": (3, _integer(1), False, "checkpoints kept"),
    "max_restarts": (None, _integer(0), True,
                     "restarts after a failure; 3 when checkpoint_dir is set"),
    "trace": (None, _PATH, True, "directory for the event trace (JSON lines per worker)"),
    "monitor": (None, _port, True, "port of the live monitoring page on 127.0.0.1"),
    "report_to": (None, _kind(str, text="a URL"), True,
                  "monitor page served by another process (set by launchers)"),
    "progress": (None, _BOOL, True, "progress in the terminal (execute, naiad.spark.execute)"),
    "send_timeout": (300.0, _number(True), False,
                     "seconds a worker waits to send to a worker that does not drain its queue"),
    "pin_cpus": (True, _BOOL, False,
                 "bind each process started by execute to CPUs of its own when there are "
                 "enough for every worker"),
    "max_epochs_in_flight": (16, _integer(1), True,
                             "on_next blocks while this many epochs are fed and not complete "
                             "(None: no bound)"),
}


DEBUG_ENV = "NAIAD_DEBUG_PROGRESS"
"""Set this environment variable to ``1`` to check every progress invariant as a run goes."""


def debug_progress_default() -> bool:
    """Whether :data:`DEBUG_ENV` asks for the progress invariant checks."""
    return os.environ.get(DEBUG_ENV) == "1"


def check_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """Fill defaults; reject unknown names (listing the known ones) and wrong values."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        msg = (f"unknown option(s) {', '.join(unknown)}; known options: "
               f"{', '.join(sorted(OPTIONS))}")
        raise TypeError(msg)
    merged = {name: spec[0] for name, spec in OPTIONS.items()}
    if debug_progress_default():
        merged["debug_progress"] = True
    for name, value in options.items():
        default, check, nullable, _ = OPTIONS[name]
        if value is None:
            if not nullable:
                msg = f"option {name} cannot be None (its default is {default!r})"
                raise TypeError(msg)
        else:
            check(name, value)
        merged[name] = value
    _check_policy(merged)
    return merged


def _check_policy(merged: Dict[str, Any]) -> None:
    """A checkpoint policy needs a directory, and one policy at a time."""
    every, interval = merged.get("checkpoint_every"), merged.get("checkpoint_interval")
    directory = merged.get("checkpoint_dir")
    if directory is not None and os.fspath(directory) == "":
        msg = ("option checkpoint_dir is an empty path; give the directory of the checkpoints, "
               "or None for no recovery")
        raise ValueError(msg)
    if directory is None and (every is not None or interval is not None):
        name = "checkpoint_every" if every is not None else "checkpoint_interval"
        msg = (f"option {name} needs checkpoint_dir (where the checkpoints go); give "
               f"checkpoint_dir=DIR, or leave {name} out for no recovery")
        raise ValueError(msg)
    if every is not None and interval is not None:
        msg = ("options checkpoint_every and checkpoint_interval are two policies: give one "
               "(a checkpoint every N epochs, or about every T seconds)")
        raise ValueError(msg)


def describe(name: str) -> Optional[str]:
    """What an option means (for help texts)."""
    spec = OPTIONS.get(name)
    return None if spec is None else spec[3]


# ---- Naiad's process flags -----------------------------------------------------------------------
class ProcessConfig(NamedTuple):
    """Where this process stands in the computation (a named tuple: no ``dataclasses``, whose
    import with ``inspect`` would cost every child process ~7 ms)."""

    procid: int = 0
    numprocs: int = 1
    threads: int = 1
    hosts: Optional[List[str]] = None
    connect_timeout: Optional[float] = None


def _flag_parser(prog: str = "naiad") -> "argparse.ArgumentParser":
    """The parser of Naiad's process flags.  argparse is imported here, when flags are parsed:
    the processes started by ``execute`` never parse any, and it costs each ~6 ms to import."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, add_help=False, description="Naiad process flags")
    p.add_argument("-p", "--procid", type=int, default=0, help="this process's index")
    p.add_argument("-n", "--numprocs", type=int, default=1, help="number of processes")
    p.add_argument("-t", "--threads", type=int, default=1, help="worker threads per process")
    p.add_argument("-h", "--hosts", nargs="+", default=None, metavar="HOST:PORT",
                   help="one host:port per process, in process order")
    p.add_argument("--connect-timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds to wait for the other processes (default 30)")
    p.add_argument("--help", action="help", help="show this help and exit")
    return p


def unknown_flags(argv: Sequence[str]) -> List[str]:
    """The arguments of ``argv`` that are not Naiad's process flags (a command that takes
    nothing else refuses them: a misspelt ``--treads 2`` must not run with one worker).

    >>> unknown_flags(["-p", "0", "-n", "2", "--treads", "2"])
    ['--treads', '2']
    """
    return list(_flag_parser().parse_known_args(list(argv))[1])


def parse_args(argv: Optional[Sequence[str]] = None) -> ProcessConfig:
    """Parse Naiad's flags; unknown arguments are left for the program."""
    args, _ = _flag_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.numprocs < 1:
        raise SystemExit(f"--numprocs must be at least 1; got {args.numprocs}")
    if args.threads < 1:
        raise SystemExit(f"--threads must be at least 1; got {args.threads}")
    if args.numprocs * args.threads > MAX_WORKERS:
        msg = (f"--numprocs x --threads is at most {MAX_WORKERS} workers in all; got "
               f"{args.numprocs} x {args.threads}")
        raise SystemExit(msg)
    if not 0 <= args.procid < args.numprocs:
        msg = (f"--procid {args.procid} must be in 0..{args.numprocs - 1} "
               f"(--numprocs {args.numprocs})")
        raise SystemExit(msg)
    if args.hosts is not None and len(args.hosts) != args.numprocs:
        msg = (f"--hosts lists {len(args.hosts)} address(es) but --numprocs is "
               f"{args.numprocs}; give one host:port per process")
        raise SystemExit(msg)
    if args.hosts is None and args.numprocs > 1:
        args.hosts = [f"127.0.0.1:{2101 + i}" for i in range(args.numprocs)]
    try:
        check_layout(args.numprocs, args.threads, args.hosts, args.procid)
    except ValueError as exc:
        raise SystemExit(f"--{exc}") from None
    if args.connect_timeout is not None and not 0 < args.connect_timeout < math.inf:
        raise SystemExit(f"--connect-timeout must be a positive, finite number of seconds; got "
                         f"{args.connect_timeout}")
    return ProcessConfig(args.procid, args.numprocs, args.threads, args.hosts,
                         args.connect_timeout)
