"""``--out`` folders: a run's files never mix with another run's or a sweep's
(barnraise/outdir.py's manifest)."""

from __future__ import annotations

import json
import pathlib
import shutil
import sqlite3

import pytest

import barnraise
from barnraise.cli import main
from barnraise.outdir import (
    MANIFEST,
    check_run_out,
    clear_run_files,
    run_identity,
    write_run_manifest,
)
from barnraise.scenarios import ScenarioError

# The cheapest shipped run that writes a canvas: fractions of a second.
RUN = ["run", "conflict_storm", "--param", "agents=2"]


def _files(folder: pathlib.Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


@pytest.fixture(scope="module")
def result() -> barnraise.RunResult:
    return barnraise.run("conflict_storm", agents=2)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory,
            result: barnraise.RunResult) -> pathlib.Path:
    """A run's folder, as ``barnraise run --out`` writes it but for build.gif (copied by
    each test that changes it)."""
    folder = tmp_path_factory.mktemp("written") / "out"
    result.write(folder)
    return folder


def _copy(folder: pathlib.Path, to: pathlib.Path) -> pathlib.Path:
    shutil.copytree(folder, to / "out")
    return to / "out"


def test_a_run_writes_a_manifest_naming_itself_and_its_files(written: pathlib.Path) -> None:
    manifest = json.loads((written / MANIFEST).read_text())
    assert manifest["kind"] == "barnraise run"
    assert manifest["run"]["scenario"] == "conflict_storm" and manifest["run"]["seed"] == 0
    assert manifest["run"]["params"]["agents"] == 2
    assert set(manifest["files"]) == {p.name for p in written.iterdir()} - {MANIFEST}
    assert {"summary.json", "canvas.png", "trace.jsonl"} <= set(manifest["files"])


