"""Let role agents crash (issue 27, item 4): a behaviour error in a role agent is reported
and counted, then crashes the agent, and its supervisor restarts it after a backoff, or
gives up at its limit. Without a fault plan the error still fails the run; under one, a
run whose every error was followed by a restart is judged by the scenario's check."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import pytest

import barnraise
from barnraise.actors.agents.participant import Participant
from barnraise.actors.base import Agent

#: A builder whose behaviour raises ``failures`` times (once per incarnation, the first
#: ones), then reports done; the top supervisor's backoff is plain (no jitter) so its
#: spacing can be asserted. ``want`` is what the check wants ``done`` to be.
SCENARIO = '''\
"""Shaky: a builder fails in its first lives, then finishes."""
from barnraise.actors.supervisor import Backoff
from barnraise.kit import Participant, host_session, spawn

PARAMS = {"failures": 1, "want": True, "limit": 5, "builders": 1, "within": 1000.0}


async def shaky(agent: Participant) -> None:
    await agent.sleep(1.0)
    if agent.incarnation < agent.params["failures"]:
        raise RuntimeError(f"life {agent.incarnation} gives out")
    agent.outcome["done"] = True


def run(simu, *, failures, want, limit, builders, within):
    simu.supervisor.backoff = Backoff(base=1.0, factor=2.0, cap=4.0, jitter=0.0)
    simu.supervisor.max_restarts = limit
    simu.supervisor.within = within
    _, session_id = host_session(simu, session_name="Shaky", grid_size=6)
    for n in range(1, builders + 1):
        spawn(simu, session_id, f"builder-{n}", "builder", crew=builders, behaviour=shaky,
              failures=failures)
    simu.run()
    done = all(simu.dispatcher.actor(f"builder-{n}").outcome.get("done", False)
               for n in range(1, builders + 1))
    return {"session_id": session_id, "done": done}


def check(summary):
    return summary["metrics"]["done"] == summary["params"]["want"]
'''

#: A plan that is on but changes little: every letter a little late.
PLAN = "delay=0.01"


@pytest.fixture
def shaky(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "shaky.py"
    path.write_text(SCENARIO)
    return str(path)


def crashes(result: barnraise.RunResult) -> list[tuple[float, str, str]]:
    return [(r.t, r.recipient, r.content_obj()["reason"])
            for r in result.trace.records("fault") if r.type == "crash"]


def supervision(result: barnraise.RunResult, kind: str) -> list[tuple[float, dict[str, Any]]]:
    return [(r.t, r.content_obj()) for r in result.trace.records("event")
            if r.recipient == "supervision" and r.type == kind]


def test_role_agents_crash_on_error_and_services_do_not() -> None:
    assert Participant.crash_on_error is True
    assert Agent.crash_on_error is False


def test_an_error_crashes_the_agent_it_restarts_and_the_error_is_shown(
        shaky: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="barnraise.errors"):
        result = barnraise.run(shaky, seed=0)
    s = result.summary
    # Counted, kept whole, and printed as it happened.
    assert s["behaviour_errors"] == 1
    [error] = s["errors"]
    assert (error["agent"], error["where"], error["error"]) == ("builder-1", "shaky",
                                                                "RuntimeError")
    assert "life 0 gives out" in caplog.text
    # The trace: the crash, then the restart as the next incarnation, which finished.
    [(t_crash, agent, reason)] = crashes(result)
    assert (agent, reason) == ("builder-1", "behaviour_error: RuntimeError")
    [(t_back, restarted)] = supervision(result, "child_restarted")
    assert restarted["child"] == "builder-1" and restarted["incarnation"] == 1
    assert t_back - t_crash == pytest.approx(1.0)  # the first backoff, base 1
    assert s["metrics"]["done"] is True
    assert s["supervision"] == {"errors_crashed": 1, "errors_restarted": 1, "gave_up": [],
                                 "retired": []}
    # Without a fault plan an error fails the run, though the agent came back.
    assert s["faults"] is None and s["success"] is False


@pytest.mark.parametrize("want", [True, False])
def test_under_a_plan_a_restart_leaves_success_to_the_check(shaky: str, want: bool) -> None:
    result = barnraise.run(shaky, seed=0, faults=PLAN, want=want)
    s = result.summary
    assert s["behaviour_errors"] == 1 and s["supervision"]["errors_restarted"] == 1
    assert s["metrics"]["done"] is True
    assert s["success"] is want


def test_restarts_of_one_agent_back_off_exponentially_up_to_the_cap(shaky: str) -> None:
    result = barnraise.run(shaky, seed=0, faults=PLAN, failures=5, limit=10)
    s = result.summary
    down = [t for t, agent, _ in crashes(result) if agent == "builder-1"]
    up = [t for t, event in supervision(result, "child_restarted")
          if event["child"] == "builder-1"]
    assert len(down) == len(up) == 5
    assert [round(b - a, 6) for a, b in zip(down, up, strict=True)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert s["behaviour_errors"] == 5 and s["supervision"]["errors_restarted"] == 5
    assert s["metrics"]["done"] is True and s["success"] is True


def test_the_backoff_grows_with_an_agents_own_restarts_not_its_siblings(shaky: str) -> None:
    result = barnraise.run(shaky, seed=0, faults=PLAN, failures=2, builders=2, limit=10)
    for agent in ("builder-1", "builder-2"):
        down = [t for t, name, _ in crashes(result) if name == agent]
        up = [t for t, event in supervision(result, "child_restarted")
              if event["child"] == agent]
        assert [round(b - a, 6) for a, b in zip(down, up, strict=True)] == [1.0, 2.0]
    assert result.summary["behaviour_errors"] == 4 and result.success


def test_past_its_restart_limit_the_supervisor_gives_up_and_the_run_fails(shaky: str) -> None:
    # The check holds (``done`` is False, as wanted): only the unexcused error fails it.
    result = barnraise.run(shaky, seed=0, faults=PLAN, failures=100, limit=3, want=False)
    s = result.summary
    # Three restarts, then the fourth crash is one too many: the group stops for good.
    assert len(supervision(result, "child_restarted")) == 3
    [(_, gave_up)] = supervision(result, "supervisor_gave_up")
    assert gave_up["supervisor"] == "supervisor" and "builder-1" in gave_up["children"]
    assert s["behaviour_errors"] == 4
    assert s["supervision"] == {"errors_crashed": 4, "errors_restarted": 3,
                                "gave_up": ["supervisor"], "retired": []}
    # The last error had no restart after it: not excused, even under the plan.
    assert s["metrics"]["done"] is False and s["success"] is False


def test_an_agent_that_fails_in_every_life_is_left_stopped_after_five_restarts(
        shaky: str) -> None:
    """Each life outlasts the window the limit counts restarts in, so the limit never
    trips: without a bound of its own the agent would restart for ever (a hang, which
    the permissions scenario without its policy rule once was). After
    MAX_ERROR_RESTARTS restarts the next error leaves it stopped, and the run ends."""
    from barnraise.actors.supervisor import MAX_ERROR_RESTARTS

    result = barnraise.run(shaky, seed=0, faults=PLAN, failures=100, limit=3, within=0.5,
                           want=False)
    s = result.summary
    assert len(supervision(result, "child_restarted")) == MAX_ERROR_RESTARTS
    assert not supervision(result, "supervisor_gave_up")
    assert s["behaviour_errors"] == MAX_ERROR_RESTARTS + 1
    assert s["supervision"] == {"errors_crashed": MAX_ERROR_RESTARTS + 1,
                                "errors_restarted": MAX_ERROR_RESTARTS, "gave_up": [],
                                "retired": ["builder-1"]}
    assert s["run_end"] == "quiescent" and s["success"] is False
    # it is over, as any end: its watchers are told (the session's coordinator watches
    # its members), and its supervisor no longer counts it among its children
    ended = [r.content_obj() for r in result.trace.records("deliver")
             if r.content_obj().get("event") == "terminated"]
    assert {"event": "terminated", "agent_id": "builder-1",
            "reason": "too_many_errors"} in ended
