"""`barnraise scenarios` and `barnraise run`: output, files and exit codes 0/1/2."""

from __future__ import annotations

import io
import json
import pathlib
import shlex
import subprocess
import sys
import textwrap
import types

import numpy as np
import pandas as pd
import pytest

import barnraise
import barnraise.cli
from barnraise.cli import main
from barnraise.loading import coerce_params
from barnraise.runner import ScenarioError
from barnraise.sim.metrics import read_agent_timeseries, read_timeseries

REQUIRED = {"scenario", "seed", "mode", "success", "trace_digest", "virtual_time",
            "wall_seconds", "messages_delivered", "messages_dropped", "agents",
            "tiles_placed", "completion_percent", "conflicts", "tasks_completed",
            "tasks_failed", "metrics"}


def test_scenarios_lists_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    folder = pathlib.Path(__file__).resolve().parents[1] / "scenarios"
    shipped = sorted(p.stem for p in folder.glob("[!_]*.py"))
    assert len(shipped) == 16 and [line.split()[0] for line in lines] == shipped
    for line in lines:  # the name, then the first line of its docstring
        _, summary = line.split(maxsplit=1)
        assert summary.strip() and "\n" not in summary


def test_a_progress_bar_goes_to_stderr_when_it_is_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["run", "kernel_build", "--param", "grid_size=60"]) == 0
    captured = capsys.readouterr()
    last = captured.err.split("\r")[-1].strip()
    assert last.startswith("100%") and "elapsed" in last and "left" in last  # tqdm, full
    assert "elapsed" not in captured.out and "succeeded" in captured.out


def test_no_progress_bar_with_json_even_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["run", "kernel_build", "--param", "grid_size=60", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    json.loads(captured.out)


def test_no_progress_bar_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "kernel_build", "--param", "grid_size=60", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_run_json_has_every_field_and_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "kernel_build", "--seed", "4", "--json",
                 "--param", "grid_size=60", "--param", "block=30"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= REQUIRED
    assert summary["success"] is True and summary["params"]["grid_size"] == 60


def test_run_writes_summary_trace_and_canvas(tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "kernel_build", "--param", "grid_size=60", "--out", str(out)]) == 0
    assert "succeeded" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    assert sum(1 for r in records if r[2] == "deliver") == summary["messages_delivered"]
    assert [r[0] for r in records] == list(range(len(records)))
    assert (out / "canvas.png").read_bytes()[:4] == b"\x89PNG"


