"""Stores an earlier barnraise wrote still open, resume and replay, or are refused (exit 2,
naming their schema version), never misread.

The stores are in tests/fixtures/stores/, made once by tests/fixtures/make_stores.py
(stores.json says when, by which commit, with which command): a finished deterministic
run of kernel_build on a 16 x 16 grid, the same run killed at record 250, and a realtime
run of it killed at record 200. Every test works on a copy in its tmp_path, never on the
committed file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pathlib
import sqlite3
from typing import Any

import pandas as pd
import pytest

from barnraise import open_run, run
from barnraise.cli import main
from barnraise.sim.store import SCHEMA_VERSION, StoreError

STORES = pathlib.Path(__file__).parent / "fixtures" / "stores"
MADE = json.loads((STORES / "stores.json").read_text())
#: The run the three stores hold: kernel_build, seed 1, this grid and crew.
PARAMS: dict[str, Any] = {"grid_size": 16, "block": 8, "builders": 2, "testers": 1}
#: The deterministic run's trace digest (the finished store's, and the killed one's once
#: resumed); a change of it is a change of every stored deterministic run of kernel_build.
DIGEST = "ae64424fc1e5ae0440d2f0661abd090ca5bec34b3acac4973783abd591b12ab2"


def _copy(name: str, folder: pathlib.Path) -> pathlib.Path:
    """The committed store ``name``, decompressed into ``folder``; checked to be the
    bytes make_stores.py wrote."""
    data = gzip.decompress((STORES / f"{name}.db.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == MADE["stores"][name]["sha256"]
    path = folder / f"{name}.db"
    path.write_bytes(data)
    return path


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_stores_were_made_by_an_earlier_barnraise_at_this_schema() -> None:
    assert {name: s["schema_version"] for name, s in MADE["stores"].items()} == {
        "finished": 4, "killed": 4, "realtime_killed": 4}
    assert SCHEMA_VERSION >= 4
    assert MADE["commit"] and MADE["made_at"]


def test_a_finished_store_opens_with_its_summary_digest_and_frames(
        tmp_path: pathlib.Path) -> None:
    path = _copy("finished", tmp_path)
    before = _sha(path)
    stored = open_run(path)
    assert stored.status == "finished"
    summary = stored.summary
    assert summary is not None
    assert summary["trace_digest"] == DIGEST == stored.info.trace_digest
    assert (summary["success"], summary["completion_percent"], summary["tasks_completed"],
            summary["tiles_placed"], summary["messages_delivered"]) == (True, 100.0, 9, 214, 337)
    assert (stored.info.scenario, stored.info.seed, stored.info.mode, stored.info.version) == (
        "kernel_build", 1, "deterministic", "0.2.0")
    assert len(list(stored.records())) == 388 == MADE["stores"]["finished"]["records"]
    assert len(stored.snapshots()) == 1
    events = stored.events()
    assert len(events) == 51
    assert events["event"].value_counts().to_dict() == {
        "agent_joined": 5, "barrier_released": 1, "region_claimed": 5, "region_released": 5,
        "task_accepted": 10, "task_completed": 9, "task_created": 10, "task_failed": 1,
        "task_unblocked": 5}
    delegations = stored.delegations()
    assert delegations["status"].value_counts().to_dict() == {"completed": 9, "failed": 1}
    last = stored.timeseries().iloc[-1]
    assert (last["tiles_placed"], last["tasks_completed"]) == (214, 9)
    # What it holds is what today's barnraise makes of the same run.
    live = run("kernel_build", seed=1, **PARAMS)
    assert live.trace_digest == DIGEST
    pd.testing.assert_frame_equal(events, live.events())
    pd.testing.assert_frame_equal(delegations, live.delegations())
    assert _sha(path) == before  # reading wrote nothing


def test_a_finished_store_replays_on_the_command_line(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy("finished", tmp_path)
    before = _sha(path)
    capsys.readouterr()
    assert main(["replay", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches"] is True and out["trace_digest"] == DIGEST
    assert _sha(path) == before


def test_a_killed_deterministic_store_resumes_to_the_pinned_digest(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy("killed", tmp_path)
    stored = open_run(path)
    assert stored.status == "interrupted" and stored.summary is None
    prefix = list(stored.records())
    assert 0 < len(prefix) == MADE["stores"]["killed"]["records"] < 388
    capsys.readouterr()
    assert main(["resume", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success"] is True and summary["trace_digest"] == DIGEST
    resumed = open_run(path)
    assert resumed.status == "finished" and resumed.info.trace_digest == DIGEST
    after = list(resumed.records())
    assert len(after) == 388 and after[:len(prefix)] == prefix
    capsys.readouterr()
    assert main(["replay", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matches"] is True


def test_a_killed_realtime_store_resumes_from_its_log(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy("realtime_killed", tmp_path)
    stored = open_run(path)
    assert stored.status == "interrupted" and stored.info.mode == "realtime"
    prefix = list(stored.records())
    assert 0 < len(prefix) == MADE["stores"]["realtime_killed"]["records"]
    capsys.readouterr()
    assert main(["resume", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success"] is True and summary["completion_percent"] == 100.0
    resumed = open_run(path)
    assert resumed.status == "finished"
    after = list(resumed.records())
    assert len(after) > len(prefix) and after[:len(prefix)] == prefix


@pytest.mark.parametrize("name", ["finished", "killed", "realtime_killed"])
def test_a_store_of_an_unknown_schema_version_is_refused_naming_it(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = _copy(name, tmp_path)
    newer = SCHEMA_VERSION + 1
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {newer}")
    db.close()
    before = _sha(path)
    words = f"schema version {newer}"
    with pytest.raises(StoreError, match=words):
        open_run(path)
    for command in ("replay", "resume", "view"):
        capsys.readouterr()
        assert main([command, str(path)]) == 2, command
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, (command, err)
    assert _sha(path) == before
    assert not pathlib.Path(f"{path}-wal").exists()
