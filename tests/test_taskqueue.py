"""The tasks service through clients: delegation, acceptance, reports, approvals, the queue.

Tests marked in their docstring "needs the regions service" use tasks with a
region, whose acceptance claims it through ``regions``; every other test uses
region-less tasks and the tasks service alone (plus the coordinator).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from barnraise.actors.taskqueue import TaskQueue
from barnraise.actors.world import Client, Simulation
from barnraise.sim.messages import Message
from barnraise.sim.seeds import seed_for
from barnraise.sim.taskgraph import TaskStatus
from barnraise.sim.tools import ToolError

# -- helpers ------------------------------------------------------------------------------


@dataclass
class Crew:
    sid: str
    arch: Client
    builder: Client
    builder2: Client
    tester: Client
    observer: Client


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=7) as s:
        yield s


def make_crew(simu: Simulation, **config: Any) -> Crew:
    """An architect, two builders, a tester and an observer in one 200x200 session."""
    arch = simu.client()
    created = arch.session_create(session_name="Kernel", grid_size=200, config=config)
    assert created["success"], created
    sid = created["session_id"]
    assert arch.session_join(session_id=sid, agent_name="Arch", role="architect")["success"]
    others = []
    for name, role in (("B1", "builder"), ("B2", "builder"), ("T1", "tester"),
                       ("Obs", "observer")):
        client = simu.client()
        assert client.session_join(session_id=sid, agent_name=name, role=role)["success"]
        others.append(client)
    return Crew(sid, arch, *others)


@pytest.fixture
def crew(simu: Simulation) -> Crew:
    return make_crew(simu)


def tasks_actor(simu: Simulation) -> TaskQueue:
    return cast(TaskQueue, simu.dispatcher.actor("tasks"))


def delegate(client: Client, **args: Any) -> str:
    args.setdefault("task_type", "build")
    result = client.task_delegate(**args)
    assert result["success"], result
    return str(result["task_id"])


def finish(client: Client, task_id: str, status: str = "completed", **extra: Any) -> dict[str, Any]:
    accepted = client.task_accept(task_id=task_id)
    assert accepted["success"], accepted
    return client.task_report(task_id=task_id, status=status, **extra)


def statuses(client: Client) -> dict[str, str]:
    queue = client.task_get_queue(filter={"status": "all"})
    return {t["task_id"]: t["status"] for t in queue["tasks"]}


def of_type(messages: list[Message], message_type: str) -> list[Message]:
    return [m for m in messages if m.message_type == message_type]


def events(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.content["event"], m.content.get("task_id", "")) for m in messages
            if m.message_type == "status_update"]


def square(x: int, y: int, size: int = 20) -> dict[str, int]:
    return {"x": x, "y": y, "width": size, "height": size}


# -- task_delegate ------------------------------------------------------------------------


def test_task_ids_are_the_queue_streams_draws_one_per_task_across_blocks(
        simu: Simulation, crew: Crew) -> None:
    """Ids are drawn a block at a time; they are what one draw per task gives, past a
    block's end, and a new stream (a resumed run's) starts a new block at once."""
    tasks = tasks_actor(simu)
    stream = np.random.default_rng(seed_for(simu.seed, "tasks"))
    ids = [delegate(crew.arch, target_agent_id="any") for _ in range(150)]
    assert ids == [f"task_{int(stream.integers(0, 2**32)):08x}{i:x}"
                   for i in range(1, 151)]
    tasks.resume_ids({"seq": 5, "tasks": 1000})
    fresh = np.random.default_rng(seed_for(simu.seed, "tasks:resumed:5"))
    assert delegate(crew.arch, target_agent_id="any") == \
        f"task_{int(fresh.integers(0, 2**32)):08x}{1001:x}"


def test_delegate_returns_the_task_and_tells_its_assignee(crew: Crew) -> None:
    crew.observer.a2a_subscribe(event_type="task_created")
    any_task = crew.arch.task_delegate(target_agent_id="any", task_type="build",
                                       description="entry point", priority="high")
    assert any_task == {"success": True, "task_id": any_task["task_id"], "assigned_to": "any",
                        "status": "pending", "position_in_queue": 1}
    assert any_task["task_id"].startswith("task_")
    by_name = crew.arch.task_delegate(target_agent_id="B1", task_type="test",
                                      region=square(0, 0))
    assert by_name["assigned_to"] == crew.builder.agent_id
    assert by_name["position_in_queue"] == 2
    [assignment] = of_type(crew.builder.messages(), "task_assignment")
    assert assignment.from_agent == "tasks"
    assert assignment.content["task_id"] == by_name["task_id"]
    assert assignment.content["region"] == square(0, 0)
    assert assignment.content["delegated_by"] == crew.arch.agent_id
    assert assignment.content["status"] == "pending"
    assert of_type(crew.builder2.messages(), "task_assignment") == []  # "any" tells no one
    created = [m.content for m in crew.observer.messages()]
    assert [(c["event"], c["task_id"], c["assigned_to"], c["delegated_by"]) for c in created] == [
        ("task_created", any_task["task_id"], "any", crew.arch.agent_id),
        ("task_created", by_name["task_id"], crew.builder.agent_id, crew.arch.agent_id)]


def test_delegate_refusals_change_nothing(crew: Crew) -> None:
    arch = crew.arch
    first = delegate(arch)
    unknown = arch.task_delegate(target_agent_id="Ghost", task_type="build")
    assert unknown["error"] == "invalid_argument" and unknown["field"] == "target_agent_id"
    watcher = arch.task_delegate(target_agent_id="Obs", task_type="review")
    assert watcher["error"] == "invalid_argument" and watcher["field"] == "target_agent_id"
    outside = arch.task_delegate(task_type="build", region=square(190, 0))
    assert outside["error"] == "out_of_bounds" and outside["field"] == "region"
    missing = arch.task_delegate(task_type="test", dependencies=[first, "task_nope"])
    assert missing["error"] == "unknown_dependency" and missing["dependency"] == "task_nope"
    assert "task_nope" in missing["message"]
    late = arch.task_delegate(task_type="build", deadline=-1)
    assert late["error"] == "invalid_argument" and late["field"] == "deadline"
    bad_type = arch.task_delegate(task_type="dance")
    assert bad_type["error"] == "invalid_argument" and bad_type["field"] == "task_type"
    assert statuses(arch) == {first: "pending"}
    assert arch.task_get_queue()["summary"]["pending"] == 1


def test_re_planning_adds_dependencies_and_refuses_a_cycle_naming_it(
        simu: Simulation, crew: Crew) -> None:
    a = delegate(crew.arch)
    b = delegate(crew.arch, dependencies=[a])
    c = delegate(crew.arch, dependencies=[b])
    d = delegate(crew.arch)
    refused = crew.arch.task_add_dependencies(task_id=a, dependencies=[d, c])
    assert refused["error"] == "dependency_cycle" and refused["field"] == "dependencies"
    assert refused["cycle"] == [a, c, b, a]  # a would depend on c, c on b, b on a
    assert f"{a} -> {c} -> {b} -> {a}" in refused["message"]
    graph = tasks_actor(simu).graph_of(crew.sid)
    assert graph.dependencies(a) == [] and nx.is_directed_acyclic_graph(graph.graph)
    assert crew.arch.task_add_dependencies(task_id=a, dependencies=[a])["cycle"] == [a, a]
    unknown = crew.arch.task_add_dependencies(task_id=a, dependencies=["task_nope"])
    assert unknown["error"] == "unknown_dependency" and unknown["dependency"] == "task_nope"
    missing = crew.arch.task_add_dependencies(task_id="task_nope", dependencies=[a])
    assert missing["error"] == "task_not_found"
    assert crew.builder.task_add_dependencies(task_id=a, dependencies=[d])["error"] == (
        "permission_denied")
    # without a cycle: a waits for d too, and is no longer ready
    added = crew.arch.task_add_dependencies(task_id=a, dependencies=[d, d])
    assert added["success"] and added["dependencies"] == [d] and added["status"] == "pending"
    assert not graph.is_ready(a)
    assert crew.builder.task_accept(task_id=a)["error"] == "invalid_transition"
    # a failed new dependency blocks the task and what depends on it, and says so
    finish(crew.builder, d, "failed")
    e = delegate(crew.arch)
    assert crew.observer.a2a_subscribe(event_type="task_blocked")["success"]
    blocked = crew.arch.task_add_dependencies(task_id=e, dependencies=[a])
    assert blocked["status"] == "blocked" and blocked["blocked"] == []
    announced = [m.content for m in crew.observer.messages()]
    assert [(n["task_id"], n["because"]) for n in announced] == [(e, e)]
    # a started task cannot gain dependencies
    f = delegate(crew.arch)
    assert crew.builder.task_accept(task_id=f)["success"]
    late = crew.arch.task_add_dependencies(task_id=f, dependencies=[e])
    assert late["error"] == "invalid_transition" and graph.dependencies(f) == []


def test_a_cycle_is_refused_and_named(simu: Simulation, crew: Crew,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Dependencies must already exist, so the only cycle task_delegate can be
    # asked for is a task depending on itself: it would need its own id. Make
    # the id predictable and ask for exactly that.
    base = delegate(crew.arch)
    monkeypatch.setattr(tasks_actor(simu), "_new_task_id", lambda: "task_loop")
    refused = crew.arch.task_delegate(task_type="build", dependencies=[base, "task_loop"])
    assert refused["error"] == "dependency_cycle"
    assert refused["cycle"] == ["task_loop", "task_loop"]
    assert "task_loop -> task_loop" in refused["message"]
    assert statuses(crew.arch) == {base: "pending"}
    assert nx.is_directed_acyclic_graph(tasks_actor(simu).graph_of(crew.sid).graph)


def test_roles_are_enforced(crew: Crew) -> None:
    assert crew.builder.task_delegate(task_type="build")["error"] == "permission_denied"
    task = delegate(crew.arch)
    assert crew.observer.task_accept(task_id=task)["error"] == "permission_denied"
    assert crew.observer.task_report(task_id=task, status="failed")["error"] == (
        "permission_denied")
    assert crew.builder.approval_respond(task_id=task, decision="approve")["error"] == (
        "permission_denied")
    assert crew.observer.task_get_queue()["success"]  # reading is open to everyone
    assert statuses(crew.arch) == {task: "pending"}


def test_priority_then_age_orders_the_queue(crew: Crew) -> None:
    arch = crew.arch
    order = ["low", "critical", "medium", "high", "medium", "critical"]
    made = [arch.task_delegate(task_type="build", priority=p) for p in order]
    # position_in_queue: rank among pending tasks at that moment
    assert [m["position_in_queue"] for m in made] == [1, 1, 2, 2, 4, 2]
    queue = arch.task_get_queue()["tasks"]
    assert [t["priority"] for t in queue] == ["critical", "critical", "high", "medium",
                                             "medium", "low"]
    ids = [m["task_id"] for m in made]
    assert [t["task_id"] for t in queue] == [ids[1], ids[5], ids[3], ids[2], ids[4], ids[0]]
    finish(crew.builder, ids[1])
    after = arch.task_delegate(task_type="build", priority="critical")
    assert after["position_in_queue"] == 2  # the finished one no longer counts


# -- task_accept ---------------------------------------------------------------------------


def test_accept_starts_a_ready_task(crew: Crew) -> None:
    crew.observer.a2a_subscribe(event_type="task_accepted")
    task = delegate(crew.arch)
    accepted = crew.builder.task_accept(task_id=task)
    assert accepted == {"success": True, "task_id": task, "status": "in_progress",
                        "assigned_to": crew.builder.agent_id, "claimed_region": None,
                        "claim": None}
    [record] = crew.arch.task_get_queue(filter={"status": "in_progress"})["tasks"]
    assert record["assigned_to"] == crew.builder.agent_id and record["accepted_at"] == 0.0
    assert events(crew.observer.messages()) == [("task_accepted", task)]


def test_accept_errors(crew: Crew) -> None:
    first = delegate(crew.arch)
    second = delegate(crew.arch, target_agent_id="B1", dependencies=[first])
    assert crew.builder.task_accept(task_id="task_nope")["error"] == "task_not_found"
    taken = crew.builder2.task_accept(task_id=second)
    assert taken["error"] == "not_owner" and taken["assigned_to"] == crew.builder.agent_id
    waiting = crew.builder.task_accept(task_id=second)
    assert waiting["error"] == "invalid_transition" and waiting["waiting_on"] == [first]
    assert crew.builder.task_accept(task_id=first)["success"]
    again = crew.builder2.task_accept(task_id=first)
    assert again["error"] == "not_owner"  # it is B1's now
    twice = crew.builder.task_accept(task_id=first)
    assert twice["error"] == "invalid_transition" and twice["status"] == "in_progress"


# -- task_report ---------------------------------------------------------------------------


def test_a_delegator_that_changes_its_result_letter_changes_nothing_in_the_queue(
        crew: Crew) -> None:
    build = delegate(crew.arch, target_agent_id="B1")
    crew.arch.messages()
    assert crew.builder.task_accept(task_id=build)["success"]
    assert crew.builder.task_report(task_id=build, status="completed",
                                    result={"tiles": 400, "rows": [1, 2]},
                                    artifacts=[{"type": "tile", "id": "block-0"}])["success"]
    [letter] = of_type(crew.arch.messages(), "task_result")
    letter.content["result"]["tiles"] = 0  # the delegator scribbles on what it got
    letter.content["result"]["rows"].append(3)
    letter.content["artifacts"][0]["id"] = "forged"
    queue = crew.arch.task_get_queue(filter={"status": "all"})
    [task] = [t for t in queue["tasks"] if t["task_id"] == build]
    assert task["result"] == {"tiles": 400, "rows": [1, 2]}
    assert task["artifacts"] == [{"type": "tile", "id": "block-0"}]


def test_complete_notifies_the_delegator_and_unblocks_dependents(crew: Crew) -> None:
    assert crew.observer.a2a_subscribe(event_type="task_unblocked")["success"]
    build = delegate(crew.arch, target_agent_id="B1", priority="high")
    test = delegate(crew.arch, target_agent_id="T1", task_type="test", dependencies=[build])
    review = delegate(crew.arch, task_type="review", dependencies=[build, test])
    crew.arch.messages()
    accepted = crew.builder.task_accept(task_id=build)
    assert accepted["success"]
    done = crew.builder.task_report(task_id=build, status="completed",
                                    result={"tiles": 400},
                                    artifacts=[{"type": "tile", "id": "block-0"}],
                                    message="built")
    assert done == {"success": True, "task_id": build, "status": "completed",
                    "notified_agents": [crew.arch.agent_id], "unblocked_tasks": [test],
                    "blocked_tasks": [], "requeued": False}
    [result] = of_type(crew.arch.messages(), "task_result")
    assert result.from_agent == "tasks"
    assert result.content["task_id"] == build and result.content["status"] == "completed"
    assert result.content["result"] == {"tiles": 400}
    assert result.content["artifacts"] == [{"type": "tile", "id": "block-0"}]
    assert result.content["unblocked_tasks"] == [test]
    unblocked = crew.observer.messages()
    assert events(unblocked) == [("task_unblocked", test)]
    assert unblocked[0].content["after"] == build and unblocked[0].content["ready"] is True
    tested = finish(crew.tester, test, result={"passed": True})
    assert tested["unblocked_tasks"] == [review]
    assert events(crew.observer.messages()) == [("task_unblocked", review)]
    record = {t["task_id"]: t for t in
              crew.arch.task_get_queue(filter={"status": "completed"})["tasks"]}[build]
    assert record["completed_at"] == 0.0 and record["message"] == "built"


def test_report_errors(crew: Crew) -> None:
    task = delegate(crew.arch, target_agent_id="B1")
    early = crew.builder.task_report(task_id=task, status="completed", result={"x": 1})
    assert early["error"] == "invalid_transition"
    assert crew.builder.task_report(task_id="task_nope", status="failed")["error"] == (
        "task_not_found")
    assert crew.builder.task_accept(task_id=task)["success"]
    other = crew.builder2.task_report(task_id=task, status="completed")
    assert other["error"] == "not_owner" and other["assigned_to"] == crew.builder.agent_id
    queue = crew.arch.task_get_queue(filter={"status": "all"})["tasks"]
    assert queue[0]["status"] == "in_progress" and queue[0]["result"] == {}  # unchanged
    # An architect may report on anyone's task.
    assert crew.arch.task_report(task_id=task, status="completed")["success"]
    assert crew.builder.task_report(task_id=task, status="failed")["error"] == (
        "invalid_transition")


def test_failure_blocks_dependents_transitively(crew: Crew) -> None:
    crew.observer.a2a_subscribe()
    a = delegate(crew.arch)
    b = delegate(crew.arch, dependencies=[a])
    c = delegate(crew.arch, dependencies=[b])
    other = delegate(crew.arch)
    crew.observer.messages()
    failed = finish(crew.builder, a, status="failed", message="compiler crashed")
    assert failed["status"] == "failed" and failed["requeued"] is False
    assert failed["blocked_tasks"] == [b, c] and failed["unblocked_tasks"] == []
    assert failed["notified_agents"] == [crew.arch.agent_id]
    seen = events(crew.observer.messages())
    assert ("task_failed", a) in seen
    assert ("task_blocked", b) in seen and ("task_blocked", c) in seen
    assert statuses(crew.arch) == {a: "failed", b: "blocked", c: "blocked", other: "pending"}
    assert crew.builder.task_accept(task_id=b)["error"] == "invalid_transition"
    late = crew.arch.task_delegate(task_type="test", dependencies=[c])
    assert late["status"] == "blocked" and late["position_in_queue"] is None
    [result] = of_type(crew.arch.messages(), "task_result")
    assert result.content["status"] == "failed"
    assert result.content["message"] == "compiler crashed"


def test_a_failed_task_is_retried_while_retries_remain(crew: Crew) -> None:
    task = delegate(crew.arch, max_retries=1)
    dependent = delegate(crew.arch, dependencies=[task])
    first = finish(crew.builder, task, status="failed", message="flaky")
    assert first["requeued"] is True and first["status"] == "pending"
    assert first["retries_used"] == 1 and first["blocked_tasks"] == []
    [record] = [t for t in crew.arch.task_get_queue()["tasks"] if t["task_id"] == task]
    assert record["assigned_to"] == crew.builder.agent_id and record["retries_used"] == 1
    assert statuses(crew.arch)[dependent] == "pending"
    assert crew.builder2.task_accept(task_id=task)["error"] == "not_owner"  # same assignee
    second = finish(crew.builder, task, status="failed", message="flaky again")
    assert second["requeued"] is False and second["status"] == "failed"
    assert second["blocked_tasks"] == [dependent]


def test_blocked_by_hand_holds_dependents_until_resumed(crew: Crew) -> None:
    task = delegate(crew.arch)
    dependent = delegate(crew.arch, dependencies=[task])
    held = finish(crew.builder, task, status="blocked", message="waiting for specs")
    assert held["status"] == "blocked" and held["blocked_tasks"] == [dependent]
    assert statuses(crew.arch) == {task: "blocked", dependent: "blocked"}
    assert crew.builder.task_accept(task_id=dependent)["error"] == "invalid_transition"
    resumed = crew.builder.task_accept(task_id=task)
    assert resumed["success"] and resumed["status"] == "in_progress"
    assert statuses(crew.arch) == {task: "in_progress", dependent: "pending"}
    assert crew.builder.task_report(task_id=task, status="completed")["unblocked_tasks"] == [
        dependent]


def test_cancel_blocks_dependents(crew: Crew) -> None:
    task = delegate(crew.arch)
    dependent = delegate(crew.arch, dependencies=[task])
    # Nobody has accepted it, so only an architect may report on it.
    assert crew.builder.task_report(task_id=task, status="cancelled")["error"] == "not_owner"
    cancelled = crew.arch.task_report(task_id=task, status="cancelled", message="scope cut")
    assert cancelled["status"] == "cancelled" and cancelled["blocked_tasks"] == [dependent]
    assert crew.arch.task_report(task_id=task, status="cancelled")["error"] == (
        "invalid_transition")


# -- task_get_queue ------------------------------------------------------------------------


def test_queue_filters_and_summary(simu: Simulation, crew: Crew) -> None:
    arch = crew.arch
    mine = delegate(arch, target_agent_id="B1", priority="high")
    anyone = delegate(arch, priority="low")
    done = delegate(arch)
    failed = delegate(arch)
    blocked = delegate(arch, dependencies=[failed])
    finish(crew.builder2, done)
    finish(crew.builder2, failed, status="failed")
    assert crew.builder.task_accept(task_id=mine)["success"]

    def ids(**flt: str) -> list[str]:
        return [t["task_id"] for t in arch.task_get_queue(filter=flt)["tasks"]]

    assert ids() == [mine, anyone]  # default: pending and in progress
    assert ids(assigned_to="B1") == [mine]
    assert ids(assigned_to=crew.builder.agent_id) == [mine]
    assert ids(assigned_to="any") == [anyone]
    assert ids(status="completed") == [done]
    assert ids(status="failed") == [failed]
    assert ids(status="blocked") == [blocked]
    assert ids(status="all", priority="low") == [anyone]
    assert len(ids(status="all")) == 5
    queue = arch.task_get_queue()
    assert queue["total"] == 2 and queue["truncated"] is False
    assert queue["summary"] == {"pending": 1, "in_progress": 1, "awaiting_approval": 0,
                                "completed_today": 1, "blocked": 1, "failed": 1}
    simu.advance(86_401)
    assert arch.task_get_queue()["summary"]["completed_today"] == 0


def test_a_long_queue_is_cut_to_fit_one_reply(crew: Crew) -> None:
    for _ in range(400):
        delegate(crew.arch, description="x" * 100)
    queue = crew.arch.task_get_queue()
    assert queue["success"] and queue["truncated"] is True and queue["total"] == 400
    assert 0 < len(queue["tasks"]) < 400


# -- approvals -----------------------------------------------------------------------------


@pytest.fixture
def gated(simu: Simulation) -> Crew:
    return make_crew(simu, require_approval=True, approval_timeout=30)


def awaiting(crew: Crew) -> tuple[str, str]:
    """A build task reported completed (so awaiting approval) and a task depending on it."""
    build = delegate(crew.arch)
    after = delegate(crew.arch, task_type="test", dependencies=[build])
    crew.arch.messages()
    reported = finish(crew.builder, build, result={"tiles": 9})
    assert reported["success"] and reported["status"] == "awaiting_approval"
    assert reported["notified_agents"] == [crew.arch.agent_id]
    assert reported["unblocked_tasks"] == []
    return build, after


def test_approval_is_requested_from_every_architect(gated: Crew) -> None:
    gated.observer.a2a_subscribe(event_type="approval_requested")
    build, after = awaiting(gated)
    [request] = of_type(gated.arch.messages(), "status_update")
    assert request.content["event"] == "approval_requested"
    assert request.content["task_id"] == build and request.content["timeout"] == 30
    assert events(gated.observer.messages()) == [("approval_requested", build)]
    assert statuses(gated.arch) == {build: "awaiting_approval", after: "pending"}
    assert gated.tester.task_accept(task_id=after)["error"] == "invalid_transition"
    assert gated.builder.task_report(task_id=build, status="completed")["error"] == (
        "invalid_transition")
    summary = gated.arch.task_get_queue()["summary"]
    assert summary["awaiting_approval"] == 1 and summary["in_progress"] == 0
    # A test task needs no approval.
    assert gated.tester.task_accept(task_id=delegate(gated.arch, task_type="test"))["success"]


def test_approve_completes_and_unblocks(gated: Crew) -> None:
    build, after = awaiting(gated)
    approved = gated.arch.approval_respond(task_id=build, decision="approve", comment="ok")
    assert approved["success"] and approved["status"] == "completed"
    assert approved["decision"] == "approve" and approved["unblocked_tasks"] == [after]
    assert statuses(gated.arch) == {build: "completed", after: "pending"}
    assert gated.tester.task_accept(task_id=after)["success"]
    again = gated.arch.approval_respond(task_id=build, decision="approve")
    assert again["error"] == "invalid_transition"


def test_reject_fails_and_blocks(gated: Crew) -> None:
    build, after = awaiting(gated)
    rejected = gated.arch.approval_respond(task_id=build, decision="reject", comment="ugly")
    assert rejected["status"] == "failed" and rejected["blocked_tasks"] == [after]
    [record] = gated.arch.task_get_queue(filter={"status": "failed"})["tasks"]
    assert record["message"] == "Rejected"
    assert statuses(gated.arch)[after] == "blocked"


def test_skip_completes_with_a_skipped_result(gated: Crew) -> None:
    build, after = awaiting(gated)
    skipped = gated.arch.approval_respond(task_id=build, decision="skip")
    assert skipped["status"] == "completed" and skipped["unblocked_tasks"] == [after]
    [record] = gated.arch.task_get_queue(filter={"status": "completed"})["tasks"]
    assert record["result"] == {"skipped": True}


def test_an_unanswered_approval_times_out(simu: Simulation, gated: Crew) -> None:
    build, after = awaiting(gated)
    # The timeout is a live timer: running until nothing is left reaches it.
    simu.run()
    assert simu.now == pytest.approx(30)
    [record] = gated.arch.task_get_queue(filter={"status": "failed"})["tasks"]
    assert record["task_id"] == build and record["message"] == "Approval timed out"
    assert statuses(gated.arch)[after] == "blocked"
    late = gated.arch.approval_respond(task_id=build, decision="approve")
    assert late["error"] == "invalid_transition"


def test_approval_respond_on_a_task_not_awaiting_approval(crew: Crew) -> None:
    task = delegate(crew.arch)
    assert crew.arch.approval_respond(task_id=task, decision="approve")["error"] == (
        "invalid_transition")
    assert crew.arch.approval_respond(task_id="task_nope", decision="skip")["error"] == (
        "task_not_found")


# -- deadlines -----------------------------------------------------------------------------


def test_a_deadline_fails_unfinished_tasks(simu: Simulation, crew: Crew) -> None:
    pending = delegate(crew.arch, deadline=10)
    started = delegate(crew.arch, deadline=10)
    in_time = delegate(crew.arch, deadline=10)
    dependent = delegate(crew.arch, dependencies=[pending])
    assert crew.builder.task_accept(task_id=started)["success"]
    finish(crew.builder2, in_time)
    crew.arch.messages()
    simu.advance(9)
    assert statuses(crew.arch)[pending] == "pending"
    simu.advance(2)
    assert statuses(crew.arch) == {pending: "failed", started: "failed", in_time: "completed",
                                   dependent: "blocked"}
    failed = crew.arch.task_get_queue(filter={"status": "failed"})["tasks"]
    assert {t["message"] for t in failed} == {"deadline passed"}
    results = of_type(crew.arch.messages(), "task_result")
    assert sorted(m.content["task_id"] for m in results) == sorted([pending, started])
    assert crew.builder.task_report(task_id=started, status="completed")["error"] == (
        "invalid_transition")


def test_a_deadline_timer_does_not_keep_a_run_alive(simu: Simulation, crew: Crew) -> None:
    task = delegate(crew.arch, deadline=1000)
    simu.run()
    assert simu.now < 1000 and statuses(crew.arch) == {task: "pending"}


def test_the_gates_hold_a_timer_only_while_it_can_fire(simu: Simulation, gated: Crew) -> None:
    tq = tasks_actor(simu)
    build, _ = awaiting(gated)
    timed = delegate(gated.arch, task_type="test", deadline=100)
    assert tq.approvals.armed(gated.sid) == {build}
    assert tq.deadlines.armed(gated.sid) == {timed}
    assert gated.arch.approval_respond(task_id=build, decision="approve")["success"]
    finish(gated.tester, timed)
    assert tq.approvals.armed(gated.sid) == frozenset()
    assert tq.deadlines.armed(gated.sid) == frozenset()


def test_a_closed_session_leaves_nothing_in_the_queue_s_rooms(
        simu: Simulation, gated: Crew) -> None:
    tq = tasks_actor(simu)
    build, _ = awaiting(gated)
    delegate(gated.arch, task_type="test", deadline=100)
    assert gated.arch.build_checkpoint(checkpoint_name="kept")["success"]
    assert len(tq.checkpoints.kept(gated.sid)) == 1
    assert tq.approvals.armed(gated.sid) == {build} and tq.deadlines.armed(gated.sid)
    tq.handler("op_session_closed")({"session_id": gated.sid})
    assert gated.sid not in tq.by_session
    assert tq.approvals.armed(gated.sid) == tq.deadlines.armed(gated.sid) == frozenset()
    assert tq.checkpoints.kept(gated.sid) == {}
    # The approval's timeout was cancelled: it no longer keeps the run going (it would
    # run on to its due time, 30 s on; test_an_unanswered_approval_times_out).
    before = simu.now
    simu.run()
    assert simu.now == before


def test_the_queue_s_rooms_serve_their_tools_and_operations(simu: Simulation) -> None:
    tq = tasks_actor(simu)
    assert tq.handler("tool_approval_respond").__self__ is tq.approvals
    assert tq.handler("op_rollback").__self__ is tq.checkpoints
    assert tq.handler("op_agent_crashed").__self__ is tq.recovery
    assert tq.handler("tool_task_report").__self__ is tq
    with pytest.raises(AttributeError, match="TaskQueue serves no op_nope"):
        tq.handler("op_nope")


# -- membership, state, checkpoints --------------------------------------------------------


def test_a_leaver_s_tasks_go_back_to_any(crew: Crew) -> None:
    started = delegate(crew.arch)
    assigned = delegate(crew.arch, target_agent_id="B1")
    others = delegate(crew.arch, target_agent_id="B2")
    assert crew.builder.task_accept(task_id=started)["success"]
    left = crew.builder.session_leave()
    assert left["success"] and sorted(left["requeued_tasks"]) == sorted([started, assigned])
    queue = {t["task_id"]: t for t in crew.arch.task_get_queue()["tasks"]}
    assert queue[started]["status"] == "pending" and queue[started]["assigned_to"] == "any"
    assert queue[assigned]["assigned_to"] == "any"
    assert queue[others]["assigned_to"] == crew.builder2.agent_id
    assert crew.builder2.task_accept(task_id=started)["success"]


def test_session_state_counts_tasks(simu: Simulation, crew: Crew) -> None:
    done = delegate(crew.arch)
    low = delegate(crew.arch, priority="low")
    urgent = delegate(crew.arch, priority="critical", description="first")
    finish(crew.builder, done)
    state = crew.observer.session_get_state()["state"]
    assert state["tasks"]["completed"] == 1 and state["tasks"]["pending"] == 2
    assert set(state["tasks"]) == {*TaskStatus, "awaiting_approval"}
    agents = {a["name"]: a["tasks_completed"] for a in state["agents"]}
    assert agents["B1"] == 1 and agents["B2"] == 0
    # A newcomer sees the pending tasks, best first, on joining.
    joined = simu.client().session_join(session_id=crew.sid, agent_name="B3")
    pending = joined["session_state"]["pending_tasks"]
    assert [t["task_id"] for t in pending] == [urgent, low]
    assert pending[0]["description"] == "first"


def test_checkpoint_and_rollback_restore_the_tasks(simu: Simulation, crew: Crew) -> None:
    a = delegate(crew.arch)
    b = delegate(crew.arch, dependencies=[a])
    checkpoint = crew.arch.build_checkpoint(checkpoint_name="before")
    assert checkpoint["success"], checkpoint
    finish(crew.builder, a)
    c = delegate(crew.arch)
    assert statuses(crew.arch) == {a: "completed", b: "pending", c: "pending"}
    rolled = crew.arch.build_rollback(checkpoint_id=checkpoint["checkpoint_id"])
    assert rolled["success"], rolled
    assert statuses(crew.arch) == {a: "pending", b: "pending"}
    assert crew.builder.task_accept(task_id=b)["error"] == "invalid_transition"
    assert finish(crew.builder, a)["unblocked_tasks"] == [b]
    tq = tasks_actor(simu)
    with pytest.raises(ToolError) as missing:
        tq.handler("op_rollback")({"session_id": crew.sid, "checkpoint_id": "ckpt_nope"})
    assert missing.value.code == "checkpoint_not_found"
    saved = tq.handler("op_checkpoint")({"session_id": crew.sid, "checkpoint_id": "manual"})
    assert saved["success"] and saved["tasks"] == 2 and saved["size_bytes"] > 0


def test_a_rollback_rearms_deadlines(simu: Simulation, crew: Crew) -> None:
    task = delegate(crew.arch, deadline=50)
    checkpoint = crew.arch.build_checkpoint()
    finish(crew.builder, task)
    crew.arch.build_rollback(checkpoint_id=checkpoint["checkpoint_id"])
    simu.advance(60)
    assert statuses(crew.arch) == {task: "failed"}


# -- regions (these need the regions service) ----------------------------------------------


def test_accepting_a_task_claims_its_region(crew: Crew) -> None:
    """Needs the regions service."""
    task = delegate(crew.arch, region=square(0, 0))
    accepted = crew.builder.task_accept(task_id=task)
    assert accepted["success"], accepted
    assert accepted["claimed_region"] and accepted["claim"]["success"]
    assert accepted["claim"]["claim_id"] == accepted["claimed_region"]
    [record] = crew.arch.task_get_queue()["tasks"]
    assert record["claim_id"] == accepted["claimed_region"]
    # The region is the acceptor's now: someone else's claim over it is refused.
    assert crew.builder2.region_claim(region=square(5, 5))["error"] == "region_conflict"


def test_a_region_conflict_leaves_the_task_pending(crew: Crew) -> None:
    """Needs the regions service."""
    assert crew.builder2.region_claim(region=square(0, 0, 50))["success"]
    task = delegate(crew.arch, region=square(10, 10))
    refused = crew.builder.task_accept(task_id=task)
    assert refused["success"] is False and refused["error"] == "region_conflict"
    assert refused["task_id"] == task
    assert statuses(crew.arch) == {task: "pending"}


def test_finishing_a_task_releases_its_claim(crew: Crew) -> None:
    """Needs the regions service."""
    build = delegate(crew.arch, region=square(0, 0))
    test = delegate(crew.arch, task_type="test", region=square(0, 0), dependencies=[build])
    assert finish(crew.builder, build)["unblocked_tasks"] == [test]
    # Same region, another agent: only possible because completion released it.
    tested = crew.tester.task_accept(task_id=test)
    assert tested["success"] and tested["claimed_region"], tested
    assert crew.tester.task_report(task_id=test, status="failed")["success"]
    assert crew.builder2.region_claim(region=square(0, 0))["success"]


# -- realtime ------------------------------------------------------------------------------


def test_realtime_mode_keeps_the_contract() -> None:
    with Simulation(seed=1, mode="realtime", time_scale=50.0) as simu:
        crew = make_crew(simu)
        assert crew.observer.a2a_subscribe(event_type="task_unblocked")["success"]
        first = delegate(crew.arch, priority="high")
        second = delegate(crew.arch, target_agent_id="T1", task_type="test",
                          dependencies=[first])
        done = finish(crew.builder, first)
        assert done["unblocked_tasks"] == [second]
        message = crew.observer.receive(timeout=50)
        assert message is not None and message.content["task_id"] == second
        assert finish(crew.tester, second)["success"]
        result = crew.arch.receive(timeout=50)
        while result is not None and result.message_type != "task_result":
            result = crew.arch.receive(timeout=50)
        assert result is not None and result.content["task_id"] == first
        assert crew.arch.task_get_queue()["summary"]["completed_today"] == 2


# -- property: the graph stays acyclic and every status consistent -------------------------


_OPS = st.one_of(
    st.tuples(st.just("delegate"), st.lists(st.integers(0, 30), max_size=3),
              st.sampled_from(["low", "medium", "high", "critical"]), st.integers(0, 1)),
    # aim=True picks a task the operation can succeed on (a ready task to accept,
    # a started one to report, by its assignee), so that runs get deep.
    st.tuples(st.just("accept"), st.integers(0, 30), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("report"), st.integers(0, 30), st.integers(0, 2), st.booleans(),
              st.sampled_from(["completed", "failed", "blocked", "cancelled"])),
    # re-planning: the one tool that can be asked for a cycle of any length
    st.tuples(st.just("depend"), st.integers(0, 30), st.lists(st.integers(0, 30), max_size=3)),
)


def check_consistent(tq: TaskQueue, sid: str) -> None:
    graph = tq.graph_of(sid)
    records = tq.records_of(sid)
    g = graph.graph
    assert nx.is_directed_acyclic_graph(g)
    assert set(records) == set(g.nodes)
    for task_id, record in records.items():
        status = graph.status(task_id)
        assert record.status == status.value
        assert sorted(graph.dependencies(task_id)) == sorted(record.dependencies)
        deps = [graph.status(d) for d in graph.dependencies(task_id)]
        broken = any(s in (TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.BLOCKED)
                     for s in deps)
        if status in (TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED):
            assert all(s is TaskStatus.COMPLETED for s in deps)
        if status is TaskStatus.PENDING:
            assert not broken
            assert graph.is_ready(task_id) == all(s is TaskStatus.COMPLETED for s in deps)
        if status is TaskStatus.BLOCKED:
            assert broken or graph.get(task_id).held
        if status is TaskStatus.IN_PROGRESS:
            assert record.assigned_to != "any"
    counts = graph.counts()
    assert sum(counts.values()) == len(records)
    pending_by = tq.by_session[sid].pending_by_priority
    assert sum(pending_by.values()) == counts["pending"]


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_OPS, min_size=1, max_size=40))
def test_random_operations_keep_the_graph_acyclic_and_consistent(
    ops: list[tuple[Any, ...]],
) -> None:
    with Simulation(seed=3) as simu:
        crew = make_crew(simu)
        workers = [crew.builder, crew.builder2, crew.arch]
        tq = tasks_actor(simu)
        ids: list[str] = []
        by_id = {w.agent_id: w for w in workers}
        for op in ops:
            records = tq.records_of(crew.sid)
            if op[0] == "delegate":
                _, picks, priority, retries = op
                deps = sorted({ids[i % len(ids)] for i in picks}) if ids else []
                result = crew.arch.task_delegate(task_type="build", dependencies=deps,
                                                 priority=priority, max_retries=retries)
                assert result["success"], result
                ids.append(result["task_id"])
            elif ids and op[0] == "accept":
                _, index, who, aim = op
                ready = tq.graph_of(crew.sid).ready()
                task_id = ready[index % len(ready)] if aim and ready else ids[index % len(ids)]
                workers[who].task_accept(task_id=task_id)
            elif ids and op[0] == "report":
                _, index, who, aim, status = op
                started = [t for t in ids if records[t].status == "in_progress"]
                task_id = ids[index % len(ids)]
                worker = workers[who]
                if aim and started:
                    task_id = started[index % len(started)]
                    worker = by_id[records[task_id].assigned_to]
                worker.task_report(task_id=task_id, status=status)
            elif ids and op[0] == "depend":
                _, index, picks = op
                task_id = ids[index % len(ids)]
                deps = [ids[i % len(ids)] for i in picks]
                before = tq.graph_of(crew.sid).dependencies(task_id)
                result = crew.arch.task_add_dependencies(task_id=task_id, dependencies=deps)
                if not result["success"]:
                    assert result["error"] in ("dependency_cycle", "invalid_transition")
                    assert tq.graph_of(crew.sid).dependencies(task_id) == before  # untouched
            check_consistent(tq, crew.sid)


# -- the benchmark's code paths (tiny; nothing is timed here) ------------------------------


def test_the_task_dag_benchmark_runs() -> None:
    from benchmarks.tasks_bench import bench_task_dag, dag_depth, dag_shape

    shape = dag_shape(30, pipelines=2, chain=3, fan_out=2)
    assert len(shape) == 30 and all(d < i for i, deps in enumerate(shape) for d in deps)
    # 15 tasks a pipeline: two motifs (chain 3, fan-out 2, join: 5 deep) and a chain of 3
    assert dag_depth(shape) == 13
    figures = bench_task_dag(200, 1, pipelines=4)
    assert figures["tasks"] == 200 and figures["ratio"] > 0
    assert figures["notes_executor"]["rounds"] == figures["shape"]["depth"]
