"""The live view's server side, without a browser: deltas, controls, the WebSocket, the CLI."""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from barnraise.actors.world import Simulation
from barnraise.plots import TILE_COLOURS
from barnraise.runner import check_request, run_request
from barnraise.view import Watcher, changed_rectangles
from barnraise.view.live import LiveView
from barnraise.view.server import QUEUE, _Connection
from tests.helpers import canvas_from_log

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"grid_size": 60, "block": 30, "builders": 2, "testers": 1}


def test_changed_rectangles_cover_every_change_and_nothing_else() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        old = rng.integers(0, 8, size=(40, 30), dtype=np.uint8)
        new = old.copy()
        for _ in range(int(rng.integers(0, 6))):
            y, x = int(rng.integers(0, 40)), int(rng.integers(0, 30))
            new[y:y + int(rng.integers(1, 5)), x:x + int(rng.integers(1, 5))] = rng.integers(0, 8)
        rects = changed_rectangles(old, new, tile=8)
        patched = old.copy()
        covered = np.zeros(new.shape, dtype=bool)
        for x, y, w, h in rects:
            patched[y:y + h, x:x + w] = new[y:y + h, x:x + w]
            covered[y:y + h, x:x + w] = True
        assert np.array_equal(patched, new)
        diff = old != new
        for x, y, w, h in rects:  # tight: each edge of a rectangle holds a change
            part = diff[y:y + h, x:x + w]
            assert part[0].any() and part[-1].any() and part[:, 0].any() and part[:, -1].any()
        # no band of 8 rows without a change is sent
        for band in range(0, 40, 8):
            if not diff[band:band + 8].any():
                assert not covered[band:band + 8].any()
        assert sum(w * h for _, _, w, h in rects) <= diff.size
    same = np.ones((5, 5), dtype=np.uint8)
    assert changed_rectangles(same, same.copy()) == []
    assert changed_rectangles(None, same) == [(0, 0, 5, 5)]
    assert changed_rectangles(np.zeros((4, 4), np.uint8), same) == [(0, 0, 5, 5)]


def test_controls_refuse_what_they_cannot_do_with_reasons() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        watcher = Watcher(simu)
        try:
            for action, bad in (("step_event", 0), ("step_event", 1.5), ("step_event", True),
                                ("step_time", 0), ("step_time", -1), ("step_time", "x"),
                                ("step_time", float("inf"))):
                refused = watcher.control(action, bad)
                assert refused["success"] is False and refused["error"] == "invalid_value"
            for bad in (None, 0, -3, "x", True):
                assert watcher.control("speed", bad)["error"] == "invalid_value"
            assert watcher.control("pause")["state"] == "paused"
            assert watcher.control("speed", 10)["speed"] == 10.0
            assert watcher.control("start")["state"] == "running"
        finally:
            watcher.close()
    with Simulation(seed=1) as simu:
        watcher = Watcher(simu, paused=True)
        try:
            assert watcher.control("fly")["error"] == "unknown_action"
            for action, value in (("step_event", 0), ("step_event", "3"), ("step_time", -1),
                                  ("speed", 0), ("speed", "fast")):
                answer = watcher.control(action, value)
                assert answer["success"] is False and answer["error"] == "invalid_value", answer
            assert watcher.gate is not None and watcher.gate.paused  # nothing changed
            ok = watcher.control("speed", 25)
            assert ok["success"] and ok["speed"] == 25.0 and ok["state"] == "paused"
            assert watcher.control("start")["state"] == "running"
            watcher.ended()
            assert watcher.control("pause")["error"] == "finished"
        finally:
            watcher.close()


def test_a_slow_page_gets_a_fresh_frame_instead_of_a_growing_queue() -> None:
    connection = _Connection()
    for i in range(QUEUE * 3):
        connection.offer(f"delta {i}".encode())
    assert connection.queue.qsize() <= QUEUE
    assert connection.resyncs >= 1


