"""Sessions through the client: create, join, leave, state, events, A2A tools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from barnraise.actors.coordinator import Coordinator
from barnraise.actors.world import Client, Simulation


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def session(simu: Simulation, **options: Any) -> tuple[Client, str]:
    arch = simu.client()
    created = arch.call("session_create", session_name="Linux Kernel Build", grid_size=200,
                        **options)
    assert created["success"], created
    joined = arch.call("session_join", session_id=created["session_id"],
                       agent_name="Architect-1", role="architect")
    assert joined["success"], joined
    return arch, created["session_id"]


def join(simu: Simulation, sid: str, name: str, role: str = "builder",
         **extra: Any) -> tuple[Client, dict[str, Any]]:
    client = simu.client()
    return client, client.call("session_join", session_id=sid, agent_name=name, role=role,
                               **extra)


def test_the_public_contract(simu: Simulation) -> None:
    arch = simu.client()
    s = arch.call("session_create", session_name="Linux Kernel Build", grid_size=200)
    assert s["success"] and s["session_name"] == "Linux Kernel Build"
    assert set(s) >= {"session_id", "created_at", "invite_token", "state"}
    assert s["state"] == {"agents_count": 0, "regions_claimed": 0, "tasks_pending": 0,
                          "progress_percent": 0.0}
    me = arch.call("session_join", session_id=s["session_id"], agent_name="Architect-1",
                   role="architect")
    assert me["success"] and me["role"] == "architect" and me["agent_id"] == arch.agent_id
    assert set(me["session_state"]) == {"agents", "claimed_regions", "pending_tasks"}
    assert arch.session_id == s["session_id"]  # bound: session_id may be omitted now
    assert arch.session_get_state()["success"]
    names = {t["name"] for t in simu.tools}
    assert "region_claim" in names and all("inputSchema" in t for t in simu.tools)


def test_three_or_more_agents_join_with_distinct_colours(simu: Simulation) -> None:
    arch, sid = session(simu)
    results = [join(simu, sid, f"Builder-{i}")[1] for i in range(4)]
    assert all(r["success"] for r in results)
    colours = [r["assigned_color"] for r in results]
    assert len(set(colours)) == 4
    state = arch.session_get_state(include=["agents"])["state"]
    assert [a["name"] for a in state["agents"]] == ["Architect-1"] + [
        f"Builder-{i}" for i in range(4)]


def test_state_is_visible_to_every_member(simu: Simulation) -> None:
    arch, sid = session(simu)
    observer, _ = join(simu, sid, "Watcher", role="observer")
    builder, _ = join(simu, sid, "Builder-A")
    for client in (arch, observer, builder):
        state = client.session_get_state()
        assert state["success"], state
        assert {a["name"] for a in state["state"]["agents"]} == {
            "Architect-1", "Watcher", "Builder-A"}


def test_join_errors(simu: Simulation) -> None:
    arch, sid = session(simu, max_agents=2)
    _, taken = join(simu, sid, "Architect-1")
    assert taken["error"] == "name_taken" and taken["field"] == "agent_name"
    assert join(simu, sid, "B")[1]["success"]
    _, full = join(simu, sid, "C")
    assert full["error"] == "session_full"
    _, missing = join(simu, "session_nope", "D")
    assert missing["error"] == "session_not_found"
    again = arch.call("session_join", session_id=sid, agent_name="Again")
    assert again["error"] == "name_taken"
    _, bad_role = join(simu, sid, "E", role="king")
    assert bad_role["error"] == "invalid_argument" and bad_role["field"] == "role"


def test_private_sessions_need_the_invite_token(simu: Simulation) -> None:
    arch = simu.client()
    s = arch.call("session_create", session_name="Secret", config={"private": True})
    sid, token = s["session_id"], s["invite_token"]
    _, refused = join(simu, sid, "Intruder")
    assert refused["error"] == "invalid_token"
    _, wrong = join(simu, sid, "Guesser", invite_token="join_000000000000")
    assert wrong["error"] == "invalid_token"
    _, welcome = join(simu, sid, "Friend", invite_token=token)
    assert welcome["success"]


def test_invite_and_role_tokens_are_compared_in_constant_time(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token compared with != answers a wrong guess sooner the earlier it differs."""
    import hmac

    import barnraise.actors.coordinator

    compared: list[tuple[bytes, bytes]] = []
    constant_time = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return constant_time(a, b)

    monkeypatch.setattr(barnraise.actors.coordinator.hmac, "compare_digest", spy)
    owner = simu.client()
    made = owner.call("session_create", session_name="Secret", config={"private": True})
    sid, invite = made["session_id"], made["invite_token"]
    owned = owner.call("session_join", session_id=sid, agent_name="Owner",
                       role="architect", invite_token=invite)
    assert owned["success"], owned
    granted = owner.call("session_grant", role="architect")
    assert granted["success"], granted
    role_token = granted["role_token"]
    _, wrong = join(simu, sid, "Guesser", invite_token="join_" + "0" * 12)
    assert wrong["error"] == "invalid_token"
    assert (b"join_" + b"0" * 12, invite.encode()) in compared
    _, wrong_role = join(simu, sid, "Pretender", role="architect",
                         role_token="role_" + "0" * 24)
    assert wrong_role["error"] == "invalid_token"
    assert (b"role_" + b"0" * 24, role_token.encode()) in compared
    _, welcome = join(simu, sid, "Friend", invite_token=invite)
    _, second = join(simu, sid, "Second", role="architect", role_token=role_token)
    assert welcome["success"] and second["success"], (welcome, second)


