"""Seed 004's alert and plan tools in the tool table: alert_raise (and plan_start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from barnraise.actors.world import Simulation
from barnraise.scenarios._kit import run_records, session_events
from barnraise.sim.policy import Policy
from tests.helpers import Crew, session_crew


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


def test_the_policy_lets_working_roles_raise_alerts() -> None:
    policy = Policy()
    for role in ("architect", "builder", "tester"):
        assert policy.decide("alert_raise", role=role), role
    assert not policy.decide("alert_raise", role="observer")
