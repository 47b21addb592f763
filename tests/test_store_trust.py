"""Issue 23, findings 8 and 9: a store never chooses the code that runs, and a store that is
not what barnraise writes is refused (exit 2, one line) with the file and its folder left
as they were, byte for byte.

Each test edits a real store in tmp_path as an attacker (or a damaged disk) would, then
asks ``replay``, ``resume``, ``view`` and ``open_run`` about it."""

from __future__ import annotations

import hashlib
import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from barnraise.cli import main
from barnraise.loading import UnverifiedScript
from barnraise.runner import open_run, replay, resume, run, stored_request
from barnraise.sim.store import SCHEMA_VERSION, StoreError, check_store
from barnraise.view.stored import ReplaySource, open_source

SMALL_KERNEL = {"grid_size": 40, "block": 20}


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folder(path: pathlib.Path) -> dict[str, str]:
    """Every file in ``path``'s folder and its sha256: what a refusal must leave as it was."""
    return {p.name: _sha(p) for p in sorted(path.parent.iterdir()) if p.is_file()}


def _edit(path: pathlib.Path, *statements: str) -> None:
    """Change the store by hand (a read-write connection, closed: no -wal left)."""
    db = sqlite3.connect(path)
    try:
        with db:
            for statement in statements:
                db.execute(statement)
    finally:
        db.close()
    assert not os.path.exists(f"{path}-wal")


def _kernel_store(tmp_path: pathlib.Path, name: str = "run.db") -> pathlib.Path:
    path = tmp_path / name
    run("kernel_build", seed=3, record=False, store=path, **SMALL_KERNEL)
    return path


