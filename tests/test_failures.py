"""Errors that show (issue 25): an exception escaping a behaviour or a handler is printed
as it happens, kept whole in the trace and the summary, fails the run unless the scenario
expects it, and opens the debugger with --pdb; the trace's copy does not depend on where
the code lives, and session members hear no file paths."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import barnraise
from barnraise.actors.base import Agent
from barnraise.cli import main
from barnraise.sim.dispatch import Dispatcher
from barnraise.sim.failures import MAX_DETAIL, Failure, portable_path
from barnraise.sim.messages import Message
from tests.helpers import Recorder

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: A scenario whose one agent fails inside the standard library (json), so its traceback
#: has frames of barnraise's, of the scenario's and of Python's own.
SCENARIO = '''\
"""Careless: a builder parses what is not JSON."""
import json

from barnraise.kit import Participant, host_session, spawn

PARAMS = {"grid_size": 6}

async def careless(agent: Participant) -> None:
    await agent.sleep(1.0)
    if agent.incarnation == 0:  # the error crashes it; its restart does not fail again
        json.loads("{not json")


def run(simu, *, grid_size):
    _, session_id = host_session(simu, session_name="Careless", grid_size=grid_size)
    spawn(simu, session_id, "builder-1", "builder", crew=1, behaviour=careless)
    simu.run()
    return {"session_id": session_id}


def check(summary):
    return True
'''
LINE = 11  # of json.loads above


def scenario(folder: pathlib.Path, *, expected: bool = False) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "careless.py"
    path.write_text(SCENARIO + ("EXPECTED_ERRORS = True\n" if expected else ""))
    return path


def error_records(result: barnraise.RunResult) -> list[dict[str, object]]:
    return [r.content_obj() for r in result.trace.records("error")]


def test_a_behaviour_error_fails_the_run_and_is_kept_whole(
        tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    path = scenario(tmp_path)
    with caplog.at_level(logging.ERROR, logger="barnraise.errors"):
        result = barnraise.run(str(path), seed=3)
    s = result.summary
    assert s["success"] is False and s["behaviour_errors"] == 1
    [error] = s["errors"]
    assert {k: error[k] for k in ("agent", "where", "error", "function", "file", "line")} == {
        "agent": "builder-1", "where": "careless", "error": "JSONDecodeError",
        "function": "careless", "file": "careless.py", "line": LINE}
    assert error["detail"].startswith("Expecting property name")
    full = str(error["traceback"])
    assert f'File "{path}", line {LINE}, in careless' in full  # as Python prints it
    assert 'json/decoder.py", line ' in full
    # the trace's record: every frame, files named portably, Python's without lines
    [record] = error_records(result)
    text = str(record["traceback"])
    assert f'File "careless.py", line {LINE}, in careless\n    json.loads("{{not json")' in text
    assert 'File "barnraise/actors/agents/participant.py", line ' in text
    assert 'File "<python>/json/decoder.py", in raw_decode\n' in text
    assert str(tmp_path) not in text and str(ROOT) not in text and sys.prefix not in text
    assert text.endswith("json.decoder.JSONDecodeError: " + error["detail"] + "\n")
    assert {k: record[k] for k in ("agent", "where", "file", "line")} == {
        "agent": "builder-1", "where": "careless", "file": "careless.py", "line": LINE}
    # logged as it happened, with the path to open
    [logged] = [r for r in caplog.records if r.name == "barnraise.errors"]
    assert logged.levelno == logging.ERROR
    assert logged.getMessage().startswith(
        "builder-1: careless raised JSONDecodeError: Expecting property name")
    assert f'File "{path}", line {LINE}' in logged.getMessage()


def test_a_scenario_that_expects_errors_succeeds_and_still_counts_them(
        tmp_path: pathlib.Path) -> None:
    result = barnraise.run(str(scenario(tmp_path, expected=True)), seed=3)
    assert result.success
    assert result.summary["behaviour_errors"] == len(result.summary["errors"]) == 1


def test_without_errors_nothing_is_added(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "calm.py"
    path.write_text(SCENARIO.replace('json.loads("{not json")', 'json.loads("{}")'))
    result = barnraise.run(str(path), seed=3)
    assert result.success and result.summary["errors"] == []
    assert error_records(result) == []


def test_members_hear_type_and_detail_only_and_a_handler_is_named(det: Dispatcher) -> None:
    class Fragile(Recorder):
        def handle_task_update(self, message: Message) -> None:
            raise ValueError(f"bad input {message.content['n']}")

    async def broken(agent: Agent) -> None:
        await agent.sleep(1.0)
        raise RuntimeError("wrench")

    watcher = det.spawn(Recorder, "watcher")
    watcher.subscribe("errors")
    fragile = det.spawn(Fragile, "f")
    det.spawn(Agent, "a", behaviours=(broken,))
    fragile.send("f", "task_update", {"n": 1})
    det.run()
    letters = sorted((m.content for m in watcher.got), key=lambda c: c["agent"])
    assert letters == [
        {"agent": "a", "where": "broken", "error": "RuntimeError", "detail": "wrench"},
        {"agent": "f", "where": "handle_task_update", "error": "ValueError",
         "detail": "bad input 1"}]
    kept = {f.agent: f for f in det.failures}
    assert (kept["f"].file, kept["f"].function) == ("test_failures.py", "handle_task_update")
    assert kept["a"].line is not None and "raise RuntimeError" in kept["a"].portable


def test_a_huge_message_or_a_host_path_stays_out_of_letters_and_the_trace(
        det: Dispatcher) -> None:
    """An exception's message of 200,000 characters is cut in the letter and the trace
    (so the report is still sent, and the run goes on); an absolute path in it is named
    portably there, and kept as Python gave it only in the summary, for the person."""
    class Fragile(Recorder):
        def handle_task_update(self, message: Message) -> None:
            raise ValueError("y" * 200_000)

    async def opens(agent: Agent) -> None:
        await agent.sleep(1.0)
        open("/nowhere/at/all/data.csv").close()

    watcher = det.spawn(Recorder, "watcher")
    watcher.subscribe("errors")
    fragile = det.spawn(Fragile, "f")
    det.spawn(Agent, "a", behaviours=(opens,))
    fragile.send("f", "task_update", {"n": 1})
    det.run()
    assert det.behaviour_errors == 2  # no third: the report itself did not fail
    letters = {m.content["agent"]: m.content["detail"] for m in watcher.got}
    assert letters["f"] == "y" * MAX_DETAIL + "... (199000 more characters)"
    assert letters["a"] == "[Errno 2] No such file or directory: 'data.csv'"
    records = [json.loads(r.content) for r in det.trace.records() if r.kind == "error"]
    assert {r["agent"]: r["detail"] for r in records} == letters
    opened = next(r for r in records if r["agent"] == "a")["traceback"]
    assert opened.endswith("FileNotFoundError: [Errno 2] No such file or directory: "
                           "'data.csv'\n")
    kept = {f.agent: f.summary() for f in det.failures}
    assert "/nowhere/at/all/data.csv" in kept["a"]["detail"]
    assert len(kept["f"]["detail"]) < 64 * MAX_DETAIL + 100


def test_the_hook_hears_each_with_its_live_traceback(dispatcher: Dispatcher) -> None:
    """Both runtimes: in realtime mode on the actor's own thread."""
    heard: list[tuple[str, str, int | None]] = []

    def hook(failure: Failure, exc: BaseException) -> None:
        assert exc.__traceback__ is not None
        heard.append((failure.where, type(exc).__name__, failure.line))

    async def broken(agent: Agent) -> None:
        await agent.sleep(0.5)
        raise KeyError("x")

    dispatcher.on_error = hook
    dispatcher.spawn(Agent, "a", behaviours=(broken,))
    dispatcher.run()
    line = broken.__code__.co_firstlineno + 2
    assert heard == [("broken", "KeyError", line)]
    [failure] = dispatcher.failures
    assert failure.summary()["traceback"].endswith("KeyError: 'x'\n")


