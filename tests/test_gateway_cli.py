"""`barnraise serve` as a process: one line with its URL, a clean exit on SIGINT and SIGTERM."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import barnraise
from barnraise.actors.world import Simulation
from tests.gateway_support import get_json

#: The operator token the served processes take (from the environment).
OPERATOR = "test-operator-token-0123456789"


def _stats(url: str) -> Any:
    request = urllib.request.Request(url + "/stats",
                                     headers={"Authorization": f"Bearer {OPERATOR}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@contextmanager
def serve(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "barnraise.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BARNRAISE_OPERATOR_TOKEN": OPERATOR})
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(30)
        assert line and line[0].startswith("http://127.0.0.1:"), (line, process.poll())
        yield process, line[0].strip()
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_its_url_and_stops_cleanly_on_a_signal(stop: signal.Signals) -> None:
    with serve("--time-scale", "20") as (process, url):
        assert get_json(url + "/healthz") == {"ok": True}
        client = barnraise.connect(url, agent_name="Visitor")
        assert client.call("region_claim", region={"x": 0, "y": 0, "width": 3,
                                                   "height": 3})["success"]
        process.send_signal(stop)
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert out == ""  # the one line was all
        client.close()


def test_serve_keeps_its_run_in_a_store_and_flushes_it_on_sigterm(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "served.db"
    with serve("--time-scale", "20", "--store", str(path)) as (process, url):
        client = barnraise.connect(url, agent_name="Mason")
        placed = []
        for x in range(3):
            region = {"x": x * 4, "y": 0, "width": 3, "height": 3}
            assert client.call("region_claim", region=region)["success"]
            answer = client.call("builder_place_tiles", region=region, tiles="code")
            assert answer["success"], answer
            placed.append(region)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0
        client.close()
    run = barnraise.open_run(path)
    assert run.status == "finished" and run.summary is not None
    assert run.summary["served"] is True
    claims = [e for e in run.entries(type="region_claimed")]
    assert len(claims) == 3
    assert run.digest() == run.info.trace_digest  # the log is the whole trace
    # a store that holds a run is not overwritten unless asked
    done = subprocess.run([sys.executable, "-m", "barnraise.cli", "serve", "--port", "0",
                           "--store", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_serve_hosts_a_scenario_crew_at_work() -> None:
    with serve("--scenario", "parallel_build", "--time-scale", "50") as (process, url):
        deadline = time.monotonic() + 30
        sessions: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            sessions = _stats(url)["sessions"]  # in full: the operator's token
            if sessions and sessions[0]["agents"] == 3:
                break
            time.sleep(0.05)
        [session] = sessions
        assert session["agents"] == 3  # the scenario's own builders joined
        # The scenario sized its session to its crew; a served one keeps seats for
        # outsiders, who join the crew at work in its open roles (not the granted ones).
        guest = barnraise.connect(url, agent_name="Visitor", role="observer")
        state = guest.call("session_get_state", include=["agents"])
        assert state["success"] and len(state["state"]["agents"]) == 4, state
        with pytest.raises(barnraise.RemoteError, match="permission_denied"):
            barnraise.connect(url, agent_name="Boss", role="architect")
        guest.close()
        # It can also work in the same world, in a session of its own.
        visitor = barnraise.connect(url)
        made = visitor.call("session_create", session_name="Next door", grid_size=50)
        assert made["success"] and visitor.session_id == made["session_id"]
        visitor.close()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 0


def test_bad_requests_exit_2_with_one_line() -> None:
    for args in (["--scenario", "no_such_scenario"], ["--param", "x=1"],
                 ["--scenario", "parallel_build", "--param", "nope=1"]):
        done = subprocess.run([sys.executable, "-m", "barnraise.cli", "serve", "--port", "0",
                               *args], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("barnraise: error:") and done.stdout == ""


def test_importing_barnraise_loads_no_server_package() -> None:
    code = ("import sys, barnraise; print(sorted(m for m in ('starlette', 'uvicorn', 'mcp', "
            "'websockets', 'httpx', 'a2a') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_client_hears_of_arrivals_and_knows_when_a_call_is_answered() -> None:
    # The two hooks the gateway drives Clients with, in process.
    heard = threading.Event()
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        client = simu.client("watcher")
        client.on_arrival(heard.set)
        pending = client.submit("session_create", session_name="S", grid_size=20)
        assert heard.wait(10)
        assert pending.answered()
        assert pending.result(0.0)["success"]
        client.on_arrival(None)
        heard.clear()
        assert client.call("session_get_state")["success"] is False  # not a member
        assert not heard.is_set()