def test_a_users_scenario_runs_by_path_and_a_failed_check_exits_1(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "never_happy.py"
    path.write_text(textwrap.dedent('''
        """A scenario whose success check never holds."""
        PARAMS = {"agents": 2}

        def run(simu, *, agents):
            host = simu.client()
            host.session_create(session_name="x", grid_size=10)
            return {"agents_asked": agents}

        def check(summary):
            return False
    '''))
    assert main(["run", str(path), "--param", "agents=3", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["metrics"] == {"agents_asked": 3} and summary["success"] is False
    # `scenarios FILE` names it as the run's summary does, and says which file it is
    assert main(["scenarios", str(path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"{summary['scenario']} (from {path})\n\nA scenario whose success check never holds.")
    assert summary["scenario"] == "never_happy"


_WORDY = textwrap.dedent('''
    PARAMS = {}

    def run(simu):
        simu.client().session_create(session_name="x", grid_size=10)
        return {"words": "w" * 400_000}

    def check(summary):
        return True
''')


def test_run_json_piped_into_head_exits_141_without_a_traceback(tmp_path: pathlib.Path) -> None:
    # A summary far larger than a pipe's buffer: the writer is still writing when head
    # has taken its 10 bytes and gone, whatever the timing.
    path = tmp_path / "wordy.py"
    path.write_text(_WORDY)
    command = shlex.join([sys.executable, "-m", "barnraise.cli", "run", str(path), "--json"])
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -c 10"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (141, '{"agents":', "")


class _ClosedPipe:
    """A stdout whose reader has gone."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")  # as a captured stdout has none


def test_a_closed_stdout_still_gets_out_written(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wordy.py"
    path.write_text(_WORDY)
    written: list[str] = []
    monkeypatch.setattr(barnraise.cli.RunResult, "write",
                        lambda self, out: written.append(out))
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 141
    assert written == [str(tmp_path / "out")]


def test_every_scenarios_defaults_are_within_its_bounds() -> None:
    from barnraise.loading import list_scenarios, load

    for name, _ in list_scenarios():
        module = load(name)
        bounds = getattr(module, "BOUNDS", {})
        assert set(bounds) <= set(module.PARAMS), name
        for key, value in module.PARAMS.items():
            if key in bounds:
                bounds[key].check(key, value)


def test_a_binary_plan_file_is_a_bad_request(tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(b"\x00\xff\xfe not text")
    assert main(["run", "plan_run", "--param", f"plan={plan}"]) == 2
    assert "not a text file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "no_such_scenario"], "unknown scenario"),
        (["run", "kernel_build", "--param", "builders=many"], "parameter builders"),
        (["run", "kernel_build", "--param", "colour=red"], "unknown parameter 'colour'"),
        (["run", "kernel_build", "--param", "builders"], "KEY=VALUE"),
        (["run", "/no/such/file.py"], "no scenario file"),
        (["run", "kernel_build", "--mode", "warp"], "--mode"),
        (["run", "kernel_build", "--seed", "x"], "--seed"),
        # values that type-check but do not fit: the scenario refuses them before it runs
        (["run", "plan_run", "--param", "plan=/no/such.yaml"], "no plan file"),
        (["run", "kernel_build", "--param", "strategy=foo"], "'foo' is not one of"),
        (["run", "kernel_build", "--param", "builders=0"], "builders"),
        (["run", "grid_build", "--param", "builders=8"], "square number"),
        (["run", "hitl_approval", "--param", 'decisions=["maybe"]'], "'maybe' is not one of"),
        # issue 11's CLI findings: each once a traceback, a hang or a silent exit 1
        (["run", "kernel_build", "--param", "grid_size=1000000000"], "at most 4096"),
        (["run", "conflict_storm", "--param", "agents=0"], "parameter agents"),
        (["run", "conflict_storm", "--param", "coordination_mode=chaos"], "'chaos' is not"),
        (["run", "hitl_approval", "--param", "block=0"], "parameter block"),
        (["run", "best_of_n", "--param", "min_error=2"], "parameter min_error"),
        (["run", "kernel_build", "--param", "tile_rate=1e-300"], "parameter tile_rate"),
        (["run", "kernel_build", "--param", "tile_rate=nan"], "finite"),
        (["run", "kernel_build", "--param", "tile_rate=0"], "parameter tile_rate"),
        (["run", "conflict_storm", "--param", "hold=inf"], "finite"),
        (["run", "hitl_approval", "--param", "approval_timeout=inf"], "finite"),
        (["run", "locks_barriers", "--param", "think=-1"], "parameter think"),
        (["run", "plan_run", "--param", "decision=maybe"], "'maybe' is not"),
        (["run", "plan_run", "--param", "builders=0"], "parameter builders"),
        (["run", "kernel_build", "--mode", "realtime", "--time-scale", "1e-9"],
         "time_scale must"),
        (["run", "kernel_build", "--out", "/proc/x"], "cannot write there"),
        (["run", "hitl_approval", "--param", 'decisions=["approve"'], "parameter decisions"),
        (["run", "parallel_build", "--param", "stagger=soon"], "parameter stagger"),
        (["run", "kernel_build", "--time-scale", "5"], "realtime mode only"),
        (["run", "kernel_build", "--mode", "realtime", "--time-scale", "0"], "time_scale must"),
        (["run", "kernel_build", "--mode", "realtime", "--time-scale", "fast"], "--time-scale"),
    ],
)
def test_bad_requests_are_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str],
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err.strip()
    # argparse's own refusals show the usage first; every refusal ends in one line
    assert needle in err.splitlines()[-1] and "Traceback" not in err
    assert len(err.splitlines()) == 1 or err.splitlines()[0].startswith("usage: ")


def test_barnraise_run_from_python() -> None:
    import barnraise

    result = barnraise.run("kernel_build", seed=9, mode="deterministic", grid_size=60, block=30)
    assert isinstance(result, barnraise.RunResult)
    assert result.success and result.summary["seed"] == 9
    assert result.summary["mode"] == "deterministic"
    assert result.trace_digest == result.summary["trace_digest"]
    # the canvas is the final tile layer and, at 100%, equal to the seeded blueprint
    from barnraise.scenarios._kit import kernel_blueprint
    from barnraise.sim.dispatch import seed_for

    blueprint = kernel_blueprint(60, np.random.default_rng(seed_for(9, "scenario:blueprint")))
    assert result.canvas() is not None and np.array_equal(result.canvas(), blueprint)
    with pytest.raises(barnraise.ParamError, match="strategy"):
        barnraise.run("kernel_build", strategy="zigzag")


def test_a_realtime_run_takes_its_time_scale(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "parallel_build", "--mode", "realtime", "--time-scale", "100",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "realtime" and summary["time_scale"] == 100.0
    assert main(["run", "parallel_build", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_scale"] is None


# -- parameter conversion (msgspec) ---------------------------------------------------------


def _scenario(**defaults: object) -> types.ModuleType:
    module = types.ModuleType("fake_scenario")
    module.PARAMS = defaults  # type: ignore[attr-defined]
    return module


FAKE = _scenario(count=3, rate=1.5, fast=False, name="x", items=[1], options={"a": 1},
                 anything=None)


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("count", "12", 12), ("count", "1e3", 1000), ("rate", "3", 3.0), ("rate", "0.25", 0.25),
        ("fast", "true", True), ("fast", "False", False), ("fast", "1", True),
        ("fast", "0", False), ("name", "12", "12"), ("items", "[1, 2]", [1, 2]),
        ("items", "[]", []), ("options", '{"b": [2]}', {"b": [2]}), ("anything", "7", "7"),
    ],
)
def test_cli_strings_become_the_defaults_types(key: str, text: str, value: object) -> None:
    got = coerce_params(FAKE, {key: text})[key]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    ("key", "given", "needle"),
    [
        # strings, read leniently, that still do not fit
        ("count", "many", "parameter count: expected int, got 'many'"),
        ("rate", "fast", "parameter rate: expected float, got 'fast'"),
        ("fast", "maybe", "parameter fast: expected bool, got 'maybe'"),
        ("items", "[1,", "parameter items: expected list, got '[1,' (Input data was trunc"),
        ("items", "1,2", "parameter items: expected list, got '1,2' (Expected `array`, got"),
        ("items", '{"a": 1}', "parameter items: expected list, got '{\"a\": 1}' (Expected `a"),
        ("options", "[1]", "parameter options: expected dict, got '[1]' (Expected `object`"),
        # Python values, read strictly: no bool for an int, no float for an int
        ("count", True, "parameter count: expected int, got True"),
        ("count", 2.0, "parameter count: expected int, got 2.0"),
        ("rate", "", "parameter rate: expected float, got ''"),
        ("items", (1, "a", {}), None),  # a tuple is a sequence: accepted as a list
        ("name", 5, "parameter name: expected str, got 5"),
    ],
)
def test_values_that_do_not_convert_are_refused_naming_the_parameter(
    key: str, given: object, needle: str | None,
) -> None:
    if needle is None:
        assert coerce_params(FAKE, {key: given})[key] == list(given)  # type: ignore[call-overload]
        return
    with pytest.raises(ScenarioError) as caught:
        coerce_params(FAKE, {key: given})
    assert str(caught.value).startswith(needle), str(caught.value)


def test_python_values_of_the_right_type_pass_and_ints_widen_to_floats() -> None:
    got = coerce_params(FAKE, {"count": 4, "rate": 2, "items": ["a"], "anything": object})
    assert got["count"] == 4 and got["rate"] == 2.0 and type(got["rate"]) is float
    assert got["items"] == ["a"] and got["anything"] is object
    assert got["name"] == "x" and got["options"] == {"a": 1}  # defaults kept
    with pytest.raises(ScenarioError, match="unknown parameter 'colour'; parameters: anything"):
        coerce_params(FAKE, {"colour": "red"})


def test_scenarios_name_prints_the_docstring_and_typed_parameters(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "conflict_storm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("conflict_storm\n\nA storm of agents claiming random regions")
    assert "Success: the figures are consistent" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.startswith("  ")}
    assert " ".join(rows["agents"]) == "int default 8 (>= 1 and <= 100000)"
    assert " ".join(rows["coordination_mode"]) == (
        'str default "coordinated" (one of free, coordinated, sequential)')
    assert " ".join(rows["rate"]) == "float default 1.0 (>= 0.01 and <= 1e+07)"
    assert main(["scenarios", "no_such_scenario"]) == 2
    assert "unknown scenario 'no_such_scenario'" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["afile", "/proc/x/y"])
def test_a_bad_out_place_is_exit_2_before_the_run(
        where: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    place = tmp_path / where if where == "afile" else pathlib.Path(where)
    if where == "afile":
        place.write_text("keep me")
    assert main(["run", "kernel_build", "--out", str(place)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no run happened
    assert captured.err.count("\n") == 1 and str(place) in captured.err
    if where == "afile":
        assert place.read_text() == "keep me"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "2e6"])
def test_a_bad_interval_is_exit_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "kernel_build", "--interval", value]) == 2
    assert "--interval must be" in capsys.readouterr().err


def test_the_text_summary_says_what_counts_mean_and_omits_what_does_not_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "kernel_build"]) == 0
    kernel = capsys.readouterr().out
    assert "16 tests failed (45 wrong tiles found), all repaired" in kernel
    assert "100% of the blueprint built" in kernel and "None" not in kernel
    assert "tasks at the end: 48 completed, 16 failed" in kernel
    assert main(["run", "conflict_storm"]) == 0
    storm = capsys.readouterr().out
    assert "blueprint" not in storm and "% complete" not in storm and "None" not in storm
    assert "35 claims refused for overlapping another's (conflicts)" in storm
    assert main(["run", "mode_comparison"]) == 0
    table = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in table if line.strip().split()[:1] in
            (["free"], ["coordinated"], ["sequential"])]
    assert [r[0] for r in rows] == ["free", "coordinated", "sequential"]
    assert all(r[1] == "100" for r in rows)  # completion in every mode
    assert rows[0][3] != "0" and rows[1][3] == "0"  # lost work only in free mode


def test_out_writes_the_metrics_files(tmp_path: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", "hitl_approval", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for name in ("timeseries.csv", "agents.csv", "events.csv", "gantt.png", "dag.png",
                 "sequence.png", "timeseries.png", "build.gif"):
        assert (out / name).stat().st_size > 0, name
    events = (out / "events.csv").read_text().splitlines()
    assert events[0].startswith("seq,t,source,topic,event")
    assert summary["success"] is True


def test_out_of_a_multi_session_run_keeps_every_session_apart(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """mode_comparison runs a session per coordination mode: --out's CSV files hold every
    session's rows, each with its session_id, and every frame of the result has one."""
    out = tmp_path / "run"
    assert main(["run", "mode_comparison", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    result = barnraise.run("mode_comparison")
    sessions = set(result.timeseries()["session_id"])
    assert len(sessions) == 3
    series = read_timeseries(out / "timeseries.csv")
    pd.testing.assert_frame_equal(series, result.timeseries())
    agents = read_agent_timeseries(out / "agents.csv")
    assert set(agents["session_id"]) == sessions
    events = pd.read_csv(out / "events.csv")
    assert set(events["session_id"].dropna()) == sessions
    frames = {"timeseries": result.timeseries(), "agents": result.agent_timeseries(),
              "events": result.events(), "delegations": result.delegations(),
              "messages": result.messages(), "task_intervals": result.task_intervals()}
    for name, frame in frames.items():
        assert "session_id" in frame.columns, name
    assert set(frames["messages"]["session_id"].dropna()) == sessions
    assert set(frames["task_intervals"]["session_id"]) <= sessions
