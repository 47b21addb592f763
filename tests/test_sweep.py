"""Sweeps: the same rows and digests on any engine, resumable after a kill, every bad
request refused before anything runs."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

import barnraise
from barnraise.cli import main
from barnraise.sweeps import SweepError, plan

GRID: dict[str, list[Any]] = {"agents": [2, 4], "coordination_mode": ["coordinated", "free"]}
SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """One 2-worker LocalCluster for the module, stopped at its end."""
    import logging

    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=logging.ERROR)
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def serial() -> pd.DataFrame:
    return barnraise.sweep("conflict_storm", GRID, SEEDS)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="wall_seconds"), b.drop(columns="wall_seconds"))


def test_rows_come_in_the_sweeps_order_with_the_promised_columns(serial: pd.DataFrame) -> None:
    assert len(serial) == 12 and serial["success"].all()
    order = [(a, m, s) for a in GRID["agents"] for m in GRID["coordination_mode"] for s in SEEDS]
    assert list(zip(serial["agents"], serial["coordination_mode"], serial["seed"],
                    strict=True)) == order
    assert list(serial.columns[:8]) == ["scenario", "seed", "agents", "coordination_mode",
                                        "success", "trace_digest", "wall_seconds",
                                        "virtual_time"]
    # a summary figure whose name a parameter has is prefixed; metrics are columns
    assert {"summary.agents", "conflict_rate", "latency_mean", "error"} <= set(serial.columns)
    for row in serial.head(3).itertuples():
        alone = barnraise.run("conflict_storm", seed=row.seed, agents=row.agents,
                              coordination_mode=row.coordination_mode, record=False)
        assert alone.trace_digest == row.trace_digest
        assert alone.summary["metrics"]["conflict_rate"] == row.conflict_rate


def test_processes_and_a_dask_cluster_give_the_same_table(serial: pd.DataFrame,
                                                          dask_address: str) -> None:
    heard: list[dict[str, Any]] = []
    on_processes = barnraise.sweep("conflict_storm", GRID, SEEDS, engine="processes",
                                   workers=2, on_result=heard.append)
    _same(serial, on_processes)
    # each run reported as it finished, in whatever order the workers finished them
    assert sorted(r["trace_digest"] for r in heard) == sorted(serial["trace_digest"])
    on_dask = barnraise.sweep("conflict_storm", GRID, SEEDS, engine="dask",
                              dask_address=dask_address)
    _same(serial, on_dask)
    assert on_dask.attrs["computed"] == 12 and on_dask.attrs["reused"] == 0


def test_a_blueprint_scenario_sweeps_alike_on_every_engine_with_its_steps(
        dask_address: str) -> None:
    """The run rows, and the per-step rows with a reporter of one's own (module-level, so
    that the workers can import it), are the same serially, on two processes and on the
    module's Dask cluster."""
    from tests import reporting

    params = {"grid_size": [60], "builders": [2, 3]}
    args: dict[str, Any] = {"collect": "timeseries", "reporters": {"mine": reporting.tiles}}
    serial = barnraise.sweep("kernel_build", params, [0, 1], **args)
    runs = serial.attrs["runs"]
    assert runs["success"].all() and (runs["completion_percent"] == 100.0).all()
    assert list(serial.columns[:4]) == ["scenario", "grid_size", "builders", "seed"]
    assert set(serial["trigger"]) == {"interval", "final"}
    assert (serial["mine"] == serial["tiles_placed"]).all()
    assert list(serial.groupby(["builders", "seed"], sort=False).size().index) == [
        (2, 0), (2, 1), (3, 0), (3, 1)]
    for engine in ({"engine": "processes", "workers": 2},
                   {"engine": "dask", "dask_address": dask_address}):
        other = barnraise.sweep("kernel_build", params, [0, 1], **args, **engine)
        _same(runs, other.attrs["runs"])
        pd.testing.assert_frame_equal(serial, other)


