"""Issue 23, finding 2 and parts of 10 and 11: the operator of a served world, the view's
controls, the clock's one bound, the CLI's ports, /stats, and seeks off the event loop.

Each test reproduces what an attacker did (an anonymous pause, a speed of 1e308, a port
of 99999, a backward seek that froze the server) and states what holds now. Servers
listen on 127.0.0.1 only; a peer on another host is played by a loopback request
carrying ``X-Forwarded-For`` (uvicorn trusts it from 127.0.0.1 alone, as from a
reverse proxy on the same machine).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

import barnraise
from barnraise.actors.world import Simulation
from barnraise.cli import exposure_warning
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.operator import ENV, Operator, is_loopback, operator_token
from barnraise.gateway.server import Gateway, GatewayServer
from barnraise.sim.clock import MAX_TIME_SCALE, MIN_TIME_SCALE, WallClock, check_time_scale
from barnraise.sim.dispatch import RealtimeDispatcher
from barnraise.view.server import ViewSurface
from barnraise.view.stored import ReplaySource, StoredServer
from barnraise.view.watch import Watcher

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "operator-token-for-tests-0123456789"
SMALL = {"grid_size": 60, "block": 30, "builders": 2, "testers": 1}
REMOTE = {"X-Forwarded-For": "203.0.113.5"}  # a peer on another host (TEST-NET-3)
OUT_OF_BOUND = (float("inf"), float("-inf"), float("nan"), 1e308, 1e-320, 0, -1,
                MAX_TIME_SCALE * 1.5, MIN_TIME_SCALE / 2, True, "fast", None)


# -- the clock's one bound -----------------------------------------------------------------

def test_the_clock_takes_only_a_scale_within_the_one_bound() -> None:
    assert check_time_scale(MIN_TIME_SCALE) == MIN_TIME_SCALE
    assert check_time_scale(MAX_TIME_SCALE) == MAX_TIME_SCALE
    clock = WallClock(2.0)
    for bad in OUT_OF_BOUND:
        with pytest.raises(ValueError, match=r"time_scale must be a number from 0\.001 to 1e"):
            clock.set_scale(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="time_scale"):
            WallClock(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="time_scale"):
            HostedWorld(time_scale=bad)  # type: ignore[arg-type]
    assert clock.time_scale == 2.0 and math.isfinite(clock.now)  # nothing changed


def test_the_views_speed_control_refuses_what_would_make_the_clock_not_finite() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=20.0) as simu:
        watcher = Watcher(simu)
        try:
            dispatcher = simu.dispatcher
            assert isinstance(dispatcher, RealtimeDispatcher)
            for bad in OUT_OF_BOUND:
                refused = watcher.control("speed", bad)
                assert refused["success"] is False and refused["error"] == "invalid_value"
                assert "0.001 to 1e+06" in refused["message"]
            assert dispatcher.clock.time_scale == 20.0 and math.isfinite(simu.now)
            assert watcher.control("speed", MAX_TIME_SCALE)["speed"] == MAX_TIME_SCALE
        finally:
            watcher.close()
    with Simulation(seed=1) as simu:  # deterministic: the same bound, null is flat out
        watcher = Watcher(simu, paused=True)
        try:
            assert watcher.gate is not None
            for bad in (1e308, float("inf"), 1e-320):
                assert watcher.control("speed", bad)["error"] == "invalid_value"
            assert watcher.gate.speed is None
            assert watcher.control("speed", 5)["speed"] == 5.0
            assert watcher.control("speed", None)["speed"] is None
        finally:
            watcher.close()


# -- the operator --------------------------------------------------------------------------

def test_operator_rules() -> None:
    for host in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in (None, "", "0.0.0.0", "::", "10.0.0.1", "203.0.113.5", "evil.example",
                 "localhost.evil.example"):
        assert not is_loopback(host), host
    served = Operator(TOKEN)
    assert served.valid(TOKEN) and not served.valid(TOKEN + "x") and not served.valid(None)
    assert not served.may_control("127.0.0.1", None)  # a served world: the token, always
    assert served.may_control("203.0.113.5", TOKEN)
    assert served.may_watch("127.0.0.1") and not served.may_watch("203.0.113.5")
    assert served.may_watch("203.0.113.5", TOKEN)
    assert served.may_see_details("203.0.113.5", f"Bearer {TOKEN}")
    assert not served.may_see_details("127.0.0.1", None)
    assert not served.may_see_details("127.0.0.1", f"Basic {TOKEN}")
    local = Operator()  # a run-local view: its loopback peers, and nobody else
    assert local.may_control("127.0.0.1", None) and not local.may_control("10.0.0.1", "x")
    assert not local.valid("")
    assert operator_token({}) != operator_token({})
    assert operator_token({ENV: TOKEN}) == TOKEN
    for bad in ("", "short", "has space in it and more", "x" * 300, "é" * 20):
        with pytest.raises(ValueError, match=ENV):
            operator_token({ENV: bad})
    assert exposure_warning("127.0.0.1") is None and exposure_warning("::1") is None
    warning = exposure_warning("0.0.0.0")
    assert warning is not None and "\n" not in warning and "operator token" in warning


@contextlib.contextmanager
def served_view(token: str | None = TOKEN) -> Iterator[tuple[GatewayServer, HostedWorld]]:
    """What ``barnraise serve`` runs, in process: a hosted realtime world, its page and
    view socket, with an operator token (None: a run-local view's rules)."""
    world = HostedWorld(time_scale=20.0, grid_size=60)
    watcher = Watcher(world.simulation, lazy=True)
    try:
        gateway = Gateway(world)
        if token is not None:
            gateway.operator = Operator(token)
        ViewSurface(watcher, gateway)
        server = GatewayServer(gateway, "127.0.0.1", 0)
        server.start()
        try:
            yield server, world
        finally:
            server.stop()
    finally:
        watcher.close()
        world.close()


def _ws(server: GatewayServer, headers: dict[str, str] | None = None) -> ClientConnection:
    return connect(server.url.replace("http://", "ws://") + "/view/ws", open_timeout=10,
                   additional_headers=headers, max_size=None)


def _ask(ws: ClientConnection, method: str, params: dict[str, Any], rid: int) -> dict[str, Any]:
    """Send one request; its answer (frames and deltas on the way are skipped)."""
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
    for _ in range(1000):
        message = json.loads(ws.recv(timeout=10))
        if message.get("id") == rid:
            return dict(message)
    raise AssertionError(f"no answer to {rid}")


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_an_anonymous_control_is_forbidden_and_changes_nothing() -> None:
    with served_view() as (server, world):
        dispatcher = world.simulation.dispatcher
        assert isinstance(dispatcher, RealtimeDispatcher)
        member = barnraise.connect(server.url, agent_name="Mason")
        try:
            with _ws(server) as ws:  # loopback: anyone may watch
                assert json.loads(ws.recv(timeout=10))["method"] == "view.frame"
                for rid, params in enumerate(({"action": "pause"},
                                              {"action": "pause", "token": "guess"},
                                              {"action": "pause", "token": TOKEN[:-1]},
                                              {"action": "pause", "token": 12},
                                              {"action": "speed", "value": 1e308}), 1):
                    answer = _ask(ws, "view.control", params, rid)
                    assert answer["result"]["success"] is False, answer
                    assert answer["result"]["error"] == "forbidden"
                    assert "operator" in answer["result"]["message"]
                assert not dispatcher.holding and dispatcher.clock.time_scale == 20.0
                # the world goes on: a member's call is answered at once (not no_reply)
                region = {"x": 0, "y": 0, "width": 3, "height": 3}
                assert member.call("region_claim", region=region)["success"]
                # the operator's token drives it; a speed past the bound is refused
                refused = _ask(ws, "view.control",
                               {"action": "speed", "value": 1e308, "token": TOKEN}, 10)
                assert refused["result"]["error"] == "invalid_value"
                assert dispatcher.clock.time_scale == 20.0 and math.isfinite(world.simulation.now)
                assert _get(server.url + "/stats")[0] == 200
                paused = _ask(ws, "view.control", {"action": "pause", "token": TOKEN}, 11)
                assert paused["result"]["success"] and paused["result"]["state"] == "paused"
                assert dispatcher.holding
                going = _ask(ws, "view.control", {"action": "start", "token": TOKEN}, 12)
                assert going["result"]["state"] == "running" and not dispatcher.holding
                # asking for the whole picture again is watching, not a control
                assert _ask(ws, "view.control", {"action": "frame"}, 13)["result"]["frame"]
            counters = _get(server.url + "/stats", {"Authorization": f"Bearer {TOKEN}"})[1]
            assert counters["counters"]["view_forbidden"] == 5
        finally:
            member.close()


def test_a_frame_nested_too_deep_is_answered_not_raised() -> None:
    """The view socket decodes with the gateway's one decoder: a frame nested past the
    depth limit (under the control size limit) answers -32600 and the socket goes on,
    where msgspec's own RecursionError used to escape the handler and close it."""
    with served_view() as (server, _world), _ws(server) as ws:
        assert json.loads(ws.recv(timeout=10))["method"] == "view.frame"
        for frame, code in (("[" * 2000 + "]" * 2000, -32600), ("not json", -32700)):
            ws.send(frame)
            for _ in range(1000):
                message = json.loads(ws.recv(timeout=10))
                if "error" in message:
                    break
            assert message["error"]["code"] == code, message
        answer = _ask(ws, "view.control", {"action": "pause"}, 5)  # still serving
        assert answer["result"]["error"] == "forbidden"


def test_watching_from_another_host_needs_the_token() -> None:
    with served_view() as (server, _world), _ws(server, REMOTE) as ws:
        # not watching: no frame comes; a request is answered forbidden, first thing
        answer = _ask(ws, "view.control", {"action": "frame"}, 1)
        assert answer["result"]["error"] == "forbidden"
        assert _ask(ws, "view.control", {"action": "pause", "token": TOKEN}, 2)[
            "result"]["error"] == "forbidden"  # not before it watches
        assert _ask(ws, "view.auth", {"token": "guess"}, 3)["result"]["error"] == "forbidden"
        assert _ask(ws, "view.auth", {}, 4)["result"]["error"] == "forbidden"
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "view.auth",
                            "params": {"token": TOKEN}}))
        got = [json.loads(ws.recv(timeout=10)) for _ in range(2)]
        assert {"id": 5, "jsonrpc": "2.0", "result": {"success": True}} in got
        assert any(m.get("method") == "view.frame" for m in got), got
        assert _ask(ws, "view.control", {"action": "pause", "token": TOKEN}, 6)[
            "result"]["state"] == "paused"
        assert _ask(ws, "view.control", {"action": "start", "token": TOKEN}, 7)[
            "result"]["state"] == "running"


