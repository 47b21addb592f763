"""What tools answer and what their side effects deliver, through the Python client.

a2a_subscribe (topics, event types, filters), build_checkpoint, build_rollback's
notifications, a2a_broadcast's audience, and session_get_state's sections; all in
deterministic mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from barnraise.actors.base import Agent
from barnraise.actors.world import Simulation
from barnraise.sim.messages import Message, Region
from tests.helpers import Crew, box, session_crew


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def crew(simu: Simulation, name: str = "S") -> Crew:
    """An architect, builders A and B, a tester and an observer in one session."""
    return session_crew(simu, name=name)


def events(messages: list[Message]) -> list[dict[str, Any]]:
    return [dict(m.content) for m in messages if "event" in m.content]


# -- a2a_subscribe -----------------------------------------------------------------------------


def test_subscribe_answers_with_a_subscription_id_and_its_topic(simu: Simulation) -> None:
    c = crew(simu)
    by_type = c.observer.a2a_subscribe(event_type="region_claimed")
    assert by_type["success"] is True
    assert by_type["topic"] == f"session:{c.sid}:events:region_claimed"
    assert isinstance(by_type["subscription_id"], str) and by_type["subscription_id"]
    all_events = c.observer.a2a_subscribe()
    assert all_events["topic"] == f"session:{c.sid}:events"
    on_topic = c.tester.a2a_subscribe(topic="progress")  # a name is the session's own topic
    assert on_topic["success"] and on_topic["topic"] == f"session:{c.sid}:progress"
    ids = {by_type["subscription_id"], all_events["subscription_id"],
           on_topic["subscription_id"]}
    assert len(ids) == 3
    assert simu.dispatcher.subscribers(f"session:{c.sid}:progress") == [c.tester.agent_id]
    assert simu.dispatcher.subscribers("progress") == []
    assert simu.dispatcher.subscribers(f"session:{c.sid}:events:region_claimed") == [
        c.observer.agent_id]


def test_subscribe_refuses_a_bad_filter_and_topic_with_event_type(simu: Simulation) -> None:
    c = crew(simu)
    both = c.observer.a2a_subscribe(topic="progress", event_type="region_claimed")
    assert (both["success"], both["error"], both["field"]) == (False, "invalid_argument",
                                                               "topic")
    bad = c.observer.a2a_subscribe(topic="progress", filter={"colour": "red"})
    assert (bad["success"], bad["error"], bad["field"]) == (False, "invalid_argument",
                                                            "filter")
    assert "colour" in bad["message"]
    not_a_region = c.observer.a2a_subscribe(topic="progress", filter={"region": {"x": 1}})
    assert not_a_region["error"] == "invalid_argument"
    assert simu.dispatcher.subscribers(f"session:{c.sid}:progress") == []  # nothing half-done


def test_an_event_type_subscription_delivers_only_that_type(simu: Simulation) -> None:
    c = crew(simu)
    assert c.observer.a2a_subscribe(event_type="region_claimed")["success"]
    assert c.tester.a2a_subscribe()["success"]  # every event of the session
    claim = c.a.region_claim(region=box(0, 0, 10))
    assert claim["success"], claim
    assert c.a.region_release(claim_id=claim["claim_id"])["success"]

    got = c.observer.messages()
    assert [(m.from_agent, m.message_type, m.to_agent) for m in got] == [
        ("regions", "status_update", f"topic:session:{c.sid}:events:region_claimed")]
    [claimed] = events(got)
    assert claimed["event"] == "region_claimed" and claimed["session_id"] == c.sid
    assert (claimed["claim_id"], claimed["agent_id"], claimed["region"]) == (
        claim["claim_id"], c.a.agent_id, box(0, 0, 10))
    assert [(e["event"], e["claim_id"]) for e in events(c.tester.messages())] == [
        ("region_claimed", claim["claim_id"]), ("region_released", claim["claim_id"])]
    # members who never subscribed hear nothing of it
    assert c.b.messages() == [] and c.arch.messages() == []


def test_a_topic_subscription_delivers_what_is_published_on_that_topic(
    simu: Simulation,
) -> None:
    c = crew(simu)
    publisher = simu.dispatcher.spawn(Agent, "publisher", agent_type="builder")
    assert c.tester.a2a_subscribe(topic="progress")["success"]
    progress = f"session:{c.sid}:progress"
    assert publisher.publish(progress, "status_update", {"n": 1}).ok
    assert publisher.publish("progress", "status_update", {"n": 2}).statuses == {}
    got = c.tester.messages()
    assert [(m.from_agent, m.to_agent, m.content) for m in got] == [
        ("publisher", f"topic:{progress}", {"n": 1})]
    assert c.observer.messages() == []


def test_a_region_filter_passes_messages_inside_and_drops_those_outside(
    simu: Simulation,
) -> None:
    c = crew(simu)
    publisher = simu.dispatcher.spawn(Agent, "publisher", agent_type="builder")
    progress = f"session:{c.sid}:progress"  # what a member's topic "progress" is
    near = c.observer.a2a_subscribe(topic="progress", filter={"region": box(0, 0, 20)})
    assert near["success"], near
    assert c.tester.a2a_subscribe(topic="progress")["success"]  # no filter: everything

    inside = publisher.publish(progress, "status_update", {"where": "inside"},
                               region=Region(5, 5, 3, 3))
    edge = publisher.publish(progress, "status_update", {"where": "edge"},
                             region=Region(19, 19, 4, 4))  # overlaps by one cell
    outside = publisher.publish(progress, "status_update", {"where": "outside"},
                                region=Region(20, 0, 5, 5))  # touches, does not overlap
    no_region = publisher.publish(progress, "status_update", {"where": "nowhere"})
    assert inside.statuses == {c.observer.agent_id: "delivered",
                               c.tester.agent_id: "delivered"}
    assert edge.statuses == inside.statuses
    assert outside.statuses == {c.tester.agent_id: "delivered"}
    assert no_region.statuses == {c.tester.agent_id: "delivered"}
    assert [m.content["where"] for m in c.observer.messages()] == ["inside", "edge"]
    assert [m.content["where"] for m in c.tester.messages()] == [
        "inside", "edge", "outside", "nowhere"]


def test_agent_type_and_message_type_filters(simu: Simulation) -> None:
    c = crew(simu)
    builder = simu.dispatcher.spawn(Agent, "pub-builder", agent_type="builder")
    tester = simu.dispatcher.spawn(Agent, "pub-tester", agent_type="tester")
    news = f"session:{c.sid}:news"
    assert c.observer.a2a_subscribe(topic="news", filter={"agent_type": "tester"})["success"]
    assert c.arch.a2a_subscribe(topic="news", filter={"message_type": "task_update"})["success"]
    builder.publish(news, "status_update", {"n": 1})
    tester.publish(news, "status_update", {"n": 2})
    builder.publish(news, "task_update", {"n": 3})
    tester.publish(news, "task_update", {"n": 4})
    assert [(m.from_agent, m.content["n"]) for m in c.observer.messages()] == [
        ("pub-tester", 2), ("pub-tester", 4)]
    assert [(m.message_type, m.content["n"]) for m in c.arch.messages()] == [
        ("task_update", 3), ("task_update", 4)]


def test_a_region_filter_on_session_events_keeps_the_events_inside(
    simu: Simulation,
) -> None:
    c = crew(simu)
    sub = c.observer.a2a_subscribe(event_type="region_claimed",
                                   filter={"region": box(0, 0, 50)})
    assert sub["success"], sub
    inside = c.a.region_claim(region=box(10, 10, 5))
    outside = c.b.region_claim(region=box(80, 80, 5))
    assert inside["success"] and outside["success"]
    got = events(c.observer.messages())
    assert [e["claim_id"] for e in got] == [inside["claim_id"]]


def test_an_agent_type_filter_on_session_events_means_the_agent_it_is_about(
    simu: Simulation,
) -> None:
    c = crew(simu)
    sub = c.observer.a2a_subscribe(event_type="agent_joined", filter={"agent_type": "tester"})
    assert sub["success"], sub
    joined = {}
    for name, role in (("B3", "builder"), ("T2", "tester")):
        client = simu.client()
        joined[name] = client.session_join(session_id=c.sid, agent_name=name, role=role)
        assert joined[name]["success"], joined[name]
    got = events(c.observer.messages())
    assert [e["agent_id"] for e in got] == [joined["T2"]["agent_id"]]


def test_another_sessions_topics_are_refused(simu: Simulation) -> None:
    c = crew(simu)
    other = simu.client()
    theirs = other.session_create(session_name="Other", grid_size=20)["session_id"]
    for topic in (f"session:{theirs}:events", f"topic:session:{theirs}:events",
                  f"session:{theirs}"):
        refused = c.observer.a2a_subscribe(topic=topic)
        assert refused["error"] == "permission_denied" and refused["field"] == "topic", topic
    assert simu.dispatcher.subscribers(f"session:{theirs}:events") == []
    mine = c.observer.a2a_subscribe(topic=f"topic:session:{c.sid}:events:agent_joined")
    assert mine["success"] and mine["topic"] == f"session:{c.sid}:events:agent_joined"


def test_no_topic_name_leads_out_of_the_session(simu: Simulation) -> None:
    """Once a prefix too many reached another session (the coordinator took off one
    ``topic:``, the dispatcher another), and the host's global topics were open to all."""
    c = crew(simu)
    theirs = simu.client().session_create(session_name="Other", grid_size=20)["session_id"]
    for topic in (f"topic:topic:session:{theirs}:events", "topic:topic:errors",
                  "type:builder", "topic:", "topic:type:x"):
        refused = c.observer.a2a_subscribe(topic=topic)
        assert refused["success"] is False and refused["field"] == "topic", topic
    # The host's topics are names like any other: they mean the session's own.
    for topic, meant in (("errors", "errors"), ("registry:events", "registry:events"),
                         ("topic:errors", "errors")):
        got = c.observer.a2a_subscribe(topic=topic)
        assert got["topic"] == f"session:{c.sid}:{meant}", topic
    everyone = set(simu.dispatcher._topics)
    assert not {"errors", "registry:events", f"session:{theirs}:events"} & {
        t for t in everyone if c.observer.agent_id in simu.dispatcher.subscribers(t)}


