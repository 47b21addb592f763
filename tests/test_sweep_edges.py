"""Issue 23, finding 10 (the sweep's part): rows read back from ``--out`` are checked (a bad
one is computed again, and the sweep says so), one ``--out`` is held by one sweep at a
time, and integer flags take ASCII digits only."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pandas as pd
import pytest

import barnraise
from barnraise.cli import main, parse_seeds
from barnraise.runner import ScenarioError
from barnraise.sweeps import LOCK_NAME, _write_results, plan

PARAMS = {"agents": [2]}


def _command(out: pathlib.Path, seeds: str = "0-3") -> list[str]:
    return ["sweep", "conflict_storm", "--param", "agents=2", "--seeds", seeds,
            "--out", str(out), "--json"]


def _saved(out: pathlib.Path) -> dict[int, tuple[pathlib.Path, dict[str, Any]]]:
    """Seed -> (file, saved run) of every run saved in ``out``."""
    found = {}
    for path in (out / "runs").glob("*.json"):
        saved = json.loads(path.read_text())
        found[saved["seed"]] = (path, saved)
    return found


def test_rows_edited_by_hand_are_computed_again_and_said(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction: seed 999 and virtual_time -1 written into saved rows were reused
    as they were; a virtual_time of text made results.parquet an ArrowInvalid traceback."""
    out = tmp_path / "out"
    fresh = barnraise.sweep("conflict_storm", PARAMS, range(5), out=out)
    saved = _saved(out)
    edits = {0: ("seed", 999), 1: ("virtual_time", -1), 2: ("virtual_time", "soon"),
             3: ("agents", 3)}
    for seed, (column, value) in edits.items():
        path, record = saved[seed]
        record["row"][column] = value
        path.write_text(json.dumps(record))
    saved[4][0].write_text('{"key": "cut sh')  # a file cut short
    capsys.readouterr()
    assert main(_command(out, "0-4")) == 0
    said = capsys.readouterr()
    report = json.loads(said.out)
    assert report["computed"] == 5 and report["reused"] == 0, report
    notes = [line for line in said.err.splitlines() if "computing it again" in line]
    assert len(notes) == 5, said.err
    for words in ("seed 999", "virtual_time -1", "virtual_time 'soon'", "agents=3",
                  "not JSON"):
        assert sum(words in line for line in notes) == 1, (words, notes)
    table = pd.read_csv(out / "results.csv")
    assert list(table["trace_digest"]) == list(fresh["trace_digest"])
    assert list(table["seed"]) == [0, 1, 2, 3, 4]
    assert (table["virtual_time"] >= 0).all()
    parquet = pd.read_parquet(out / "results.parquet")
    assert list(parquet["trace_digest"]) == list(fresh["trace_digest"])
    # Saved again, whole: a third sweep reuses every run and says nothing.
    assert main(_command(out, "0-4")) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["reused"] == 5 and "computing it again" not in said.err


def test_a_column_parquet_cannot_type_is_a_note_not_a_traceback(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pd.DataFrame({"seed": [0, 1], "metric": [1, "one"]})
    _write_results(table, tmp_path)
    err = capsys.readouterr().err
    assert (tmp_path / "results.csv").is_file() and not (tmp_path / "results.parquet").exists()
    assert err.count("\n") == 1 and "results.parquet not written" in err


def test_one_out_is_held_by_one_sweep_at_a_time(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction: two sweeps on one --out both computed (30 rows for 20 runs). Now
    the second, started while the first runs, exits 2 naming the holder; once the first
    has ended the directory is free again."""
    out = tmp_path / "out"
    second: list[tuple[int, str]] = []

    def meanwhile(row: dict[str, Any]) -> None:
        if not second:
            capsys.readouterr()
            code = main(_command(out, "0-3"))
            second.append((code, capsys.readouterr().err))

    first = barnraise.sweep("conflict_storm", PARAMS, range(4), out=out, on_result=meanwhile)
    assert first.attrs["computed"] == 4
    ((code, err),) = second
    assert code == 2 and err.count("\n") == 1, err
    assert "in use by another sweep" in err and f"pid {os.getpid()}" in err, err
    assert len(list((out / "runs").glob("*.json"))) == 4
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4  # nothing computed twice
    assert (out / LOCK_NAME).is_file()
    again = barnraise.sweep("conflict_storm", PARAMS, range(4), out=out)
    assert again.attrs["reused"] == 4


# Full-width 0-3 and 1, an Arabic-Indic 1, a superscript 2: all str.isdigit().
@pytest.mark.parametrize("spec", ["\uff10-\uff13", "\uff11", "0,\u0661", "0-\uff13",
                                  "\u00b2"])
def test_seeds_take_ascii_digits_only(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ScenarioError, match="ASCII digits"):
        parse_seeds(spec)
    capsys.readouterr()
    assert main(["sweep", "conflict_storm", "--seeds", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--seeds" in err and "ASCII" in err, err


def test_ascii_seeds_still_parse() -> None:
    assert parse_seeds(" 0-3 ") == [0, 1, 2, 3]
    assert parse_seeds("7") == [7]
    assert parse_seeds("5, 1,2") == [5, 1, 2]


@pytest.mark.parametrize("argv", [
    ["sweep", "conflict_storm", "--workers", "\uff12"],
    ["run", "kernel_build", "--seed", "\uff17"],
    ["run", "kernel_build", "--view", "--port", "\uff18\uff10"],
    ["serve", "--seed", "\u0661"],
    ["serve", "--port", "\uff10"],
    ["mcp", "--seed", "\u00b2"],
    ["view", "x.db", "--port", "\uff10"],
])
def test_an_integer_flag_in_other_digits_is_a_usage_error(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "ASCII digits" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["results.csv", "results.parquet", "results.jsonl",
                                   "runs/KEY.json"])
def test_a_folder_where_a_sweep_writes_a_file_is_exit_2_before_any_run(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    out = tmp_path / "out"
    (spec,) = plan("conflict_storm", PARAMS, [0])
    (out / where.replace("KEY", spec.key)).mkdir(parents=True)
    capsys.readouterr()
    assert main(_command(out, "0")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is in the way" in err, err
    assert not (out / "results.jsonl").is_file()  # nothing was run
    # ... and the refused sweep let go of out: a sweep there is refused for the folder,
    # not for a lock nobody holds.
    capsys.readouterr()
    assert main(_command(out, "0")) == 2
    assert "in use" not in capsys.readouterr().err
