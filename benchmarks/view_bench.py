"""The live view's cost: a big kernel_build watched by a headless page, against none.

:func:`bench_view` runs the same deterministic kernel_build (1,000 agents on a
1000 x 1000 canvas by default) in this process, in interleaved rounds:

* **plain**: no viewer; the run is held at its first step (a gate, as the watched
  run is) and its wall time runs from the moment it is let go to the moment it
  ends (the runner's ``watch`` hook marks the end), so the scenario's set-up before
  its first step, Simulation set-up and summarising are outside both figures; it
  runs on a thread, as the watched run does;
* **watched**: a :class:`barnraise.view.live.LiveView` serves the run, headless
  Chromium (Debian's, through Playwright) has the page open from before the
  first step, and the run is started paused and let go once the page has its
  first frame; its wall time runs from that start (the run standing at its first
  step) to the run's end.

* **socket**: the same as watched, with a plain WebSocket client reading every frame
  and delta in place of the browser: the server's side of the cost alone.

It reports the medians, their ratio (target <= 1.15), and the page's frame rate
while the run goes (``requestAnimationFrame`` callbacks counted in the page over
the same span; target >= 20 fps), with what the server sent (deltas, reads), the
CPU the browser's processes used during each watched run (Linux), and the trace
digests (equal: watching changes nothing in the run).
"""

from __future__ import annotations

import gc
import glob
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from actors.world import Simulation
from barnraise.runner import RunResult, check_request, run_request
from sim.dispatch import DeterministicDispatcher, Gate


