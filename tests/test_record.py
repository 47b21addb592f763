"""The record of a run, the same live and stored (sim/record.py): for one run,
``RunResult`` and ``open_run`` give equal ``events()``, ``delegations()``,
``timeseries()`` and ``agent_timeseries()`` frames."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

import barnraise
from barnraise.loading import list_scenarios
from barnraise.sim.metrics import AGENT_DTYPES, TIMESERIES_DTYPES
from barnraise.sim.record import DELEGATION_COLUMNS, RunRecord, delegations_frame, fold_delegations
from barnraise.sim.trace import DELIVER, EVENT, TraceRecord

SCENARIOS = sorted(name for name, _ in list_scenarios())


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_run_and_its_store_give_equal_frames(name: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    live = barnraise.run(name, seed=0, store=path)
    stored = barnraise.open_run(path)
    assert isinstance(live, RunRecord) and isinstance(stored, RunRecord)
    assert stored.summary == live.summary
    events = live.events()
    assert len(events) == sum(1 for r in live.trace.records() if r.kind == EVENT) > 0
    pd.testing.assert_frame_equal(stored.events(), events)
    delegations = live.delegations()
    assert list(delegations.columns) == list(DELEGATION_COLUMNS)
    pd.testing.assert_frame_equal(stored.delegations(), delegations)
    # the frame is the store's table, row for row
    rows = stored.delegation_rows()
    assert list(delegations["task_id"]) == [r["task_id"] for r in rows]
    assert list(delegations["status"]) == [r["status"] for r in rows]
    # the raw records are the same on both sides too
    assert list(stored.records()) == list(live.records())
    # the samples: the recorder's live, the log's through the same collector stored
    series = live.timeseries()
    assert list(series.columns) == list(TIMESERIES_DTYPES) and len(series) > 0
    assert set(series["trigger"]) >= {"event", "final"}
    pd.testing.assert_frame_equal(stored.timeseries(), series)
    agents = live.agent_timeseries()
    assert list(agents.columns) == list(AGENT_DTYPES)
    pd.testing.assert_frame_equal(stored.agent_timeseries(), agents)
    # the canvas, at the end (kept live, folded stored) and halfway (folded on both sides)
    end, half = live.canvas(), live.canvas(at=live.summary["virtual_time"] / 2)
    for here, there in ((end, stored.canvas()), (half, stored.canvas(at=live.summary[
            "virtual_time"] / 2))):
        assert (here is None) == (there is None)
        if here is not None:
            assert there is not None and np.array_equal(here, there)
    if end is not None:  # the trace's fold at the end is the canvas the run kept
        assert np.array_equal(live.canvas(at=live.summary["virtual_time"] + 1.0), end)


def test_the_delegations_of_a_delegating_run_are_its_tasks(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    live = barnraise.run("kernel_build", seed=0, record=False, store=path)
    frame = barnraise.open_run(path).delegations()
    final = {t["task_id"]: t["status"] for t in live.tasks}
    assert len(frame) == len(final) > 0
    assert dict(zip(frame["task_id"], frame["status"], strict=True)) == final
    done = frame[frame["status"] == "completed"]
    assert len(done) and done["delivered_at"].notna().all()
    assert json.loads(done["result"].iloc[0])["task_id"] == done["task_id"].iloc[0]


def test_both_reprs_say_which_run_it_is(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    live = barnraise.run("conflict_resolution", seed=0, record=False, store=path)
    records = len(live.trace)
    t = live.summary["virtual_time"]
    stored = barnraise.open_run(path)
    assert repr(live) == (f"<RunResult conflict_resolution seed=0 mode=deterministic "
                          f"success=True t={t:g} records={records}>")
    assert repr(stored) == (f"<StoredRun conflict_resolution seed=0 mode=deterministic "
                            f"success=True t={t:g} records={records} path={str(path)!r}>")


def _rec(seq: int, kind: str, type_: str, body: dict[str, object], t: float = 0.0
         ) -> TraceRecord:
    if kind == EVENT:  # an event's body names it, as every traced one does
        body = {"event": type_, **body}
    return TraceRecord(seq, t, kind, "a", "b", type_, json.dumps(body).encode())


def test_the_fold_keeps_the_first_creation_and_the_first_delivery() -> None:
    created = {"task_id": "t1", "session_id": "s", "delegated_by": "boss",
               "assigned_to": "any", "type": "build", "status": "pending"}
    records = [
        _rec(0, DELIVER, "task_result", {"task_id": "t1"}, 0.5),  # before its task: ignored
        _rec(1, EVENT, "task_created", created, 1.0),
        _rec(2, EVENT, "task_created", {**created, "type": "other"}, 1.5),  # not again
        _rec(3, EVENT, "task_accepted", {"task_id": "t1", "agent_id": "w"}, 2.0),
        _rec(4, EVENT, "task_completed", {"task_id": "t1", "agent_id": "w"}, 3.0),
        _rec(5, DELIVER, "task_result", {"task_id": "t1"}, 4.0),
        _rec(6, EVENT, "task_result_read", {"task_id": "t1"}, 5.0),  # second: ignored
        _rec(7, EVENT, "task_completed", {"task_id": "nobody"}, 6.0),  # no such task
        _rec(8, DELIVER, "status_update", {"task_id": "t1"}, 7.0),  # not a result letter
    ]
    rows = fold_delegations(records)
    assert rows == [{"task_id": "t1", "session_id": "s", "delegator": "boss",
                     "delegatee": "w", "type": "build", "status": "completed",
                     "result": {"event": "task_completed", "task_id": "t1", "agent_id": "w"},
                     "delivered_at": 4.0}]
    frame = delegations_frame(rows)
    assert frame["result"].iloc[0] == \
        '{"agent_id": "w", "event": "task_completed", "task_id": "t1"}'
    assert frame["delivered_at"].dtype == "float64"
    empty = delegations_frame([])
    assert list(empty.columns) == list(DELEGATION_COLUMNS) and len(empty) == 0


def test_a_stored_logs_records_filter_by_kind_and_refuse_a_bad_kind(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    live = barnraise.run("conflict_resolution", seed=0, record=False, store=path)
    stored = barnraise.open_run(path)
    events = list(stored.records(kind=EVENT))
    assert events == [r for r in live.trace.records() if r.kind == EVENT]
    with pytest.raises(ValueError, match="kind must be a record kind"):
        list(stored.records(kind=3))  # type: ignore[arg-type]


def test_a_run_with_latency_gives_its_mailbox_depths_live_and_stored(
        tmp_path: pathlib.Path) -> None:
    """With a latency, letters wait between instants: the stored samples count them from
    the deliveries after each sample, as the recorder read them from the runtime."""
    script = tmp_path / "slow_kernel.py"
    script.write_text(
        '"""kernel_build with every letter 0.05 s on its way."""\n'
        "from barnraise.scenarios.kernel_build import PARAMS, check, run  # noqa: F401\n"
        "SIMULATION = {'latency': 0.05}\n"
    )
    path = tmp_path / "run.db"
    live = barnraise.run(str(script), seed=0, store=path, grid_size=60, block=30)
    series = live.timeseries()
    assert series["mailbox_max"].max() > 0
    stored = barnraise.open_run(path)
    pd.testing.assert_frame_equal(stored.timeseries(), series)
    pd.testing.assert_frame_equal(stored.agent_timeseries(), live.agent_timeseries())


def test_without_latency_no_letter_waits_at_a_sample(tmp_path: pathlib.Path) -> None:
    """The deterministic recorder samples after everything due at its instant: with no
    latency every letter sent by then has been handled."""
    live = barnraise.run("grid_build", seed=0)
    ticks = live.timeseries().query("trigger != 'event'")
    assert len(ticks) > 10
    assert (ticks["mailbox_max"] == 0).all() and ticks["mailbox_max_agent"].isna().all()


def test_a_live_runs_canvas_at_a_time_is_folded_from_its_trace(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    live = barnraise.run("kernel_build", seed=0, record=False, store=path, grid_size=60,
                         block=30)
    stored = barnraise.open_run(path)
    end = live.canvas()
    assert end is live.final_canvas and end is not None and end.any()
    t = live.summary["virtual_time"] / 2
    half = live.canvas(at=t)
    assert half is not None and 0 < np.count_nonzero(half) < np.count_nonzero(end)
    start, there = live.canvas(at=0.0), stored.canvas(at=0.0)
    assert start is not None and there is not None and np.array_equal(start, there)
    assert np.count_nonzero(start) < np.count_nonzero(half)
    assert live.canvas(at=-1.0) is None  # before the first record: no session yet
    there = stored.canvas(at=t)
    assert there is not None and np.array_equal(half, there)
    sid = live.session_id
    assert sid is not None
    by_name = live.canvas(at=t, session_id=sid)
    assert by_name is not None and np.array_equal(by_name, half)
    assert live.canvas(session_id="no-such-session") is None
    assert stored.canvas(session_id="no-such-session") is None


def test_a_run_whose_clock_went_past_its_last_record_samples_up_to_its_end(
        tmp_path: pathlib.Path) -> None:
    """Under a delay plan the clock goes on past the last record (timers that leave none):
    the recorder ticked on until the end, and so does the log's fold."""
    path = tmp_path / "run.db"
    live = barnraise.run("kernel_build", seed=0, faults="delay=0.3", store=path,
                         grid_size=60, block=30)
    stored = barnraise.open_run(path)
    last = stored.last()
    assert last is not None and live.summary["virtual_time"] > round(last.t, 6) + 1.0
    series = live.timeseries()
    assert (series[series["trigger"] == "interval"]["t"] > last.t).any()
    pd.testing.assert_frame_equal(stored.timeseries(), series)
    pd.testing.assert_frame_equal(stored.agent_timeseries(), live.agent_timeseries())