def test_a_sessions_errors_go_to_its_own_members_only(simu: Simulation) -> None:
    c = crew(simu)
    other = session_crew(simu, name="Other")
    assert c.observer.a2a_subscribe(topic="errors")["success"]
    assert other.observer.a2a_subscribe(topic="errors")["success"]
    simu.dispatcher.report_error(other.a.agent_id, "behaviour", ValueError("their secret"))
    assert c.observer.messages() == []
    got = other.observer.messages()
    assert [(m.message_type, m.content["detail"]) for m in got] == [
        ("error_report", "their secret")]


def test_task_events_filter_on_the_assignees_type_and_conflicts_on_their_region(
    simu: Simulation,
) -> None:
    c = crew(simu)
    assert c.observer.a2a_subscribe(event_type="task_completed",
                                    filter={"agent_type": "tester"})["success"]
    assert c.arch.a2a_subscribe(event_type="conflict_detected",
                                filter={"region": box(0, 0, 20)})["success"]
    done = {}
    for who in (c.a, c.tester):
        task = c.arch.task_delegate(task_type="test" if who is c.tester else "build",
                                    target_agent_id=who.agent_id)
        assert who.task_accept(task_id=task["task_id"])["success"]
        assert who.task_report(task_id=task["task_id"], status="completed")["success"]
        done[who.agent_id] = task["task_id"]
    assert [e["task_id"] for e in events(c.observer.messages())] == [done[c.tester.agent_id]]
    c.arch.messages()
    assert c.a.region_claim(region=box(0, 0, 10))["success"]
    assert c.a.region_claim(region=box(50, 50, 10))["success"]
    assert c.b.region_claim(region=box(5, 5, 10))["error"] == "region_conflict"  # inside
    assert c.b.region_claim(region=box(55, 55, 10))["error"] == "region_conflict"  # outside
    conflicts = [e for e in events(c.arch.messages()) if e["event"] == "conflict_detected"]
    assert [e["region"] for e in conflicts] == [box(5, 5, 10)]


