"""Reporters of one's own (sim/reporters.py): columns of a run's time series, live and
from its store, refused when wrong before the run, failing the run when they fail."""

from __future__ import annotations

import pathlib
import pickle
import re
import textwrap

import pandas as pd
import pytest

import barnraise
from barnraise.cli import main
from barnraise.sim.metrics import (
    AGENT_DTYPES,
    TIMESERIES_DTYPES,
    read_agent_timeseries,
    read_timeseries,
)
from barnraise.sim.reporters import ReporterError
from tests import reporting

# A cheap run with three builders: 12 samples, three of them interval or final.
SCENARIO = "parallel_build"
REPORTERS = {"my_tiles": reporting.tiles, "my_members": reporting.members,
             "my_mode": reporting.mode}
AGENT_REPORTERS = {"my_agent_tiles": reporting.agent_tiles, "my_role": reporting.agent_role}


@pytest.fixture(scope="module")
def plain() -> barnraise.RunResult:
    return barnraise.run(SCENARIO, seed=1)


def test_reporters_are_columns_sampled_with_the_figures_that_read_the_world(
        plain: barnraise.RunResult) -> None:
    result = barnraise.run(SCENARIO, seed=1, reporters=REPORTERS,
                           agent_reporters=AGENT_REPORTERS)
    # Reporters only read: the trace and the built-in columns are the run's without them.
    assert result.trace_digest == plain.trace_digest
    series = result.timeseries()
    assert list(series.columns) == [*TIMESERIES_DTYPES, *REPORTERS]
    pd.testing.assert_frame_equal(series[list(TIMESERIES_DTYPES)], plain.timeseries())
    read = series[series["trigger"] != "event"]
    assert len(read) >= 2 and read["trigger"].iloc[-1] == "final"
    assert list(read["my_tiles"]) == list(read["tiles_placed"])
    assert (read["my_members"] == result.summary["agents"]).all()
    assert read["my_mode"].nunique() == 1
    assert read["my_mode"].iloc[0] in ("free", "coordinated", "sequential")
    assert str(series["my_tiles"].dtype) == "Int64" and str(series["my_mode"].dtype) == "string"
    # An event sample reads nothing of the world: no value, as it has no tile count.
    events = series[series["trigger"] == "event"]
    assert len(events) and events["my_tiles"].isna().all() and events["tiles_placed"].isna().all()
    agents = result.agent_timeseries()
    assert list(agents.columns) == [*AGENT_DTYPES, *AGENT_REPORTERS]
    last = agents[agents["trigger"] == "final"]
    assert len(last) == result.summary["agents"]
    assert list(last["my_agent_tiles"]) == list(last["tiles_placed"])
    assert list(last["my_role"]) == list(last["role"])
    # A result pickles (it comes back from worker processes) with its columns.
    again = pickle.loads(pickle.dumps(result))
    pd.testing.assert_frame_equal(again.timeseries(), series)
    pd.testing.assert_frame_equal(again.agent_timeseries(), agents)


def test_a_store_keeps_the_values_and_gives_the_live_columns(tmp_path: pathlib.Path) -> None:
    calls: list[float] = []

    def counted(view: object) -> int:
        calls.append(0.0)
        return reporting.tiles(view)  # type: ignore[arg-type]

    path = tmp_path / "run.db"
    live = barnraise.run(SCENARIO, seed=1, store=path,
                         reporters={**REPORTERS, "counted": counted},
                         agent_reporters=AGENT_REPORTERS)
    made = len(calls)
    assert made > 0
    stored = barnraise.open_run(path)
    pd.testing.assert_frame_equal(stored.timeseries(), live.timeseries())
    pd.testing.assert_frame_equal(stored.agent_timeseries(), live.agent_timeseries())
    assert len(calls) == made  # the store read the values; it called nothing
    # Outside the digest: the stored run replays to the same digest without them.
    assert stored.digest() == live.trace_digest == barnraise.run(SCENARIO, seed=1,
                                                                  record=False).trace_digest


