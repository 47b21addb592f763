"""Per-step metrics: the recorder leaves runs alone, its rows agree with the world, and the
frames, the trace file and pickled results come back as they were."""

from __future__ import annotations

import math
import multiprocessing
import pathlib
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pandas as pd
import pytest

import barnraise
import barnraise.loading
from barnraise.actors.recording import Recorder
from barnraise.outputs import RunResult
from barnraise.sim.metrics import (
    AGENT_DTYPES,
    TIMESERIES_DTYPES,
    read_agent_timeseries,
    read_timeseries,
)
from barnraise.sim.trace import Trace

SCENARIOS = [name for name, _ in barnraise.loading.list_scenarios()]
MOVING = ("region_claimed", "region_released", "conflict_detected", "task_created",
          "task_accepted", "task_completed", "task_failed", "task_cancelled", "task_blocked",
          "task_unblocked", "task_requeued", "approval_requested", "agent_joined",
          "agent_left", "agent_offline", "rollback")


@pytest.fixture(scope="module")
def kernel() -> RunResult:
    return barnraise.run("kernel_build", seed=3, interval=0.5, frame_size=32)


@pytest.mark.parametrize("name", SCENARIOS)
def test_recording_changes_no_digest_and_its_counters_agree_with_the_world(name: str) -> None:
    plain = barnraise.run(name, record=False)
    recorded = barnraise.run(name, interval=0.1, check_metrics=True)
    assert barnraise.run(name, interval=0.1).trace_digest == plain.trace_digest
    assert recorded.trace_digest == plain.trace_digest
    assert plain.metrics is None
    metrics = recorded.metrics
    assert metrics is not None
    # every interval sample compared what the events had moved with the world
    assert metrics.drift == [] and metrics.errors == []
    series = recorded.timeseries()
    final = series[series["trigger"] == "final"]
    mine = final[final["session_id"] == recorded.session_id].iloc[0]
    summary = recorded.summary
    assert mine["tiles_placed"] == summary["tiles_placed"]
    assert mine["conflicts"] == summary["conflicts"]
    assert mine["messages_delivered"] == summary["messages_delivered"]
    assert mine["tasks_completed"] == summary["tasks_completed"]
    assert mine["tasks_failed"] == summary["tasks_failed"]
    if summary["has_blueprint"]:
        assert mine["completion_percent"] == summary["completion_percent"]
    else:
        assert pd.isna(mine["completion_percent"]) and summary["completion_percent"] is None


def test_the_frames_are_tidy_and_typed(kernel: RunResult) -> None:
    series = kernel.timeseries()
    assert list(series.columns) == list(TIMESERIES_DTYPES)
    assert {c: str(t) for c, t in series.dtypes.items()} == dict(TIMESERIES_DTYPES)
    assert series["sample"].is_monotonic_increasing and series["t"].is_monotonic_increasing
    interval = series[series["trigger"] == "interval"]
    # one interval sample every 0.5 simulated seconds, from 0.5 to the end
    assert list(interval["t"]) == [0.5 * (i + 1) for i in range(len(interval))]
    assert len(interval) == math.floor(kernel.summary["virtual_time"] / 0.5)
    assert interval["tiles_placed"].notna().all() and interval["messages_delivered"].notna().all()
    assert interval["tiles_placed"].is_monotonic_increasing
    events = series[series["trigger"] == "event"]
    # an event sample reads nothing: the figures only an interval sample reads are missing
    assert events["tiles_placed"].isna().all() and events["messages_delivered"].isna().all()
    assert set(events["event"]) >= {"region_claimed", "task_created", "task_completed",
                                    "task_failed", "agent_joined"}
    # one event sample per session event that moves a counter, and no other
    table = kernel.events()
    moving = table[table["topic"].str.startswith("session:") & table["event"].isin(MOVING)]
    assert len(events) == len(moving)
    agents = kernel.agent_timeseries()
    assert {c: str(t) for c, t in agents.dtypes.items()} == dict(AGENT_DTYPES)
    last = agents[agents["trigger"] == "final"]
    assert last["tiles_placed"].sum() == kernel.summary["tiles_placed"]
    builders = last[last["role"] == "builder"]
    assert len(builders) == 4 and (builders["tiles_placed"] > 0).all()
    assert last["tasks_done"].sum() == kernel.summary["tasks_completed"]
    assert set(last["status"]) <= {"idle", "working", "awaiting_approval", "left", "offline"}


def test_events_frame_and_csv_round_trip(kernel: RunResult, tmp_path: pathlib.Path) -> None:
    events = kernel.events()
    assert len(events) == sum(1 for _ in kernel.trace.records("event"))
    assert (events["event"] == "task_completed").sum() == kernel.summary["tasks_completed"]
    written = {p.name for p in kernel.write(tmp_path)}
    assert {"timeseries.csv", "agents.csv", "events.csv", "timeseries.png", "gantt.png",
            "dag.png", "sequence.png", "build.gif", "canvas.png"} <= written
    pd.testing.assert_frame_equal(read_timeseries(tmp_path / "timeseries.csv"),
                                  kernel.timeseries())
    pd.testing.assert_frame_equal(read_agent_timeseries(tmp_path / "agents.csv"),
                                  kernel.agent_timeseries())
    assert len(pd.read_csv(tmp_path / "events.csv")) == len(events)