# -- build_checkpoint --------------------------------------------------------------------------


def test_checkpoint_result_counts_what_was_built(simu: Simulation) -> None:
    c = crew(simu)
    assert c.a.region_claim(region=box(0, 0, 30))["success"]
    empty = c.arch.build_checkpoint(checkpoint_name="empty")
    assert empty["success"] and empty["contents"] == {"tiles": 0, "shaders": 0,
                                                      "cartridges": 0}
    assert c.a.builder_place_tiles(region=box(0, 0, 10), tiles="code")["tiles_placed"] == 100
    assert c.a.builder_place_tiles(region=box(10, 0, 5, 4), tiles="data")["success"]
    assert c.a.builder_load_shader(region=box(0, 0, 5), shader_name="glow")["success"]
    assert c.a.builder_load_shader(region=box(5, 5, 5), shader_name="dim")["success"]
    assert c.a.builder_assemble_cartridge(region=box(0, 0, 10), name="boot")["success"]

    full = c.arch.build_checkpoint(checkpoint_name="built", description="after the build")
    assert full["success"], full
    assert full["contents"] == {"tiles": 120, "shaders": 2, "cartridges": 1}
    assert (full["checkpoint_name"], full["description"]) == ("built", "after the build")
    assert full["include"] == ["tiles", "shaders", "cartridges", "session_state"]
    assert full["checkpoint_id"] != empty["checkpoint_id"]
    for result in (empty, full):
        assert isinstance(result["size_kb"], float) and result["size_kb"] > 0
    # rewriting cells already built adds no tiles
    assert c.a.builder_place_tiles(region=box(0, 0, 5), tiles="system")["success"]
    again = c.arch.build_checkpoint()
    assert again["contents"]["tiles"] == 120
    assert again["checkpoint_name"] == again["checkpoint_id"]  # unnamed: named by its id

    only_shaders = c.arch.build_checkpoint(include=["shaders"])
    assert only_shaders["contents"] == {"tiles": 0, "shaders": 2, "cartridges": 0}
    assert 0 < only_shaders["size_kb"] < full["size_kb"]


