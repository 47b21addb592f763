"""The sweep command's edges: Ctrl-C, a bad --plot, and the processes engine's guard."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

import barnraise
from barnraise.cli import main
from barnraise.loading import load, metric_names
from barnraise.sweeps import columns_before_runs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def test_ctrl_c_says_how_many_runs_are_saved_and_exits_130(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "sweep"
    process = subprocess.Popen(
        [sys.executable, "-m", "barnraise.cli", "sweep", "conflict_storm", "--seeds", "0-199",
         "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        _wait_for(lambda: (out / "runs").is_dir() and any((out / "runs").glob("*.json")),
                  60, "the first saved run")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    saved = len(list((out / "runs").glob("*.json")))
    assert 1 <= saved < 200
    assert f"sweep interrupted: {saved} of 200 runs saved in {out}" in stderr, stderr
    assert f"computes only the other {200 - saved}" in stderr
    assert stdout == ""


def test_ctrl_c_without_out_says_nothing_was_kept(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import barnraise.sweeps as sweeps

    real = sweeps.run_one
    calls = []

    def second_run_interrupted(spec: sweeps.RunSpec, collect: Any = None) -> dict[str, object]:
        calls.append(spec)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(spec, collect)

    monkeypatch.setattr(sweeps, "run_one", second_run_interrupted)
    assert main(["sweep", "conflict_storm", "--param", "agents=2", "--seeds", "0-4"]) == 130
    err = capsys.readouterr().err
    assert "sweep interrupted after 1 of 5 runs; none saved" in err and "--out" in err


def test_a_plot_of_no_column_is_refused_before_any_run(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    import barnraise.sweeps as sweeps

    def no_run(spec: sweeps.RunSpec, collect: Any = None) -> dict[str, object]:
        raise AssertionError("a run started")

    monkeypatch.setattr(sweeps, "run_one", no_run)
    assert main(["sweep", "conflict_storm", "--param", "coordination_mode=free,coordinated",
                 "--plot", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("barnraise: error: --plot 'nosuch': no such column")
    assert "conflict_rate" in err and "coordination_mode" in err and "virtual_time" in err
    # a metric that is a dict gives name.key columns; a run column has none
    from barnraise.sweeps import SweepError, check_plot_column

    module = load("conflict_storm")
    check_plot_column(module, ["agents"], "metrics.latency_mean")
    check_plot_column(module, ["agents"], "latency_mean.p50")
    with pytest.raises(SweepError, match="no such column"):
        check_plot_column(module, ["agents"], "virtual_time.x")


@pytest.mark.parametrize(("scenario", "params"), [
    ("conflict_storm", {"coordination_mode": ["free"]}),
    ("kernel_build", {"grid_size": [30]}),
])
def test_every_column_of_a_real_sweep_is_known_before_its_runs(
        scenario: str, params: dict[str, list[object]]) -> None:
    known = columns_before_runs(load(scenario), params)
    assert known is not None
    table = barnraise.sweep(scenario, params, [0])
    assert set(table.columns) <= known | {c for c in table.columns
                                          if c.split(".", 1)[0] in known}


def test_metric_names_are_read_only_from_a_run_that_returns_dict_displays(
        tmp_path: pathlib.Path) -> None:
    literal = tmp_path / "literal.py"
    literal.write_text(textwrap.dedent('''
        PARAMS = {}
        def run(simu):
            def inner():
                return None  # not run's own
            if simu:
                return {"a": 1, "b": inner()}
            return {"c": 2}
        def check(summary):
            return True
    '''))
    built = tmp_path / "built.py"
    built.write_text(textwrap.dedent('''
        PARAMS = {}
        def run(simu):
            out = {"a": 1}
            return out
        def check(summary):
            return True
    '''))
    assert metric_names(load(str(literal))) == {"a", "b", "c"}
    assert metric_names(load(str(built))) is None
    assert columns_before_runs(load(str(built)), []) is None  # then --plot is not refused


def test_a_processes_sweep_in_a_script_without_the_guard_names_it(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text('import barnraise\n\nbarnraise.sweep("conflict_storm", {"agents": [2, 3]}, '
                      '[0], engine="processes", workers=2)\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("barnraise.sweeps.SweepError: engine 'processes': a worker process "
                           "died (BrokenProcessPool)"), done.stderr[-2000:]
    assert f"the script {script} has no `if __name__ == \"__main__\":` guard" in last


def test_the_readmes_sweep_example_shows_a_difference_between_its_modes() -> None:
    """It swept free and coordinated, which conflict_storm cannot tell apart (every write
    is inside a claim): the same figures in both; the README now says so, and sweeps
    modes that differ in the column it plots."""
    import re

    text = (ROOT / "README.md").read_text()
    command = re.search(r"`barnraise sweep conflict_storm (.*?)`", text, re.S)
    assert command is not None
    args = command.group(1).split()
    modes = next(a for a in args if a.startswith("coordination_mode=")).split("=")[1]
    plotted = args[args.index("--plot") + 1]
    table = barnraise.sweep("conflict_storm", {"agents": [4],
                                               "coordination_mode": modes.split(",")}, [0])
    assert table[plotted].nunique() == len(modes.split(",")), table[[plotted]]
    # and why the old example showed nothing: free and coordinated, figure for figure
    same = barnraise.sweep("conflict_storm", {"agents": [4],
                                              "coordination_mode": ["free", "coordinated"]},
                           [0])
    figures = ["conflict_rate", "latency_mean", "writes_ok", "writes_refused", "lost_work",
               "virtual_time"]
    assert same[figures].iloc[0].tolist() == same[figures].iloc[1].tolist()