def test_files_are_named_by_where_they_belong() -> None:
    import barnraise.actors.actor as actor_module

    symlinked = actor_module.__file__
    assert portable_path(symlinked) == ("barnraise/actors/actor.py", True)
    assert portable_path(os.path.realpath(symlinked)) == ("barnraise/actors/actor.py", True)
    assert portable_path(json.__file__) == ("<python>/json/__init__.py", False)
    assert portable_path(pytest.__file__) == ("<site-packages>/pytest/__init__.py", False)
    assert portable_path("/somewhere/else/mine.py") == ("mine.py", True)
    assert portable_path("<string>") == ("<string>", False)


def test_the_cli_prints_each_as_it_happens_and_exits_1_unless_expected(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = scenario(tmp_path / "a")
    assert main(["run", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("barnraise: builder-1: careless raised JSONDecodeError: ")
    assert f'File "{path}", line {LINE}, in careless' in err
    assert "FAILED (1 behaviour error, below)" in out
    assert "builder-1: careless raised JSONDecodeError: Expecting" in out
    assert f"at careless.py:{LINE}" in out
    expected = scenario(tmp_path / "b", expected=True)
    assert main(["run", str(expected)]) == 0
    out, err = capsys.readouterr()
    assert "succeeded" in out and "the scenario expects them" in out
    assert "careless raised JSONDecodeError" in err
    assert not logging.getLogger("barnraise.errors").handlers  # the CLI's is gone


def _env(pythonpath: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pythonpath)
    return env


def test_pdb_opens_at_the_first_error_and_the_run_goes_on(tmp_path: pathlib.Path) -> None:
    path = scenario(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from barnraise.cli import main; sys.exit(main())",
         "run", str(path), "--pdb"],
        input="p agent.name\np type(agent).__name__\nc\n", capture_output=True, text=True,
        timeout=120, env=_env(ROOT), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"careless.py({LINE})careless()" in done.stdout  # stopped in the frame that raised
    assert "'builder-1'" in done.stdout and "'Participant'" in done.stdout
    assert "barnraise: --pdb: builder-1: careless raised JSONDecodeError" in done.stderr
    assert "FAILED (1 behaviour error, below)" in done.stdout  # then the run finished


def _copy_checkout(to: pathlib.Path) -> pathlib.Path:
    """The package's code (its four layers, the symlinks kept) under ``to``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for layer in ("sim", "actors", "scenarios"):
        shutil.copytree(ROOT / layer, to / layer, ignore=ignore)
    shutil.copytree(ROOT / "barnraise", to / "barnraise", symlinks=True, ignore=ignore)
    return to


def test_the_digest_of_a_run_with_errors_does_not_depend_on_where_the_code_lives(
        tmp_path: pathlib.Path) -> None:
    """The same scenario, run here and from a copy of the checkout elsewhere (another
    scenario folder too): the same error record, so the same digest. (The copy runs it
    through ``barnraise.run`` with no logging set up: the traceback is on stderr.)"""
    here = barnraise.run(str(scenario(tmp_path / "one")), seed=5)
    copy = _copy_checkout(tmp_path / "elsewhere" / "checkout")
    program = textwrap.dedent("""
        import json, sys
        import barnraise
        result = barnraise.run(sys.argv[1], seed=5)
        [record] = [r.content_obj() for r in result.trace.records("error")]
        print(json.dumps({"file": barnraise.__file__, "digest": result.trace_digest,
                          "record": record}))
    """)
    elsewhere = scenario(tmp_path / "two" / "deeper")
    done = subprocess.run([sys.executable, "-c", program, str(elsewhere)],
                          capture_output=True, text=True, timeout=120, env=_env(copy),
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # a library user who configured no logging still sees it, as it happened
    assert done.stderr.startswith("builder-1: careless raised JSONDecodeError: ")
    assert f'File "{elsewhere}", line {LINE}, in careless' in done.stderr
    there = json.loads(done.stdout.splitlines()[-1])
    assert there["file"].startswith(str(copy))  # the copy ran, not this checkout
    [record] = error_records(here)
    assert there["record"] == record
    assert there["digest"] == here.trace_digest


def test_every_one_is_counted_and_traced_the_first_hundred_kept_five_shown(
        tmp_path: pathlib.Path, det: Dispatcher) -> None:
    from barnraise.cli import summary_lines
    from barnraise.sim.dispatch.routing import KEPT_FAILURES

    for n in range(KEPT_FAILURES + 3):
        det.report_error("svc", "timer", RuntimeError(f"boom {n}"))
    assert det.behaviour_errors == KEPT_FAILURES + 3
    assert len(det.failures) == KEPT_FAILURES
    assert det.failures[-1].detail == f"boom {KEPT_FAILURES - 1}"
    assert sum(1 for _ in det.trace.records("error")) == KEPT_FAILURES + 3
    summary = dict(barnraise.run(str(scenario(tmp_path)), seed=3).summary)
    summary["behaviour_errors"] = 7
    summary["errors"] = summary["errors"] * 7
    lines = summary_lines(summary)
    assert sum(1 for line in lines if "careless raised JSONDecodeError" in line) == 5
    assert "    ... and 2 more" in lines