def test_per_step_rows_are_a_runs_own_samples_and_are_saved_with_it(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests import reporting

    args: dict[str, Any] = {"collect": "timeseries", "reporters": {"mine": reporting.tiles}}
    out = tmp_path / "steps"
    first = barnraise.sweep("kernel_build", {"grid_size": [60]}, [0, 1], out=out, **args)
    # each run's rows are its own time series' interval and final samples
    alone = barnraise.run("kernel_build", seed=1, grid_size=60).timeseries()
    kept = alone[alone["trigger"] != "event"]
    mine = first[first["seed"] == 1]
    assert list(mine["t"]) == list(kept["t"]) and len(mine) > 1
    assert list(mine["completion_percent"]) == list(kept["completion_percent"])
    # saved with each run: a sweep run again on the same out reuses the rows
    again = barnraise.sweep("kernel_build", {"grid_size": [60]}, [0, 1], out=out, **args)
    assert again.attrs["reused"] == 2 and again.attrs["computed"] == 0
    pd.testing.assert_frame_equal(again, first)
    assert len(pd.read_csv(out / "timeseries.csv")) == len(first)
    # asked for other reporters, a saved run's rows (their columns) are not reused
    capsys.readouterr()
    theirs = barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=out,
                             collect="timeseries", reporters={"theirs": reporting.members})
    assert theirs.attrs["computed"] == 1 and "theirs" in theirs and "mine" not in theirs
    assert "with the reporters mine, not this sweep's theirs" in capsys.readouterr().err
    assert json.loads((out / "runs" / f"{plan('kernel_build', {'grid_size': [60]}, [0])[0].key}"
                       ".json").read_text())["reporters"] == ["theirs"]
    # a run saved without its steps (a sweep that did not collect them) is computed again
    other = tmp_path / "plain"
    barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=other)
    assert barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=other,
                           **args).attrs["computed"] == 1


def test_a_step_column_named_as_a_parameter_is_prefixed_not_lost() -> None:
    from barnraise.sweeps import RunSpec, steps_of

    spec = RunSpec(0, "mine", 3, {"event": "storm", "t": 0.5}, "k")
    table = pd.DataFrame({"sample": [0, 1, 2], "t": [1.0, 1.5, 2.0],
                          "trigger": ["interval", "event", "final"], "event": ["", "x", ""],
                          "mine": pd.array([4, None, 6], dtype="Int64")})
    assert steps_of(spec, table) == [
        {"scenario": "mine", "event": "storm", "t": 0.5, "seed": 3, "sample": 0,
         "timeseries.t": 1.0, "trigger": "interval", "timeseries.event": "", "mine": 4},
        {"scenario": "mine", "event": "storm", "t": 0.5, "seed": 3, "sample": 2,
         "timeseries.t": 2.0, "trigger": "final", "timeseries.event": "", "mine": 6}]


def test_max_time_stops_every_run_and_keys_its_runs(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "cut"
    whole = barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=out)
    cut = barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=out, max_time=2.5,
                          collect="timeseries")
    assert cut.attrs["computed"] == 1  # a run stopped early is not the saved whole run
    assert whole["virtual_time"].iloc[0] > 2.5
    assert cut.attrs["runs"]["virtual_time"].iloc[0] == 2.5 and cut["t"].max() == 2.5


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"engine": "processes", "workers": 2, "collect": "timeseries",
      "reporters": {"x": lambda view: 1}}, "reporter 'x': engine 'processes' runs in other "
     "processes, which need a module-level function"),
    ({"collect": "timeseries", "reporters": {"tiles_placed": len}}, "built-in column"),
    ({"reporters": {"x": len}}, "go with collect='timeseries'"),
    ({"collect": "timeseries", "agent_reporters": {"x": len}}, "agent reporters go with"),
    ({"collect": "steps"}, "collect must be 'runs' or 'timeseries'"),
    ({"max_time": 0}, "max_time must be"),
])
def test_bad_collect_requests_are_refused_in_one_line_before_any_run(
        tmp_path: pathlib.Path, kwargs: dict[str, Any], words: str) -> None:
    out = tmp_path / "never"
    with pytest.raises(SweepError, match=words) as caught:
        barnraise.sweep("kernel_build", {"grid_size": [60]}, [0], out=out, **kwargs)
    assert "\n" not in str(caught.value) and not out.exists()


