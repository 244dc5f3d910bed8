"""The live monitoring page, loaded in a real headless Chromium while a 2-process run goes on.

Needs Debian's chromium (``sudo apt-get install chromium``); without it these tests are skipped
with that advice.  Chromium renders the page's JavaScript (``--dump-dom``), so what is asserted
is what a person would see: every stage by name, record counts, and the frontier moving.
"""

import html.parser
import os
import json
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

import linq  # noqa: F401 - the fluent methods
import naiad
from naiad.testing import free_ports

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=(
    "the monitor page is tested in a real browser: sudo apt-get install chromium"))

MAX_EPOCHS = 600


def _paced(stop_file):
    """Word counts per epoch, fed no further ahead than the probe allows, slowly enough to be
    watched, until the test creates ``stop_file`` (at most MAX_EPOCHS epochs: about 90 s).
    Returns (process index, epochs fed)."""
    def program(comp):
        inp = comp.new_input(name="lines")
        counts = inp.stream.select_many(str.split).count()
        probe = counts.probe()
        comp.activate()
        epoch = 0
        while epoch < MAX_EPOCHS and not os.path.exists(stop_file):
            inp.on_next([f"the quick brown fox {epoch % 7}"] * 500)
            probe.wait(epoch, timeout=60)
            epoch += 1
            time.sleep(0.15)
        inp.on_completed()
        comp.join(timeout=60)
        return comp.process_index, epoch
    return program


class _Rows(html.parser.HTMLParser):
    """The stage table's rows: {stage name: {cell class: text}}, and the status line."""

    def __init__(self):
        super().__init__()
        self.rows, self.status = {}, ""
        self._row = self._cell = None
        self._in_status = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "stage-row":
            self._row = self.rows.setdefault(a["data-stage"], {})
        elif tag == "td" and self._row is not None:
            self._cell = a.get("class", "")
        elif a.get("id") == "status":
            self._in_status = True

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None
        elif tag == "td":
            self._cell = None
        elif tag == "div":
            self._in_status = False

    def handle_data(self, data):
        if self._row is not None and self._cell is not None:
            self._row[self._cell] = self._row.get(self._cell, "") + data
        if self._in_status:
            self.status += data