@pytest.fixture
def live_run() -> Iterator[LiveView]:
    """A paused deterministic kernel_build on a LiveView; the run is let go at the end."""
    ready = threading.Event()
    live = LiveView(port=0, paused=True, announce=lambda _url: ready.set())
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = run_request(check_request("kernel_build", seed=2, **SMALL),
                                            watch=live.watch)
        except BaseException as exc:
            outcome["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(20) and live.url is not None, outcome.get("error")
    try:
        yield live
    finally:
        if live.watcher is not None and live.watcher.gate is not None:
            live.watcher.gate.close()
        thread.join(60)
        live.close()
    assert "error" not in outcome and outcome["result"].success


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def _ws_url(live: LiveView) -> str:
    assert live.url is not None
    return live.url.replace("http://", "ws://") + "/view/ws"


def _next(ws: Any, method: str) -> dict[str, Any]:
    for _ in range(1000):
        message = json.loads(ws.recv(timeout=10))
        if message.get("method") == method:
            params: dict[str, Any] = message["params"]
            return params
    raise AssertionError(f"no {method} came")


def test_the_websocket_sends_a_frame_then_deltas_and_takes_controls(live_run: LiveView) -> None:
    assert live_run.url is not None
    status, page = _get(live_run.url + "/")
    assert status == 200
    assert "<canvas id=\"tiles\"" in page and "/view/static/main.js" in page
    assert _get(live_run.url + "/view/static/main.js")[0] == 200
    with pytest.raises(InvalidStatus):  # a browser page from elsewhere is refused
        connect(_ws_url(live_run), origin="http://evil.example", open_timeout=10)  # type: ignore[arg-type]
    with connect(_ws_url(live_run), open_timeout=10) as ws:
        frame = _next(ws, "view.frame")
        assert frame["state"] == "paused" and frame["palette"] == list(TILE_COLOURS)
        for text, code in (("not json", -32700), ("[1]", -32600),
                           ('{"jsonrpc": "2.0", "id": 1, "method": "session_join"}', -32601),
                           ('{"jsonrpc": "2.0", "id": 2, "method": "view.control",'
                            ' "params": {"value": 1}}', -32602),
                           ("x" * 5000, -32600)):
            ws.send(text)
            answer = json.loads(ws.recv(timeout=10))
            while "method" in answer:  # a delta on its way; the answer follows
                answer = json.loads(ws.recv(timeout=10))
            assert answer["error"]["code"] == code
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "view.control",
                            "params": {"action": "start"}}))
        deltas: list[dict[str, Any]] = []
        answered = None
        while True:
            message = json.loads(ws.recv(timeout=20))
            if message.get("id") == 7:
                answered = message["result"]
            elif message.get("method") == "view.delta":
                deltas.append(message["params"])
                if message["params"]["state"] == "finished":
                    break
        assert answered is not None and answered["success"] and answered["state"] == "running"
        seqs = [d["seq"] for d in deltas]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # Each delta follows the one before (or the frame): reads where nothing moved
        # while the run was held are never a delta's base, so the page sees no gap
        # and never asks for the whole picture again.
        drawn = frame["seq"]
        for delta in deltas:
            if delta["seq"] <= drawn:
                continue  # older than the frame: the page skips it
            assert delta["base"] in (None, drawn), (delta["seq"], delta["base"], drawn)
            drawn = delta["seq"]
        canvas = np.zeros((SMALL["grid_size"],) * 2, dtype=np.uint8)
        for delta in deltas:
            for rect in delta["canvas"]:
                block = np.frombuffer(base64.b64decode(rect["data"]), dtype=np.uint8)
                canvas[rect["y"]:rect["y"] + rect["h"], rect["x"]:rect["x"] + rect["w"]] = \
                    block.reshape(rect["h"], rect["w"])
            # never the whole canvas once the first picture is there
            if delta["base"] is not None:
                assert sum(r["w"] * r["h"] for r in delta["canvas"]) <= canvas.size
        assert deltas[-1]["progress"] == 100
        watcher = live_run.watcher
        assert watcher is not None
        final = watcher.frame()
        assert final["state"] == "finished"
        assert watcher._current is not None and watcher._current.canvas is not None
        assert np.array_equal(canvas, watcher._current.canvas)
        # the agent rows, rebuilt from the frame and the deltas (rows that changed, and
        # the mailbox depths sent apart), are the final frame's
        rows = {a["id"]: dict(a) for a in frame["agents"]}
        for delta in deltas:
            for row in delta["agents"]:
                rows[row["id"]] = dict(row)
            for gone in delta["agents_removed"]:
                rows.pop(gone, None)
            for agent_id, depth in delta["mailboxes"].items():
                assert set(delta["mailboxes"]).isdisjoint(r["id"] for r in delta["agents"])
                rows[agent_id]["mailbox"] = depth
        assert rows == {a["id"]: a for a in final["agents"]}