def _private_session_run(seed: int) -> tuple[str, str, str, list[bytes]]:
    with Simulation(seed=seed) as simu:
        made = simu.client("host").call("session_create", session_name="Secret",
                                        config={"private": True})
        sid, token = made["session_id"], made["invite_token"]
        _, joined = join(simu, sid, "Friend", invite_token=token)
        assert joined["success"], joined
        trace = simu.dispatcher.trace
        return token, sid, trace.digest, list(trace.to_jsonl())


def test_secrets_come_from_the_os_and_stay_out_of_the_trace() -> None:
    """Invite tokens and the signing key were drawn from the seed, so anyone who knew
    the seed could join a private session or sign as any agent."""
    first, second = _private_session_run(3), _private_session_run(3)
    assert first[0] != second[0]  # a new token every run...
    assert first[1:3] == second[1:3]  # ...yet the same session id and digest
    for token, _, _, lines in (first, second):
        assert not any(token.encode() in line for line in lines)
    with Simulation(seed=3) as a, Simulation(seed=3) as b:
        assert a.dispatcher.secret != b.dispatcher.secret
        assert len(a.dispatcher.secret) >= 32


def test_the_seeded_stand_in_of_a_token_opens_nothing() -> None:
    with Simulation(seed=5) as simu:
        made = simu.client("host").call("session_create", session_name="Secret",
                                        config={"private": True})
        sid, token = made["session_id"], made["invite_token"]
        shown = b"".join(simu.dispatcher.trace.to_jsonl())
        stand_in = shown.split(b'"invite_token":"')[1].split(b'"')[0].decode()
        assert stand_in != token
        _, refused = join(simu, sid, "Guesser", invite_token=stand_in)
        assert refused["error"] == "invalid_token"


def test_calls_before_joining_and_unknown_tools(simu: Simulation) -> None:
    _, sid = session(simu)
    stranger = simu.client()
    result = stranger.call("session_get_state", session_id=sid)
    assert result["error"] == "not_a_member"
    assert stranger.call("teleport")["error"] == "unknown_tool"
    with pytest.raises(AttributeError, match="teleport"):
        stranger.teleport  # noqa: B018 - the attribute lookup is the test
    bad = stranger.call("session_get_state", session_id=sid, include=["gossip"])
    assert bad["error"] == "invalid_argument" and bad["field"] == "include[0]"


def test_leaving_unbinds_and_announces(simu: Simulation) -> None:
    arch, sid = session(simu)
    arch.a2a_subscribe()
    builder, _ = join(simu, sid, "Builder-A")
    left = builder.session_leave()
    assert left["success"] and left["released_regions"] == [] and builder.session_id is None
    events = [m.content["event"] for m in arch.messages()]
    assert events == ["agent_joined", "agent_left"]
    state = arch.session_get_state(include=["agents"])["state"]
    assert [a["name"] for a in state["agents"]] == ["Architect-1"]
    assert builder.call("session_get_state", session_id=sid)["error"] == "not_a_member"


def test_subscribers_receive_events_of_one_type(simu: Simulation) -> None:
    _, sid = session(simu)
    watcher, _ = join(simu, sid, "Watcher", role="observer")
    sub = watcher.a2a_subscribe(event_type="agent_joined")
    assert sub["success"] and sub["topic"] == f"session:{sid}:events:agent_joined"
    join(simu, sid, "Builder-A")
    builder_b, _ = join(simu, sid, "Builder-B")
    builder_b.session_leave()
    got = watcher.messages()
    assert [(m.content["event"], m.content["name"]) for m in got] == [
        ("agent_joined", "Builder-A"), ("agent_joined", "Builder-B")]
    assert got[0].from_agent == "coordinator" and got[0].message_type == "status_update"