def _params(agents: int, grid: int, block: int) -> dict[str, Any]:
    testers = max(1, (agents - 1) // 5)
    return {"grid_size": grid, "block": block, "builders": agents - 1 - testers,
            "testers": testers}


def _plain(params: dict[str, Any], seed: int) -> tuple[float, RunResult]:
    marks: list[float] = []

    def watch(simu: Simulation) -> Callable[[], None]:
        # Held at the first step and let go as the watched run is, so both clocks start
        # at the same point (after the scenario's own set-up, the blueprint).
        dispatcher = simu.dispatcher
        assert isinstance(dispatcher, DeterministicDispatcher)
        gate = Gate(paused=True)
        detach = dispatcher.attach_gate(gate)

        def release() -> None:
            gate.call(lambda: None, timeout=120)  # returns once the run waits at its step
            marks.append(time.perf_counter())
            gate.resume()

        threading.Thread(target=release, daemon=True).start()

        def end() -> None:
            marks.append(time.perf_counter())
            detach()

        return end

    # On a thread, as the watched run is, with this thread waiting, as it does there.
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = run_request(check_request("kernel_build", seed=seed, **params),
                                        watch=watch)

    thread = threading.Thread(target=run, name="view-bench-plain", daemon=True)
    thread.start()
    thread.join(600)
    if "result" not in outcome:
        raise RuntimeError("the unwatched run did not finish")
    return marks[1] - marks[0], outcome["result"]


def _browser_cpu() -> float | None:
    """CPU seconds used so far by every Chromium process on this machine (Linux /proc;
    None elsewhere)."""
    total, found = 0, False
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as handle:
                fields = handle.read().rsplit(")", 1)
            if "chrom" not in fields[0].rsplit("(", 1)[-1]:
                continue
            parts = fields[1].split()
            total += int(parts[11]) + int(parts[12])  # utime, stime
            found = True
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK") if found else None


def _at_first_step(live: Any) -> None:
    """Wait until the held run stands at its first step (as the plain run is let go)."""
    gate = live.watcher.gate
    if gate is not None:
        gate.call(lambda: None, timeout=120)


def _socket_client(url: str, started: threading.Event, done: dict[str, Any]) -> None:
    """A page without a browser: reads every frame and delta until the run is finished."""
    from websockets.sync.client import connect

    with connect(url, max_size=None, open_timeout=30) as ws:
        received = 0
        while True:
            message = ws.recv(timeout=600)
            received += len(message)
            if not started.is_set():
                started.set()  # the first frame is here
            if b'"state":"finished"' in (message if isinstance(message, bytes)
                                          else message.encode()):
                break
        done["bytes"] = received


def _watched(params: dict[str, Any], seed: int, browser: Any,
             client: str = "browser") -> dict[str, Any]:
    from barnraise.view.live import LiveView

    ready = threading.Event()
    live = LiveView(port=0, paused=True, announce=lambda _url: ready.set())
    marks: dict[str, float] = {}
    outcome: dict[str, Any] = {}

    def watch(simu: Simulation) -> Callable[[], None]:
        ended = live.watch(simu)

        def end() -> None:
            marks["end"] = time.perf_counter()
            ended()

        return end

    def run() -> None:
        try:
            outcome["result"] = run_request(check_request("kernel_build", seed=seed, **params),
                                            watch=watch)
        except BaseException as exc:
            outcome["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="view-bench-run", daemon=True)
    thread.start()
    page = None
    try:
        if not ready.wait(60) or live.url is None or live.watcher is None:
            raise RuntimeError(f"the view did not start: {outcome.get('error')}")
        if client == "socket":
            started, got = threading.Event(), {}
            reader = threading.Thread(target=_socket_client, daemon=True, args=(
                live.url.replace("http://", "ws://") + "/view/ws", started, got))
            reader.start()
            if not started.wait(60):
                raise RuntimeError("the socket client got no frame")
            _at_first_step(live)
            marks["start"] = time.perf_counter()
            live.watcher.control("start")
            thread.join(600)
            reader.join(600)
            if "error" in outcome:
                raise RuntimeError(f"the watched run failed: {outcome['error']}")
            return {"wall": marks["end"] - marks["start"], "result": outcome["result"],
                    "bytes": got.get("bytes")}
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(600_000)
        page.goto(live.url + "/")
        page.wait_for_function("window.__view && window.__view.frameMessages > 0")
        before = page.evaluate("({frames: __view.frames, at: performance.now()})")
        cpu = _browser_cpu()
        _at_first_step(live)
        marks["start"] = time.perf_counter()
        answer = live.watcher.control("start")  # what the page's Start button sends
        if not answer["success"]:
            raise RuntimeError(f"start refused: {answer}")
        # Polled five times a second, not every animation frame: the harness's own
        # checking should not be counted as the page's work.
        page.wait_for_function("window.__view.state === 'finished'", polling=200)
        cpu_after = _browser_cpu()
        after = page.evaluate("({frames: __view.frames, at: performance.now(), "
                              "deltas: __view.deltas, bad: __view.bad, "
                              "progress: __view.progress})")
        thread.join(600)
        if "error" in outcome:
            raise RuntimeError(f"the watched run failed: {outcome['error']}")
        surface = live.surface
        seconds = (after["at"] - before["at"]) / 1000
        return {
            "wall": marks["end"] - marks["start"], "result": outcome["result"],
            "fps": (after["frames"] - before["frames"]) / seconds if seconds > 0 else 0.0,
            "page_deltas": after["deltas"], "page_bad": after["bad"],
            "page_progress": after["progress"], "reads": live.watcher.reads,
            "browser_cpu_s": None if cpu is None or cpu_after is None else cpu_after - cpu,
            "deltas_sent": None if surface is None else surface.deltas_sent,
            "frames_sent": None if surface is None else surface.frames_sent,
        }
    finally:
        if page is not None:
            page.close()
        if live.watcher is not None and live.watcher.gate is not None:
            live.watcher.gate.close()
        thread.join(600)
        live.close()


def bench_view(agents: int = 1000, grid: int = 1000, block: int = 32, repeats: int = 5,
               seed: int = 1) -> dict[str, Any]:
    """A ``agents``-strong kernel_build watched live against the same run unwatched."""
    from playwright.sync_api import sync_playwright

    from barnraise.view import headless

    reason = headless.missing()
    if reason is not None:
        return {"skipped": reason}
    params = _params(agents, grid, block)
    plain: list[float] = []
    socket: list[float] = []
    watched: list[dict[str, Any]] = []
    digests: set[str] = set()
    with sync_playwright() as playwright:
        browser = headless.launch(playwright)
        try:
            for round_ in range(repeats):
                # Alternate which goes first, so a drift in the machine falls on both.
                kinds = ("plain", "socket", "watched")
                for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
                    gc.collect()
                    if kind == "socket":
                        side = _watched(params, seed, browser, client="socket")
                        digests.add(side["result"].trace_digest)
                        socket.append(side["wall"])
                    elif kind == "plain":
                        wall, result = _plain(params, seed)
                        assert result.success, "the unwatched run failed its check"
                        plain.append(wall)
                        digests.add(result.trace_digest)
                    else:
                        run = _watched(params, seed, browser)
                        assert run["result"].success, "the watched run failed its check"
                        digests.add(run["result"].trace_digest)
                        del run["result"]
                        watched.append(run)
        finally:
            browser.close()
    walls = [w["wall"] for w in watched]
    fps = [w["fps"] for w in watched]
    return {
        "crew": agents, "grid": grid, "block": block, "mode": "deterministic",
        "repeats": repeats,
        "plain_wall_s": round(statistics.median(plain), 3),
        "watched_wall_s": round(statistics.median(walls), 3),
        "ratio": round(statistics.median(walls) / statistics.median(plain), 3),
        "ratio_per_round": [round(w / p, 3) for w, p in zip(walls, plain, strict=True)],
        "ratio_median_of_rounds": round(statistics.median(
            w / p for w, p in zip(walls, plain, strict=True)), 3),
        "plain_walls_s": [round(p, 3) for p in plain],
        "watched_walls_s": [round(w, 3) for w in walls],
        "socket_wall_s": round(statistics.median(socket), 3),
        "socket_ratio": round(statistics.median(socket) / statistics.median(plain), 3),
        "browser_cpu_s_per_run": [None if w["browser_cpu_s"] is None
                                  else round(w["browser_cpu_s"], 2) for w in watched],
        "fps": round(statistics.median(fps), 1), "fps_per_round": [round(f, 1) for f in fps],
        "target_ratio": 1.15, "target_fps": 20,
        "same_digest": len(digests) == 1,
        "reads_per_run": [w["reads"] for w in watched],
        "deltas_sent_per_run": [w["deltas_sent"] for w in watched],
        "page_deltas_per_run": [w["page_deltas"] for w in watched],
        "page_bad": sum(w["page_bad"] for w in watched),
        "page_progress": [w["page_progress"] for w in watched],
    }


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        return {"watched_kernel_build": bench_view(agents=20, grid=96, block=16, repeats=1)}
    return {"watched_kernel_build": bench_view()}
