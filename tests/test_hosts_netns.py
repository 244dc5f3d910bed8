"""Two hosts for real: two Linux network namespaces joined by a veth pair.

Each namespace has its own network stack and one address on the pair (10.213.0.1 and
10.213.0.2); nothing else, not even loopback, connects them.  The processes are started by hand
(``naiad run ... -p -n -t -h``) with ``ip netns exec``, so every socket binds to a non-loopback
address of its own host and CURVE is required.  Only addresses inside these namespaces are used.
The namespaces (and the veth pair with them) are deleted in ``finally``, and every process the
tests start is killed there too.
"""

from __future__ import annotations

import ast
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

from tests import netns_programs

ROOT = Path(__file__).resolve().parent.parent
SECRET = "netns test secret, shared by both hosts"
ADDRESSES = ("10.213.0.1", "10.213.0.2")


class Hosts:
    """Two namespaces, each an address; starts processes in them and kills them all at the end."""

    def __init__(self, names: Tuple[str, str]) -> None:
        self.names = names
        self.procs: List[subprocess.Popen] = []
        self._port = 7100

    def hosts(self) -> List[str]:
        """A fresh ``host:port`` per namespace (every run of a test gets its own ports)."""
        self._port += 1
        return [f"{a}:{self._port}" for a in ADDRESSES]

    def start(self, index: int, argv: List[str], secret: Optional[str]) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        env.pop("NAIAD_SECRET", None)
        env.pop("NAIAD_SECRET_FILE", None)
        if secret is not None:
            env["NAIAD_SECRET"] = secret
        # ip netns exec execs the command after entering the namespace: the pid is Python's.
        proc = subprocess.Popen(["ip", "netns", "exec", self.names[index], *argv], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                pass


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    if sys.platform != "linux" or shutil.which("ip") is None:
        pytest.skip("needs Linux network namespaces and iproute2's `ip` (apt-get install iproute2)")
    tag = os.getpid() % 100000
    names = (f"naiad-{tag}-a", f"naiad-{tag}-b")
    veth = (f"nv{tag}a", f"nv{tag}b")
    made: List[str] = []
    box = Hosts(names)
    try:
        for name in names:
            res = _ip("netns", "add", name)
            if res.returncode != 0:
                pytest.skip(f"`ip netns add` is not permitted here ({res.stderr.strip()}); "
                            "the separate-hosts test needs root or CAP_SYS_ADMIN")
            made.append(name)
        steps: List[Tuple[str, ...]] = [
            ("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])]
        for name, dev, addr in zip(names, veth, ADDRESSES):
            steps += [("link", "set", dev, "netns", name),
                      ("-n", name, "addr", "add", f"{addr}/24", "dev", dev),
                      ("-n", name, "link", "set", dev, "up"),
                      ("-n", name, "link", "set", "lo", "up")]
        for step in steps:
            res = _ip(*step)
            assert res.returncode == 0, f"ip {' '.join(step)}: {res.stderr}"
        yield box
    finally:
        box.kill_all()
        for name in made:
            _ip("netns", "del", name)   # removes the veth pair with it


def _naiad_run(function: str, index: int, hosts: List[str]) -> List[str]:
    return [sys.executable, "-m", "naiad.cli", "run", f"tests.netns_programs:{function}",
            "-p", str(index), "-n", "2", "-t", "2", "-h", *hosts]


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float) -> None:
    """Read ``proc``'s stdout until a line contains ``text``, for at most ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                if text in line:
                    return
                if not line:
                    break
    pytest.fail(f"process did not print {text!r} within {timeout} s "
                f"(exit code {proc.poll()})")


def test_a_computation_on_two_hosts_counts_words_like_the_oracle(hosts):
    addrs = hosts.hosts()
    procs = [hosts.start(i, _naiad_run("wordcount", i, addrs), SECRET) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    merged: Dict[int, Dict[str, int]] = {}
    owned = []
    for out, _ in outs:
        part = ast.literal_eval(out.strip().splitlines()[-1])
        owned.append({w for recs in part.values() for w, _ in recs})
        for epoch, records in part.items():
            for word, n in records:
                assert word not in merged.setdefault(epoch, {}), "a key reached both hosts"
                merged[epoch][word] = n
    assert {e: sorted(d.items()) for e, d in merged.items()} == netns_programs.oracle()
    assert all(owned) and not owned[0] & owned[1], "the words were not split across the hosts"


def test_a_process_without_the_secret_is_refused(hosts):
    addrs = hosts.hosts()
    proc = hosts.start(1, _naiad_run("wordcount", 1, addrs), None)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "no secret" in err and "beyond loopback" in err and "NAIAD_SECRET" in err, err


def test_a_process_with_a_wrong_secret_never_joins(hosts):
    addrs = hosts.hosts()
    argv = [sys.executable, "-m", "tests.netns_programs", "wordcount", "--connect-timeout", "6",
            "-p", "{i}", "-n", "2", "-t", "2", "-h", *addrs]
    good = hosts.start(0, [a.replace("{i}", "0") for a in argv], SECRET)
    bad = hosts.start(1, [a.replace("{i}", "1") for a in argv], "not the secret")
    (out0, err0), (out1, err1) = good.communicate(timeout=60), bad.communicate(timeout=60)
    assert good.returncode != 0 and bad.returncode != 0
    # Neither heard the other: the CURVE handshake failed, so not one message was read. The
    # one whose handshakes were refused says so at once; one that waits out connect_timeout
    # names the process it did not hear from (and the secrets, if a handshake of its own
    # failed before the other stopped).
    for err, me, peer in ((err0, 0, 1), (err1, 1, 0)):
        assert (f"what listens at tcp://{addrs[peer]} (process {peer}) refused this process's "
                "CURVE handshake" in err
                or f"waited 6 s for process(es) {peer} (tcp://{addrs[peer]})" in err), err
    assert "refused this process's CURVE handshake" in err0 + err1
    assert "wordcount" not in out0 + out1 and not out0.strip() and not out1.strip()


def test_killing_one_hosts_process_is_reported_by_the_other_with_host_and_index(hosts):
    addrs = hosts.hosts()
    procs = [hosts.start(i, _naiad_run("slow", i, addrs), SECRET) for i in range(2)]
    for proc in procs:
        _wait_for_line(proc, "running", timeout=60)
    t0 = time.monotonic()
    procs[1].send_signal(signal.SIGKILL)
    _, err = procs[0].communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert procs[0].returncode != 0
    assert f"process 1 (tcp://{addrs[1]}) is gone" in err, err
    assert elapsed < 30, f"the failure took {elapsed:.1f} s to be reported"