def test_direct_messages_and_broadcasts_between_members(simu: Simulation) -> None:
    arch, sid = session(simu)
    b1, _ = join(simu, sid, "B1")
    t1, _ = join(simu, sid, "T1", role="tester")
    sent = arch.a2a_send_message(to_agent="B1", content={"hello": 1},
                                 message_type="task_update")
    assert sent["success"] and sent["status"] == "delivered"
    [m] = b1.messages()
    assert (m.from_agent, m.content) == (arch.agent_id, {"hello": 1})
    everyone = b1.a2a_broadcast(content={"all": True})
    assert everyone["delivered"] == sorted([arch.agent_id, t1.agent_id])
    testers = arch.a2a_broadcast(agent_type="tester", content={"t": 1})
    assert testers["delivered"] == [t1.agent_id]
    nobody = arch.a2a_send_message(to_agent="Ghost")
    assert nobody["error"] == "invalid_argument" and nobody["field"] == "to_agent"
    observer, _ = join(simu, sid, "O", role="observer")
    assert observer.a2a_broadcast(content={})["error"] == "permission_denied"


def test_discover_by_type_and_capability(simu: Simulation) -> None:
    arch, sid = session(simu)
    join(simu, sid, "B1", capabilities=["wgsl", "kernel"])
    join(simu, sid, "B2", capabilities=["kernel"])
    join(simu, sid, "T1", role="tester", capabilities=["testing"])
    found = arch.a2a_discover(agent_type="builder", capability="wgsl")
    assert [a["name"] for a in found["agents"]] == ["B1"]
    assert arch.a2a_discover(capability="kernel")["count"] == 2


def test_realtime_mode_keeps_the_contract() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        arch, sid = session(simu)
        builders = [join(simu, sid, f"B{i}")[1] for i in range(3)]
        assert all(b["success"] for b in builders)
        state = arch.session_get_state(include=["agents"])
        assert len(state["state"]["agents"]) == 4


def test_same_seed_same_trace(simu: Simulation) -> None:
    def script(seed: int) -> str:
        with Simulation(seed=seed) as s:
            arch, sid = session(s)
            for i in range(3):
                join(s, sid, f"B{i}")
            arch.session_get_state()
            return s.dispatcher.trace_digest

    assert script(3) == script(3) != script(4)


def test_a_simulated_agent_calls_tools_from_its_behaviour(simu: Simulation) -> None:
    from barnraise.actors.base import Agent

    seen: dict[str, Any] = {}

    async def organise(agent: Agent) -> None:
        created = await agent.call("session_create", session_name="Agents only")
        joined = await agent.call("session_join", session_id=created["session_id"],
                                  agent_name="Planner", role="architect")
        seen["bound"] = agent.session_id == created["session_id"] == joined["session_id"]
        seen["state"] = await agent.call("session_get_state", include=["agents"])
        seen["unknown"] = await agent.call("fly")
        seen["denied"] = await agent.call("build_test", region={
            "x": 0, "y": 0, "width": 1, "height": 1})

    simu.dispatcher.spawn(Agent, "planner", behaviours=(organise,))
    assert simu.run().reason == "quiescent"
    assert seen["bound"]
    assert [a["name"] for a in seen["state"]["state"]["agents"]] == ["Planner"]
    # the same words a client gets: agents and clients share one binding and one lookup rule
    assert seen["unknown"] == simu.client().call("fly")
    assert seen["unknown"]["error"] == "unknown_tool"
    assert seen["denied"]["error"] == "permission_denied"