def test_another_runs_folder_is_refused_before_the_run_and_left_as_it_was(
        written: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(written, tmp_path)
    before = _files(folder)
    capsys.readouterr()
    assert main([*RUN, "--seed", "1", "--out", str(folder), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before the run: nothing ran, nothing printed
    assert err.startswith("barnraise: error: --out ") and "another run's files" in err
    assert "conflict_storm seed 0" in err and "--overwrite-out" in err
    assert _files(folder) == before


def test_the_same_run_may_write_over_its_own_files(written: pathlib.Path) -> None:
    params = json.loads((written / "summary.json").read_text())["params"]
    same = run_identity("conflict_storm", 0, "deterministic", params)
    check_run_out(written, same, overwrite=False)  # no error
    other = run_identity("conflict_storm", 0, "realtime", params)
    with pytest.raises(ScenarioError, match="another run's files"):
        check_run_out(written, other, overwrite=False)
    check_run_out(written, other, overwrite=True)


def test_overwrite_out_leaves_none_of_the_other_runs_files(tmp_path: pathlib.Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    # an earlier run that wrote files this one will not (a build.gif, a gantt chart)
    old = ["summary.json", "build.gif", "gantt.png", "dag.png"]
    for name in old:
        (tmp_path / name).write_text("old")
    write_run_manifest(tmp_path, run_identity("kernel_build", 3, "realtime", {}),
                       [tmp_path / name for name in old])
    (tmp_path / "notes.txt").write_text("mine")  # not a run's: kept
    assert main([*RUN, "--out", str(tmp_path)]) == 2
    assert "kernel_build seed 3 (realtime)" in capsys.readouterr().err
    assert main([*RUN, "--out", str(tmp_path), "--overwrite-out"]) == 0
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["run"]["scenario"] == "conflict_storm"
    assert not {"gantt.png", "dag.png"} & set(manifest["files"])
    assert (tmp_path / "build.gif").read_bytes()[:3] == b"GIF"  # this run's
    assert set(_files(tmp_path)) == {*manifest["files"], MANIFEST, "notes.txt"}
    assert json.loads((tmp_path / "summary.json").read_text())["scenario"] == "conflict_storm"


def test_a_folder_of_an_older_run_without_a_manifest_is_known_by_its_summary(
        written: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(written, tmp_path)
    (folder / MANIFEST).unlink()
    assert main([*RUN, "--param", "coordination_mode=free", "--out", str(folder)]) == 2
    assert "another run's files" in capsys.readouterr().err


def test_overwrite_out_without_out_is_a_bad_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, "--overwrite-out"]) == 2
    assert "--overwrite-out applies with --out only" in capsys.readouterr().err


def test_a_sweep_reuses_only_a_folder_of_the_same_sweep(written: pathlib.Path,
                                                        tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    out = tmp_path / "sweep"
    first = barnraise.sweep("conflict_storm", {"agents": [2]}, [0], out=out)
    assert first.attrs["computed"] == 1
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest == {"kind": "barnraise sweep",
                        "sweep": {"scenario": "conflict_storm", "params": ["agents"]}}
    # the same sweep, one more seed: reused and extended
    again = barnraise.sweep("conflict_storm", {"agents": [2]}, [0, 1], out=out)
    assert (again.attrs["computed"], again.attrs["reused"]) == (1, 1)
    before = _files(out / "runs")
    for scenario, params in (("locks_barriers", {}),
                             ("conflict_storm", {"coordination_mode": ["free"]})):
        with pytest.raises(ScenarioError, match="holds another sweep's runs "
                           r"\(conflict_storm over agents\)"):
            barnraise.sweep(scenario, params, [0], out=out)
    assert _files(out / "runs") == before
    # a run's folder is not a sweep's, and a sweep's is not a run's
    with pytest.raises(ScenarioError, match="holds a run's files"):
        barnraise.sweep("conflict_storm", {"agents": [2]}, [0], out=written)
    capsys.readouterr()
    assert main([*RUN, "--out", str(out), "--overwrite-out"]) == 2
    assert "holds a sweep's files (conflict_storm)" in capsys.readouterr().err


def test_a_sweep_folder_from_before_manifests_is_still_a_sweeps(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "old"
    barnraise.sweep("conflict_storm", {"agents": [2]}, [0], out=out)
    (out / MANIFEST).unlink()
    again = barnraise.sweep("conflict_storm", {"agents": [2]}, [0], out=out)
    assert again.attrs["reused"] == 1 and (out / MANIFEST).is_file()
    (out / MANIFEST).unlink()
    assert main([*RUN, "--out", str(out)]) == 2
    assert "holds a sweep's files" in capsys.readouterr().err
    # a folder of the user's own that happens to have a runs/ folder is not a sweep's
    mine = tmp_path / "mine"
    (mine / "runs").mkdir(parents=True)
    check_run_out(mine, run_identity("conflict_storm", 0, "deterministic", {}),
                  overwrite=False)


@pytest.mark.parametrize("files, says", [
    (["README.md", "summary.json"], "lists files a run does not write ('README.md')"),
    (["../victim.txt"], "lists files a run does not write"),
    ("ab", "must be a list of file names, not 'ab'"),  # not each letter a file
    ({"summary.json": 1}, "must be a list of file names"),
    (["gantt.png"], "lists 'gantt.png', which is there but not a file"),
])
def test_a_manifest_listing_what_a_run_does_not_write_removes_nothing(
        tmp_path: pathlib.Path, result: barnraise.RunResult,
        capsys: pytest.CaptureFixture[str], files: object, says: str) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    for name in ("README.md", "summary.json", "a", "b"):
        (folder / name).write_text("mine")
    (folder / "gantt.png").mkdir()
    (tmp_path / "victim.txt").write_text("mine")
    params = json.loads(json.dumps(result.summary["params"]))
    identity = run_identity("conflict_storm", 0, "deterministic", params)
    (folder / MANIFEST).write_text(json.dumps({"kind": "barnraise run", "run": identity,
                                               "files": files}))
    before = _files(folder)
    # the same run (no --overwrite-out needed) and another run with it: refused
    # before the run, naming the manifest; and RunResult.write() by the same rule
    for extra in ([], ["--seed", "1", "--overwrite-out"]):
        capsys.readouterr()
        assert main([*RUN, *extra, "--out", str(folder)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and str(folder / MANIFEST) in err and says in err, err
    with pytest.raises(ScenarioError, match=r"manifest\.json"):
        result.write(folder)
    assert _files(folder) == before and (tmp_path / "victim.txt").exists()


def test_clearing_a_run_removes_a_listed_symlink_not_what_it_points_to(
        tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (tmp_path / "victim.txt").write_text("mine")
    (folder / "canvas.png").symlink_to(tmp_path / "victim.txt")
    write_run_manifest(folder, run_identity("kernel_build", 3, "realtime", {}),
                       [folder / "canvas.png"])
    clear_run_files(folder)
    assert list(folder.iterdir()) == [] and (tmp_path / "victim.txt").read_text() == "mine"


def test_resume_out_checks_the_folder_before_the_resume(tmp_path: pathlib.Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    store = tmp_path / "run.db"
    assert main([*RUN, "--store", str(store)]) == 0
    with sqlite3.connect(store) as db:  # as a run killed at its end leaves it
        db.execute("UPDATE run SET status = 'running', summary = NULL")
    db.close()
    rows = store.read_bytes()
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "gantt.png").write_text("old")
    write_run_manifest(folder, run_identity("kernel_build", 3, "realtime", {}),
                       [folder / "gantt.png"])
    before = _files(folder)
    capsys.readouterr()
    assert main(["resume", str(store), "--out", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "another run's files (kernel_build seed 3" in err, err
    assert _files(folder) == before and store.read_bytes() == rows
    assert main(["resume", str(store), "--overwrite-out"]) == 2
    assert "--overwrite-out applies with --out only" in capsys.readouterr().err
    assert main(["resume", str(store), "--out", str(folder), "--overwrite-out"]) == 0
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["run"]["scenario"] == "conflict_storm" and not (folder / "gantt.png").exists()