def test_a_trace_file_loads_back_with_the_runs_digest(kernel: RunResult,
                                                      tmp_path: pathlib.Path) -> None:
    (tmp_path / "trace.jsonl").write_bytes(b"".join(kernel.trace.to_jsonl()))
    loaded = Trace.read(tmp_path / "trace.jsonl")
    assert loaded.digest == kernel.trace_digest
    assert list(loaded.records()) == list(kernel.trace.records())
    broken = tmp_path / "broken.jsonl"
    lines = (tmp_path / "trace.jsonl").read_bytes().splitlines(keepends=True)
    broken.write_bytes(b"".join(lines[:3]) + b'{"not": "a record"}\n')
    with pytest.raises(ValueError, match="line 4: not a trace record"):
        Trace.read(broken)


def _run_in_worker(seed: int) -> RunResult:
    return barnraise.run("kernel_build", seed=seed, grid_size=60, interval=0.5)


def test_a_run_result_comes_back_from_a_worker_process() -> None:
    here = _run_in_worker(5)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = pool.submit(_run_in_worker, 5).result(timeout=120)
    assert isinstance(there, RunResult)
    assert there.trace_digest == here.trace_digest == there.trace.digest
    assert there.summary == {**here.summary, "wall_seconds": there.summary["wall_seconds"]}
    pd.testing.assert_frame_equal(there.timeseries(), here.timeseries())
    pd.testing.assert_frame_equal(there.events(), here.events())
    assert (there.canvas() == here.canvas()).all()
    again = pickle.loads(pickle.dumps(there))
    assert again.trace.digest == here.trace_digest and len(again.trace) == len(here.trace)


def test_tiles_by_agent_sums_to_tiles_placed_and_rolls_back_with_it() -> None:
    with barnraise.Simulation(seed=1) as simu:
        a, b = simu.client("a"), simu.client("b")
        made = a.session_create(session_name="S", grid_size=20, coordination_mode="free")
        a.session_join(session_id=made["session_id"], agent_name="A", role="architect")
        b.session_join(session_id=made["session_id"], agent_name="B")
        a.builder_place_tiles(region={"x": 0, "y": 0, "width": 4, "height": 4}, tiles="code")
        checkpoint = a.build_checkpoint(checkpoint_name="c")
        b.builder_place_tiles(region={"x": 10, "y": 10, "width": 2, "height": 3}, tiles="data")
        a.builder_place_tile(x=19, y=19, tile_type="system")
        view = simu.view()
        assert view.progress.tiles_by_agent == {"a": 17, "b": 6}
        assert sum(view.progress.tiles_by_agent.values()) == view.progress.tiles_placed == 23
        view.progress.tiles_by_agent["a"] = 0  # a copy: the world does not change
        assert simu.view().progress.tiles_by_agent["a"] == 17
        a.build_rollback(checkpoint_id=checkpoint["checkpoint_id"])
        after = simu.view().progress
        assert after.tiles_by_agent == {"a": 16} and after.tiles_placed == 16


def test_realtime_recording_samples_through_the_read_api() -> None:
    result = barnraise.run("kernel_build", mode="realtime", time_scale=40.0, grid_size=60,
                           interval=0.5)
    assert result.success
    metrics = result.metrics
    assert metrics is not None and metrics.errors == []
    series = result.timeseries(result.session_id)
    interval = series[series["trigger"] == "interval"]
    assert len(interval) >= 2 and interval["tiles_placed"].notna().all()
    final = series[series["trigger"] == "final"].iloc[-1]
    assert final["tiles_placed"] == result.summary["tiles_placed"]
    assert final["tasks_completed"] == result.summary["tasks_completed"]


@pytest.mark.parametrize(("options", "message"), [
    ({"interval": 0}, "interval must be"),
    ({"interval": -1.0}, "interval must be"),
    ({"interval": float("nan")}, "interval must be"),
    ({"interval": "1"}, "interval must be"),
    ({"interval": True}, "interval must be"),
    ({"frame_size": -1}, "frame_size must be"),
    ({"frame_size": 5000}, "frame_size must be"),
    ({"frame_size": 1.5}, "frame_size must be"),
])
def test_bad_recording_options_are_refused_before_the_run(options: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(barnraise.ScenarioError, match=message):
        barnraise.run("kernel_build", **options)
    with barnraise.Simulation() as simu, pytest.raises(ValueError, match=message):
        Recorder(simu, **options)


def test_a_recorder_that_finishes_twice_returns_the_same_metrics() -> None:
    with barnraise.Simulation(seed=2) as simu:
        recorder = Recorder(simu, interval=1.0)
        simu.client("a").session_create(session_name="S", grid_size=10)
        simu.advance(3.0)
        first = recorder.finish()
        assert recorder.finish() is first
        assert [s.trigger for s in first.samples][-1] == "final"


def test_reading_what_was_not_recorded_says_so(kernel: RunResult) -> None:
    with pytest.raises(LookupError, match="no samples of session 'nope'; sampled: session_"):
        kernel.timeseries("nope")
    with pytest.raises(LookupError, match="no samples of session 'nope'"):
        kernel.agent_timeseries("nope")
    plain = barnraise.run("locks_barriers", record=False)
    with pytest.raises(ValueError, match="not recorded"):
        plain.timeseries()
    with pytest.raises(FileNotFoundError):
        Trace.read("/no/such/trace.jsonl")


def test_a_view_without_tasks_leaves_only_them_out() -> None:
    with barnraise.Simulation(seed=3) as simu:
        a = simu.client("a")
        made = a.session_create(session_name="S", grid_size=20)
        a.session_join(session_id=made["session_id"], agent_name="A", role="architect")
        a.task_delegate(target_agent_id="any", task_type="build",
                        region={"x": 0, "y": 0, "width": 2, "height": 2})
        full, light = simu.view(), simu.view(tasks=False)
        assert len(full.tasks) == 1 and light.tasks == ()
        assert light.members == full.members and light.progress == full.progress
        assert light.claims == full.claims and light.session == full.session