def test_call_fresh_answers_as_call_does(simu: Simulation) -> None:
    import numpy as np

    from barnraise.actors.base import Agent

    seen: dict[str, Any] = {}

    async def build(agent: Agent) -> None:
        # a binding tool goes through call(): the agent is bound as call() binds it
        created = await agent.call_fresh("session_create", {"session_name": "Fresh"})
        await agent.call_fresh("session_join", {"session_id": created["session_id"],
                                                "agent_name": "B", "role": "builder"})
        seen["bound"] = agent.session_id == created["session_id"]
        region = {"x": 0, "y": 0, "width": 2, "height": 1}
        await agent.call("region_claim", region=region)
        sent = {"tiles": [[1, 2]], "region": region}
        seen["placed"] = await agent.call_fresh("builder_place_tiles", sent)
        seen["sent"] = sent  # handed over: session_id filled in, the lists the caller's
        seen["same"] = await agent.call("builder_place_tiles", tiles=[[1, 2]], region=region)
        seen["unknown"] = await agent.call_fresh("fly", {})
        seen["unknown_odd_keys"] = await agent.call_fresh("fly", {1: "not a keyword"})
        seen["numpy"] = await agent.call_fresh("builder_place_tiles", {
            "tiles": [[np.uint8(1), 2]], "region": region})
        seen["state"] = await agent.call_fresh("session_get_state", {"include": ["agents"]})

    simu.dispatcher.spawn(Agent, "fresh", behaviours=(build,))
    assert simu.run().reason == "quiescent"
    assert seen["bound"]
    assert seen["placed"]["success"] and seen["placed"].keys() == seen["same"].keys()
    assert seen["sent"]["session_id"] == simu.view().session_id
    assert seen["unknown"] == simu.client().call("fly")  # the same words as call()
    assert seen["unknown_odd_keys"] == seen["unknown"]  # a dict's keys need not be names
    # not JSON: refused when sent, as the argument it is (call refuses it before)
    assert (seen["numpy"]["success"], seen["numpy"]["error"]) == (False, "invalid_argument")
    assert seen["numpy"]["message"].startswith("arguments: not JSON-encodable")
    assert [a["name"] for a in seen["state"]["state"]["agents"]] == ["B"]
    assert simu.view().canvas[0, :2].tolist() == [1, 2]


def test_a_member_that_stops_heartbeating_goes_offline_in_its_session(
    simu: Simulation,
) -> None:
    from barnraise.actors.base import Agent

    arch, sid = session(simu)
    arch.a2a_subscribe(event_type="agent_offline")

    async def join_and_idle(agent: Agent) -> None:
        await agent.call("session_join", session_id=sid, agent_name="Flaky", role="builder")

    flaky = simu.dispatcher.spawn(Agent, "flaky", heartbeat_interval=2.0,
                                  behaviours=(join_and_idle,))
    simu.advance(10.0)
    assert arch.messages() == []
    flaky.pause_heartbeats()
    simu.advance(10.0)
    [event] = arch.messages()
    assert (event.content["event"], event.content["name"]) == ("agent_offline", "Flaky")


def test_checkpoint_interval_takes_checkpoints_on_its_own(simu: Simulation) -> None:
    arch, _ = session(simu, config={"checkpoint_interval": 30})
    arch.a2a_subscribe(event_type="checkpoint_created")
    simu.advance(95.0)
    names = [m.content["name"] for m in arch.messages()]
    assert names == ["auto-30", "auto-60", "auto-90"]


def test_a_closed_session_stops_its_autosave_and_drops_its_checkpoints(
        simu: Simulation, monkeypatch: pytest.MonkeyPatch) -> None:
    arch, sid = session(simu, config={"checkpoint_interval": 30})
    coordinator = cast(Coordinator, simu.dispatcher.actor("coordinator"))
    made = arch.build_checkpoint(checkpoint_name="mine")
    assert list(coordinator.checkpoints.index(sid)) == [made["checkpoint_id"]]
    simu.advance(35.0)
    assert len(coordinator.checkpoints.index(sid)) == 2  # and auto-30
    started: list[str] = []
    start = coordinator.start_behaviour

    def spy(*args: Any, name: str = "", **options: Any) -> Any:
        started.append(name)
        return start(*args, name=name, **options)

    monkeypatch.setattr(coordinator, "start_behaviour", spy)
    simu.advance(30.0)
    assert started == ["autosave"]  # the spy sees the autosave while the session is open
    coordinator.handler("op_session_closed")({"session_id": sid})
    assert coordinator.checkpoints.index(sid) == {}
    simu.advance(100.0)
    assert started == ["autosave"]  # its timer stopped with the session


def test_a_coordinator_room_serves_its_tools_through_the_service(simu: Simulation) -> None:
    coordinator = cast(Coordinator, simu.dispatcher.actor("coordinator"))
    assert coordinator.handler("tool_build_rollback").__self__ is coordinator.checkpoints
    assert coordinator.handler("tool_a2a_subscribe").__self__ is coordinator.messaging
    assert coordinator.handler("tool_session_join").__self__ is coordinator
    with pytest.raises(AttributeError, match="Coordinator serves no tool_nope"):
        coordinator.handler("tool_nope")