def test_a_scenario_module_brings_its_own_and_out_writes_them(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "mine.py"
    script.write_text(textwrap.dedent("""\
        from barnraise.scenarios._kit import host_session
        PARAMS = {"size": 8}
        def placed(view):
            return view.progress.tiles_placed
        def claims(agent):
            return len(agent.claims)
        REPORTERS = {"placed": placed}
        AGENT_REPORTERS = {"claims_now": claims}
        def run(simu, *, size):
            client, sid = host_session(simu, session_name="S", grid_size=size)
            client.call("builder_place_tile", session_id=sid, x=1, y=1, tile=3)
            return {"session_id": sid}
        def check(summary):
            return True
        """))
    out = tmp_path / "out"
    assert main(["run", str(script), "--out", str(out), "--json"]) == 0
    series = read_timeseries(out / "timeseries.csv")
    kept = series[series["trigger"] == "final"]
    assert len(kept) == 1 and kept["placed"].tolist() == kept["tiles_placed"].tolist()
    assert "claims_now" in read_agent_timeseries(out / "agents.csv").columns
    live = barnraise.run(str(script), reporters={"also": reporting.members})
    assert list(live.timeseries().columns)[-2:] == ["placed", "also"]


@pytest.mark.parametrize(("given", "words"), [
    ({"reporters": {"tiles_placed": reporting.tiles}}, "'tiles_placed' is a built-in column"),
    ({"agent_reporters": {"status": reporting.agent_role}}, "'status' is a built-in column"),
    ({"reporters": {"": reporting.tiles}}, "a reporter's name must be"),
    ({"reporters": {"x": 3}}, "reporter 'x' is not a function"),
    ({"reporters": [reporting.tiles]}, "must be a dict of name -> function"),
])
def test_a_bad_reporter_is_refused_before_the_run(tmp_path: pathlib.Path,
                                                  given: dict[str, object], words: str) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(ValueError, match=words):
        barnraise.run(SCENARIO, seed=1, store=path, **given)  # type: ignore[arg-type]
    assert not path.exists()  # nothing opened, nothing ran
    with pytest.raises(barnraise.ScenarioError, match="need record=True"):
        barnraise.run(SCENARIO, record=False, reporters={"x": reporting.tiles})


def _broken(view: object) -> float:
    return 1 / len(())  # ZeroDivisionError, at this line


def test_a_reporter_that_raises_is_shown_with_its_traceback_and_fails_the_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ReporterError, match=r"reporter 'boom' raised ZeroDivisionError at t=1 "
                       r"\(session ") as caught:
        barnraise.run(SCENARIO, seed=1, reporters={"fine": reporting.tiles, "boom": _broken})
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    err = capsys.readouterr().err
    assert "Traceback" in err and "test_reporters.py" in err and "_broken" in err
    assert err.count("reporter 'boom' raised") == 1  # the first failure only
    assert "_broken" in caught.value.traceback
    # A value that is neither a number nor a string is refused, naming the reporter.
    with pytest.raises(ReporterError, match=r"reporter 'members' returned list \[.*\] at t="
                       r"1 .*: a reporter returns a number or a string"):
        barnraise.run(SCENARIO, seed=1, reporters={
            "members": lambda view: [m.agent_id for m in view.members]})
    # ... and said on stderr as it happened.
    assert "returned list" in capsys.readouterr().err


def test_max_time_stops_a_run_at_that_simulated_time(plain: barnraise.RunResult) -> None:
    assert plain.summary["virtual_time"] > 1.5
    cut = barnraise.run(SCENARIO, seed=1, max_time=1.5, reporters={"placed": reporting.tiles})
    assert cut.summary["virtual_time"] == 1.5 and cut.summary["run_end"] == "until"
    series = cut.timeseries()
    assert series["t"].max() == 1.5 and series["trigger"].iloc[-1] == "final"
    with pytest.raises(barnraise.ScenarioError, match="max_time must be"):
        barnraise.run(SCENARIO, max_time=-1)
    with pytest.raises(barnraise.ScenarioError, match="deterministic mode only"):
        barnraise.run(SCENARIO, mode="realtime", max_time=1.0)


