"""The live view in a real browser: headless Debian chromium through Playwright.

One deterministic kernel_build is watched from its first step: the page holds
still while the run is paused, stepping advances it, the canvas changes while
tiles are placed, and at the end the page's tile layer is the run's final
canvas in barnraise/plots.py's colours, at 100%. Screenshots go to
``<basetemp>/view-screenshots``. Every server and browser a test starts, it stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from barnraise.outputs import RunResult
from barnraise.plots import TILE_COLOURS
from barnraise.runner import check_request, run_request
from barnraise.view import headless
from tests.helpers import canvas_from_log

WHY = headless.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no headless browser: {WHY}")

if WHY is None:
    from playwright.sync_api import Browser, Page, sync_playwright

    from barnraise.view.live import LiveView

#: Small enough to be quick, big enough to take several reads: 16 blocks of 15 x 15.
PARAMS: dict[str, Any] = {"grid_size": 60, "block": 15, "builders": 4, "testers": 2,
                          "tile_rate": 150.0}
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = headless.launch(playwright)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.getbasetemp() / "view-screenshots"
    folder.mkdir(exist_ok=True)
    return folder


class Watched:
    """A scenario run on a thread, with its LiveView; ``result`` once it is over."""

    def __init__(self, scenario: str = "kernel_build", params: dict[str, Any] | None = None,
                 **live: Any) -> None:
        self.ready = threading.Event()
        self.live = LiveView(port=0, announce=lambda _url: self.ready.set(), **live)
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        request = check_request(scenario, seed=5, **(PARAMS if params is None else params))
        self.thread = threading.Thread(target=self._run, args=(request,), daemon=True)
        self.thread.start()
        assert self.ready.wait(20), "the view's server did not start"
        assert self.live.url is not None
        self.url = self.live.url + "/"

    def _run(self, request: Any) -> None:
        try:
            self.result = run_request(request, watch=self.live.watch)
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    def close(self) -> None:
        watcher = self.live.watcher
        if watcher is not None and watcher.gate is not None:
            watcher.gate.close()  # let a held run finish
        self.thread.join(60)
        self.live.close()


@pytest.fixture
def watched() -> Iterator[Callable[..., Watched]]:
    made: list[Watched] = []

    def make(**live: Any) -> Watched:
        made.append(Watched(**live))
        return made[-1]

    yield make
    for w in made:
        w.close()


def _open(browser: Browser, url: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_function("window.__view && window.__view.frameMessages > 0", timeout=WAIT_MS)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def _status(page: Page) -> dict[str, Any]:
    # (the hash is the worker's answer: it holds the canvas, and has drawn every
    # delta the page shows)
    status: dict[str, Any] = page.evaluate(
        "async () => ({seq: __view.seq, state: __view.state, t: __view.t, grid: __view.grid,"
        " progress: __view.progress, bad: __view.bad, hash: await __view.hash(),"
        " deltas: __view.deltas, frames: __view.frames})")
    return status


def _settle(page: Page, w: Watched) -> None:
    """Wait until the run is held, two reads have been taken since, and the page has
    every delta they gave."""
    watcher = w.live.watcher
    assert watcher is not None and watcher.gate is not None
    for _ in range(200):
        if watcher.gate.paused:
            break
        assert watcher.wait_reads(watcher.reads + 1, timeout=10)
    assert watcher.gate.paused
    assert watcher.wait_reads(watcher.reads + 2, timeout=10)
    page.wait_for_function(f"window.__view.seq >= {watcher.told_seq}")


def _wait_seq_after(page: Page, seq: int) -> None:
    page.wait_for_function(f"window.__view.seq > {seq}", timeout=WAIT_MS)


def _expected_pixels(canvas: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    palette = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] + [255] for c in TILE_COLOURS],
                       dtype=np.uint8)
    return palette[canvas]


def test_the_page_follows_a_run_paused_stepped_and_to_its_end(
        browser: Browser, watched: Callable[..., Watched], shots: Path) -> None:
    w = watched(paused=True)
    watcher = w.live.watcher
    assert watcher is not None and watcher.gate is not None
    gate = watcher.gate
    page = _open(browser, w.url)
    assert _status(page)["state"] == "paused"
    page.screenshot(path=str(shots / "1-paused-at-start.png"))

    # Step by events until the session (and so the canvas) is there.
    for _ in range(100):
        if _status(page)["grid"] is not None:
            break
        seq = _status(page)["seq"]
        page.click("#btn-step-event")
        _wait_seq_after(page, seq)
        _settle(page, w)
    status = _status(page)
    assert status["grid"] == [PARAMS["grid_size"], PARAMS["grid_size"]]

    # Paused: the pump reads the world on, and nothing moves, on the server or the page.
    _settle(page, w)
    held = _status(page)
    events, reads, told = gate.events, watcher.reads, watcher.told_seq
    assert watcher.wait_reads(reads + 3, timeout=10)
    # two animation frames: whatever reached the page by now is drawn
    page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    after = _status(page)
    assert gate.events == events and gate.paused and watcher.told_seq == told
    assert after["state"] == "paused"
    assert (after["hash"], after["seq"], after["t"]) == (held["hash"], held["seq"], held["t"])

    # Stepping by simulated seconds advances the clock and, once tiles go down, the canvas.
    blank = after["hash"]
    stepped = []
    for _ in range(10):
        before = _status(page)
        page.click("#btn-step-time")
        _wait_seq_after(page, before["seq"])
        _settle(page, w)
        now = _status(page)
        assert before["t"] <= now["t"] <= before["t"] + 1.0 + 1e-9
        stepped.append(now)
        if now["hash"] != blank:
            break
    assert stepped[-1]["hash"] != blank, "ten one-second steps placed no tile"
    page.screenshot(path=str(shots / "2-after-steps.png"))

    # Running, paced: the canvas changes read after read while tiles are placed.
    page.select_option("#speed", "2")
    page.click("#btn-start")
    hashes = {stepped[-1]["hash"]}
    seq = stepped[-1]["seq"]
    while True:
        _wait_seq_after(page, seq)
        now = _status(page)
        seq = now["seq"]
        hashes.add(now["hash"])
        if len(hashes) == 3:
            page.screenshot(path=str(shots / "3-building.png"))
        if now["state"] == "finished":
            break
    assert len(hashes) >= 4, f"the canvas changed only {len(hashes) - 1} times while running"

    # The end: the run's final canvas, pixel for pixel, in the plots' colours; 100%.
    w.thread.join(60)
    assert w.error is None and w.result is not None and w.result.success
    page.wait_for_function("window.__view.progress === 100", timeout=WAIT_MS)
    final = _status(page)
    assert final["state"] == "finished" and final["bad"] == 0
    pixels = np.array(page.evaluate("__view.pixels()"), dtype=np.uint8)
    canvas = w.result.canvas()
    assert canvas is not None
    expected = _expected_pixels(canvas)
    assert pixels.shape == (expected.size,)
    assert np.array_equal(pixels.reshape(expected.shape), expected)
    assert page.evaluate("document.getElementById('progress').value") == 100
    assert page.errors == []  # type: ignore[attr-defined]
    page.screenshot(path=str(shots / "4-finished.png"))
    page.close()


def test_bad_and_unknown_messages_are_shown_and_break_nothing(
        browser: Browser, watched: Callable[..., Watched], shots: Path) -> None:
    w = watched(paused=True)
    page = _open(browser, w.url)
    surface = w.live.surface
    watcher = w.live.watcher
    assert surface is not None and surface._loop is not None and watcher is not None
    # An event of a type the page does not know, with a body of any shape, goes to the log.
    watcher._on_event(0.0, "somewhere", "topic", "mystery_event", [1, {"odd": None}])
    seq = _status(page)["seq"]
    page.click("#btn-step-event")
    _wait_seq_after(page, seq)
    page.wait_for_function("document.querySelector('#log .unknown') !== null", timeout=WAIT_MS)
    # Frames that are not JSON, not JSON-RPC, or a delta whose parts are nonsense.
    for junk in (b"not json", b"[1, 2]", b'{"jsonrpc": "2.0", "method": "view.nothing"}',
                 b'{"jsonrpc": "2.0", "method": "view.delta", "params": {"seq": 1000000,'
                 b' "canvas": [{"x": -5, "y": 0, "w": 2, "h": 2, "data": "AAAA"}, 7],'
                 b' "claims_added": 5, "agents": "x", "events": [null, 3, {"type": 9}],'
                 b' "point": "p", "state": "running"}}'):
        surface._loop.call_soon_threadsafe(surface._fan_out, junk)
    page.wait_for_function("window.__view.bad >= 6", timeout=WAIT_MS)
    page.wait_for_function("document.querySelectorAll('#log .bad').length >= 4",
                           timeout=WAIT_MS)
    # The page goes on: a real run still draws on it to the end.
    page.click("#btn-start")
    page.wait_for_function("window.__view.state === 'finished'", timeout=WAIT_MS)
    page.wait_for_function("window.__view.progress === 100", timeout=WAIT_MS)
    page.screenshot(path=str(shots / "5-after-bad-messages.png"))
    assert page.errors == []  # type: ignore[attr-defined]
    page.close()


def test_a_refused_claim_flashes_red_over_its_region(
        browser: Browser, watched: Callable[..., Watched], shots: Path) -> None:
    w = watched(scenario="conflict_storm", params={"agents": 6, "grid": 48}, paused=True)
    page = _open(browser, w.url)
    for _ in range(400):  # step by events until the first refused claim is on the page
        if page.evaluate("document.querySelector('#log .conflict_detected') !== null"):
            break
        seq = _status(page)["seq"]
        page.click("#btn-step-event")
        _wait_seq_after(page, seq)
    else:
        raise AssertionError("no conflict_detected event in 400 steps")
    watcher = w.live.watcher
    assert watcher is not None
    conflict = next(e for e in watcher.frame()["events"] if e["type"] == "conflict_detected")
    region = conflict["body"]["region"]
    page.wait_for_function("window.__view.flashes() > 0")
    x, y = region["x"] + region["width"] // 2, region["y"] + region["height"] // 2
    red, green, blue, alpha = page.evaluate(f"__view.overlayAt({x}, {y})")
    assert alpha > 0 and red > green and red > blue  # the flash, red over the region
    page.screenshot(path=str(shots / "6-conflict-flash.png"))
    page.click("#btn-start")
    page.wait_for_function("window.__view.state === 'finished'")
    assert page.errors == []  # type: ignore[attr-defined]
    page.close()


@pytest.fixture
def stored_run(tmp_path: Path) -> Path:
    """A finished kernel_build kept in a store, with a snapshot every 400 records."""
    from barnraise.runner import open_store

    path = tmp_path / "run.db"
    request = check_request("kernel_build", seed=5, **PARAMS)
    result = run_request(request, store=open_store(request, path, snapshot_every=400))
    assert result.success
    return path


def test_the_scrubber_shows_a_stored_run_at_a_chosen_time(
        browser: Browser, stored_run: Path, shots: Path) -> None:
    from barnraise import open_run
    from barnraise.view.stored import StoredServer

    run = open_run(stored_run)
    times = [t for _, t in run.snapshots()]
    assert len(times) >= 3, "the store should hold snapshots along the run"
    served = StoredServer(run, port=0)
    try:
        url = served.server.start() + "/"
        page = _open(browser, url)
        assert page.evaluate("window.__view.scrub !== null")
        end = page.evaluate("window.__view.scrub.end")
        assert end == max(times[-1], end) and page.is_visible("#scrub")
        # Move the slider to a time between two snapshots: the run is re-executed to it.
        chosen = round((times[1] + times[2]) / 2 if times[2] > times[1] else times[1], 2)
        seq = _status(page)["seq"]
        page.evaluate(f"(() => {{ const s = document.getElementById('scrub'); "
                      f"s.value = '{chosen}'; s.dispatchEvent(new Event('change')); }})()")
        page.wait_for_function(f"window.__view.seq > {seq} && window.__view.t === {chosen}")
        expected = canvas_from_log(run, chosen, PARAMS["grid_size"])
        snapshot = run.snapshot(at=chosen)  # the last one taken before the chosen time
        (part,) = snapshot.values()
        before = np.frombuffer(part["canvas"], np.uint8).reshape(part["shape"])
        assert not np.array_equal(expected, before), \
            "tiles should be written between the snapshot before and the chosen time"
        pixels = np.array(page.evaluate("__view.pixels()"), dtype=np.uint8)
        assert np.array_equal(pixels.reshape(_expected_pixels(expected).shape),
                              _expected_pixels(expected))
        assert "re-executed" in page.inner_text("#scrub-text")
        page.screenshot(path=str(shots / "7-scrubbed.png"))
        # At the end: the finished run's canvas.
        seq = _status(page)["seq"]
        page.evaluate(f"__view.control('seek', {end})")
        page.wait_for_function(f"window.__view.seq > {seq}")
        final = run.canvas()
        assert final is not None
        pixels = np.array(page.evaluate("__view.pixels()"), dtype=np.uint8)
        assert np.array_equal(pixels.reshape(_expected_pixels(final).shape),
                              _expected_pixels(final))
        assert page.errors == []  # type: ignore[attr-defined]
        page.close()
    finally:
        served.close()


def test_the_scrubber_of_a_realtime_store_shows_its_frontier_and_chart(
        browser: Browser, tmp_path: Path, shots: Path) -> None:
    """A realtime store cannot be re-executed: its page is folded from the log. At a time
    mid-run it shows the DAG's frontier (the fold's), the chart, and each agent's mailbox
    depth as unknown."""
    from barnraise import open_run
    from barnraise.runner import open_store
    from barnraise.view.stored import StoredServer, StoredSource

    path = tmp_path / "realtime.db"
    request = check_request("kernel_build", seed=5, mode="realtime", time_scale=50.0, **PARAMS)
    assert run_request(request, store=open_store(request, path), record=False).success
    run = open_run(path)
    served = StoredServer(run, port=0)
    try:
        assert isinstance(served.source, StoredSource)
        url = served.server.start() + "/"
        page = _open(browser, url)
        times = sorted({r.t for r in run.records()})
        for chosen in (times[len(times) // 3], times[2 * len(times) // 3]):
            seq = _status(page)["seq"]
            page.evaluate(f"__view.control('seek', {chosen})")
            page.wait_for_function(f"window.__view.seq > {seq}")
            served.source.at = chosen
            want = served.source.frame()
            board = want["board"]
            assert board is not None and board["frontier"], "tasks should be ready mid-run"
            wanted = [t["id"] for t in board["frontier"]]
            # The board is one of the panels drawn in turn: wait for it to show this frame.
            page.wait_for_function(
                "ids => [...document.querySelectorAll('#frontier li')]"
                ".map(li => li.innerText.split(/\\s+/)[0]).join(',') === ids.join(',')",
                arg=wanted, timeout=10_000)
            shown = page.locator("#frontier li").all_inner_texts()
            assert [text.split()[0] for text in shown] == wanted
            assert f"({board['frontier_size']} ready)" in page.inner_text("#frontier-size")
            assert len(want["series"]) > 2
            page.wait_for_timeout(300)  # the chart is one of the panels drawn in turn
            drawn = page.evaluate(
                "(() => { const c = document.getElementById('chart');"
                " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                " let n = 0; for (let i = 0; i < d.length; i += 4)"
                " if (d[i + 3] && !(d[i] > 200 && d[i + 1] > 200 && d[i + 2] > 200)) n++;"
                " return n; })()")
            assert drawn > 100, "the chart should draw its lines"
            mailboxes = page.locator("#agents tbody tr td:last-child").all_inner_texts()
            assert mailboxes and set(mailboxes) == {"\u2013"}  # an en dash: not known
        page.screenshot(path=str(shots / "8-realtime-store-folded.png"))
        assert page.errors == []  # type: ignore[attr-defined]
        page.close()
    finally:
        served.close()


def test_the_notebooks_inline_view_loads_the_run_in_its_iframe(
        browser: Browser, shots: Path) -> None:
    """barnraise.show's cell output, as Jupyter puts it in a page: the IFrame loads the
    view of the run, scrubbed to its end; the page drives it with the token its URL
    carries, and the same page without the token is refused."""
    import barnraise

    result = barnraise.run("kernel_build", seed=5, **PARAMS)
    assert result.success and result.final_canvas is not None
    with barnraise.show(result, height=700) as view:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.set_content(f"<h1>a notebook cell</h1>{view._repr_html_()}")
        handle = page.wait_for_selector("iframe")
        assert handle is not None
        frame = handle.content_frame()
        assert frame is not None and frame.url == view.url
        frame.wait_for_function("window.__view && window.__view.frameMessages > 0")
        assert frame.evaluate("window.__view.scrub !== null")
        end = frame.evaluate("window.__view.scrub.end")
        assert round(end, 6) == result.summary["virtual_time"]
        assert frame.evaluate("window.__view.progress") == 100
        pixels = np.array(frame.evaluate("__view.pixels()"), dtype=np.uint8)
        expected = _expected_pixels(result.final_canvas)
        assert np.array_equal(pixels.reshape(expected.shape), expected)
        page.screenshot(path=str(shots / "9-notebook-iframe.png"))
        # a seek from the IFrame's page carries the view's token: answered, a new frame
        seq = frame.evaluate("window.__view.seq")
        frame.evaluate("__view.control('seek', 0.5)")
        frame.wait_for_function(f"window.__view.seq > {seq} && window.__view.t === 0.5")
        # the page at the URL without its fragment watches, and its seek is refused
        plain = browser.new_page()
        plain.set_default_timeout(WAIT_MS)
        plain.goto(view.url.split("#", 1)[0])
        plain.wait_for_function("window.__view && window.__view.frameMessages > 0")
        assert plain.evaluate("window.__view.t") == 0.5  # one scrubber: the time chosen
        plain.evaluate("__view.control('seek', 1.0)")
        plain.wait_for_function(
            "[...document.querySelectorAll('#log div')].some(li => "
            "li.textContent.includes('control refused'))")
        assert plain.evaluate("window.__view.t") == 0.5
        assert frame.evaluate("window.__view.t") == 0.5
        assert errors == []
        plain.close()
        page.close()