def test_policy_rules_are_enforced_by_the_owning_services() -> None:
    rules = {"rules": [
        {"agent": "trusted", "tool": "task_delegate", "allow": True},  # agent ids
        {"role": "observer", "tool": "builder_*", "allow": True},
        {"role": "builder", "tool": "region_claim", "allow": False},
        {"agent": "claimer", "tool": "region_claim", "allow": True},
    ]}

    def member(agent_id: str, name: str) -> Client:
        client = simu.client(agent_id)
        assert client.session_join(session_id=sid, agent_name=name)["success"]
        return client

    with Simulation(seed=2, policy=rules) as simu:
        arch, sid = session(simu)
        trusted = member("trusted", "Trusted-Builder")
        plain = member("plain", "Plain-Builder")
        claimer = member("claimer", "Claimer")
        assert trusted.task_delegate(task_type="build")["success"]  # agent beats role
        assert plain.task_delegate(task_type="build")["error"] == "permission_denied"
        region = {"x": 0, "y": 0, "width": 5, "height": 5}
        # role x exact deny ties the default role x exact allow: deny wins
        assert plain.region_claim(region=region)["error"] == "permission_denied"
        assert claimer.region_claim(region=region)["success"]  # agent beats role
        free_sid = arch.call("session_create", session_name="free-for-all",
                             coordination_mode="free")["session_id"]
        assert arch.session_id == sid  # a bound client stays bound to its session
        painter_free = simu.client()
        painter_free.session_join(session_id=free_sid, agent_name="Painter", role="observer")
        placed = painter_free.builder_place_tile(tile_type="code", x=3, y=3)
        assert placed["success"], placed  # role x pattern allow: observers may paint here


def test_privileged_roles_are_granted_not_claimed(simu: Simulation) -> None:
    owner = simu.client("owner")
    sid = owner.call("session_create", session_name="Crew")["session_id"]
    # an open role is open; the architect's is not, nor by leaving and coming back
    _, builder = join(simu, sid, "B")
    assert builder["success"]
    climber, claimed = join(simu, sid, "Boss", role="architect")
    assert (claimed["error"], claimed["field"]) == ("permission_denied", "role")
    assert climber.call("session_get_state", session_id=sid)["error"] == "not_a_member"
    # the owner grants it: to one agent by id, or as a role token
    assert climber.call("session_grant", session_id=sid, role="architect",
                        agent_id=climber.agent_id)["error"] == "permission_denied"
    assert owner.call("session_grant", session_id=sid, role="architect",
                      agent_id=climber.agent_id)["success"]
    assert climber.call("session_join", session_id=sid, agent_name="Boss",
                        role="architect")["success"]
    minted = owner.call("session_grant", session_id=sid, role="architect")
    _, with_token = join(simu, sid, "Deputy", role="architect",
                              role_token=minted["role_token"])
    assert with_token["success"] and with_token["role"] == "architect"
    _, forged = join(simu, sid, "Forger", role="architect", role_token="role_guess")
    assert (forged["error"], forged["field"]) == ("invalid_token", "role_token")
    # the creator holds the owner's role and may join as anything
    assert owner.call("session_join", session_id=sid, agent_name="Owner",
                      role="architect")["success"]
    # a session may open every role, or grant more
    open_sid = owner.call("session_create", session_name="Open",
                          granted_roles=[])["session_id"]
    assert join(simu, open_sid, "Anyone", role="architect")[1]["success"]
    strict = owner.call("session_create", session_name="Strict",
                        granted_roles=["architect", "tester"])["session_id"]
    assert join(simu, strict, "T", role="tester")[1]["error"] == "permission_denied"


def test_policy_rules_match_agent_ids_not_display_names() -> None:
    rule = {"agent": "foreman", "tool": "task_delegate", "allow": True}
    with Simulation(seed=1, policy=[rule]) as simu:
        host = simu.client("host")
        mine = host.call("session_create", session_name="Mine")["session_id"]
        other = host.call("session_create", session_name="Other")["session_id"]
        foreman = simu.client("foreman")
        assert foreman.call("session_join", session_id=mine, agent_name="Foreman")["success"]
        allowed = foreman.call("task_delegate", task_type="build", description="x")
        assert allowed["success"], allowed
        imposter = simu.client("imposter")
        assert imposter.call("session_join", session_id=other, agent_name="foreman")["success"]
        denied = imposter.call("task_delegate", task_type="build", description="x")
        assert denied["error"] == "permission_denied"