def test_a_run_local_view_takes_controls_from_loopback_only() -> None:
    with served_view(token=None) as (server, world):
        dispatcher = world.simulation.dispatcher
        assert isinstance(dispatcher, RealtimeDispatcher)
        with _ws(server) as ws:  # the user's own run, on the user's machine: no ceremony
            assert json.loads(ws.recv(timeout=10))["method"] == "view.frame"
            assert _ask(ws, "view.control", {"action": "pause"}, 1)["result"]["success"]
            assert _ask(ws, "view.control", {"action": "start"}, 2)["result"]["success"]
        with _ws(server, REMOTE) as ws:  # another host: nothing, not even with a guess
            assert _ask(ws, "view.auth", {"token": "x" * 20}, 1)["result"]["error"] == "forbidden"
            assert _ask(ws, "view.control", {"action": "pause"}, 2)["result"]["error"] == \
                "forbidden"
        assert not dispatcher.holding
        # /stats in full on loopback, counts from elsewhere
        assert isinstance(_get(server.url + "/stats")[1]["sessions"], list)
        assert isinstance(_get(server.url + "/stats", REMOTE)[1]["sessions"], int)


def test_stats_without_the_token_shows_counts_only() -> None:
    with served_view() as (server, world):
        secret_name = "Private Works 7f3a"
        host = world.simulation.client("someone")
        made = host.call("session_create", session_name=secret_name, grid_size=20)
        assert made["success"]
        member = barnraise.connect(server.url, agent_name="Mason Q")
        try:
            for headers in ({}, REMOTE, {"Authorization": "Bearer wrong"},
                            {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
                status, counts = _get(server.url + "/stats", headers)
                assert status == 200
                text = json.dumps(counts)
                assert counts["sessions"] == 2 and counts["agents"] == 1, counts
                for private in (secret_name, made["session_id"], "Mason Q", "barnraise"):
                    assert private not in text, (private, headers)
                # the one session outsiders are offered to join stays public
                assert counts["default_session"] == world.default_session
            status, full = _get(server.url + "/stats", {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200
            names = {s["session_name"] for s in full["sessions"]}
            assert names == {secret_name, "barnraise"}
        finally:
            member.close()


# -- seeks off the event loop --------------------------------------------------------------

def test_a_seek_does_not_hold_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    assert barnraise.run("kernel_build", seed=3, store=path, **SMALL).success
    run = barnraise.open_run(path)
    served = StoredServer(run, port=0)
    source = served.source
    assert isinstance(source, ReplaySource)
    folding, release = threading.Event(), threading.Event()
    replayed = source._replayed

    def slow(at: float) -> dict[str, Any] | None:  # a re-execution that takes its time
        folding.set()
        assert release.wait(30)
        return replayed(at)

    source._replayed = slow  # type: ignore[method-assign]
    try:
        url = served.server.start()
        with connect(url.replace("http://", "ws://") + "/view/ws", open_timeout=10) as ws:
            assert folding.wait(10)  # the page's first frame is being built
            # meanwhile the loop answers: a seek back, another page's request, /healthz
            seek = _ask(ws, "view.control", {"action": "seek", "value": 1.0}, 1)
            assert seek["result"]["success"] and seek["result"]["at"] == 1.0
            assert not release.is_set()
            assert _get(url + "/healthz") == (200, {"ok": True})
            with connect(url.replace("http://", "ws://") + "/view/ws", open_timeout=10) as other:
                assert _ask(other, "view.control", {"action": "fly"}, 2)["result"]["error"] \
                    == "unknown_action"
            assert not release.is_set()  # all of it answered while the fold was held
            release.set()
            frames = []
            while not frames or frames[-1]["t"] != 1.0:
                message = json.loads(ws.recv(timeout=30))
                if message.get("method") == "view.frame":
                    frames.append(message["params"])
            assert frames[-1]["scrub"]["at"] == 1.0
    finally:
        release.set()
        served.close()


# -- the command line ----------------------------------------------------------------------

def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "barnraise.cli", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=120, check=False)


def _one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("barnraise: error:"), done.stderr
    assert "Traceback" not in done.stderr and "role_token" not in done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_refused_before_anything(port: str) -> None:
    _one_line(_cli("serve", "--port", port), "--port must be from 0 to 65535")
    _one_line(_cli("view", "no-such.db", "--port", port), "--port must be from 0 to 65535")
    _one_line(_cli("run", "kernel_build", "--view", "--port", port), "--port must be")


@pytest.mark.parametrize("scale", ["inf", "1e308", "1e-320", "nan", "0", "-5", "2e6"])
def test_serve_and_mcp_take_the_runs_time_scale_bound(scale: str) -> None:
    _one_line(_cli("serve", "--port", "0", "--time-scale", scale),
              "--time-scale must be a number from 0.001 to 1e+06")
    _one_line(_cli("mcp", "--time-scale", scale), "--time-scale must be")
    _one_line(_cli("run", "kernel_build", "--mode", "realtime", "--time-scale", scale),
              "time_scale must be")


def test_a_port_in_use_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    assert barnraise.run("kernel_build", seed=1, store=path, **SMALL).success
    before = path.read_bytes()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        _one_line(_cli("serve", "--port", port), f"--port {port}", f"127.0.0.1:{port}")
        _one_line(_cli("serve", "--port", port, "--store", str(tmp_path / "new.db")),
                  f"127.0.0.1:{port}")
        assert not (tmp_path / "new.db").exists()  # nothing was started
        _one_line(_cli("view", str(path), "--port", port), f"127.0.0.1:{port}")
        _one_line(_cli("run", "kernel_build", "--view", "--port", port), f"127.0.0.1:{port}")
    assert path.read_bytes() == before
    # an address that is not this machine's: the same, before anything
    _one_line(_cli("serve", "--host", "192.0.2.1", "--port", "0"), "192.0.2.1")


def test_serve_prints_the_operator_token_and_page_and_takes_it_from_the_environment(
        ) -> None:
    for env, expected in (({}, None), ({ENV: TOKEN}, TOKEN)):
        process = subprocess.Popen(
            [sys.executable, "-m", "barnraise.cli", "serve", "--port", "0"], cwd=ROOT,
            env={**{k: v for k, v in os.environ.items() if k != ENV}, "PYTHONPATH": str(ROOT),
                 **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stderr is not None
            lines: list[str] = []
            for line in process.stderr:  # the page's URL is the last line it prints
                lines.append(line)
                if "#operator=" in line:
                    break
            url = process.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            [token_line] = [x for x in lines if "operator_token=" in x]
            token = token_line.strip().split("operator_token=", 1)[1]
            assert expected in (None, token) and len(token) >= 16
            assert lines[-1].strip().endswith(f"{url}/#operator={token}")
            assert not any("warning" in x for x in lines)  # loopback: nothing to warn of
            assert isinstance(_get(url + "/stats")[1]["sessions"], int)
            full = _get(url + "/stats", {"Authorization": f"Bearer {token}"})[1]
            assert isinstance(full["sessions"], list)
            with connect(url.replace("http://", "ws://") + "/view/ws", open_timeout=10,
                         max_size=None) as ws:  # the served world's page socket
                refused = _ask(ws, "view.control", {"action": "pause"}, 1)["result"]
                assert refused["error"] == "forbidden"
                held = _ask(ws, "view.control", {"action": "pause", "token": token}, 2)
                assert held["result"]["state"] == "paused"
        finally:
            process.terminate()
            process.communicate(timeout=30)
        assert process.returncode == 0
    _one_line(_cli("serve", "--port", "0", env={ENV: "short"}), ENV)


def test_a_port_taken_after_the_check_is_still_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import barnraise.cli as cli

    monkeypatch.setattr(cli, "_check_port_free", lambda host, port: None)  # lost the race
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"barnraise: error: --port {port}: cannot listen on 127.0.0.1:{port}: "
                       "Address already in use"), err