def _dom(url: str) -> str:
    """The page's DOM once Chromium has run its scripts."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=1500",
             "--dump-dom", url], capture_output=True, text=True, timeout=60, check=True).stdout


def _render(url: str) -> _Rows:
    rows = _Rows()
    rows.feed(_dom(url))
    return rows


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_page_shows_every_stage_its_counts_and_a_moving_frontier(tmp_path):
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}/"
    stop = tmp_path / "stop"
    outcome = {}
    # The run lasts until the test has seen the page twice (rendering is slow on a loaded
    # machine: a fixed number of epochs could end before the second look).
    run = threading.Thread(target=lambda: outcome.setdefault(
        "result", naiad.execute(_paced(str(stop)), processes=2, monitor=port)), daemon=True)
    run.start()
    deadline = time.monotonic() + 60
    first = None
    while time.monotonic() < deadline:
        try:
            state = json.load(urllib.request.urlopen(url + "state", timeout=5))
        except OSError:
            time.sleep(0.2)
            continue
        if state["reported"] == 2 and state["epochs_fed"] >= 3:
            first = _render(url)
            break
        time.sleep(0.2)
    assert first is not None, "the page never had reports from both processes"
    time.sleep(1.5)
    second = _render(url)
    # select_many(split) is fused into count.local; the stage left behind is not shown.
    names = ["lines", "count.local", "count", "probe_1"]
    for page in (first, second):
        assert set(page.rows) == set(names), page.rows
        assert "2 process(es)" in page.status and "running" in page.status
        assert _count(page.rows["count.local"]["in"]) > 0
        assert _count(page.rows["lines"]["out"]) > 0
        assert page.rows["count"]["name frontier"].startswith("epoch ")
    assert _count(second.rows["count.local"]["in"]) > _count(first.rows["count.local"]["in"])
    assert second.rows["count"]["name frontier"] != first.rows["count"]["name frontier"]
    stop.touch()
    run.join(timeout=120)
    assert [i for i, _ in outcome["result"]] == [0, 1]
    fed = sum(n for _, n in outcome["result"])
    # The page stays readable after the run, with the final counts.
    done = _render(url)
    assert "finished" in done.status
    assert _count(done.rows["lines"]["out"]) == fed * 500
    assert all(row["name frontier"] == "complete" for row in done.rows.values())


def test_a_failure_is_shown_with_its_message():
    port = free_ports(1)[0]

    def program(comp):
        inp = comp.new_input(name="lines")
        inp.stream.select(lambda line: 1 // 0).collect()
        comp.activate()
        inp.on_next(["x"])
        inp.on_completed()
        comp.join(timeout=30)

    with pytest.raises(naiad.VertexError):
        naiad.execute(program, processes=2, monitor=port)
    time.sleep(0.3)
    page = _render(f"http://127.0.0.1:{port}/")
    assert "failed" in page.status
    state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5))
    assert "ZeroDivisionError" in state["failure"]


def test_a_long_run_shows_its_latest_checkpoints_and_how_many_it_took(tmp_path):
    """60 checkpoints (one per epoch boundary): the table shows the last SHOWN_CHECKPOINTS
    and says how many were taken, as a person reads it in the browser."""
    import functools
    from naiad.monitor import SHOWN_CHECKPOINTS
    from tests.test_observability import _many_checkpoints
    port = free_ports(1)[0]
    naiad.execute(functools.partial(_many_checkpoints, epochs=61), processes=2, monitor=port,
                  checkpoint_every=1, checkpoint_dir=str(tmp_path / "ck"))
    time.sleep(0.3)
    dom = _dom(f"http://127.0.0.1:{port}/")
    table = dom.split('id="checkpoints"')[1].split("</table>")[0]
    epochs = [int(cell.split("<td>")[1].split("</td>")[0])
              for cell in table.split("<tr>")[1:] if cell.startswith("<td>")]
    assert epochs == list(range(61 - SHOWN_CHECKPOINTS, 61)), epochs
    assert f"the last {SHOWN_CHECKPOINTS} of 60 taken" in table, table[-400:]


class _Round(naiad.Vertex):
    def on_recv_batch(self, edge, messages, time):
        out = [m + 1 for m in messages if time.counters[-1] < 2]
        if out:
            self.send_batch_by(0, out, time)


def _two_loops(comp):
    """A LINQ iterate and a LoopContext side by side on one input (their stages share layers)."""
    import stages
    nums = comp.new_input(name="nums")
    nums.stream.iterate(lambda s: s.select(lambda v: v + 1), 3).count().collect()
    loop = stages.LoopContext(comp, name="ctx")
    fb = loop.feedback(partition_by=lambda v: v)
    body = stages.unary(loop.enter(nums.stream).concat(fb.stream), _Round, name="step")
    fb.connect(body)
    loop.exit(body).collect()
    comp.activate()
    nums.on_next(range(20))
    nums.on_completed()
    comp.join(timeout=30)


def test_loops_side_by_side_are_drawn_in_boxes_of_their_own():
    """Each loop's dashed box was the bounding box of its stages, placed in rows shared with
    the other loop's: two loops side by side drew overlapping boxes, each around stages of
    the other."""
    import re
    port = free_ports(1)[0]
    naiad.execute(_two_loops, processes=2, monitor=port)
    time.sleep(0.3)
    dom = _dom(f"http://127.0.0.1:{port}/")
    boxes = []
    for tag in re.findall(r"<rect [^>]*stroke-dasharray[^>]*>", dom):
        a = dict(re.findall(r'(\w+)="([^"]*)"', tag))
        x, y, w, h = (float(a[k]) for k in ("x", "y", "width", "height"))
        boxes.append((x, y, x + w, y + h))
    assert len(boxes) == 2, dom[:2000]
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = boxes
    assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, boxes
