"""Seed 004's alert and plan tools in the tool table: alert_raise (and plan_start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from barnraise.actors.stored.resume import fold
from barnraise.actors.world import Client, Simulation
from barnraise.scenarios._kit import (
    host_session,
    kernel_blueprint,
    run_records,
    session_events,
    spawn,
)
from barnraise.sim.policy import Policy
from tests.helpers import Crew, session_crew

PLAN: dict[str, Any] = {"name": "tiny", "steps": [
    {"id": "lay", "role": "builder", "task_type": "build",
     "region": {"x": 0, "y": 0, "width": 4, "height": 2}},
    {"id": "top", "role": "builder", "task_type": "build", "depends_on": ["lay"],
     "region": {"x": 0, "y": 2, "width": 4, "height": 2}}]}


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=4) as s:
        yield s


def _alerts(simu: Simulation, sid: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("seq", "t")}
            for e in session_events(simu, sid, "agent.alert")]


def test_alert_raise_publishes_an_agent_alert_from_its_caller(simu: Simulation) -> None:
    crew: Crew = session_crew(simu)
    heard = crew.observer.a2a_subscribe(event_type="agent.alert")
    assert heard["success"], heard
    raised = crew.a.alert_raise(severity="warning", title="Tile supply low",
                                body="12 left", details={"step_id": "boot", "left": 12})
    assert raised == {"success": True, "delivered": True, "severity": "warning",
                      "title": "Tile supply low", "topic": f"session:{crew.sid}:events"}
    simu.settle()
    assert _alerts(simu, crew.sid) == [{
        "event": "agent.alert", "session_id": crew.sid, "agent_id": "a",
        "severity": "warning", "title": "Tile supply low", "body": "12 left",
        "step_id": "boot", "left": 12}]
    # sent as its caller, as a behaviour's alert() is: the trace names the agent
    [record] = [r for r in run_records(simu, "event") if r.type == "agent.alert"]
    assert record.sender == "a"
    [note] = [m for m in crew.observer.messages() if m.content.get("event") == "agent.alert"]
    assert note.content["title"] == "Tile supply low"
    # the typed surface has it, and a tester and an architect may raise one too
    assert crew.tester.call("alert_raise", severity="info", title="ok")["success"]
    assert crew.arch.alert_raise(severity="critical", title="stop")["success"]


@pytest.mark.parametrize(("who", "args", "error", "field"), [
    ("a", {"severity": "fatal", "title": "x"}, "invalid_argument", "severity"),
    ("a", {"severity": "info", "title": ""}, "invalid_argument", "title"),
    ("a", {"severity": "info"}, "invalid_argument", "title"),
    ("a", {"severity": "info", "title": "x", "body": "b" * 4001}, "invalid_argument", "body"),
    ("a", {"severity": "info", "title": "x", "details": {"severity": "critical"}},
     "invalid_argument", "details.severity"),
    ("a", {"severity": "info", "title": "x", "details": {"event": "plan.completed"}},
     "invalid_argument", "details.event"),
    ("a", {"severity": "info", "title": "x", "colour": "red"}, "invalid_argument", None),
    ("observer", {"severity": "info", "title": "x"}, "permission_denied", None),
    ("stranger", {"severity": "info", "title": "x"}, "not_a_member", None),
])
def test_a_refused_alert_publishes_nothing(simu: Simulation, who: str, args: dict[str, Any],
                                           error: str, field: str | None) -> None:
    crew = session_crew(simu)
    caller = {"a": crew.a, "observer": crew.observer}.get(who) or simu.client("stranger")
    before = len(list(run_records(simu, "event")))
    refused = caller.call_any("alert_raise", {"session_id": crew.sid, **args})
    assert refused["success"] is False and refused["error"] == error, refused
    if field is not None:
        assert refused["field"] == field, refused
    simu.settle()
    assert _alerts(simu, crew.sid) == []
    assert len(list(run_records(simu, "event"))) == before


def test_the_policy_lets_working_roles_raise_alerts_and_architects_start_plans() -> None:
    policy = Policy()
    for role in ("architect", "builder", "tester"):
        assert policy.decide("alert_raise", role=role), role
    assert not policy.decide("alert_raise", role="observer")
    assert policy.decide("plan_start", role="architect")
    for role in ("builder", "tester", "observer"):
        assert not policy.decide("plan_start", role=role), role


# -- plan_start ---------------------------------------------------------------------------

def _plan_world(simu: Simulation, max_agents: int = 10) -> tuple[str, Client, Client]:
    """A session of 8 x 8 with one builder at work; an architect and a builder client."""
    blueprint = kernel_blueprint(8, np.random.default_rng(0))
    _, sid = host_session(simu, session_name="plans", grid_size=8, max_agents=max_agents,
                          blueprint=blueprint.tolist())
    boss = simu.client("boss")
    simu.grant(sid, "boss", "architect")
    assert boss.session_join(session_id=sid, agent_name="boss", role="architect")["success"]
    spawn(simu, sid, "builder-1", "builder", crew=1, blueprint=blueprint)
    simu.run(until=1.0)  # the builder has joined: the runner finds it
    worker = simu.client("worker")
    assert worker.session_join(session_id=sid, agent_name="worker", role="builder")["success"]
    return sid, boss, worker


def _plan_trace(simu: Simulation, sid: str) -> list[tuple[Any, ...]]:
    return [(e["event"], e.get("step_id"), e.get("plan_id"), e["t"])
            for e in session_events(simu, sid, prefix="plan.")]


def test_plan_start_runs_the_plan_by_a_runner_of_its_own(simu: Simulation) -> None:
    sid, boss, _ = _plan_world(simu)
    started = boss.plan_start(plan=PLAN)
    assert started["success"], started
    plan_id, runner = started["plan_id"], started["runner"]
    assert (started["plan"], started["steps"]) == ("tiny", ["lay", "top"])
    assert runner == f"planner-{plan_id}"
    report = simu.run()
    assert report.reason == "quiescent"
    events = [(e["event"], e.get("step_id")) for e in session_events(simu, sid, prefix="plan.")
              if e["plan_id"] == plan_id]
    assert events == [("plan.started", None), ("plan.step.started", "lay"),
                      ("plan.step.completed", "lay"), ("plan.step.started", "top"),
                      ("plan.step.completed", "top"), ("plan.completed", None)]
    [done] = session_events(simu, sid, "plan.completed")
    assert done["status"] == "completed" and done["completed"] == ["lay", "top"]
    # the runner is a member, as the architect it was granted, and the steps' tasks are its
    members = boss.a2a_discover(agent_type="architect")["agents"]
    assert runner in [m["agent_id"] for m in members]
    queue = boss.task_get_queue(filter={"status": "all"})["tasks"]
    assert sorted(t["payload"]["step"] for t in queue if t["payload"].get("plan_id") == plan_id) \
        == ["lay", "top"]


def test_plan_start_is_deterministic() -> None:
    traces = []
    for _ in range(2):
        with Simulation(seed=9) as simu:
            sid, boss, _ = _plan_world(simu)
            assert boss.plan_start(plan=PLAN)["success"]
            simu.run()
            traces.append(_plan_trace(simu, sid))
    assert traces[0] == traces[1] and len(traces[0]) == 6


@pytest.mark.parametrize(("change", "error", "field"), [
    ({"steps": [{**PLAN["steps"][1], "depends_on": ["nope"]}]}, "invalid_argument",
     "plan.steps[0].depends_on[0]"),
    ({"steps": [{**PLAN["steps"][0], "region": {"x": 6, "y": 0, "width": 4, "height": 2}}]},
     "invalid_argument", "plan.steps[0].region"),
    ({"steps": [{**PLAN["steps"][0], "aproval": True}]}, "invalid_argument",
     "plan.steps[0].aproval"),
    ({"steps": []}, "invalid_argument", "plan.steps"),
    ({"name": ""}, "invalid_argument", "plan.name"),
])
def test_a_bad_plan_is_refused_naming_its_field_and_starts_nothing(
        simu: Simulation, change: dict[str, Any], error: str, field: str) -> None:
    sid, boss, _ = _plan_world(simu)
    actors = set(simu.dispatcher.actors)
    refused = boss.plan_start(plan={**PLAN, **change})
    assert (refused["success"], refused["error"]) == (False, error), refused
    assert refused["field"].startswith(field), refused
    simu.run()
    assert set(simu.dispatcher.actors) == actors  # no runner
    assert session_events(simu, sid, prefix="plan.") == []


def test_plan_start_is_refused_to_a_builder_a_stranger_and_a_full_session(
        simu: Simulation) -> None:
    sid, boss, worker = _plan_world(simu, max_agents=3)  # boss, builder-1, worker
    actors = set(simu.dispatcher.actors)
    assert worker.plan_start(plan=PLAN)["error"] == "permission_denied"
    stranger = simu.client("stranger")
    assert stranger.call_any("plan_start", {"session_id": sid, "plan": PLAN})["error"] \
        == "not_a_member"
    full = boss.plan_start(plan=PLAN)
    assert full["error"] == "session_full" and "runner" in full["message"]
    assert boss.call_any("plan_start", {"plan": "kernel_plan"})["error"] == "invalid_argument"
    simu.run()
    assert set(simu.dispatcher.actors) - actors == {"stranger"}
    assert session_events(simu, sid, prefix="plan.") == []


def test_plan_start_on_a_realtime_world_runs_to_completion() -> None:
    """The runner is started from the coordinator's own thread here: its run is heard of
    through a subscription, waited for with a timeout."""
    with Simulation(seed=2, mode="realtime", time_scale=50.0) as simu:
        _, boss, _ = _plan_world(simu)
        assert boss.a2a_subscribe(event_type="plan.completed")["success"]
        started = boss.plan_start(plan=PLAN)
        assert started["success"], started
        done = None
        for _ in range(200):  # each wait is bounded; 200 of them at most
            note = boss.receive(timeout=0.5)
            if note is not None and note.content.get("event") == "plan.completed":
                done = note.content
                break
        assert done is not None, "no plan.completed within 100 s"
        assert (done["plan_id"], done["status"]) == (started["plan_id"], "completed")


def test_a_resume_fold_counts_a_plan_id_among_the_coordinators_draws(
        simu: Simulation) -> None:
    """A resumed coordinator goes on from the serial its fold counted: a plan's id is
    one of its draws, so the fold counts the plan_start answer (actors/coordinator_log.py)."""
    _, boss, _ = _plan_world(simu)
    coordinator = simu.dispatcher.actors["coordinator"]
    before = fold(list(simu.dispatcher.trace.records())).serials["coordinator"]
    assert before == coordinator._serial
    assert boss.plan_start(plan=PLAN)["success"]
    simu.run()
    image = fold(list(simu.dispatcher.trace.records()))
    assert image.serials["coordinator"] == coordinator._serial == before + 1