def test_a_read_where_nothing_moved_is_never_a_deltas_base(live_run: LiveView) -> None:
    watcher = live_run.watcher
    assert watcher is not None
    told: list[dict[str, Any]] = []
    stop = watcher.subscribe(told.append)
    try:
        for _ in range(200):  # step by events until the world has a session to read
            if watcher._current is not None:
                break
            watcher.control("step_event", 1)
            watcher.wait_reads(watcher.reads + 1, timeout=1)
        assert watcher._current is not None
        # Held: the pump reads on and nothing moves; then the run goes to its end.
        assert watcher.wait_reads(watcher.reads + 3, timeout=10)
        assert watcher.control("start")["success"]
        deadline = time.monotonic() + 60
        while not (told and told[-1]["state"] == "finished"):
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.05)
    finally:
        stop()
    # Every delta follows the one told before it: the reads where nothing moved were
    # no delta's base (when they were, every page saw a gap and asked for a frame).
    for before, delta in itertools.pairwise(told):
        assert delta["base"] in (None, before["seq"]), (before["seq"], delta)
    assert any(d["base"] is not None for d in told)


def test_a_deterministic_runs_gateway_takes_no_agents(live_run: LiveView) -> None:
    assert live_run.url is not None
    with connect(live_run.url.replace("http://", "ws://") + "/a2a", open_timeout=10) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session_join",
                            "params": {"session_id": "x", "agent_name": "B1"}}))
        answer = json.loads(ws.recv(timeout=10))
    assert answer["error"]["data"]["reason"] == "no_agents"
    assert "deterministic run" in answer["error"]["message"]
    watcher = live_run.watcher
    assert watcher is not None
    watcher.control("start")


def _cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "barnraise.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_run_view_prints_the_url_serves_the_page_and_stops_on_sigint() -> None:
    process = _cli("run", "kernel_build", "--view", "--port", "0", "--wait", "0",
                   *(f"--param={k}={v}" for k, v in SMALL.items()))
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        html = _get(url)[1]
        assert "barnraise" in html
        for line in process.stderr:  # the run ends; the page stays up
            if "stays up" in line:
                break
        with connect(url.replace("http://", "ws://") + "view/ws", open_timeout=10) as ws:
            frame = _next(ws, "view.frame")
            assert frame["state"] == "finished" and frame["progress"] == 100
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        assert process.returncode == 0
        assert "100" in out
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def _lines_until(stream: Any, needle: str) -> list[str]:
    """Lines of ``stream`` up to the first holding ``needle`` (the caller's communicate
    timeout bounds the wait: the process ends, and the stream with it)."""
    seen = []
    for line in stream:
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"no line with {needle!r} in {seen}")


