"""barnraise.show: the view's page served on loopback for a notebook, and stopped again.

Over real sockets, without a browser (tests/test_view.py opens the IFrame in chromium):
what is served for a live Simulation, a stored run and a RunResult, that the page's
controls need the view's own operator token (which only the URL carries), that the
server stops at close(), when the view is collected and with a ``with`` block, leaving
no thread, and that what cannot be shown is refused with nothing left running.
"""

from __future__ import annotations

import gc
import json
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.sync.client import ClientConnection, connect

import barnraise
from barnraise.sim.dispatch import DeterministicDispatcher
from barnraise.sim.store import StoreError
from barnraise.view.inline import InlineView
from barnraise.view.server import STATIC

PARAMS: dict[str, Any] = {"grid_size": 24, "block": 12}
SEED = 1


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("barnraise-")}


def _base(view: InlineView) -> str:
    return view.url.split("#", 1)[0].rstrip("/")


def _token(view: InlineView) -> str:
    fragment = urlsplit(view.url).fragment
    assert fragment.startswith("operator=")
    return fragment.removeprefix("operator=")


def _ws(view: InlineView) -> ClientConnection:
    return connect(_base(view).replace("http://", "ws://") + "/view/ws", open_timeout=10,
                   max_size=None)


def _ask(ws: ClientConnection, params: dict[str, Any], rid: int) -> dict[str, Any]:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "view.control",
                        "params": params}))
    for _ in range(1000):
        message = json.loads(ws.recv(timeout=10))
        if message.get("id") == rid:
            return dict(message["result"])
    raise AssertionError(f"no answer to {rid}")


def _refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


def test_a_live_simulation_is_served_on_loopback_and_driven_with_the_views_token() -> None:
    before = _threads()
    with barnraise.Simulation(seed=SEED) as simu:
        view = barnraise.show(simu, height=420)
        try:
            assert view.what == "live" and not view.closed
            parts = urlsplit(view.url)
            assert parts.hostname == "127.0.0.1" and parts.path == "/"
            token = _token(view)
            assert len(token) >= 16
            # the cell's output: an IFrame of that very URL, with the height asked
            shown = view._repr_html_()
            assert shown.startswith("<iframe ") and f'src="{view.url}"' in shown
            assert 'height="420"' in shown
            # the same page barnraise run --view serves
            with urllib.request.urlopen(_base(view) + "/", timeout=10) as page:
                assert page.read() == (STATIC / "index.html").read_bytes()
            dispatcher = simu.dispatcher
            assert isinstance(dispatcher, DeterministicDispatcher)
            with _ws(view) as ws:  # anyone on loopback watches
                frame = json.loads(ws.recv(timeout=10))
                assert frame["method"] == "view.frame"
                # a control without the token (or with another) is refused, nothing held
                for rid, params in enumerate(({"action": "pause"},
                                              {"action": "pause", "token": token[:-1]}), 1):
                    answer = _ask(ws, params, rid)
                    assert answer["success"] is False and answer["error"] == "forbidden"
                answer = _ask(ws, {"action": "pause", "token": token}, 3)
                assert answer["success"] is True and answer["state"] == "paused"
                answer = _ask(ws, {"action": "start", "token": token}, 4)
                assert answer["success"] is True and answer["state"] == "running"
            # the notebook drives the world while it is watched
            client = simu.client()
            client.call("session_create", session_name="S", grid_size=8)
            with pytest.raises(ValueError, match="already watched"):
                barnraise.show(simu)
        finally:
            view.close()
        assert view.closed and "(closed)" in repr(view)
        assert view._repr_html_() == "<p>barnraise view: closed</p>"
        assert _refused(_base(view) + "/")
        view.close()  # a second close does nothing
    assert _threads() <= before


def test_a_view_dropped_without_close_stops_when_collected() -> None:
    before = _threads()
    with barnraise.Simulation(seed=SEED) as simu:
        view = barnraise.show(simu)
        base = _base(view)
        assert _threads() > before
        del view
        gc.collect()
        assert _threads() <= before
        assert _refused(base + "/")


def test_a_run_result_is_re_executed_into_a_store_and_scrubbed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = barnraise.run("kernel_build", seed=SEED, **PARAMS)
    assert result.success
    before = _threads()
    with barnraise.show(result) as view:
        assert view.what == "result"
        (folder,) = tmp_path.glob("barnraise-show-*")
        stored = barnraise.open_run(folder / "run.db")
        assert stored.digest() == result.trace_digest and stored.status == "finished"
        with _ws(view) as ws:
            frame = json.loads(ws.recv(timeout=30))["params"]
            assert frame["state"] == "stored"
            assert round(frame["scrub"]["end"], 6) == result.summary["virtual_time"]
            assert frame["scrub"]["at"] == frame["scrub"]["end"]
            token = _token(view)
            assert _ask(ws, {"action": "seek", "value": 0.1}, 1)["error"] == "forbidden"
            moved = _ask(ws, {"action": "seek", "value": 0.1, "token": token}, 2)
            assert moved["success"] is True and moved["at"] == 0.1
    assert not folder.exists()  # the temporary store goes with the view
    assert _threads() <= before


def test_a_store_is_shown_by_path_or_as_opened(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    result = barnraise.run("kernel_build", seed=SEED, store=path, **PARAMS)
    for shown in (path, str(path), barnraise.open_run(path)):
        with barnraise.show(shown) as view:
            assert view.what == "stored"
            with _ws(view) as ws:
                frame = json.loads(ws.recv(timeout=30))["params"]
                assert round(frame["scrub"]["end"], 6) == result.summary["virtual_time"]
    assert path.exists()  # the user's store is theirs: shown, never removed


def test_what_cannot_be_shown_is_refused_and_nothing_is_left_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _threads()
    with pytest.raises(TypeError, match="not int"):
        barnraise.show(42)  # type: ignore[arg-type]
    result = barnraise.run("kernel_build", seed=SEED, **PARAMS)
    for height in (0, 2.5, True, 10_001):
        with pytest.raises(ValueError, match="height must be"):
            barnraise.show(result, height=height)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="script= applies to a stored run"):
        barnraise.show(result, script="mine.py")
    with pytest.raises(StoreError):
        barnraise.show(tmp_path / "nothing-here.db")
    # a time limit is not in the summary: the re-execution differs, and says so
    limited = barnraise.run("kernel_build", seed=SEED, max_time=0.2, **PARAMS)
    with pytest.raises(ValueError, match="store=PATH"):
        barnraise.show(limited)
    realtime = barnraise.RunResult({**result.summary, "mode": "realtime"}, result.trace)
    with pytest.raises(ValueError, match="realtime RunResult cannot be re-executed"):
        barnraise.show(realtime)
    unknown = barnraise.RunResult({**result.summary, "scenario": "my_own"}, result.trace)
    with pytest.raises(ValueError, match="unknown scenario 'my_own'"):
        barnraise.show(unknown)
    closed = barnraise.Simulation(seed=SEED)
    closed.close()
    with pytest.raises(ValueError, match="Simulation is closed"):
        barnraise.show(closed)
    assert list(tmp_path.glob("barnraise-show-*")) == []
    assert _threads() <= before