def test_checkpoints_are_the_architects_and_are_announced(simu: Simulation) -> None:
    c = crew(simu)
    assert c.observer.a2a_subscribe(event_type="checkpoint_created")["success"]
    denied = c.a.build_checkpoint()
    assert (denied["success"], denied["error"]) == (False, "permission_denied")
    made = c.arch.build_checkpoint(checkpoint_name="cp")
    assert [(e["checkpoint_id"], e["name"]) for e in events(c.observer.messages())] == [
        (made["checkpoint_id"], "cp")]


# -- build_rollback ----------------------------------------------------------------------------


def _build_and_checkpoint(c: Crew) -> str:
    assert c.a.region_claim(region=box(0, 0, 20))["success"]
    assert c.a.builder_place_tiles(region=box(0, 0, 10), tiles="code")["success"]
    checkpoint = c.arch.build_checkpoint(checkpoint_name="base")
    assert checkpoint["success"], checkpoint
    assert c.a.builder_place_tiles(region=box(10, 0, 5), tiles="data")["success"]
    for client in c.everyone:
        client.messages()  # start from empty mailboxes
    return str(checkpoint["checkpoint_id"])


def test_rollback_notifies_every_other_member_by_default(simu: Simulation) -> None:
    c = crew(simu)
    checkpoint_id = _build_and_checkpoint(c)
    rolled = c.arch.build_rollback(checkpoint_id=checkpoint_id)
    assert rolled["success"] and rolled["rolled_back_to"] == checkpoint_id
    assert rolled["lost"] == {"tiles": 25, "shaders": 0, "cartridges": 0}
    for member in (c.a, c.b, c.tester, c.observer):
        got = member.messages()
        assert [(m.from_agent, m.to_agent, m.message_type, m.content) for m in got] == [
            ("coordinator", member.agent_id, "status_update",
             {"event": "rollback", "session_id": c.sid, "checkpoint_id": checkpoint_id})]
    assert c.arch.messages() == []  # the caller is not told of its own rollback


def test_rollback_without_notify_agents_tells_nobody_directly(simu: Simulation) -> None:
    c = crew(simu)
    assert c.tester.a2a_subscribe(event_type="rollback")["success"]
    checkpoint_id = _build_and_checkpoint(c)
    rolled = c.arch.build_rollback(checkpoint_id=checkpoint_id, notify_agents=False)
    assert rolled["success"] and rolled["lost"]["tiles"] == 25
    for member in (c.arch, c.a, c.b, c.observer):
        assert member.messages() == []
    # a subscriber still hears of it through the event, not through a direct notice
    [event] = c.tester.messages()
    assert event.to_agent == f"topic:session:{c.sid}:events:rollback"
    assert event.content["event"] == "rollback"
    assert (event.content["checkpoint_id"], event.content["by"]) == (
        checkpoint_id, c.arch.agent_id)
    assert event.content["lost_items"] == rolled["lost"]


# -- a2a_broadcast -----------------------------------------------------------------------------


def test_broadcast_excludes_the_sender_unless_told_not_to(simu: Simulation) -> None:
    c = crew(simu)
    others = sorted(m.agent_id for m in (c.arch, c.b, c.tester, c.observer))
    default = c.a.a2a_broadcast(content={"round": 1})
    assert default["success"]
    assert default["recipients"] == default["delivered"] == others
    assert c.a.messages() == []
    for member in (c.arch, c.b, c.tester, c.observer):
        [m] = member.messages()
        assert (m.from_agent, m.message_type, m.content) == (
            c.a.agent_id, "status_update", {"round": 1})

    everyone = c.a.a2a_broadcast(content={"round": 2}, exclude_self=False,
                                  message_type="task_update")
    assert everyone["delivered"] == sorted([c.a.agent_id, *others])
    assert set(everyone["statuses"].values()) == {"delivered"}
    for member in c.everyone:
        [m] = member.messages()
        assert (m.from_agent, m.message_type, m.content) == (
            c.a.agent_id, "task_update", {"round": 2})