def test_run_view_waits_for_its_first_viewer_before_the_run_starts() -> None:
    """A default kernel_build ended in 0.08 s, before a browser opened on the URL had
    connected: the run now starts when a page watches (or --wait runs out)."""
    process = _cli("run", "kernel_build", "--view", "--port", "0", "--wait", "60",
                   *(f"--param={k}={v}" for k, v in SMALL.items()))
    timer = threading.Timer(90, process.kill)  # a hung process must not hang the suite
    timer.start()
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().strip()
        waiting = _lines_until(process.stderr, "waiting up to 60 s for a viewer")
        assert url in waiting[-1] and "--wait 0" in waiting[-1]
        with connect(url.replace("http://", "ws://") + "view/ws", open_timeout=10) as ws:
            _next(ws, "view.frame")
            # the run started only now, after this page came; then it ends, the page stays
            after = _lines_until(process.stderr, "stays up")
            assert "a viewer is watching: the run starts" in after[0], after
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        assert process.returncode == 0 and "succeeded" in out
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_run_view_starts_anyway_when_no_viewer_comes_in_time() -> None:
    process = _cli("run", "kernel_build", "--view", "--port", "0", "--wait", "0.5",
                   *(f"--param={k}={v}" for k, v in SMALL.items()))
    timer = threading.Timer(90, process.kill)
    timer.start()
    try:
        assert process.stderr is not None
        lines = _lines_until(process.stderr, "stays up")
        text = "".join(lines)
        assert "waiting up to 0.5 s for a viewer" in text
        assert "no viewer after 0.5 s: the run starts anyway" in text
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_a_paused_realtime_run_waits_for_start_from_its_page() -> None:
    process = _cli("run", "kernel_build", "--view", "--port", "0", "--paused",
                   "--mode", "realtime", "--time-scale", "20",
                   *(f"--param={k}={v}" for k, v in SMALL.items()))
    try:
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().strip()
        with connect(url.replace("http://", "ws://") + "view/ws", open_timeout=10) as ws:
            frame = _next(ws, "view.frame")
            assert frame["state"] == "paused" and frame["mode"] == "realtime"
            assert frame["controls"] is True and frame["steps"] is True
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "view.control",
                                "params": {"action": "start"}}))
            for _ in range(2000):
                message = json.loads(ws.recv(timeout=30))
                if message.get("method") == "view.delta" \
                        and message["params"]["state"] == "finished":
                    break
            assert message["params"]["progress"] == 100
        for line in process.stderr:
            if "stays up" in line:
                break
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
        assert process.returncode == 0, out
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_ctrl_c_on_a_held_run_stops_it_and_says_so() -> None:
    process = _cli("run", "kernel_build", "--view", "--port", "0", "--paused")
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        with connect(url.replace("http://", "ws://") + "view/ws", open_timeout=10) as ws:
            assert _next(ws, "view.frame")["state"] == "paused"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 130
        assert "interrupted before the run ended" in err and "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_view_options_are_checked_before_the_run() -> None:
    for args, words in ((("--port", "0"), "--port, --paused, --wait and --allow-host go with "
                         "--view"),
                        (("--wait", "5"), "go with --view"),
                        (("--view", "--wait", "-1"), "--wait must be 0..86400"),
                        (("--allow-host", "barn.example"), "go with --view"),
                        (("--view", "--port", "0", "--allow-host", "http://barn.example"),
                         "--allow-host 'http://barn.example'"),
                        (("--view", "--port", "70000"), "--port must be")):
        process = _cli("run", "kernel_build", *args)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 2, err
        assert words in err


def test_serve_shows_the_page_of_its_realtime_world() -> None:
    process = _cli("serve", "--port", "0", "--scenario", "kernel_build", "--time-scale", "20",
                   *(f"--param={k}={v}" for k, v in SMALL.items()))
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert "barnraise" in _get(url + "/")[1]
        with connect(url.replace("http://", "ws://") + "/view/ws", open_timeout=10) as ws:
            _next(ws, "view.frame")
            for _ in range(500):  # the realtime world builds; deltas bring its canvas
                delta = _next(ws, "view.delta")
                if delta["grid"] is not None and delta["progress"]:
                    break
            assert delta["grid"] == [SMALL["grid_size"]] * 2 and delta["mode"] == "realtime"
            assert delta["controls"] is True and delta["steps"] is True
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)



