"""The registry: registration, discovery filters, status, heartbeat supervision."""

from __future__ import annotations

from typing import Any

from barnraise.actors.base import Agent
from barnraise.actors.registry import Registry
from barnraise.sim.dispatch import DELIVERED, OFFLINE, Dispatcher
from barnraise.sim.messages import Message, Region
from tests.helpers import Recorder


def query(d: Dispatcher, asker: Recorder, **content: Any) -> Message:
    """Send a registry query with a correlation id and return the reply."""
    before = len(asker.got)
    asker.send("registry", "registry_query", content, correlation_id=d.next_id())
    d.run() if d.mode == "deterministic" else d.wait_idle(timeout=5)  # type: ignore[attr-defined]
    replies = asker.got[before:]
    assert len(replies) == 1, replies
    return replies[0]


def test_register_discover_with_filters(dispatcher: Dispatcher) -> None:
    d = dispatcher
    d.spawn(Registry, "registry")
    d.spawn(Agent, "b1", agent_type="builder", capabilities=("build", "shader"),
            region=Region(0, 0, 10, 10))
    d.spawn(Agent, "b2", agent_type="builder", capabilities=("build",),
            region=Region(50, 50, 10, 10))
    d.spawn(Agent, "t1", agent_type="tester", capabilities=("test",))
    asker = d.spawn(Recorder, "asker", agent_type="observer")

    def names(**filters: Any) -> list[str]:
        reply = query(d, asker, op="discover", **filters)
        assert reply.message_type == "registry_response"
        return sorted(a["agent_id"] for a in reply.content["agents"])

    assert names() == ["asker", "b1", "b2", "t1"]
    assert names(agent_type="builder") == ["b1", "b2"]
    assert names(capability="shader") == ["b1"]
    assert names(region_overlaps={"x": 55, "y": 55, "width": 100, "height": 1}) == ["b2"]
    assert names(agent_type="tester", capability="build") == []
    record = query(d, asker, op="get", agent_id="b1").content
    assert record["region"] == {"x": 0, "y": 0, "width": 10, "height": 10}
    assert record["status"] == "idle"


def test_status_changes_and_unregister_on_stop(det: Dispatcher) -> None:
    registry = det.spawn(Registry, "registry")
    worker = det.spawn(Agent, "worker", agent_type="builder")
    det.run()
    worker.set_status("busy")
    det.run()
    assert registry.records["worker"].status == "busy"
    det.stop_actor("worker")
    det.run()
    assert "worker" not in registry.records


def test_bad_queries_get_an_error_naming_the_field(det: Dispatcher) -> None:
    det.spawn(Registry, "registry")
    asker = det.spawn(Recorder, "asker")
    det.run()
    cases = [
        ({"op": "teleport"}, "op"),
        ({"op": "discover", "region_overlaps": {"x": 1}}, "region_overlaps.y"),
        ({"op": "discover", "region_overlaps": {"x": 1, "y": 1, "width": 0, "height": 1}},
         "region_overlaps"),
        ({"op": "discover", "status": "asleep"}, "status"),
        ({"op": "set_status", "status": "offline"}, "status"),
        ({"op": "get", "agent_id": "ghost"}, "agent_id"),
        ({"op": "register", "agent_type": 7}, "agent_type"),
        ({"op": "register", "agent_type": "x", "capabilities": "build"}, "capabilities"),
    ]
    for content, field in cases:
        reply = query(det, asker, **content)
        assert reply.message_type == "error_report", content
        assert reply.content["error_code"] == "invalid_argument"
        assert reply.content["field"] == field, (content, reply.content)
    assert det.statistics().behaviour_errors == 0


def test_missing_three_heartbeats_marks_an_agent_offline(det: Dispatcher) -> None:
    registry = det.spawn(Registry, "registry", check_interval=0.5)
    watcher = det.spawn(Recorder, "watcher")
    watcher.subscribe("registry:events")
    steady = det.spawn(Agent, "steady", heartbeat_interval=1.0)
    flaky = det.spawn(Agent, "flaky", heartbeat_interval=1.0)
    det.run(until=10.0)
    assert registry.records["flaky"].status == "idle"

    flaky.pause_heartbeats()  # hung: still there, no longer heard from
    det.run(until=13.0)
    assert registry.records["flaky"].status == "idle"  # three missed, not yet more
    det.run(until=13.5)
    assert registry.records["flaky"].status == "offline"
    assert registry.records["steady"].status == "idle"
    events = [m.content for m in watcher.got]
    assert [(e["event"], e["agent_id"]) for e in events] == [("agent_offline", "flaky")]
    # last heard at t=10 (its last heartbeat); offline once more than 3 s had passed
    assert events[0]["last_heartbeat"] == 10.0
    assert steady.send("flaky", "task_update", {}).statuses == {"flaky": OFFLINE}

    flaky.heartbeat()  # it recovers
    det.run(until=16.0)
    assert registry.records["flaky"].status == "idle"
    assert steady.send("flaky", "task_update", {}).statuses == {"flaky": DELIVERED}
    assert [m.content["event"] for m in watcher.got] == ["agent_offline", "agent_online"]
    offline_events = [r for r in det.trace.records("event") if r.type == "agent_offline"]
    assert len(offline_events) == 1
