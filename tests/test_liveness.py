"""Liveness: members that vanish leave their sessions, and leavers hear nothing more.

Issue 23, findings 6 and 7. In-process agents: the registry's heartbeat check
(``agent_offline``) makes the coordinator expire a member no supervisor brings
back. Remote agents: the hub's time to live (tests/test_gateway_liveness.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barnraise.actors.agents.participant import HEARTBEAT, Participant
from barnraise.actors.base import Agent
from barnraise.actors.supervisor import Backoff
from barnraise.actors.world import Client, Simulation
from barnraise.sim.messages import Message


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


# -- role agents heartbeat: a vanished builder's task goes to another ---------------------


def _task_requeued(message: Message) -> bool:
    return message.content.get("event") == "task_requeued"


async def _slow_builder(agent: Participant) -> None:
    """Takes the task it is given and works on it for a long while."""
    task = await agent.receive(message_type="task_assignment")
    task_id = task.content["task_id"]
    accepted = await agent.call("task_accept", task_id=task_id)
    agent.outcome["accepted"] = task_id if accepted.get("success") else accepted
    await agent.sleep(1000.0)
    await agent.call("task_report", task_id=task_id, status="completed")


async def _helper(agent: Participant) -> None:
    """Finishes every task the queue gives back."""
    await agent.call("a2a_subscribe", event_type="task_requeued")
    while True:
        event = await agent.receive(_task_requeued, daemon=True)
        task_id = event.content["task_id"]
        if (await agent.call("task_accept", task_id=task_id)).get("success"):
            done = await agent.call("task_report", task_id=task_id, status="completed")
            agent.outcome.setdefault("finished", []).append((task_id, done.get("success")))


def _builder(simu: Simulation, sid: str, name: str, behaviour: Any,
             supervised: bool = False) -> Participant:
    args = {"session_id": sid, "agent_name": name, "role": "builder", "behaviour": behaviour}
    if supervised:
        return simu.supervisor.start_child(Participant, name.lower(), **args)
    return simu.dispatcher.spawn(Participant, name.lower(), **args)


def test_role_agents_heartbeat_by_default(simu: Simulation) -> None:
    _, sid = _session(simu)
    builder = _builder(simu, sid, "B1", _slow_builder)
    assert builder.heartbeat_interval == HEARTBEAT == 5.0
    simu.advance(12.0)
    beats = [r.t for r in simu.dispatcher.trace.records()
             if r.type == "heartbeat" and r.sender == "b1" and r.kind == "deliver"]
    assert beats == [5.0, 10.0]


@pytest.mark.parametrize(("how", "reason"), [
    ("stop", "terminated"),  # its actor stopped: the coordinator watches every member
    ("crash", "terminated"),  # crashed with no supervisor: it stays down, says nothing
    ("hang", "offline"),  # alive but silent: its heartbeats stopped
])
def test_a_vanished_builders_task_is_finished_by_another(
    simu: Simulation, how: str, reason: str,
) -> None:
    arch, sid = _session(simu)
    assert arch.call("a2a_subscribe", event_type="agent_expired")["success"]
    vanishing = _builder(simu, sid, "B1", _slow_builder)
    helper = _builder(simu, sid, "B2", _helper)
    simu.advance(1.0)
    task_id = arch.call("task_delegate", target_agent_id="B1", task_type="build",
                        region=_box(0, 0, 8))["task_id"]
    simu.advance(2.0)
    assert vanishing.outcome["accepted"] == task_id
    if how == "stop":
        simu.dispatcher.stop_actor("b1")
    elif how == "crash":
        simu.dispatcher.crash("b1", "vanished")
    else:
        vanishing.pause_heartbeats()
    simu.advance(30.0)
    [event] = [m for m in arch.messages() if m.content.get("event") == "agent_expired"]
    assert (event.content["name"], event.content["reason"]) == ("B1", reason)
    assert event.content["requeued_tasks"] == [task_id]
    assert helper.outcome["finished"] == [(task_id, True)]
    queue = arch.call("task_get_queue", filter={"status": "all"})["tasks"]
    [record] = [t for t in queue if t["task_id"] == task_id]
    assert (record["status"], record["assigned_to"]) == ("completed", "b2")
    if how == "hang":  # the hung one's own report, when it comes, changes nothing
        simu.advance(1000.0)
        assert vanishing.outcome["accepted"] == task_id
        queue = arch.call("task_get_queue", filter={"status": "all"})["tasks"]
        assert [t["assigned_to"] for t in queue if t["task_id"] == task_id] == ["b2"]


def test_a_builder_its_supervisor_restarts_is_not_expired(simu: Simulation) -> None:
    arch, sid = _session(simu)
    assert arch.call("a2a_subscribe", event_type="agent_expired")["success"]
    assert arch.call("a2a_subscribe", event_type="agent_offline")["success"]
    # restarted 20 s after its crash: offline (15 s of silence) before it is back
    simu.supervisor.backoff = Backoff(base=20.0, cap=20.0, jitter=0.0)
    _builder(simu, sid, "B1", _slow_builder, supervised=True)
    simu.advance(1.0)
    task_id = arch.call("task_delegate", target_agent_id="B1", task_type="build",
                        region=_box(0, 0, 8))["task_id"]
    simu.advance(2.0)
    simu.dispatcher.crash("b1", "fault")
    simu.advance(40.0)
    assert [m.content.get("event") for m in arch.messages()
            if m.message_type == "status_update"] == ["agent_offline"]
    members = [a["name"] for a in arch.call("session_get_state", include=["agents"])
               ["state"]["agents"]]
    assert members == ["Architect-1", "B1"]
    restarted = simu.dispatcher.actor("b1")
    assert isinstance(restarted, Participant) and restarted.incarnation == 1
    queue = arch.call("task_get_queue", filter={"status": "all"})["tasks"]
    [record] = [t for t in queue if t["task_id"] == task_id]
    assert record["assigned_to"] == "b1"


def test_a_stored_run_folds_an_expiry_as_the_world_had_it(tmp_path: Path) -> None:
    from barnraise import open_run
    from barnraise.actors.stored.rebuild import world_at
    from tests.test_rebuild import _plain, _same

    with Simulation(seed=3, store=tmp_path / "expired.db") as simu:
        arch, sid = _session(simu)
        gone = simu.client()
        assert gone.call("session_join", session_id=sid, agent_name="Gone",
                         role="builder")["success"]
        assert gone.call("region_claim", region=_box(0, 0, 8))["success"]
        task_id = arch.call("task_delegate", target_agent_id="any", task_type="build",
                            region=_box(0, 0, 8))["task_id"]
        assert gone.call("task_accept", task_id=task_id)["success"]
        simu.expire(gone.agent_id, "ttl")
        simu.advance(1.0)
        world = simu.world_state()
        assert simu.store is not None
        simu.store.commit()
        folded = world_at(open_run(tmp_path / "expired.db"))
        assert folded.notes == []
        _same(folded.state(), _plain(world))
    assert [m[1] for m in world[sid]["members"]] == ["Architect-1"]
    assert world[sid]["claims"] == []


def test_one_watch_per_member_ended_by_its_last_leave(simu: Simulation) -> None:
    arch, first = _session(simu)
    second = arch.call("session_create", session_name="Second", grid_size=32)["session_id"]
    member = simu.client()
    for sid in (first, second):
        assert member.call("session_join", session_id=sid, agent_name="M",
                           role="builder")["success"]
    watchers = simu.dispatcher._lives.watchers
    assert watchers[member.agent_id] == ["coordinator"]
    assert member.call("session_leave", session_id=first)["success"]
    assert watchers[member.agent_id] == ["coordinator"]  # still in the second
    assert member.call("session_leave", session_id=second)["success"]
    assert watchers.get(member.agent_id, []) == []


def test_realtime_offline_takes_a_wall_second_of_silence_at_least() -> None:
    """At 1,000 simulated seconds a wall second, three missed 5 s heartbeats are 15 wall
    milliseconds, which a loaded machine takes without anyone gone: the registry also
    waits for MIN_WALL_SILENCE of wall time (the trace shows how long it waited)."""
    import time

    from barnraise.actors.registry import MIN_WALL_SILENCE

    with Simulation(seed=1, mode="realtime", time_scale=1000.0) as simu:
        quiet = simu.dispatcher.spawn(Agent, "quiet", heartbeat_interval=5.0)
        deadline = time.monotonic() + 5.0
        while "quiet" not in simu.dispatcher.actor("registry").records:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "never registered"
            time.sleep(0.01)
        quiet.pause_heartbeats()
        deadline = time.monotonic() + 20.0
        offline: list[Any] = []
        while not offline:
            assert time.monotonic() < deadline, "never marked offline"
            time.sleep(0.05)
            offline = [r for r in simu.dispatcher.trace.records("event")
                       if r.type == "agent_offline"]
        body = offline[0].content_obj()
        silence = offline[0].t - body["last_heartbeat"]
        assert silence >= MIN_WALL_SILENCE * 1000.0 > 3 * 5.0



def test_realtime_heartbeats_are_a_quarter_wall_second_apart_at_least() -> None:
    import time

    from barnraise.actors.agent import MIN_WALL_HEARTBEAT
    from barnraise.actors.registry import MIN_WALL_SILENCE

    with Simulation(seed=1, mode="realtime", time_scale=1000.0) as simu:
        simu.dispatcher.spawn(Agent, "fast", heartbeat_interval=5.0)
        simu.dispatcher.spawn(Agent, "slow", heartbeat_interval=600.0)
        records = simu.dispatcher.actor("registry").records  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10.0
        while not {"fast", "slow"} <= set(records):  # registered with what they keep to
            assert time.monotonic() < deadline, "never registered"
            time.sleep(0.01)
        assert records["fast"].heartbeat_interval == MIN_WALL_HEARTBEAT * 1000.0 == 250.0
        assert records["slow"].heartbeat_interval == 600.0
    assert 3 * MIN_WALL_HEARTBEAT < MIN_WALL_SILENCE  # three missed come before offline
    with Simulation(seed=1) as simu:  # deterministic: simulated seconds as given
        steady = simu.dispatcher.spawn(Agent, "any", heartbeat_interval=5.0)
        assert steady.heartbeat_interval == 5.0