def _watched_realtime(drive: Callable[[Simulation, Watcher], None], *, time_scale: float,
                      **watcher: Any) -> tuple[Any, dict[str, Any]]:
    """A realtime kernel_build with a Watcher, and ``drive(simu, watcher)`` on a thread of
    its own; (the run's result, what went wrong). An exception in ``drive`` is kept and
    the run let go, so the run ends either way."""
    seen: dict[str, Any] = {}

    def watch(simu: Simulation) -> Any:
        w = Watcher(simu, **watcher)

        def go() -> None:
            try:
                drive(simu, w)
            except BaseException as exc:
                seen["error"] = exc
                w.control("start")

        thread = threading.Thread(target=go, daemon=True)
        thread.start()

        def ended() -> None:
            thread.join(60)
            w.ended()
            w.close()

        return ended

    result = run_request(check_request("kernel_build", seed=4, mode="realtime",
                                       time_scale=time_scale, **SMALL), watch=watch)
    return result, seen


def test_a_held_realtime_run_stands_still_and_then_ends_as_it_would() -> None:
    """Pause a realtime kernel_build half way: clock, canvas and trace stand still while
    the view reads on; after a resume (and a change of speed) the run succeeds."""
    held: list[Any] = []

    def drive(simu: Simulation, watcher: Watcher) -> None:
        for _ in range(400):  # until some tiles are down
            watcher.wait_reads(watcher.reads + 1, timeout=10)
            current = watcher._current
            if current is not None and current.canvas is not None and current.canvas.any():
                break
        assert watcher.control("pause")["state"] == "paused"
        assert watcher.wait_reads(watcher.reads + 2, timeout=10)
        held.append((simu.now, len(simu.dispatcher.trace), watcher._current))
        assert watcher.wait_reads(watcher.reads + 4, timeout=10)
        held.append((simu.now, len(simu.dispatcher.trace), watcher._current))
        watcher.control("speed", 40)
        watcher.control("start")

    # At a time scale of 5 the build lasts about a wall second: the pause, asked at the
    # first read that sees tiles, lands well before its end even when reads come late
    # on a busy machine (at 20 the whole build took about four reads).
    result, seen = _watched_realtime(drive, time_scale=5.0, rate=20)
    assert "error" not in seen, seen.get("error")
    (t0, n0, snap0), (t1, n1, snap1) = held
    assert t0 == t1 and n0 == n1
    assert snap0 is not None and snap1 is not None and snap0.canvas is not None
    assert snap1.canvas is not None and np.array_equal(snap0.canvas, snap1.canvas)
    assert 0 < snap0.completion < 100
    assert result.success, result.summary


def test_barnraise_view_serves_a_stored_run_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    from barnraise.runner import open_store

    path = tmp_path / "run.db"
    request = check_request("kernel_build", seed=3, **SMALL)
    assert run_request(request, store=open_store(request, path)).success
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello")
    for bad in (str(not_a_store), str(tmp_path / "missing.db")):
        process = _cli("view", bad, "--port", "0")
        _, err = process.communicate(timeout=60)
        assert process.returncode == 2 and "barnraise: error" in err, err
    process = _cli("view", str(path), "--port", "0")
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "barnraise" in _get(url)[1]
        with connect(url.replace("http://", "ws://") + "view/ws", open_timeout=10) as ws:
            frame = _next(ws, "view.frame")
            assert frame["state"] == "stored" and frame["grid"] == [SMALL["grid_size"]] * 2
            assert frame["scrub"]["at"] == frame["scrub"]["end"] > 0
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "view.control",
                                "params": {"action": "seek", "value": "soon"}}))
            answer = json.loads(ws.recv(timeout=10))
            assert answer["result"]["error"] == "invalid_value"
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "view.control",
                                "params": {"action": "seek", "value": 0}}))
            again = _next(ws, "view.frame")
            assert again["t"] == 0 and again["seq"] > frame["seq"]
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def _hosts_served(url: str, port: str) -> dict[str, int]:
    """The status of GET / for each Host header: the bound address, an allowed name, a
    foreign one."""
    found = {}
    for host in (f"127.0.0.1:{port}", "barn.example", f"evil.example:{port}"):
        request = urllib.request.Request(url, headers={"Host": host})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                found[host] = response.status
        except urllib.error.HTTPError as exc:
            found[host] = exc.code
    return found