def test_broadcast_to_one_agent_type(simu: Simulation) -> None:
    c = crew(simu)
    testers = c.arch.a2a_broadcast(agent_type="tester", content={"to": "testers"})
    assert testers["delivered"] == [c.tester.agent_id]
    builders = c.a.a2a_broadcast(agent_type="builder", content={"to": "builders"})
    assert builders["delivered"] == [c.b.agent_id]  # the sender is still left out
    with_me = c.a.a2a_broadcast(agent_type="builder", content={"to": "us"}, exclude_self=False)
    assert with_me["delivered"] == sorted([c.a.agent_id, c.b.agent_id])
    assert [m.content["to"] for m in c.tester.messages()] == ["testers"]
    assert [m.content["to"] for m in c.b.messages()] == ["builders", "us"]
    assert [m.content["to"] for m in c.a.messages()] == ["us"]
    assert c.arch.messages() == [] and c.observer.messages() == []
    nobody = c.arch.a2a_broadcast(agent_type="observer", content={}, exclude_self=False)
    assert nobody["delivered"] == [c.observer.agent_id]
    bad = c.arch.a2a_broadcast(agent_type="wizard")
    assert (bad["success"], bad["error"]) == (False, "invalid_argument")


# -- session_get_state -------------------------------------------------------------------------


def test_state_with_events_lists_this_sessions_events(simu: Simulation) -> None:
    c = crew(simu)
    other = crew(simu, "Other")  # its events must not leak into this session's state
    claim = c.a.region_claim(region=box(0, 0, 10))
    assert claim["success"]
    assert other.a.region_claim(region=box(50, 50, 10))["success"]

    result = c.arch.session_get_state(include=["events"])
    assert result["success"] and result["session_id"] == c.sid
    state = result["state"]
    assert set(state) == {"events"}
    got = state["events"]
    assert all(e["session_id"] == c.sid for e in got)
    assert [(e["type"], e.get("name")) for e in got if e["type"] == "agent_joined"] == [
        ("agent_joined", name) for name in ("Arch", "A", "B", "T", "O")]
    [claimed] = [e for e in got if e["type"] == "region_claimed"]
    assert (claimed["claim_id"], claimed["agent_id"], claimed["region"]) == (
        claim["claim_id"], c.a.agent_id, box(0, 0, 10))
    assert [e["type"] for e in got] == ["agent_joined"] * 5 + ["region_claimed"]
    assert all(e["event"] == e["type"] and e["t"] == 0.0 for e in got)
    other_state = other.arch.session_get_state(include=["events"])["state"]
    assert [e["type"] for e in other_state["events"]] == ["agent_joined"] * 5 + [
        "region_claimed"]
    assert all(e["session_id"] == other.sid for e in other_state["events"])


def test_state_with_all_returns_every_section(simu: Simulation) -> None:
    c = crew(simu)
    claim = c.a.region_claim(region=box(0, 0, 10))
    assert c.a.builder_place_tiles(region=box(0, 0, 4), tiles="code")["success"]
    task = c.arch.task_delegate(task_type="build", region=box(40, 40, 5))
    assert task["success"], task

    everything = c.observer.session_get_state(include=["all"])
    assert everything["success"]
    state = everything["state"]
    assert set(state) == {"agents", "regions", "tasks", "progress", "events"}
    assert [a["name"] for a in state["agents"]] == ["Arch", "A", "B", "T", "O"]
    first = next(a for a in state["agents"] if a["name"] == "A")
    assert first["regions_claimed"] == 1 and first["role"] == "builder"
    assert [r["claim_id"] for r in state["regions"]] == [claim["claim_id"]]
    assert state["progress"]["tiles_placed"] == 16
    assert sum(state["tasks"].values()) == 1
    assert "region_claimed" in [e["type"] for e in state["events"]]
    # "all" is the default, and is the same as naming every section
    assert c.observer.session_get_state()["state"] == state
    named = c.observer.session_get_state(
        include=["agents", "regions", "tasks", "progress", "events"])["state"]
    assert named == state
    only_agents = c.observer.session_get_state(include=["agents"])["state"]
    assert set(only_agents) == {"agents"} and only_agents["agents"] == state["agents"]
