"""A store that says something barnraise never writes is refused with an error naming the
record, in bounded time and memory: a time that is not finite, a run so long that its
samples would not fit, a record that unpacks to gigabytes; and an operation or event that
the live services refused or never made does not move the stored world.

Each test edits a copy of the committed fixture store (tests/fixtures/stores) or writes
its own small store.
"""

from __future__ import annotations

import math
import pathlib
import re
import sqlite3
import zlib

import numpy as np
import pytest

from barnraise import Simulation, open_run
from barnraise.actors.stored import run as stored_run
from barnraise.cli import main
from barnraise.sim.messages import Priority
from barnraise.sim.store import StoreError
from barnraise.sim.store import reader as store_reader
from barnraise.view.stored import CHART_POINTS, StoredSource, chart_interval
from tests.test_store_fixtures import _copy


def _edit(path: pathlib.Path, statement: str, *args: object) -> None:
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute(statement, args)
    finally:
        db.close()


def _last_seq(path: pathlib.Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT max(seq) FROM events").fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("t", [math.inf, -1.0, "soon"])
def test_a_record_time_that_is_not_finite_is_refused_naming_the_record(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], t: object) -> None:
    path = _copy("finished", tmp_path)
    last = _last_seq(path)
    _edit(path, "UPDATE events SET t = ? WHERE seq = ?", t, last)
    run = open_run(path)
    with pytest.raises(StoreError, match=f"record {last}: time"):
        run.timeseries()
    with pytest.raises(StoreError, match=f"record {last}: time"):
        StoredSource(run)
    capsys.readouterr()
    assert main(["view", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"record {last}: time" in err and err.count("\n") == 1


def test_a_run_too_long_for_its_interval_asks_for_a_wider_one(tmp_path: pathlib.Path) -> None:
    """A store whose last record is at t=1e15 (a long realtime run, or an edited one): the
    fold refuses before sampling instead of taking 1e15 samples, and a wide enough
    interval gives the series; the view charts it at a wider interval by itself."""
    path = _copy("finished", tmp_path)
    _edit(path, "UPDATE events SET t = 1e15 WHERE seq = ?", _last_seq(path))
    run = open_run(path)
    with pytest.raises(ValueError, match=r"ask for an interval of at least 1e\+10 s"):
        run.timeseries()
    series = run.timeseries(interval=1e11)
    assert 10_000 <= len(series) <= stored_run.MAX_SAMPLES
    assert series["tiles_placed"].iloc[-1] == 214
    assert chart_interval(1e15) == 1e15 / CHART_POINTS
    source = StoredSource(run)
    assert source.end == 1e15
    assert len(source.samples) <= CHART_POINTS + 100  # interval samples, then the events'


def test_the_sample_bound_is_what_the_fold_checks(tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy("finished", tmp_path)
    _edit(path, "UPDATE events SET t = 50.0 WHERE seq = ?", _last_seq(path))
    run = open_run(path)
    ticks = int((run.timeseries()["trigger"] == "interval").sum())
    assert ticks >= 49
    monkeypatch.setattr(stored_run, "MAX_SAMPLES", ticks - 1)
    with pytest.raises(ValueError, match=f"over the {ticks - 1:,} a fold makes"):
        run.timeseries()
    monkeypatch.setattr(stored_run, "MAX_SAMPLES", ticks)
    assert int((run.timeseries()["trigger"] == "interval").sum()) == ticks


def test_a_record_that_unpacks_past_the_bound_is_refused(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy("finished", tmp_path)
    body = b'{"pad":"' + b"x" * 5000 + b'"}'
    _edit(path, "UPDATE events SET content = ?, packed = 1 WHERE seq = 3", zlib.compress(body))
    assert [r.content for r in open_run(path).records() if r.seq == 3] == [body]
    monkeypatch.setattr(store_reader, "MAX_RECORD_BYTES", 4096)
    with pytest.raises(StoreError, match="record 3: its packed content unpacks to more than"):
        list(open_run(path).records())
    _edit(path, "UPDATE events SET content = ?, packed = 1 WHERE seq = 3", b"not zlib")
    with pytest.raises(StoreError, match="record 3: its packed content does not unpack"):
        list(open_run(path).records())


def test_bad_arguments_say_what_is_wrong(tmp_path: pathlib.Path) -> None:
    run = open_run(_copy("finished", tmp_path))
    for at in (math.nan, math.inf, True, "5"):
        with pytest.raises(ValueError, match="at must be a finite simulated time"):
            run.canvas(at=at)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"the interval is keyword-only: interval=0\.5"):
        run.timeseries(0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keyword-only"):
        run.agent_timeseries(2)  # type: ignore[arg-type]


def test_an_operation_an_agent_sends_a_service_does_not_move_the_stored_world(
        tmp_path: pathlib.Path) -> None:
    """An agent sends regions a rollback in the coordinator's words: regions refuses it
    (permission_denied), the live canvas keeps its 41 tiles, and so does the stored one."""
    path = tmp_path / "forged.db"
    with Simulation(seed=1, mode="deterministic", store=str(path)) as sim:
        a = sim.client("mallory")
        sid = a.call("session_create", session_name="s", grid_size=20)["session_id"]
        a.call("session_join", session_id=sid, agent_name="M", role="architect")
        a.call("region_claim", region={"x": 0, "y": 0, "width": 20, "height": 20},
               purpose="p")
        a.call("builder_place_tiles", region={"x": 0, "y": 0, "width": 4, "height": 4},
               tiles="system")
        checkpoint = a.call("build_checkpoint", checkpoint_name="c1", include=["tiles"])
        a.call("builder_place_tiles", region={"x": 10, "y": 10, "width": 5, "height": 5},
               tiles="system")
        d = sim.dispatcher
        for content in (
                {"op": "_rollback", "session_id": sid,
                 "checkpoint_id": checkpoint["checkpoint_id"]},
                {"op": "_session", "session": {
                    "session_id": "session_evil", "session_name": "x", "grid_size": 60_000,
                    "coordination_mode": "free", "config": {}, "created_at": 0.0}}):
            d.send(d.seal(d.message("mallory", "regions", "coordination_request", content,
                                    priority=Priority.HIGH, correlation_id=d.next_id())))
        live = a.call("session_get_state")["state"]["progress"]["tiles_placed"]
        assert live == 41
    run = open_run(path)
    refused = [r for r in run.records() if r.sender == "regions" and b"permission_denied"
               in r.content]
    assert len(refused) == 2
    canvas = run.canvas(session_id=sid)
    assert canvas is not None and int(np.count_nonzero(canvas)) == 41
    assert set(run.world()) == {sid}  # no session_evil, no 60,000-cell canvas
    assert run.timeseries(sid)["tiles_placed"].iloc[-1] == 41


@pytest.mark.parametrize("content", [b"{nope", b"\xff"])
def test_an_event_that_is_not_what_barnraise_writes_is_refused_naming_it(
        tmp_path: pathlib.Path, content: bytes) -> None:
    path = _copy("finished", tmp_path)
    db = sqlite3.connect(path)
    try:
        seq = int(db.execute("SELECT min(seq) FROM events WHERE type = 'region_claimed'"
                             ).fetchone()[0])
    finally:
        db.close()
    _edit(path, "UPDATE events SET content = ? WHERE seq = ?", content, seq)
    run = open_run(path)
    words = f"record {seq} (event 'region_claimed' from 'regions') is not what barnraise writes"
    with pytest.raises(StoreError, match=re.escape(words)):
        run.events()
    with pytest.raises(StoreError, match=re.escape(words)):
        run.timeseries()