def test_allow_host_goes_with_run_view_and_view(tmp_path: Path) -> None:
    """serve had --allow-host; run --view and view serve HTTP behind the same rule
    (a view behind a proxy answered 421 to the proxy's name)."""
    from barnraise.runner import open_store

    path = tmp_path / "run.db"
    request = check_request("kernel_build", seed=3, **SMALL)
    assert run_request(request, store=open_store(request, path)).success
    process = _cli("view", str(path), "--port", "0", "--allow-host", "a b")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2 and out == "" and "--allow-host 'a b'" in err, err
    assert len(err.strip().splitlines()) == 1
    for command in (("view", str(path), "--port", "0", "--allow-host", "barn.example"),
                    ("run", "kernel_build", "--view", "--port", "0", "--allow-host",
                     "barn.example", *(f"--param={k}={v}" for k, v in SMALL.items()))):
        process = _cli(*command)
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), (command, process.poll())
            port = url.rstrip("/").rsplit(":", 1)[1]
            assert _hosts_served(url, port) == {f"127.0.0.1:{port}": 200, "barn.example": 200,
                                                f"evil.example:{port}": 421}, command
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=10)


def _stored(path: Path, every: int) -> Path:
    from barnraise.runner import open_store

    request = check_request("kernel_build", seed=7, **SMALL)
    assert run_request(request, store=open_store(request, path, snapshot_every=every)).success
    return path


def _canvas(frame: dict[str, Any]) -> np.ndarray[Any, Any]:
    height, width = frame["grid"]
    canvas = np.zeros((height, width), dtype=np.uint8)
    for part in frame["canvas"]:
        block = np.frombuffer(base64.b64decode(part["data"]), dtype=np.uint8)
        canvas[part["y"]:part["y"] + part["h"], part["x"]:part["x"] + part["w"]] = \
            block.reshape(part["h"], part["w"])
    return canvas


