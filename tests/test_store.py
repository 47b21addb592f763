"""The durable store (sim/store/): writing, reading back, replay, resume after SIGKILL,
and bad paths that are refused with the file left as it was."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import pathlib
import random
import re
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import barnraise
import barnraise.sim.store.divergence as divergence_module
from barnraise.actors.world import Simulation
from barnraise.cli import main
from barnraise.loading import list_scenarios
from barnraise.runner import open_run, replay, resume, run
from barnraise.sim.store import (
    SCHEMA_VERSION,
    SNAPSHOT_EVERY,
    Store,
    StoreError,
    check_store,
    read_snapshot,
)
from barnraise.sim.trace import Trace, TraceRecord
from tests import crashing

SMALL_KERNEL = {"grid_size": 40, "block": 20}


def _digest_of_file(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- writing and reading back ------------------------------------------------------------


def test_a_stored_run_has_the_same_trace_and_reads_back(tmp_path: pathlib.Path) -> None:
    memory = run("kernel_build", seed=3, record=False, **SMALL_KERNEL)
    path = tmp_path / "run.db"
    stored = run("kernel_build", seed=3, record=False, store=path, **SMALL_KERNEL)
    assert stored.trace_digest == memory.trace_digest
    view = open_run(path)
    assert view.status == "finished"
    assert view.summary is not None and view.summary["trace_digest"] == memory.trace_digest
    assert view.digest() == memory.trace_digest
    events = view.entries()
    assert [e["seq"] for e in events] == list(range(len(memory.trace)))
    assert {"seq", "time", "type"} <= set(events[0])
    completed = view.entries(type="task_completed")
    assert len(completed) == sum(1 for r in memory.trace.records()
                                 if r.kind == "event" and r.type == "task_completed")
    assert all(e["type"] == "task_completed" for e in completed)
    canvas = view.canvas()
    assert canvas is not None and memory.canvas() is not None
    assert np.array_equal(canvas, memory.canvas())
    delegations = view.delegation_rows()
    assert sorted(d["task_id"] for d in delegations) == sorted(t["task_id"]
                                                               for t in memory.tasks)
    final = {t["task_id"]: t["status"] for t in memory.tasks}
    assert all(d["status"] == final[d["task_id"]] for d in delegations)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [r[0] for r in db.execute("SELECT version FROM migrations")] == \
            list(range(1, SCHEMA_VERSION + 1))
        # Every table was made in the store's first bytes (one write, one sync): no
        # index beyond the primary keys, and the run row is there.
        assert db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                          "sql IS NOT NULL").fetchall() == []
        # Each commit's digest is the trace digest of the log up to its end, the last
        # one the run's.
        digests = db.execute("SELECT seq, digest FROM digests ORDER BY seq").fetchall()
    db.close()
    assert len(digests) > 1 and digests[-1] == (len(memory.trace), memory.trace_digest)
    prefix = Trace()
    for seq, digest in digests:
        for r in memory.trace.records_from(len(prefix), seq):
            prefix.add_record((r.t, r.kind, r.sender, r.recipient, r.type, r.content))
        assert prefix.digest == digest
    with pytest.raises(ValueError, match=r"digest_at\(1\): the trace has"):
        prefix.digest_at(1)  # the hash only goes forward


def test_the_rows_of_a_stored_log_are_its_records_as_stored(tmp_path: pathlib.Path) -> None:
    """``StoredRun.rows`` (what the realtime resume's fold reads): the records as stored,
    a long content packed, filtered by type and by seq in SQL as ``records`` would be."""
    path = tmp_path / "run.db"
    run("kernel_build", seed=3, record=False, store=path, grid_size=60, block=20)
    view = open_run(path)
    records = list(view.records())

    def unpacked(rows: Any) -> list[TraceRecord]:
        return [TraceRecord(*row[:6], zlib.decompress(row[6]) if row[7] else row[6])
                for row in rows]

    assert any(row[7] for row in view.rows())  # the blueprint's call, over PACK_OVER
    assert unpacked(view.rows()) == records
    n = len(records)
    for types, upto in [({"task_created", "coordination_response"}, None), (None, n // 2),
                        ({"coordination_request"}, n // 3), (None, 0), (set(), None),
                        (None, n + 5)]:
        want = [r for r in records
                if (types is None or r.type in types) and (upto is None or r.seq < upto)]
        assert unpacked(view.rows(types=types, upto=upto)) == want, (types, upto)


@pytest.mark.parametrize(("call", "words"), [
    (lambda v: v.rows(types="task_created"), "not one string ('task_created')"),
    (lambda v: v.records(types=b"task_created"), "not one string"),
    (lambda v: v.rows(types=["task_created", 3]), "record types (strings)"),
    (lambda v: v.rows(upto=2.5), "upto must be a record's seq (an int), got 2.5"),
    (lambda v: v.rows(upto=True), "upto must be a record's seq"),
    (lambda v: v.records("7"), "start must be a record's seq (an int), got '7'"),
    (lambda v: v.records(float("nan")), "start must be a record's seq"),
])
def test_reading_the_log_with_a_bad_filter_is_refused_before_anything_is_read(
        tmp_path: pathlib.Path, call: Any, words: str) -> None:
    """A string for ``types`` would be read letter by letter, a float or a bool for a seq
    compared as SQLite compares mixed types: each is refused at the call, naming it."""
    path = tmp_path / "run.db"
    run("kernel_build", seed=3, record=False, store=path, **SMALL_KERNEL)
    before = path.read_bytes()
    with pytest.raises(ValueError) as refused:
        call(open_run(path))
    assert words in str(refused.value)
    assert path.read_bytes() == before
    view = open_run(path)  # a numpy integer is a seq like any other
    assert list(view.rows(upto=np.int64(3))) == list(view.rows(upto=3))
    assert len(list(view.rows(upto=3))) == 3


def _records(n: int, start: int = 0) -> list[tuple[float, str, str, str, str, bytes]]:
    return [(float(i), "event", "a", "b", "tick", b'{"i":%d}' % i) for i in range(start, n)]


def test_a_resumed_store_checks_by_digests_and_writes_what_goes_past_the_log_at_once(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-execution's first commit that goes past the stored log checks the stored
    part by its commits' digests (no row is read back) and writes the rest in the same
    commit: an answer acknowledged then is durable then."""
    path = tmp_path / "run.db"
    store = Store.create(path, seed=0, mode="deterministic")
    first = Trace()
    store.attach(first)
    for stop in (30, 70, 100):  # three commits, three digests
        for record in _records(stop, len(first)):
            first.add_record(record)
        store.commit()
    store.close()
    resumed, _ = Store.resume(path)

    def no_rows(*args: Any) -> None:
        raise AssertionError("the check read rows back")

    monkeypatch.setattr(divergence_module, "first_difference", no_rows)
    again = Trace()
    resumed.attach(again)
    for record in _records(80):
        again.add_record(record)
    resumed.commit(whole=False)  # checked to the stored commit at 70: not live yet
    assert resumed.written == 70 and resumed.live_at is None
    for record in _records(130, 80):
        again.add_record(record)
    resumed.commit(whole=False)
    assert resumed.divergence is None and resumed.written == 130
    assert resumed.live_at is not None  # the stored log reproduced: live from here
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 130
        assert db.execute("SELECT seq, digest FROM digests ORDER BY seq").fetchall() == [
            (30, _digest_of(_records(30))),
            (70, _digest_of(_records(70))), (100, _digest_of(_records(100))),
            (130, again.digest)]
    db.close()
    resumed.close()


def _digest_of(records: list[tuple[float, str, str, str, str, bytes]]) -> str:
    trace = Trace()
    for record in records:
        trace.add_record(record)
    return trace.digest


def test_a_new_store_is_whole_before_its_first_commit(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "new.db"
    store = Store.create(path, seed=7, mode="deterministic", scenario="grid_build",
                         params={"grid": 40})
    try:
        info = check_store(path)  # another connection, read-only: the file alone
        assert info is not None and info.status == "running" and info.seed == 7
        assert info.scenario == "grid_build" and info.params == {"grid": 40}
        assert open_run(path).status == "running"
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.close()
    finally:
        store.close()
    assert open_run(path).status == "interrupted"


def test_a_new_store_that_cannot_be_written_leaves_nothing(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    path = tmp_path / "full.db"
    with pytest.raises(StoreError, match=r"cannot write it \(No space left on device"):
        Store.create(path, seed=0, mode="deterministic")
    assert not path.exists()


def test_acknowledged_means_durable(tmp_path: pathlib.Path) -> None:
    """When a call's answer is back, a reader of the file already sees the call and what
    it changed (a separate connection, read-only)."""
    path = tmp_path / "live.db"
    with Simulation(seed=1, store=path) as simu:
        client = simu.client("alice")
        created = client.call("session_create", session_name="S", grid_size=20)
        assert created["success"]
        joined = client.call("session_join", agent_name="alice", role="architect")
        assert joined["success"]
        claimed = client.call("region_claim", region={"x": 0, "y": 0, "width": 4, "height": 4})
        assert claimed["success"], claimed
        placed = client.call("builder_place_tile", x=1, y=2, tile_type="code")
        view = open_run(path)
        assert view.status == "running"
        requests = [e["content"]["tool"] for e in view.entries(type="coordination_request")
                    if e["sender"] == "alice"]
        assert requests == ["session_create", "session_join", "region_claim",
                            "builder_place_tile"]
        assert any(e["content"]["event"] == "agent_joined"
                   for e in view.entries(type="agent_joined"))
        assert placed["success"], placed
    assert open_run(path).status == "finished"


def test_a_finished_store_is_not_reopened_for_writing(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.db"
    assert main(["run", "locks_barriers", "--store", str(path)]) == 0
    before = _digest_of_file(path)
    capsys.readouterr()
    assert main(["run", "locks_barriers", "--store", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "finished run" in err and "--overwrite" in err
    assert _digest_of_file(path) == before
    with pytest.raises(StoreError, match="finished run"):
        Simulation(store=path)
    assert main(["run", "locks_barriers", "--seed", "4", "--store", str(path),
                 "--overwrite"]) == 0
    assert open_run(path).info.seed == 4  # type: ignore[union-attr]


# -- snapshots: how often is a parameter -------------------------------------------------------


def _commit_ends(path: pathlib.Path) -> list[int]:
    """Where each commit of a deterministic run's store ended (its ``digests`` rows)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [row[0] for row in db.execute("SELECT seq FROM digests ORDER BY seq")]


def test_snapshot_every_is_a_parameter_of_the_store_and_of_a_run(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store takes a snapshot at the first commit after every ``snapshot_every``
    records it is given; the environment has no say in it."""
    monkeypatch.setenv("BARNRAISE_STORE_SNAPSHOT_EVERY", "7")  # (it once had)
    path = tmp_path / "every-50.db"
    store = Store.create(path, seed=0, mode="deterministic", snapshot_every=50)
    store.snapshotter = lambda: {"world": 1}
    trace = Trace()
    store.attach(trace)
    for end in (30, 60, 90, 120, 140):
        for record in _records(end, len(trace)):
            trace.add_record(record)
        store.commit()
    store.close()
    assert [seq for seq, _ in open_run(path).snapshots()] == [60, 120]
    # Through run(): every commit past one record snapshots, so one at every commit's end;
    # by default a run this short keeps only its last.
    for every in (1, SNAPSHOT_EVERY):
        path = tmp_path / f"run-{every}.db"
        assert run("kernel_build", seed=2, record=False, store=path, snapshot_every=every,
                   **SMALL_KERNEL).success
        taken = [seq for seq, _ in open_run(path).snapshots()]
        ends = _commit_ends(path)
        assert taken == (ends if every == 1 else ends[-1:]), every


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "100", None])
def test_a_bad_snapshot_interval_is_refused_before_any_store_is_made(
        tmp_path: pathlib.Path, bad: Any) -> None:
    path = tmp_path / "run.db"
    with pytest.raises(ValueError, match="snapshot_every must be a positive int"):
        Store.create(path, seed=0, mode="deterministic", snapshot_every=bad)
    assert not path.exists()
    if bad is None:  # run()'s "not given": the default interval
        return
    with pytest.raises(ValueError, match="snapshot_every must be a positive int"):
        run("kernel_build", record=False, store=path, snapshot_every=bad, **SMALL_KERNEL)
    assert not path.exists()


@pytest.mark.parametrize("given", [{"snapshot_every": 50}, {"overwrite": True}])
def test_a_store_option_without_a_store_is_refused_not_ignored(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, given: dict[str, Any]) -> None:
    monkeypatch.chdir(tmp_path)
    (name,) = given
    with pytest.raises(ValueError, match=f"{name} applies to a store: give store="):
        run("kernel_build", record=False, **given, **SMALL_KERNEL)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_takes_snapshot_every_with_a_store_only(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.db"
    assert main(["run", "kernel_build", "--snapshot-every", "50"]) == 2
    assert "--snapshot-every apply with --store only" in capsys.readouterr().err
    for bad in ("0", "-3", "x"):
        with pytest.raises(SystemExit) as exit_:
            main(["run", "kernel_build", "--store", str(path), "--snapshot-every", bad])
        assert exit_.value.code == 2
        assert "--snapshot-every" in capsys.readouterr().err
    assert not path.exists()
    assert main(["run", "kernel_build", "--param", "grid_size=40", "--param", "block=20",
                 "--store", str(path), "--snapshot-every", "1"]) == 0
    assert [seq for seq, _ in open_run(path).snapshots()] == _commit_ends(path)


def test_no_module_of_the_engine_actors_or_scenarios_reads_the_environment() -> None:
    """Switches for tests (a crash, a snapshot interval) are parameters or live in the
    tests (tests/crashing.py), never in an environment variable the library reads."""
    root = pathlib.Path(__file__).resolve().parents[1]
    readers = []
    for layer in ("sim", "actors", "scenarios"):
        for path in sorted((root / layer).rglob("*.py")):
            text = path.read_text()
            if re.search(r"\benviron\b|\bgetenv\b|\benvironb\b", text):  # not "environment"
                readers.append(path.relative_to(root).as_posix())
    assert readers == []


# -- replay --------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [name for name, _ in list_scenarios()])
def test_every_shipped_scenario_replays_from_its_store(tmp_path: pathlib.Path,
                                                       scenario: str) -> None:
    params = SMALL_KERNEL if scenario == "kernel_build" else {}
    path = tmp_path / "run.db"
    result = run(scenario, seed=2, record=False, store=path, **params)
    digest, divergence = replay(path)
    assert divergence is None
    assert digest == result.trace_digest == open_run(path).digest()


def test_replay_names_the_first_record_that_differs(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.db"
    run("grid_build", record=False, store=path)
    assert main(["replay", str(path)]) == 0
    with sqlite3.connect(path) as db:
        (packed,) = db.execute("SELECT min(seq) FROM events WHERE packed").fetchone()
        assert packed is not None  # a record over 4 KB, kept compressed
    db.close()
    # A packed record that differs (recompressed from other bytes) is named...
    tampered = tmp_path / "packed.db"
    shutil.copy(path, tampered)
    with sqlite3.connect(tampered) as db:
        (blob,) = db.execute("SELECT content FROM events WHERE seq = ?", (packed,)).fetchone()
        changed = zlib.compress(zlib.decompress(blob).replace(b"]", b" ]", 1))
        db.execute("UPDATE events SET content = ? WHERE seq = ?", (changed, packed))
    db.close()
    capsys.readouterr()
    assert main(["replay", str(tampered)]) == 1
    assert f"record {packed} differs" in capsys.readouterr().out
    # ... and so is a later plain one, the records before it being equal.
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET sender = 'someone-else' WHERE seq = 500")
    db.close()
    digest, divergence = replay(path)
    assert divergence is not None and divergence.seq == 500
    assert divergence.stored is not None and divergence.stored.sender == "someone-else"
    assert divergence.got is not None and divergence.got.sender != "someone-else"
    assert digest == open_run(path).summary["trace_digest"]  # type: ignore[index]
    # A finished log that ends early under its commit digests is not whole: refused
    # (issue 23: replay and resume share the check, and agree on what a store holds)...
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM events WHERE seq >= 400")
    db.close()
    with pytest.raises(StoreError, match="past the log's end"):
        replay(path)
    # ... and one cut at a commit's end, nothing past it, is whole: the first record it
    # lacks is named.
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM digests WHERE seq > 400")
        db.execute("DELETE FROM snapshots WHERE seq > 400")
    db.close()
    digest, divergence = replay(path)
    assert divergence is not None and divergence.seq == 400 and divergence.stored is None
    with sqlite3.connect(path) as db:  # tamper with one record
        db.execute("UPDATE events SET recipient = 'someone-else' WHERE seq = 7")
    capsys.readouterr()
    assert main(["replay", str(path), "--json"]) == 1
    out = capsys.readouterr().out
    assert '"matches": false' in out and "record 7 differs" in out


# -- crash and resume ------------------------------------------------------------------------


def _run_killed(path: pathlib.Path, crash: str, *command: str) -> int:
    """``barnraise COMMAND...`` (run or resume) killed at ``crash``, with a snapshot every
    500 records."""
    done = subprocess.run(crashing.command(crash, *command, "--snapshot-every", "500"),
                          cwd=crashing.ROOT, capture_output=True, timeout=120, check=False)
    return done.returncode


def _check_resumed(path: pathlib.Path, prefix: list[Any], expected_digest: str) -> None:
    result = resume(path, record=False)
    assert result.success and result.summary["completion_percent"] == 100.0
    assert result.trace_digest == expected_digest
    view = open_run(path)
    assert view.status == "finished"
    after = list(view.records())
    # Everything committed before the kill (every acknowledged tile among it) is still
    # there, unchanged, in the same place.
    assert after[:len(prefix)] == prefix
    completed = collections.Counter(e["content"]["task_id"]
                                    for e in view.entries(type="task_completed"))
    assert all(n == 1 for n in completed.values())
    finished = {t["task_id"] for t in result.tasks if t["status"] == "completed"}
    assert set(completed) == finished


@pytest.mark.parametrize(("moment", "commit", "snapshots"), [
    ("commit:2", 2, 0), ("record:45", 2, 0), ("record:30", 2, 0), ("record:29", 1, 0),
    ("snapshot:1", 2, 0), ("snapshot:2", 4, 1)])
def test_the_kill_switch_fires_in_the_transaction_it_names_before_it_commits(
        tmp_path: pathlib.Path, moment: str, commit: int, snapshots: int) -> None:
    """tests/crashing.py kills at a transaction's COMMIT: the commit that writes record N,
    the N-th commit, the one that writes the N-th snapshot; its rows are written then,
    and not yet committed (a reader sees none of them: the records and ``snapshots``
    snapshots of the commits before)."""
    path = tmp_path / "run.db"
    store = Store.create(path, seed=0, mode="deterministic")
    store.snapshot_every = 50
    store.snapshotter = lambda: {"world": 1}
    fired: list[tuple[int, int, int]] = []

    def kill() -> None:
        with sqlite3.connect(path) as reader:  # what a process opening it now would see
            stored = reader.execute("SELECT count(*) FROM events").fetchone()[0]
            kept = reader.execute("SELECT count(*) FROM snapshots").fetchone()[0]
        fired.append((store.commits + 1, stored, kept))

    store._db.set_trace_callback(crashing.KillSwitch(moment, kill))
    trace = Trace()
    store.attach(trace)
    ends = (30, 60, 90, 120)  # four commits; a snapshot with the second and the fourth
    for end in ends:
        for record in _records(end, len(trace)):
            trace.add_record(record)
        store.commit()
    store.close()
    assert fired == [(commit, ends[commit - 2] if commit > 1 else 0, snapshots)]
    with pytest.raises(ValueError, match="record:N, commit:N or snapshot:N"):
        crashing.KillSwitch("record")


def test_sigkill_at_seeded_moments_then_resume(tmp_path: pathlib.Path) -> None:
    """Killed at seeded records (three spread over the run; all eight of the same draws
    under BARNRAISE_DEEP=1), at snapshots and at the first commit, a run resumes to the
    digest of the run never killed."""
    expected = run("kernel_build", seed=5, record=False).trace_digest
    rng = random.Random(8)
    records = sorted(rng.sample(range(1, 2600), 8))
    deep = os.environ.get("BARNRAISE_DEEP") == "1"
    moments = [f"record:{n}" for n in (records if deep else records[::3])]
    # A later snapshot than the first: the second. A snapshot is taken at the first commit
    # after 500 records (_run_killed), and a commit groups 10 ms of the run, so a fast
    # machine takes fewer of them: at 1.6 s a 100,000-record run this run took only 3,
    # and a kill at the fourth never came (exit 0).
    moments += ["snapshot:1", "snapshot:2", "commit:1"]
    for moment in moments:
        path = tmp_path / f"{moment.replace(':', '-')}.db"
        code = _run_killed(path, moment, "run", "kernel_build", "--seed", "5", "--store",
                           str(path))
        assert code == -9, moment
        view = open_run(path)
        assert view.status == "interrupted"
        prefix = list(view.records())
        if moment.startswith("record:"):  # killed before the commit holding record N ended
            assert len(prefix) <= int(moment.removeprefix("record:")), moment
        if moment.startswith("snapshot:"):
            assert len(view.snapshots()) == int(moment.removeprefix("snapshot:")) - 1
        _check_resumed(path, prefix, expected)


def test_kill_resume_kill_resume_on_one_store(tmp_path: pathlib.Path) -> None:
    expected = run("kernel_build", seed=6, record=False).trace_digest
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:700", "run", "kernel_build", "--seed", "6", "--store",
                       str(path)) == -9
    first = list(open_run(path).records())
    assert _run_killed(path, "record:1500", "resume", str(path)) == -9
    second = list(open_run(path).records())
    assert len(second) > len(first) and second[:len(first)] == first
    assert open_run(path).status == "interrupted"
    _check_resumed(path, second, expected)


def test_a_faulted_run_killed_and_resumed_ends_as_it_would_have(tmp_path: pathlib.Path) -> None:
    """The fault plan is part of the stored run: resume and replay draw the same faults."""
    plan = "drop=0.05,duplicate=0.02,delay=0.5,crash=0.001"
    expected = run("kernel_build", seed=3, faults=plan, record=False)
    assert expected.success
    path = tmp_path / "faulted.db"
    assert _run_killed(path, "record:1800", "run", "kernel_build", "--seed", "3",
                       "--faults", plan, "--store", str(path)) == -9
    _check_resumed(path, list(open_run(path).records()), expected.trace_digest)
    assert replay(path) == (expected.trace_digest, None)


def test_resume_of_a_run_that_no_longer_reproduces_its_log_names_the_first_record(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A re-execution that differs from the stored run (here its error rate is changed in
    the run row, as a changed barnraise would change the run): the resume refuses, names
    the record a record-by-record comparison finds first, and leaves the log as it was."""
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:1500", "run", "kernel_build", "--store", str(path)) == -9
    before = list(open_run(path).records())
    with sqlite3.connect(path) as db:
        params = json.loads(db.execute("SELECT params FROM run").fetchone()[0])
        params["error_rate"] = 0.05
        db.execute("UPDATE run SET params = ?", (json.dumps(params, sort_keys=True),))
        assert db.execute("SELECT count(*) FROM digests").fetchone()[0] > 1
    db.close()
    first = open_run(path).compare(run("kernel_build", error_rate=0.05, record=False).trace)
    assert first is not None and 0 < first.seq < len(before)
    assert main(["resume", str(path)]) == 1
    assert f"record {first.seq} differs" in capsys.readouterr().err
    assert open_run(path).status == "interrupted"
    assert list(open_run(path).records()) == before


def test_resume_goes_by_the_rows_where_a_stored_digest_is_wrong(tmp_path: pathlib.Path) -> None:
    """The digests only save reading the rows: a digest row that does not match its
    records (damaged) sends the check to the rows, which the re-execution reproduces."""
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:1500", "run", "kernel_build", "--store", str(path)) == -9
    prefix = list(open_run(path).records())
    with sqlite3.connect(path) as db:
        db.execute("UPDATE digests SET digest = 'not a digest' WHERE seq = "
                   "(SELECT min(seq) FROM digests WHERE seq > 200)")
        assert db.total_changes == 1
    db.close()
    _check_resumed(path, prefix, run("kernel_build", record=False).trace_digest)


def test_resume_of_a_store_without_digests_checks_its_rows(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store without digests (one written before schema 3; here they are deleted) is
    checked row by row: a stored record that the re-execution does not reproduce is
    named. (With digests, the check is against what the run wrote when it wrote it; a
    row changed in the file afterwards is for ``barnraise replay`` to find, which
    compares rows: test_replay_names_the_first_record_that_differs.)"""
    path = tmp_path / "run.db"
    # Killed well past record 12: a commit groups 10 ms of the run, which on a fast machine
    # is hundreds of records, and a kill at record 400 once left only the first commit's 6
    # (the record changed below was then not in the file, and the resume rightly passed).
    assert _run_killed(path, "record:1500", "run", "kernel_build", "--store", str(path)) == -9
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET t = t + 1 WHERE seq = 12")
        assert db.total_changes == 1, "the killed store does not hold record 12"
        db.execute("DELETE FROM digests")
    db.close()
    code = main(["resume", str(path)])
    said = capsys.readouterr()
    assert code == 1, (code, said.err, said.out[-2000:])
    assert "record 12 differs" in said.err, said.err
    assert open_run(path).status == "interrupted"


def test_a_store_of_schema_1_is_migrated_when_resumed(tmp_path: pathlib.Path) -> None:
    """Schema 1 had an index on events(type) and no digests; a resume brings the file up to
    the current schema in one transaction (the index goes, the digests table comes, the
    migrations table says so) and checks the stored records row by row."""
    expected = run("kernel_build", seed=5, record=False).trace_digest
    path = tmp_path / "old.db"
    assert _run_killed(path, "record:900", "run", "kernel_build", "--seed", "5", "--store",
                       str(path)) == -9
    with sqlite3.connect(path) as db:  # as barnraise with schema 1 would have left it
        db.execute("CREATE INDEX events_type ON events (type)")
        db.execute("DROP TABLE digests")
        db.execute("ALTER TABLE run DROP COLUMN script_sha256")
        db.execute("DROP TABLE reporters")
        db.execute("DROP TABLE reported")
        db.execute("DELETE FROM migrations WHERE version > 1")
        db.execute("PRAGMA user_version = 1")
    db.close()
    prefix = list(open_run(path).records())
    _check_resumed(path, prefix, expected)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [r[0] for r in db.execute("SELECT version FROM migrations")] == \
            list(range(1, SCHEMA_VERSION + 1))
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'events_type'"
                          ).fetchone()[0] == 0
        # The resumed run's own commits (past the stored log) keep their digests.
        assert db.execute("SELECT min(seq) FROM digests").fetchone()[0] > len(prefix)
    db.close()


# -- the world rebuilt from the store ---------------------------------------------------------

CALLS = st.lists(st.one_of(
    st.tuples(st.just("place_tile"), st.integers(0, 9), st.integers(0, 9),
              st.sampled_from(["code", "data", "system", "empty"])),
    st.tuples(st.just("region_claim"), st.integers(0, 9), st.integers(0, 9),
              st.integers(1, 4)),
    st.tuples(st.just("task_create"), st.integers(0, 3), st.integers(0, 0), st.integers(0, 0)),
    st.tuples(st.just("join"), st.integers(0, 3), st.integers(0, 0), st.integers(0, 0)),
), min_size=1, max_size=12)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=CALLS)
def test_the_world_in_the_store_equals_the_world_in_memory(
        tmp_path: pathlib.Path, calls: list[tuple[str, int, int, Any]]) -> None:
    path = pathlib.Path(tempfile.mkdtemp(dir=tmp_path)) / "p.db"
    seen: list[tuple[int, dict[str, Any]]] = []
    with Simulation(seed=3, store=path) as simu:
        assert simu.store is not None
        simu.store.snapshot_every = 1
        owner = simu.client("owner")
        owner.call("session_create", session_name="P", grid_size=10)
        owner.call("session_join", agent_name="owner", role="architect")
        others: dict[int, Any] = {}
        for name, a, b, c in calls:
            if name == "place_tile":
                owner.call("builder_place_tile", x=a, y=b, tile_type=c)
            elif name == "region_claim":
                owner.call("region_claim", region={"x": a, "y": b, "width": c, "height": c})
            elif name == "task_create":
                owner.call("task_delegate", task_type="build", description=f"t{a}")
            elif a not in others:
                other = others[a] = simu.client(f"guest-{a}")
                other.call("session_join", session_id=owner.session_id,
                           agent_name=f"guest-{a}", role="builder")
            simu.store.commit()
            seen.append((simu.store.written, simu.world_state()))
        stored = open_run(path)
        points = dict(stored.snapshots())
        # Every call committed something, and with a snapshot every record the store
        # holds the world exactly where each call left it.
        for written, world in seen:
            assert written in points
            assert stored.snapshot(seq=written) == _plain(world)


def _plain(world: dict[str, Any]) -> Any:
    """What a snapshot decodes to (msgpack: tuples come back as lists)."""
    import msgspec
    return msgspec.msgpack.decode(msgspec.msgpack.encode(world))


# -- bad input ---------------------------------------------------------------------------------


def _good_store(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "good.db"
    run("locks_barriers", record=False, store=path)
    return path


def _bad_inputs(tmp_path: pathlib.Path) -> dict[str, tuple[pathlib.Path, str]]:
    good = _good_store(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database\n")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:6000])
    newer = tmp_path / "newer.db"
    shutil.copy(good, newer)
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"text": (text, "not an SQLite database"), "empty": (empty, "empty file"),
            "truncated": (truncated, "damaged"), "newer": (newer, "newer than"),
            "other": (other, "not a barnraise store"), "folder": (folder, "directory")}


@pytest.mark.parametrize("command", ["replay", "resume", "run"])
def test_bad_stores_exit_2_with_one_line_and_are_left_unchanged(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    for kind, (path, words) in _bad_inputs(tmp_path).items():
        before = None if path.is_dir() else _digest_of_file(path)
        argv = (["run", "locks_barriers", "--store", str(path), "--overwrite"]
                if command == "run" else [command, str(path)])
        capsys.readouterr()
        assert main(argv) == 2, kind
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, (kind, err)
        if before is not None:
            assert _digest_of_file(path) == before, kind
        with pytest.raises(StoreError):
            barnraise.open_run(path)


def test_a_store_a_live_run_holds_is_refused(tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "live.db"
    with Simulation(seed=1, store=path) as simu:
        simu.client("a").call("session_create", session_name="S", grid_size=10)
        before = _digest_of_file(path)
        for argv in (["resume", str(path)],
                     ["run", "locks_barriers", "--store", str(path), "--overwrite"]):
            assert main(argv) == 2
            assert "held by another live run" in capsys.readouterr().err
        assert _digest_of_file(path) == before
        assert open_run(path).status == "running"
        with pytest.raises(StoreError, match="held by another live run"):
            Store.create(path, seed=0, mode="deterministic", overwrite=True)
    assert check_store(path) is not None and open_run(path).status == "finished"


def test_snapshots_decode_to_the_world(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    run("kernel_build", record=False, store=path, **SMALL_KERNEL)
    with sqlite3.connect(path) as db:
        blobs = [bytes(r[0]) for r in db.execute("SELECT data FROM snapshots")]
    db.close()
    assert blobs
    for blob in blobs:
        world = read_snapshot(blob)
        (part,) = world.values()
        assert len(part["canvas"]) == part["shape"][0] * part["shape"][1]


def test_resume_and_replay_refuse_what_they_cannot_do(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A scenario of the user's that does not say how it resumes (RESUMABLE) in realtime.
    script = tmp_path / "plain_scenario.py"
    script.write_text(
        "from barnraise.scenarios._kit import host_session\n"
        "PARAMS = {}\n"
        "def run(simu):\n"
        "    _, sid = host_session(simu, session_name='S', grid_size=8)\n"
        "    return {'session_id': sid}\n"
        "def check(summary):\n"
        "    return True\n")
    realtime = tmp_path / "rt.db"
    run(str(script), mode="realtime", time_scale=200.0, record=False, store=realtime)
    with sqlite3.connect(realtime) as db:  # as if it had been killed
        db.execute("UPDATE run SET status = 'running'")
    db.close()
    before = _digest_of_file(realtime)
    for argv, words in ((["resume", str(realtime), "--script", str(script)],
                         "does not declare how it resumes"),
                        (["replay", str(realtime)], "realtime run"),
                        (["run", "locks_barriers", "--store",
                          str(tmp_path / "no" / "such" / "dir.db")], "cannot open it")):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, err
    assert _digest_of_file(realtime) == before
    assert open_run(realtime).status == "interrupted"
    by_hand = tmp_path / "hand.db"
    with Simulation(seed=2, store=by_hand) as simu:
        simu.client("a").call("session_create", session_name="S", grid_size=10)
    assert main(["replay", str(by_hand)]) == 2
    assert "cannot be re-executed" in capsys.readouterr().err


def test_resume_on_the_command_line_prints_json_and_writes_out(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:300", "run", "kernel_build", "--store", str(path)) == -9
    capsys.readouterr()
    assert main(["resume", str(path), "--json", "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success"] and summary["completion_percent"] == 100.0
    # A deterministic resume re-executes the whole run: every count and the scenario's
    # own figures are the uninterrupted run's, not the part after the kill.
    whole = run("kernel_build", record=False).summary
    assert summary["trace_digest"] == whole["trace_digest"]
    assert {k: v for k, v in summary.items() if k != "wall_seconds"} == {
        k: v for k, v in json.loads(json.dumps(whole)).items() if k != "wall_seconds"}
    assert summary["resumed_metrics_only"] is False
    assert (tmp_path / "out" / "trace.jsonl").is_file()
    assert open_run(path).summary == summary


def test_resume_says_how_many_stored_records_it_reproduced_and_when_it_went_live(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:300", "run", "kernel_build", "--store", str(path)) == -9
    stored = open_run(path).last()
    assert stored is not None and stored.seq + 1 < 300  # the commit holding 300 was lost
    for name in ("a.db", "b.db"):  # a killed store: its WAL holds committed records too
        for suffix in ("", "-wal"):
            if os.path.exists(f"{path}{suffix}"):
                shutil.copyfile(f"{path}{suffix}", tmp_path / f"{name}{suffix}")
    result = resume(tmp_path / "a.db", record=False)
    assert result.resumed_records == stored.seq + 1
    assert result.live_after is not None and 0 < result.live_after < result.summary[
        "wall_seconds"] + 1
    capsys.readouterr()
    assert main(["resume", str(tmp_path / "b.db")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-1].startswith(f"  resumed from {stored.seq + 1:,} stored records: live after ")
    assert run("kernel_build", record=False).trace_digest == result.trace_digest


def test_a_simulation_that_raised_leaves_its_store_interrupted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "hand.db"
    with pytest.raises(RuntimeError), Simulation(seed=2, store=path) as simu:
        simu.client("a").call("session_create", session_name="S", grid_size=10)
        raise RuntimeError("the driver failed")
    view = open_run(path)
    assert view.status == "interrupted" and view.summary is None
    assert [e["content"]["tool"] for e in view.entries(type="coordination_request")
            if e["sender"] == "a"] == ["session_create"]


def test_a_stored_run_gives_its_time_series_from_the_log(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.db"
    result = run("kernel_build", interval=2.0, store=path, grid_size=60, block=30,
                 builders=2, testers=1)
    stored = open_run(path)
    frame = stored.timeseries(interval=2.0)
    pd.testing.assert_frame_equal(frame, result.timeseries())
    pd.testing.assert_frame_equal(stored.agent_timeseries(interval=2.0),
                                  result.agent_timeseries())
    ticks = frame[frame["trigger"] == "interval"]
    assert list(ticks["t"]) == [2.0 * (i + 1) for i in range(len(ticks))] and len(ticks) > 1
    end = frame.iloc[-1]
    assert end["trigger"] == "final" and end["t"] == pytest.approx(stored.last().t)  # type: ignore[union-attr]
    assert end["tiles_placed"] == result.summary["tiles_placed"]
    assert end["completion_percent"] == result.summary["completion_percent"] == 100.0
    assert end["tasks_completed"] == result.summary["tasks_completed"]
    assert ticks["tiles_placed"].is_monotonic_increasing and \
        ticks["tiles_placed"].iloc[0] < end["tiles_placed"]
    # another interval samples the log at other times
    assert len(stored.timeseries(interval=1.0)) > len(frame)
    with pytest.raises(ValueError, match="interval must be"):
        stored.timeseries(interval=0)


def test_a_new_store_does_not_take_in_a_stale_wal_of_a_deleted_one(
        tmp_path: pathlib.Path) -> None:
    """A killed run leaves run.db-wal beside run.db; a user deletes run.db only and runs
    again under the same name. SQLite would replay the old WAL into the new file."""
    path = tmp_path / "run.db"
    assert _run_killed(path, "record:1500", "run", "kernel_build", "--store", str(path)) == -9
    assert pathlib.Path(f"{path}-wal").stat().st_size > 0
    path.unlink()
    result = run("grid_build", record=False, store=path)
    assert result.success
    view = open_run(path)
    assert view.info.scenario == "grid_build" and view.status == "finished"  # type: ignore[union-attr]
    assert [r.seq for r in view.records()] == list(range(len(result.trace)))


@pytest.mark.parametrize("interval", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_time_series_with_a_bad_interval_is_refused(tmp_path: pathlib.Path,
                                                      interval: Any) -> None:
    path = tmp_path / "run.db"
    run("grid_build", record=False, store=path)
    with pytest.raises(ValueError, match="interval must be a finite number of seconds > 0"):
        open_run(path).timeseries(interval=interval)
