"""The live view in Firefox: Debian's firefox-esr, headless, over WebDriver BiDi (tests/firefox.py).

The page is plain JavaScript modules and must work in current Firefox as in
Chromium (issue 12). A deterministic kernel_build is watched from its first step:
once started from the page, the canvas's pixels change while tiles are placed,
and at the end the page's tile layer is the run's final canvas in barnraise/plots.py's
colours, at 100%, with no JavaScript error logged and no message shown as bad.
Screenshots go to ``<basetemp>/view-screenshots``. The run, its server and the
browser are stopped whatever happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from barnraise.outputs import RunResult
from barnraise.plots import TILE_COLOURS
from barnraise.runner import check_request, run_request
from tests import firefox

WHY = firefox.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no headless Firefox: {WHY}")

#: As tests/test_view.py's run: 16 blocks of 15 x 15, several reads long.
PARAMS: dict[str, Any] = {"grid_size": 60, "block": 15, "builders": 4, "testers": 2,
                          "tile_rate": 150.0}
WAIT = 30.0  # wall seconds for anything the page should do


@pytest.fixture
def browser() -> Iterator[firefox.Firefox]:
    with firefox.Firefox() as launched:
        yield launched


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.getbasetemp() / "view-screenshots"
    folder.mkdir(exist_ok=True)
    return folder


def _pixels(canvas: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    palette = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] + [255] for c in TILE_COLOURS],
                       dtype=np.uint8)
    return palette[canvas].reshape(-1)


def test_the_page_draws_a_running_kernel_build_to_its_end_in_firefox(
        browser: firefox.Firefox, shots: Path) -> None:
    from barnraise.view.live import LiveView

    ready = threading.Event()
    live = LiveView(port=0, paused=True, announce=lambda _url: ready.set())
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = run_request(check_request("kernel_build", seed=5, **PARAMS),
                                            watch=live.watch)
        except BaseException as exc:
            outcome["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="firefox-test-run", daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "the view's server did not start"
        assert "error" not in outcome, outcome.get("error")
        assert live.url is not None
        browser.goto(live.url + "/")
        browser.wait_for("window.__view && window.__view.frameMessages > 0", WAIT)
        assert browser.evaluate("__view.state") == "paused"
        blank = browser.evaluate("__view.hash()")

        # Started from the page's controls, paced so that several reads see the canvas grow.
        watcher = live.watcher
        assert watcher is not None and watcher.gate is not None
        browser.evaluate("(() => { const s = document.getElementById('speed'); s.value = '2';"
                         " s.dispatchEvent(new Event('change')); })()")
        browser.evaluate("document.getElementById('btn-start').click()")
        for _ in range(100):
            if watcher.gate.speed == 2 and not watcher.gate.paused:
                break
            watcher.wait_reads(watcher.reads + 1, timeout=5)
        assert watcher.gate.speed == 2 and not watcher.gate.paused, "the controls did nothing"
        hashes = {blank}
        seq = browser.evaluate("__view.seq")
        while True:
            browser.wait_for(f"window.__view.seq > {seq}", WAIT)
            now = browser.evaluate("({seq: __view.seq, state: __view.state,"
                                   " hash: await __view.hash()})")
            seq = now["seq"]
            hashes.add(now["hash"])
            if len(hashes) == 3:
                browser.screenshot(str(shots / "firefox-1-building.png"))
            if now["state"] == "finished":
                break
        assert len(hashes) >= 4, f"the canvas changed only {len(hashes) - 1} times while running"

        # The end: the run's final canvas, pixel for pixel, in the plots' colours; 100%.
        thread.join(60)
        assert not thread.is_alive(), "the run did not end"
        assert "error" not in outcome, outcome.get("error")
        result: RunResult = outcome["result"]
        assert result.success and result.canvas() is not None
        browser.wait_for("window.__view.progress === 100", WAIT)
        pixels = np.array(browser.evaluate("__view.pixels()"), dtype=np.uint8)
        assert np.array_equal(pixels, _pixels(result.canvas()))
        assert browser.evaluate("document.getElementById('progress').value") == 100
        assert browser.evaluate("__view.bad") == 0
        # The panels are drawn in turn, one a frame: wait for the agents' to show the end.
        agents = watcher.frame()["agents"]
        working = sum(a["status"] == "working" for a in agents)
        browser.wait_for("document.getElementById('agent-count').textContent === "
                         f"'{len(agents)} ({working} working)'", WAIT)
        assert browser.evaluate("document.querySelectorAll('#agents tbody tr').length") > 0
        browser.screenshot(str(shots / "firefox-2-finished.png"))
        assert browser.errors == [], browser.errors
    finally:
        watcher = live.watcher
        if watcher is not None and watcher.gate is not None:
            watcher.gate.close()  # a held run (a failed test) goes on to its end
        thread.join(60)
        live.close()


def test_the_client_hears_the_errors_a_page_makes(browser: firefox.Firefox) -> None:
    """The check above for no page errors means something: an uncaught exception and a
    module that cannot be loaded are both heard."""
    browser.goto("data:text/html,<script>setTimeout(() => { throw new Error('boom') }, 0)"
                 "</script><script type=module>import './missing.js'</script>")
    deadline = time.monotonic() + WAIT
    while len(browser.errors) < 2 and time.monotonic() < deadline:
        browser.evaluate("new Promise((done) => setTimeout(done, 50))")  # events come in between
    texts = " | ".join(str(e.get("text")) for e in browser.errors)
    assert "boom" in texts and "missing.js" in texts, texts
