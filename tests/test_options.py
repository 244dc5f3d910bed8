"""Options are checked at the call, before any process starts: wrong type -> TypeError, wrong
range -> ValueError, each naming the option."""

import time

import pytest

import naiad

BAD = [
    ("heartbeat_timeout", -1, ValueError),
    ("heartbeat_timeout", "6", TypeError),
    ("heartbeat_timeout", 0.001, ValueError),      # every peer would look dead at once
    ("send_timeout", float("inf"), ValueError),    # every wait has a bound
    ("connect_timeout", float("nan"), ValueError),
    ("checkpoint_interval", float("inf"), ValueError),
    ("connect_timeout", 0, ValueError),
    ("checkpoint_every", 0, ValueError),
    ("checkpoint_every", 2.5, TypeError),
    ("checkpoint_every", True, TypeError),
    ("checkpoint_interval", -3.0, ValueError),
    ("checkpoint_keep", 0, ValueError),
    ("max_restarts", -1, ValueError),
    ("secret", "", ValueError),
    ("secret", 1234, TypeError),
    ("checkpoint_dir", 5, TypeError),
    ("trace", 5, TypeError),
    ("monitor", 70000, ValueError),
    ("monitor", "8000", TypeError),
    ("accumulate", None, TypeError),
    ("accumulate", "yes", TypeError),
    ("rendezvous", "not callable", TypeError),
]


def _program(comp):
    raise AssertionError("the program must not run with a bad option")


@pytest.mark.parametrize("name,value,error", BAD, ids=[f"{n}={v!r}" for n, v, _ in BAD])
def test_a_bad_option_fails_at_the_call_naming_it(name, value, error):
    t0 = time.monotonic()
    with pytest.raises(error, match=f"option {name} "):
        naiad.execute(_program, processes=2, **{name: value})
    assert time.monotonic() - t0 < 2.0          # no process was started
    with pytest.raises(error, match=f"option {name} "):
        naiad.Computation(**{name: value})


def test_an_unknown_option_lists_the_known_ones():
    with pytest.raises(TypeError, match="unknown option.*checkpoint_evry.*known options: accum"):
        naiad.execute(_program, checkpoint_evry=3)


@pytest.mark.parametrize("kwargs,name", [({"processes": 0}, "processes"),
                                         ({"workers": -2}, "workers"),
                                         ({"workers": True}, "workers"),
                                         ({"processes": 1.0}, "processes")])
def test_counts_must_be_positive_integers(kwargs, name):
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        naiad.execute(_program, **kwargs)


def test_a_bad_option_is_not_retried_by_recovery(tmp_path):
    calls = []

    def program(comp):
        calls.append(1)

    with pytest.raises(ValueError, match="option checkpoint_every"):
        naiad.execute(program, checkpoint_dir=str(tmp_path), checkpoint_every=-1, max_restarts=3)
    assert calls == []


def test_every_option_is_documented_with_its_default():
    """docs/options.md has a row for every option, with the default naiad.config holds."""
    import re
    from pathlib import Path

    from naiad.config import OPTIONS
    page = (Path(__file__).resolve().parent.parent / "docs" / "options.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", page, re.M))
    assert set(rows) == set(OPTIONS), set(rows) ^ set(OPTIONS)
    for name, (default, *_rest) in OPTIONS.items():
        assert rows[name] == repr(default), (name, rows[name], default)


@pytest.mark.parametrize("options, says", [
    ({"checkpoint_every": 2}, "option checkpoint_every needs checkpoint_dir"),
    ({"checkpoint_interval": 1.0}, "option checkpoint_interval needs checkpoint_dir"),
    ({"checkpoint_dir": ""}, "option checkpoint_dir is an empty path"),
    ({"checkpoint_dir": "ckpt", "checkpoint_every": 2, "checkpoint_interval": 1.0},
     "checkpoint_every and checkpoint_interval are two policies"),
])
def test_a_checkpoint_policy_without_a_directory_is_refused(options, says, tmp_path,
                                                           monkeypatch):
    """A policy without a directory ran with no checkpoint and no word (as did an empty
    directory name), and with both policies checkpoint_every won silently."""
    import os
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=says):
        naiad.execute(lambda comp: None, **options)
    assert not os.listdir(tmp_path)