def test_the_scrubber_re_executes_a_stored_run_to_any_time(tmp_path: Path) -> None:
    from barnraise import open_run
    from barnraise.view.stored import ReplaySource, open_source

    run = open_run(_stored(tmp_path / "a.db", 500))
    answers = [r.content_obj() for r in run.records()
               if r.sender == "regions" and r.type == "coordination_response"]
    assert answers and all(a["success"] for a in answers)  # so the log says what was written
    snapshots = [t for _, t in run.snapshots()]
    times = sorted({r.t for r in run.records()})
    end = max(times[-1], snapshots[-1])
    # times between snapshots, where no snapshot can show the world
    chosen = [t for t in times[len(times) // 8::len(times) // 6] if t not in snapshots][:5]
    assert len(chosen) >= 4
    source = open_source(run)
    assert isinstance(source, ReplaySource)
    size = SMALL["grid_size"]
    try:
        first = source.frame()  # the end: the finished run
        final = run.canvas()
        assert final is not None and np.array_equal(_canvas(first), final)
        assert first["progress"] == 100 and first["scrub"]["exact"]
        assert first["scrub"]["end"] == end
        seqs = [first["seq"]]
        # backwards from the end (a fresh re-execution), forwards, back again, to the end
        for t in [chosen[1], *chosen[2:], chosen[0], end]:
            assert source.control("seek", t)["success"]
            frame = source.frame()
            assert source.problem is None, source.problem
            assert frame["t"] == t and frame["scrub"]["shown"] == t
            assert np.array_equal(_canvas(frame), canvas_from_log(run, t, size)), t
            assert frame["board"]["total"] > 0 and frame["agents"]
            assert all(e["t"] <= round(t, 6) for e in frame["events"])  # times are rounded
            assert len([e for e in frame["events"]]) == min(
                2000, len([e for e in run.entries() if e["kind"] == "event" and e["time"] <= t]))
            seqs.append(frame["seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # mid-run the page sees agents at work and an open board, which no snapshot keeps
        done = sorted(e["time"] for e in run.entries("task_completed"))
        source.control("seek", done[len(done) // 2])
        frame = source.frame()
        assert any(a["status"] == "working" for a in frame["agents"])
        assert 0 < frame["board"]["counts"].get("completed", 0) < frame["board"]["total"]
    finally:
        source.close()
    assert not [t for t in threading.enumerate() if t.name == "barnraise-scrub"]


def test_the_scrubber_shows_snapshots_when_the_log_is_not_what_the_run_makes(
        tmp_path: Path) -> None:
    import sqlite3

    from barnraise import open_run
    from barnraise.view.stored import open_source

    path = _stored(tmp_path / "a.db", 300)
    with sqlite3.connect(path) as db:  # a record the re-execution will not make
        db.execute("UPDATE events SET content = ? WHERE seq = 40", (b'{"forged": true}',))
    db.close()
    run = open_run(path)
    source = open_source(run)
    try:
        frame = source.frame()
        assert source.problem is not None and "record 40" in source.problem
        assert frame["scrub"]["problem"] == source.problem and not frame["scrub"].get("exact")
        final = run.canvas()
        assert final is not None and np.array_equal(_canvas(frame), final)
    finally:
        source.close()


def test_a_realtime_run_steps_by_simulated_seconds_and_by_events() -> None:
    """A held realtime kernel_build is stepped: by simulated time (the clock moves by about
    the step and stands again), by events (at least that many more are heard), then let
    go to its end, which it reaches as it would."""
    moved: list[float] = []
    heard: list[int] = []

    def drive(simu: Simulation, watcher: Watcher) -> None:
        realtime = simu.dispatcher

        def held(timeout: float = 20.0) -> bool:
            for _ in range(int(timeout / 0.01)):
                if realtime.holding and watcher._step is None:
                    return True
                watcher.wait_reads(watcher.reads + 1, timeout=0.01)
            return False

        assert held()
        for _ in range(3):
            start = simu.now
            answer = watcher.control("step_time", 0.5)
            assert answer["success"] and answer["state"] == "running"
            assert held()
            moved.append(simu.now - start)
            frozen = simu.now
            assert watcher.wait_reads(watcher.reads + 2, timeout=10)
            assert simu.now == frozen  # held again: the clock stands
        for _ in range(3):
            before = watcher._event_count + len(watcher._events)
            assert watcher.control("step_event", 2)["success"]
            assert held()
            heard.append(watcher._event_count + len(watcher._events) - before)
        assert watcher.control("start")["state"] == "running"

    result, seen = _watched_realtime(drive, time_scale=5.0, rate=20, paused=True)
    assert "error" not in seen, seen.get("error")
    # let go at now, held once now passed now + 0.5 (polled every 50 ms of wall time; a
    # loaded machine may be late by a few hundred ms: 2 simulated s is 0.4 wall s here)
    assert len(moved) == 3 and all(0.5 <= m < 0.5 + 2.0 for m in moved), moved
    assert len(heard) == 3 and all(n >= 2 for n in heard), heard
    assert result.success, result.summary