def _refused(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(argv)
    said = capsys.readouterr()
    err = said.err.strip()
    assert code == 2, (argv, code, err, said.out[-500:])
    assert err.count("\n") == 0 and words in err, (argv, err)


EVIL = """\
import pathlib
pathlib.Path({marker!r}).write_text("ran")
PARAMS = {{}}
def run(simu):
    return {{}}
def check(summary):
    return True
"""


# -- finding 8: a store never chooses code ---------------------------------------------------


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_store_naming_a_file_runs_nothing_without_the_users_word(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The reproduction: run.scenario set to evil.py made replay, resume and the view's
    first seek import it. Now each refuses, exit 2, one line, and evil.py never runs."""
    marker = tmp_path / "evil-ran"
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    path = _kernel_store(tmp_path)
    named = str(evil) if where == "absolute" else "evil.py"
    _edit(path, f"UPDATE run SET scenario = '{named}', status = 'running'")
    before = _folder(path)
    for command in ("replay", "resume"):
        _refused([command, str(path)], "name that file with --script", capsys)
    # barnraise view decides when it starts (exit 2 before serving), not at a first seek.
    _refused(["view", str(path), "--port", "0"], "name that file with --script", capsys)
    with pytest.raises(StoreError, match="name that file with --script"):
        open_source(open_run(path)).frame()
    with pytest.raises(StoreError, match="--script"):
        replay(path)
    with pytest.raises(StoreError, match="--script"):
        resume(path)
    # open_run only reads: the run row, the log, the world, never the scenario.
    stored = open_run(path)
    assert stored.info.scenario == named and stored.status == "interrupted"
    assert stored.world() and stored.last() is not None
    assert not marker.exists()
    assert _folder(path) == before


@pytest.mark.parametrize(
    "name", ["os", "no_such_scenario", "_kit", "barnraise.scenarios.kernel_build"]
)
def test_a_name_the_installed_scenarios_do_not_have_is_refused(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = _kernel_store(tmp_path)
    _edit(path, f"UPDATE run SET scenario = '{name}'")
    before = _folder(path)
    _refused(["replay", str(path)], "installed scenarios package does not have", capsys)
    _edit(path, "UPDATE run SET status = 'running'")
    before = _folder(path)
    _refused(["resume", str(path)], "installed scenarios package does not have", capsys)
    assert _folder(path) == before


def _user_scenario(path: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    path.write_text(textwrap.dedent(f"""\
        import pathlib
        from barnraise.scenarios._kit import host_session
        PARAMS = {{"size": 8}}
        def run(simu, *, size):
            pathlib.Path({str(marker)!r}).write_text("ran")
            client, sid = host_session(simu, session_name="S", grid_size=size)
            client.call("builder_place_tile", session_id=sid, x=1, y=1, tile=3)
            return {{"session_id": sid}}
        def check(summary):
            return True
        """))
    return path


def test_a_store_made_from_a_file_runs_that_file_again_only_when_named_and_the_same(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    script = _user_scenario(tmp_path / "mine.py", marker)
    path = tmp_path / "mine.db"
    first = run(str(script), seed=4, record=False, store=path)
    info = check_store(path)
    assert info is not None and info.script_sha256 == _sha(script)
    marker.unlink()
    # Not named: refused, nothing run.
    _refused(["replay", str(path)], "name that file with --script", capsys)
    assert not marker.exists()
    # Named, the same bytes: it runs and reproduces the run.
    capsys.readouterr()
    assert main(["replay", str(path), "--script", str(script)]) == 0
    assert first.trace_digest in capsys.readouterr().out
    assert marker.exists()
    marker.unlink()
    # The view's scrubber, given the file, re-executes it at a seek and shows it exactly.
    source = open_source(open_run(path), script=script)
    assert isinstance(source, ReplaySource)
    try:
        picture = source.frame()
        assert source.problem is None and picture["scrub"]["exact"] is True
    finally:
        source.close()
    assert marker.exists()
    marker.unlink()
    # The same name, other bytes: refused before anything is run.
    script.write_text(script.read_text() + "# changed\n")
    before = _folder(path)
    _refused(["replay", str(path), "--script", str(script)], "not the file the store was made",
             capsys)
    with pytest.raises(StoreError, match="not the file"):
        open_source(open_run(path), script=script)
    assert not marker.exists()
    assert _folder(path) == before
    # --script is for a store made from a file, not one of an installed scenario.
    shipped = _kernel_store(tmp_path)
    _refused(["replay", str(shipped), "--script", str(script)], "installed scenario", capsys)
    assert not marker.exists()


def test_a_served_store_made_from_a_file_keeps_its_sha256(tmp_path: pathlib.Path) -> None:
    """``serve --scenario FILE --store PATH`` (HostedWorld) keeps the file's hash too, so
    its store resumes only with that file named, verified rather than 'unverified'."""
    pytest.importorskip("starlette")
    from barnraise.gateway.hosting import HostedWorld

    marker = tmp_path / "ran"
    script = _user_scenario(tmp_path / "served.py", marker)
    path = tmp_path / "served.db"
    world = HostedWorld(scenario=str(script), store=str(path), time_scale=50.0)
    world.close()
    info = check_store(path)
    assert info is not None and info.script_sha256 == _sha(script)


def test_a_store_from_before_the_sha_runs_its_file_when_named_and_says_unverified(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    script = _user_scenario(tmp_path / "older.py", marker)
    path = tmp_path / "older.db"
    first = run(str(script), seed=1, record=False, store=path)
    # As barnraise with schema 3 left it: no script_sha256 column, no migrations 4 and 5.
    _edit(path, "ALTER TABLE run DROP COLUMN script_sha256", "DROP TABLE reporters",
          "DROP TABLE reported", "DELETE FROM migrations WHERE version > 3",
          "PRAGMA user_version = 3")
    info = check_store(path)
    assert info is not None and info.schema == 3 and info.script_sha256 is None
    _refused(["replay", str(path)], "name that file with --script", capsys)
    capsys.readouterr()
    assert main(["replay", str(path), "--script", str(script)]) == 0
    said = capsys.readouterr()
    assert first.trace_digest in said.out
    warning = [line for line in said.err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "unverified" in warning[0], said.err
    # In Python: the same, the warning a UnverifiedScript.
    with pytest.warns(UnverifiedScript, match="unverified"):
        request = stored_request(info, str(path), script)
    assert request.script_sha256 == _sha(script)
    # A resume of it runs the named file and migrates the file (the column comes).
    _edit(path, "UPDATE run SET status = 'running'")
    with pytest.warns(UnverifiedScript):
        resumed = resume(path, script=script, record=False)
    assert resumed.trace_digest == first.trace_digest
    after = check_store(path)
    assert after is not None and after.schema == SCHEMA_VERSION == 5
    assert after.status == "finished" and after.script_sha256 is None


# -- finding 9: stores that break the exit-2 promise ---------------------------------------


def _every_command_refuses(path: pathlib.Path, words: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """replay, resume and open_run all refuse ``path`` (one line, exit 2) and leave its
    folder as it was, byte for byte."""
    before = _folder(path)
    for command in ("replay", "resume"):
        _refused([command, str(path)], words, capsys)
        assert _folder(path) == before, command
    with pytest.raises(StoreError, match=words):
        open_run(path)
    assert _folder(path) == before


@pytest.mark.parametrize("column, value", [
    ("params", "'{not json'"), ("params", "'[1, 2]'"), ("options", "'nope'"),
    ("summary", "'{'"), ("seed", "'seven'"), ("seed", "-1"), ("mode", "'sideways'"),
    ("status", "'paused'"), ("scenario", "''"), ("script_sha256", "'abc'")])
def test_a_malformed_run_row_is_exit_2_naming_the_field(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], column: str,
        value: str) -> None:
    path = _kernel_store(tmp_path)
    _edit(path, f"UPDATE run SET {column} = {value}", "UPDATE run SET status = 'running'"
          if column != "status" else "SELECT 1")
    _every_command_refuses(path, f"run.{column}", capsys)


def test_a_log_cut_short_under_its_digests_is_refused_before_anything_is_appended(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reproduction: rows past seq 500 deleted, status set to running: resume appended
    264 rows and died on UNIQUE constraint failed: digests.seq, the file spoiled."""
    path = _kernel_store(tmp_path)
    _edit(path, "DELETE FROM events WHERE seq > 500", "UPDATE run SET status = 'running'")
    _every_command_refuses(path, "past the log's end", capsys)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 501
    finally:
        db.close()


@pytest.mark.parametrize("edit", [
    "UPDATE events SET seq = seq + 1000000",  # renumbered: replay said "reproduces"
    "DELETE FROM events WHERE seq = 10",  # a gap
    "DELETE FROM events WHERE seq = 0",  # does not start at 0
])
def test_a_log_not_whole_and_in_order_is_refused_by_replay_and_resume_alike(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], edit: str) -> None:
    path = _kernel_store(tmp_path)
    _edit(path, edit, "DELETE FROM digests", "DELETE FROM snapshots",
          "UPDATE run SET status = 'running'")
    _every_command_refuses(path, "not whole and in order", capsys)


def test_a_fifo_or_a_directory_is_refused_without_opening_it(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    # In a process of its own, bounded: an open of a FIFO blocks until a writer comes.
    for command in (["replay"], ["resume"], ["view"], ["run", "locks_barriers", "--store"]):
        done = subprocess.run([sys.executable, "-m", "barnraise.cli", *command, str(fifo)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
        assert done.returncode == 2, (command, done.returncode, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and "not a regular file" in done.stderr
    with pytest.raises(StoreError, match="not a regular file"):
        open_run(fifo)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    _refused(["replay", str(folder)], "is a directory", capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.db", "pipe.db"]


def test_reading_a_store_leaves_no_wal_or_shm_beside_it(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only open of a WAL store made its -wal and -shm, and could not remove them;
    every check, open_run, status, events, world and a refused resume left two files."""
    path = _kernel_store(tmp_path)
    before = _folder(path)
    assert list(before) == ["run.db"]
    stored = open_run(path)
    assert stored.status == "finished" and stored.summary is not None
    assert stored.entries(type="task_completed") and stored.snapshots()
    assert stored.world() and len(stored.delegations()) and stored.last() is not None
    check_store(path)
    _refused(["resume", str(path)], "finished run", capsys)
    assert _folder(path) == before
    # Two readers at once (the view's threads): the first to close leaves the files the
    # other's connection uses; the last one removes them.
    held = stored.records()
    first = next(held)
    assert first.seq == 0 and os.path.exists(f"{path}-shm")
    assert stored.entries(type="task_completed")
    assert os.path.exists(f"{path}-shm")
    assert sum(1 for _ in held) == stored.last().seq  # type: ignore[union-attr]
    held.close()
    assert _folder(path) == before


def test_an_id_in_a_log_ending_in_other_digits_folds_without_a_traceback() -> None:
    """str.isdigit() takes a superscript two, int() does not: a crafted claim id in a
    realtime log made the fold (and so resume) a ValueError traceback."""
    from barnraise.actors.regions_log import serial_of as _serial

    assert _serial("claim_000012") == 12
    assert _serial("claim_\u00b2") == 0 and _serial("claim_\uff11") == 0


def test_a_record_marked_packed_that_does_not_decompress_is_exit_2(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _kernel_store(tmp_path)
    _edit(path, "UPDATE events SET packed = 1 WHERE seq = 5")
    before = _folder(path)
    _refused(["replay", str(path)], "a record's content is not", capsys)
    assert _folder(path) == before


def test_a_realtime_log_with_a_content_that_is_not_json_is_exit_2_for_resume(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rt.db"
    run("locks_barriers", mode="realtime", time_scale=200.0, record=False, store=path)
    db = sqlite3.connect(path)
    try:
        (seq,) = db.execute("SELECT min(seq) FROM events WHERE type = 'coordination_request' "
                            "AND packed = 0").fetchone()
    finally:
        db.close()
    _edit(path, f"UPDATE events SET content = CAST('{{not json' AS BLOB) WHERE seq = {seq}",
          "UPDATE run SET status = 'running'")
    before = _folder(path)
    _refused(["resume", str(path)], "a record's content is not", capsys)
    assert _folder(path) == before