def test_a_scenario_with_a_bad_reporters_table_is_refused_when_loaded(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.py"
    script.write_text(textwrap.dedent("""\
        PARAMS = {}
        REPORTERS = {"conflicts": len}
        def run(simu):
            raise AssertionError("never run")
        def check(summary):
            return True
        """))
    with pytest.raises(barnraise.ScenarioError, match=r"bad.py: the scenario's REPORTERS: "
                       r"the reporter name 'conflicts' is a built-in column"):
        barnraise.run(str(script))
    assert main(["run", str(script)]) == 2
    assert "'conflicts' is a built-in column" in capsys.readouterr().err


def test_a_realtime_run_has_its_reporters_on_the_sampler_threads_rows() -> None:
    result = barnraise.run(SCENARIO, seed=1, mode="realtime", time_scale=50,
                           reporters={"mine": reporting.tiles},
                           agent_reporters={"mine_too": reporting.agent_tiles})
    series = result.timeseries()
    read = series[series["trigger"] != "event"]
    # each value on the row of the sample it was taken at (the clock is read once)
    assert len(read) and read["trigger"].iloc[-1] == "final"
    assert list(read["mine"]) == list(read["tiles_placed"])
    agents = result.agent_timeseries()
    last = agents[agents["trigger"] == "final"]
    assert len(last) == result.summary["agents"]
    assert list(last["mine_too"]) == list(last["tiles_placed"])


def test_the_horizon_stops_step_and_run_until_too() -> None:
    from barnraise.sim.dispatch import DeterministicDispatcher

    d = DeterministicDispatcher(seed=0)
    fired: list[float] = []

    class Target:
        name = "target"
        stopped = False

        def a2a_timer(self, timer: object) -> None:
            fired.append(d.clock.now)

    d.horizon = 2.0
    for t in (1.0, 3.0):
        d.call_later(t, Target(), lambda: None)  # type: ignore[arg-type]
    assert d.step() and fired == [1.0]
    assert not d.step() and fired == [1.0]  # the next is past the horizon: it waits
    assert not d.run_until(lambda: len(fired) == 2) and d.clock.now == 2.0
    assert d.run().reason == "until" and fired == [1.0]
    d.horizon = None
    assert d.run().reason == "quiescent" and fired == [1.0, 3.0]


def test_a_failing_reporter_in_a_scenario_file_exits_1_with_its_file_and_line(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "oops.py"
    script.write_text(textwrap.dedent("""\
        from barnraise.scenarios._kit import host_session
        PARAMS = {}
        def ratio(view):
            return len(view.members) / len(view.claims)
        REPORTERS = {"ratio": ratio}
        def run(simu):
            client, sid = host_session(simu, session_name="S", grid_size=8)
            return {"session_id": sid}
        def check(summary):
            return True
        """))
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and f'File "{script}", line 4, in ratio' in err
    assert "barnraise: the run failed: reporter 'ratio' raised ZeroDivisionError" in err


def test_a_stored_run_cut_at_max_time_replays_to_its_digest(tmp_path: pathlib.Path) -> None:
    from barnraise.runner import replay

    path = tmp_path / "cut.db"
    cut = barnraise.run(SCENARIO, seed=1, max_time=1.5, record=False, store=path)
    digest, difference = replay(path)  # the store keeps max_time; the replay stops there too
    assert difference is None and digest == cut.trace_digest
    assert barnraise.open_run(path).info.options["max_time"] == 1.5  # type: ignore[union-attr]


@pytest.mark.parametrize(("statement", "words"), [
    ("UPDATE reported SET data = x'c1' WHERE rowid = 1", "a reporter's values are not what"),
    ("UPDATE reported SET data = x'91a178' WHERE rowid = 1", "holds 1 reporter values, not 3"),
])
def test_reporter_values_a_store_did_not_write_are_a_store_error(
        tmp_path: pathlib.Path, statement: str, words: str) -> None:
    import sqlite3

    path = tmp_path / "run.db"
    barnraise.run(SCENARIO, seed=1, store=path, reporters=REPORTERS)
    db = sqlite3.connect(path)
    with db:
        db.execute(statement)
    db.close()
    with pytest.raises(barnraise.StoreError, match=words):
        barnraise.open_run(path).timeseries()


def test_reporter_names_or_tables_a_store_did_not_write_are_a_store_error(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store's reporter names are checked on reading as a run's are before it runs:
    one named as a built-in column would replace it; a missing table or column is said
    as a StoreError (and `barnraise view` exits 2), not sqlite3's error."""
    import shutil
    import sqlite3

    made = tmp_path / "run.db"
    barnraise.run(SCENARIO, seed=1, store=made, reporters=REPORTERS)
    for statement, words in (
            ("UPDATE reporters SET name = 'tiles_placed' WHERE name = 'my_mode'",
             "'tiles_placed' is a built-in column"),
            ("UPDATE reporters SET name = 'my_tiles' WHERE name = 'my_mode'",
             "the model reporter 'my_tiles' is named twice"),
            ("UPDATE reporters SET kind = 'other' WHERE name = 'my_mode'", "of kind 'other'"),
            ("UPDATE reporters SET name = '' WHERE name = 'my_mode'", "a reporter's name must"),
            ("DROP TABLE reporters", "no such table: reporters"),
            ("ALTER TABLE reported DROP COLUMN agent_id", "no such column: agent_id")):
        path = tmp_path / "edited.db"
        shutil.copy(made, path)
        db = sqlite3.connect(path)
        with db:
            db.execute(statement)
        db.close()
        with pytest.raises(barnraise.StoreError, match=re.escape(words)):
            barnraise.open_run(path).timeseries()
        capsys.readouterr()
        assert main(["view", str(path), "--port", "0"]) == 2, statement
        assert words in capsys.readouterr().err
