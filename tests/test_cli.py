"""The command line: the demo, exit codes, and clear errors."""

from __future__ import annotations

import json

import pytest

from sim.cli import main


def test_demo_succeeds_and_is_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--seed", "3"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["demo", "--json", "--seed", "3"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["success"] and first["tasks_done"] == 12 and first["reason"] == "quiescent"
    assert first["trace_digest"] == second["trace_digest"]
    assert main(["demo", "--json", "--seed", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["trace_digest"] != first["trace_digest"]


def test_demo_in_realtime_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--mode", "realtime", "--workers", "3"]) == 0
    assert "3 workers finished 6 tasks" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["demo", "--seed", "x"], "--seed"),
        (["demo", "--mode", "warp"], "--mode"),
        (["demo", "--workers", "0"], "--workers"),
        (["launch"], "launch"),
        ([], "command"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        if main(argv) == 2:
            raise SystemExit(2)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err