def test_the_sweep_command_writes_per_step_rows(tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "kernel_build", "--timeseries"]) == 2
    assert "give --out DIR" in capsys.readouterr().err
    out = tmp_path / "cli"
    assert main(["sweep", "kernel_build", "--param", "grid_size=60", "--seeds", "0",
                 "--timeseries", "--max-time", "2.5", "--out", str(out), "--json"]) == 1
    said = json.loads(capsys.readouterr().out)
    rows = pd.read_csv(out / "timeseries.csv")
    assert said["steps"] == len(rows) == 3 and list(rows["t"]) == [1.0, 2.0, 2.5]
    assert list(rows["trigger"]) == ["interval", "interval", "final"]


def _sweep_command(out: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "barnraise.cli", "sweep", "kernel_build",
            "--param", "grid_size=60", "--param", "error_rate=0.0,0.002", "--seeds", "0-19",
            "--out", str(out), "--json"]


def test_a_killed_sweep_run_again_computes_only_what_is_missing(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "sweep"
    runs = out / "runs"
    child = subprocess.Popen(_sweep_command(out), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if runs.is_dir() and len(list(runs.glob("*.json"))) >= 5:
                break
            time.sleep(0.01)
        assert child.poll() is None, "the sweep finished before it could be killed"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    saved = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    assert 5 <= len(saved) < 40
    assert not (out / "results.csv").exists()  # it never got to the end
    again = subprocess.run(_sweep_command(out), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report == {**report, "runs": 40, "computed": 40 - len(saved), "reused": len(saved),
                      "failed": 0}
    # the runs saved before the kill were read, not run again
    assert {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json")
            if p.name in saved} == saved
    assert len(list(runs.glob("*.json"))) == 40
    table = pd.read_csv(out / "results.csv")
    fresh = barnraise.sweep("kernel_build", {"grid_size": [60], "error_rate": [0.0, 0.002]},
                            range(20))
    assert list(table["trace_digest"]) == list(fresh["trace_digest"])
    assert list(table["seed"]) == list(fresh["seed"])
    assert (out / "results.parquet").exists() and (out / "sweep.png").exists()
    resumed = barnraise.sweep("kernel_build", {"grid_size": [60], "error_rate": [0.0, 0.002]},
                              range(20), out=out)
    assert resumed.attrs["computed"] == 0 and resumed.attrs["reused"] == 40
    _same(resumed, fresh)


def test_a_run_that_raises_is_a_failed_row_not_a_lost_sweep(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "touchy.py"
    script.write_text(textwrap.dedent('''
        """Raises for a bad value."""
        PARAMS = {"x": 1}
        def run(simu, *, x):
            if x == 2:
                raise RuntimeError("two is bad")
            return {"x_seen": x}
        def check(summary):
            return summary["metrics"]["x_seen"] == 1
    '''))
    table = barnraise.sweep(str(script), {"x": [1, 2, 3]}, [0])
    assert list(table["success"]) == [True, False, False]
    assert list(table["error"]) == ["", "RuntimeError: two is bad", ""]
    assert table["trace_digest"].isna().tolist() == [False, True, False]
    assert main(["sweep", str(script), "--param", "x=1,3"]) == 1
    assert main(["sweep", str(script), "--param", "x=1", "--seeds", "0-2"]) == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"params": {"nope": [1]}}, "unknown parameter 'nope'"),
    ({"params": {"agents": 4}}, r"params\['agents'\] must be a list"),
    ({"params": {"agents": "4"}}, r"params\['agents'\] must be a list"),
    ({"params": {"agents": []}}, "give from 1 to"),
    ({"params": {"agents": [2, 2]}}, "given twice"),
    ({"params": {"agents": ["many"]}}, "parameter agents: expected int"),
    ({"params": [("agents", [2])]}, "params must be a dict"),
    ({"seeds": -1}, "a count must be from 1"),
    ({"seeds": 0}, "a count must be from 1"),
    ({"seeds": [0, -3]}, "each seed must be an integer"),
    ({"seeds": [0, True]}, "each seed must be an integer"),
    ({"seeds": [1, 1]}, "1 is given twice"),
    ({"seeds": []}, "at least one seed"),
    ({"seeds": "0-3"}, "seeds must be a count or a list"),
    ({"seeds": 10**6}, "a count must be from 1"),
    ({"workers": 0, "engine": "processes"}, "workers must be an integer from 1"),
    ({"workers": 300, "engine": "processes"}, "workers must be an integer from 1"),
    ({"workers": "2", "engine": "processes"}, "workers must be an integer from 1"),
    ({"workers": 2}, "engine 'serial' runs one run at a time"),
    ({"engine": "threads"}, "engine must be one of serial, processes, dask"),
    ({"engine": "processes", "dask_address": "tcp://127.0.0.1:8786"}, "applies to engine"),
    ({"engine": "dask", "dask_address": "not an address"}, "dask_address must be"),
    ({"engine": "dask", "dask_address": "tcp://127.0.0.1:8786", "workers": 2},
     "has its own workers"),
])
def test_bad_requests_are_refused_before_anything_runs(
        kwargs: dict[str, Any], message: str, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "never"
    call: dict[str, Any] = {"params": {"agents": [2]}, "seeds": 1, "out": out, **kwargs}
    with pytest.raises(SweepError, match=message) if "parameter agents" not in message \
            else pytest.raises(barnraise.ScenarioError, match=message):
        barnraise.sweep("conflict_storm", call.pop("params"), call.pop("seeds"), **call)
    assert not out.exists()  # nothing half-done


def test_bad_out_places_are_refused(tmp_path: pathlib.Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    for place, message in ((afile, "a file is there"), ("/proc/x", "cannot write there")):
        with pytest.raises(barnraise.ScenarioError, match=message):
            barnraise.sweep("conflict_storm", {"agents": [2]}, 1, out=place)


def test_too_many_runs_are_refused() -> None:
    with pytest.raises(SweepError, match="asks for 200000 runs"):
        plan("conflict_storm", {"agents": list(range(1, 21)), "claim_size": list(range(1, 11))},
             range(1000))


@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "5-2"], "ends before it starts"),
    (["--seeds", "abc"], "expected S, A-B or A,B,C"),
    (["--seeds", "-3"], "expected S, A-B or A,B,C"),
    (["--seeds", "1-200000"], "at most 100000 seeds"),
    (["--workers", "0"], "workers must be an integer from 1"),
    (["--dask", "nowhere"], "dask_address must be"),
    (["--param", "agents="], "an empty value"),
    (["--param", "agents=2,x"], "parameter agents: expected int"),
    (["--param", "agents=2", "--param", "agents=3"], "given twice"),
    (["--param", "nope=1"], "unknown parameter 'nope'"),
    (["--param", "agents"], "expected KEY=VALUE"),
    (["--out", "/proc/x"], "cannot write there"),
])
def test_the_sweep_command_refuses_bad_requests_with_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "conflict_storm", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_sweep_command_writes_results_and_the_plot(tmp_path: pathlib.Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    out = tmp_path / "s"
    assert main(["sweep", "conflict_storm", "--param", "agents=2,3",
                 "--param", "coordination_mode=coordinated,free", "--seeds", "0-1",
                 "--workers", "2", "--plot", "conflict_rate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 runs (8 computed, 0 reused" in text and "8 passed" in text
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 8 and list(table["agents"]) == [2, 2, 2, 2, 3, 3, 3, 3]
    assert pd.read_parquet(out / "results.parquet")["trace_digest"].tolist() == \
        table["trace_digest"].tolist()
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "runs").glob("*.json"))) == 8
    assert len((out / "results.jsonl").read_text().splitlines()) == 8
    assert os.path.getsize(out / "results.csv") > 0


def test_the_sweep_bar_shows_on_a_terminal_and_not_with_json(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["sweep", "conflict_storm", "--param", "agents=2,3", "--seeds", "0-1"]) == 0
    last = capsys.readouterr().err.split("\r")[-1]
    assert "4/4 runs" in last and "elapsed" in last and "left" in last
    assert main(["sweep", "conflict_storm", "--param", "agents=2,3", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["runs"] == 2


def test_a_scheduler_nobody_answers_at_is_refused_before_anything(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import barnraise.sweeps

    monkeypatch.setattr(barnraise.sweeps, "DASK_CONNECT_TIMEOUT", 0.5)
    out = tmp_path / "never"
    with pytest.raises(SweepError, match=r"no scheduler answered within 0\.5 s"):
        barnraise.sweep("conflict_storm", {"agents": [2]}, 1, engine="dask",
                        dask_address="tcp://127.0.0.1:9", out=out)
    assert not out.exists()
