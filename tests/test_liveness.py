"""Liveness: members that vanish leave their sessions, and leavers hear nothing more.

Issue 23, findings 6 and 7. In-process agents: the registry's heartbeat check
(``agent_offline``) makes the coordinator expire a member no supervisor brings
back. Remote agents: the hub's time to live (tests/test_gateway_liveness.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors.base import Agent
from actors.world import Client, Simulation


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def _session(simu: Simulation) -> tuple[Client, str]:
    arch = simu.client()
    created = arch.call("session_create", session_name="Liveness", grid_size=64)
    assert created["success"], created
    joined = arch.call("session_join", session_id=created["session_id"],
                       agent_name="Architect-1", role="architect")
    assert joined["success"], joined
    return arch, created["session_id"]


def _box(x: int, y: int, size: int) -> dict[str, int]:
    return {"x": x, "y": y, "width": size, "height": size}


def _subscriptions_of(simu: Simulation, name: str) -> list[str]:
    return sorted(topic for topic, sub in simu.dispatcher._subs_by_id.values()
                  if sub.endpoint.name == name)


def test_a_leaver_hears_none_of_its_sessions_events(simu: Simulation) -> None:
    arch, sid = _session(simu)
    leaver = simu.client()
    assert leaver.call("session_join", session_id=sid, agent_name="Leaver",
                       role="builder")["success"]
    for args in ({}, {"event_type": "agent_joined"}, {"event_type": "region_claimed"},
                 {"topic": "errors"}):
        assert leaver.call("a2a_subscribe", **args)["success"], args
    assert len(_subscriptions_of(simu, leaver.agent_id)) == 4
    assert leaver.call("session_leave")["success"]
    assert _subscriptions_of(simu, leaver.agent_id) == []
    leaver.messages()  # what came before the leave
    other = simu.client()
    assert other.call("session_join", session_id=sid, agent_name="Other",
                      role="builder")["success"]
    assert other.call("region_claim", region=_box(0, 0, 4))["success"]
    assert leaver.messages() == []
    # the session's other members still hear it all
    assert arch.call("a2a_subscribe")["success"]
    assert other.call("region_claim", region=_box(8, 8, 4))["success"]
    assert [m.content["event"] for m in arch.messages()] == ["region_claimed"]


def test_leaving_keeps_subscriptions_outside_the_session(simu: Simulation) -> None:
    _, sid = _session(simu)
    member = simu.client()
    assert member.call("session_join", session_id=sid, agent_name="M", role="builder")["success"]
    endpoint = simu.dispatcher.actor(member.agent_id)
    simu.dispatcher.subscribe(endpoint, "registry:events")
    simu.dispatcher.subscribe(endpoint, f"session:{sid}x:events")  # a name that only starts alike
    assert member.call("a2a_subscribe")["success"]
    assert member.call("session_leave")["success"]
    assert _subscriptions_of(simu, member.agent_id) == ["registry:events",
                                                        f"session:{sid}x:events"]


def _flaky(simu: Simulation, sid: str, name: str, seen: dict[str, Any]) -> Agent:
    async def join_and_claim(agent: Agent) -> None:
        seen["joined"] = await agent.call("session_join", session_id=sid, agent_name=name,
                                          role="builder")
        seen["claimed"] = await agent.call("region_claim", region=_box(0, 0, 8))
        seen["subscribed"] = await agent.call("a2a_subscribe")

    return simu.dispatcher.spawn(Agent, name.lower(), heartbeat_interval=2.0,
                                 behaviours=(join_and_claim,))


def test_a_member_whose_heartbeats_stop_expires_from_its_session(simu: Simulation) -> None:
    arch, sid = _session(simu)
    assert arch.call("a2a_subscribe", event_type="agent_expired")["success"]
    seen: dict[str, Any] = {}
    flaky = _flaky(simu, sid, "Flaky", seen)
    simu.advance(10.0)
    assert seen["claimed"]["success"] and seen["subscribed"]["success"]
    assert arch.messages() == []
    flaky.pause_heartbeats()
    simu.advance(10.0)
    [event] = arch.messages()
    assert event.content["event"] == "agent_expired"
    assert (event.content["name"], event.content["reason"]) == ("Flaky", "offline")
    assert event.content["released_regions"] == [seen["claimed"]["claim_id"]]
    state = arch.call("session_get_state", include=["agents", "regions"])["state"]
    assert [a["name"] for a in state["agents"]] == ["Architect-1"]
    assert state["regions"] == []
    assert _subscriptions_of(simu, "flaky") == []
    # its name is free again, and its region too
    again = simu.client()
    assert again.call("session_join", session_id=sid, agent_name="Flaky",
                      role="builder")["success"]
    assert again.call("region_claim", region=_box(0, 0, 8))["success"]


def test_simulation_expire_removes_an_outside_member(simu: Simulation) -> None:
    arch, sid = _session(simu)
    assert arch.call("a2a_subscribe", event_type="agent_expired")["success"]
    gone = simu.client()
    assert gone.call("session_join", session_id=sid, agent_name="Gone", role="builder")["success"]
    simu.expire(gone.agent_id, "ttl")
    simu.advance(1.0)
    [event] = arch.messages()
    assert (event.content["name"], event.content["reason"]) == ("Gone", "ttl")
    assert gone.call("session_get_state", session_id=sid)["error"] == "not_a_member"
    simu.expire(gone.agent_id, "ttl")  # a member of nothing: nothing happens
    simu.advance(1.0)
    assert arch.messages() == []
