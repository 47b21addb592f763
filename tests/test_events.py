"""The typed domain events (sim/events.py): every event a run emits is a registered struct
whose body reads back into it byte for byte, and status_after is the one status rule
(checked, event type by status, against the maps each consumer kept before it)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

import barnraise
from barnraise.actors.world import Simulation
from barnraise.loading import list_scenarios
from barnraise.sim import events as ev
from barnraise.sim.dispatch import make_dispatcher
from barnraise.sim.events import (
    EVENTS,
    MEMBER_STATUSES,
    TASK_EVENTS,
    TASK_STATUSES,
    Event,
    UnknownEvent,
    body_of,
    decode,
    register,
    status_after,
)
from barnraise.sim.trace import EVENT
from tests.helpers import box, session_crew

_ENCODE = msgspec.json.Encoder(order="sorted").encode  # the trace's canonical form


def _scripted_events() -> list[tuple[str, bytes]]:
    """A session driven by hand through what no shipped scenario does: a task held by a
    report, one cancelled, dependencies added, a live holder's lock lease renewed as it
    runs out, a claim renewed and handed over, and a member leaving."""
    with Simulation(seed=3) as simu:
        crew = session_crew(simu, grid=50)
        a, b = crew.a.agent_id, crew.b.agent_id
        first = crew.arch.task_delegate(task_type="build", description="a", target_agent_id=a)
        second = crew.arch.task_delegate(task_type="build", description="b", target_agent_id=a)
        third = crew.arch.task_delegate(task_type="build", description="c", target_agent_id=b)
        assert first["success"] and second["success"] and third["success"], (first, second)
        added = crew.arch.task_add_dependencies(task_id=third["task_id"],
                                                dependencies=[first["task_id"]])
        assert added["success"], added
        assert crew.a.task_accept(task_id=first["task_id"])["success"]
        held = crew.a.task_report(task_id=first["task_id"], status="blocked", message="wait")
        assert held["success"], held
        cut = crew.arch.task_report(task_id=second["task_id"], status="cancelled",
                                    message="scope cut")
        assert cut["success"], cut
        lock = crew.b.a2a_lock_acquire(lock_id="door", lease=1.0)
        assert lock["success"], lock
        simu.advance(5.0)
        claim = crew.a.region_claim(region=box(0, 0, 5), purpose="build")
        assert crew.a.region_renew(claim_id=claim["claim_id"], timeout=60)["success"]
        left = crew.a.session_leave(handoff_to=b)
        assert left["success"], left
        return [(r.type, r.content) for r in simu.dispatcher.trace.records(EVENT)]


@pytest.fixture(scope="module")
def emitted() -> dict[str, list[bytes]]:
    """Every event body of the shipped scenarios (seed 0), of kernel_build under crashes
    and drops (restarts, requeues, results read by a restarted delegator), of a plan
    whose gate is rejected (failed steps) and of the scripted session above, by type."""
    bodies: dict[str, list[bytes]] = {}
    records: list[tuple[str, bytes]] = []
    for name, _ in list_scenarios():
        records += [(r.type, r.content)
                    for r in barnraise.run(name, seed=0, record=False).trace.records(EVENT)]
    for other in (barnraise.run("kernel_build", seed=1, faults="crash=0.01,drop=0.05",
                                record=False),
                  barnraise.run("plan_run", seed=5, decision="reject", record=False)):
        records += [(r.type, r.content) for r in other.trace.records(EVENT)]
    records += _scripted_events()
    for kind, content in records:
        bodies.setdefault(kind, []).append(content)
    return bodies


def test_every_emitted_event_reads_back_into_its_struct_byte_for_byte(
        emitted: dict[str, list[bytes]]) -> None:
    assert set(emitted) <= set(EVENTS), sorted(set(emitted) - set(EVENTS))
    for kind, bodies in emitted.items():
        for content in bodies:
            event = decode(content)
            assert type(event) is EVENTS[kind] and event.kind == kind
            assert _ENCODE(body_of(event)) == content, kind


def test_the_runs_reach_every_event_type_but_the_rare_ones(
        emitted: dict[str, list[bytes]]) -> None:
    """What the runs above do not reach is named here, so a new event type that no run
    emits (and so is never checked against a real body) shows up."""
    # lock_expired: a live holder's lease is renewed, a member that goes releases its
    # locks as it leaves; only a resumed run's gone holders let one lapse (test_leases.py)
    not_reached = {"agent_expired", "agent_offline", "agent_online", "supervisor_escalated",
                   "supervisor_gave_up", "lock_expired"}
    library = {name for name, cls in EVENTS.items() if cls.__module__ == "barnraise.sim.events"}
    assert library - set(emitted) == not_reached


def _library_modules() -> Iterator[str]:
    for package in ("barnraise",):  # barnraise.sim, .actors and .scenarios among them
        module = importlib.import_module(package)
        yield package
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            yield info.name


def test_every_event_type_in_the_library_is_registered() -> None:
    """An Event subclass anywhere in the library is in the registry (the dispatcher
    refuses to publish one that is not), and the registry holds nothing else."""
    for name in _library_modules():
        importlib.import_module(name)
    bases = {ev.SessionEvent, ev.TaskEvent, ev.PlanEvent}

    def tagged(cls: type[Event]) -> Iterator[type[Event]]:
        for sub in cls.__subclasses__():
            if sub not in bases and sub.__module__.split(".")[0] != "tests":
                yield sub
            yield from tagged(sub)

    library = set(tagged(Event))
    registered = {cls for cls in EVENTS.values() if cls.__module__.split(".")[0] != "tests"}
    assert library == registered
    assert all(cls.kind == name for name, cls in EVENTS.items())
    assert len(registered) == 41


def test_an_alert_keeps_its_details_beside_its_fields() -> None:
    alert = ev.AgentAlert(session_id="s", agent_id="a", severity="info", title="t", body="b",
                          details={"code": 7, "title": "not this one"})
    body = body_of(alert)
    assert body == {"event": "agent.alert", "code": 7, "session_id": "s", "agent_id": "a",
                    "severity": "info", "title": "t", "body": "b"}
    assert decode(_ENCODE(body)) == ev.AgentAlert(
        session_id="s", agent_id="a", severity="info", title="t", body="b",
        details={"code": 7})


def test_a_body_is_a_copy_of_what_the_emitter_holds() -> None:
    """A subscriber that changes an event's body cannot reach into the service's state."""
    region = {"x": 1, "y": 2, "width": 3, "height": 4}
    body = body_of(ev.RegionClaimed(session_id="s", agent_id="a", claim_id="c",
                                    region=region, exclusive=True, expires_at=None))
    body["region"]["x"] = 99
    assert region["x"] == 1
    assert "transferred_from" not in body  # unset: absent, as the dict it replaced had it


def test_bad_bodies_and_types_are_refused_naming_what_is_wrong() -> None:
    with pytest.raises(UnknownEvent, match="'no_such_event'"):
        decode(b'{"event":"no_such_event","x":1}')
    with pytest.raises(UnknownEvent, match="None"):
        decode({"task_id": "t"})
    with pytest.raises(msgspec.ValidationError, match="task_id"):
        decode({"event": "task_accepted", "session_id": "s", "agent_id": "a",
                "claim_id": None})
    with pytest.raises(TypeError, match="registered already, as TaskAccepted"):
        class Again(Event, frozen=True, kw_only=True, tag="task_accepted"):
            pass
        register(Again)
    assert EVENTS["task_accepted"] is ev.TaskAccepted
    with pytest.raises(TypeError, match="tag= name"):
        register(ev.SessionEvent)


def test_the_dispatcher_refuses_an_unregistered_event_and_records_nothing() -> None:
    class Stray(Event, frozen=True, kw_only=True, tag="stray_event"):
        x: int

    d = make_dispatcher("deterministic", seed=1)
    before = len(d.trace)
    with pytest.raises(TypeError, match="Stray is no registered event type"):
        d.emit("svc", "news", Stray(x=1))
    assert len(d.trace) == before
    assert "stray_event" not in EVENTS


# -- status_after against the maps the consumers kept before it --------------------------------
#
# Each function below is one consumer's old rule, as it read before barnraise.sim.events (the maps
# restore._STATUS, rebuild._DONE_EVENTS and _REQUEUED_FROM, the store's delegations,
# a2a_binding._EVENT_STATE, the metrics collector's handlers): (event, status) -> status.

_GRAPH = ("pending", "in_progress", "completed", "failed", "blocked", "cancelled")


def _body(kind: str, created: str = "pending") -> dict[str, Any]:
    return {"event": kind, "status": created} if kind == "task_created" else {"event": kind}


def _old_restore(kind: str, current: str) -> str:
    fixed = {"task_completed": "completed", "task_failed": "failed",
             "task_cancelled": "cancelled", "task_blocked": "blocked",
             "task_accepted": "in_progress", "task_requeued": "pending"}
    if kind == "task_unblocked":
        return "pending" if current == "blocked" else current
    return fixed.get(kind, current)


def _old_rebuild(kind: str, current: str) -> str:
    done = {"task_completed": "completed", "task_failed": "failed",
            "task_cancelled": "cancelled", "task_requeued": "pending",
            "task_blocked": "blocked", "task_unblocked": "pending"}
    if kind == "task_accepted":
        return "in_progress"
    if kind == "task_requeued":
        return "pending" if current in ("in_progress", "failed") else current
    return done.get(kind, current)


def _old_metrics(kind: str, current: str) -> str:
    fixed = {"task_accepted": "in_progress", "task_completed": "completed",
             "task_failed": "failed", "task_cancelled": "cancelled",
             "task_blocked": "blocked", "task_unblocked": "pending",
             "task_requeued": "pending", "approval_requested": "awaiting_approval"}
    return fixed.get(kind, current)


_OLD_A2A = {
    "task_created": "TASK_STATE_SUBMITTED", "task_requeued": "TASK_STATE_SUBMITTED",
    "task_blocked": "TASK_STATE_SUBMITTED", "task_unblocked": "TASK_STATE_SUBMITTED",
    "task_accepted": "TASK_STATE_WORKING", "approval_resolved": "TASK_STATE_WORKING",
    "approval_requested": "TASK_STATE_INPUT_REQUIRED",
    "task_completed": "TASK_STATE_COMPLETED", "task_failed": "TASK_STATE_FAILED",
    "task_cancelled": "TASK_STATE_CANCELED",
}

# Where the new rule differs, on purpose (the task queue's own state machine,
# actors/taskqueue.py and sim/taskgraph.py): a requeue takes only a started or failed
# task back to pending (a member leaving leaves its pending or blocked tasks so, for
# anyone); an unblock frees only a blocked task (the queue announces it for a pending one
# made ready, too, and never for a task in any other status).
_REQUEUE_KEEPS = {"pending", "blocked", "completed", "cancelled"}


def _differs(consumer: str, kind: str, current: str) -> bool:
    if kind == "task_requeued":
        return consumer in ("restore", "metrics") and current in _REQUEUE_KEEPS
    if kind == "task_unblocked":
        return consumer in ("rebuild", "metrics") and current not in ("blocked", "pending")
    return False


# The events each consumer asks status_after about (rebuild and restore keep an approval
# as a flag beside the graph's status; the metrics collector follows no approval_resolved).
_ASKS: dict[str, tuple[frozenset[str], tuple[str, ...], Callable[[str, str], str]]] = {
    "restore": (frozenset({"task_accepted", "task_completed", "task_failed", "task_cancelled",
                           "task_blocked", "task_unblocked", "task_requeued"}),
                _GRAPH, _old_restore),
    "rebuild": (TASK_EVENTS - {"task_created", "approval_requested", "approval_resolved"},
                _GRAPH, _old_rebuild),
    "metrics": (TASK_EVENTS - {"task_created", "approval_resolved"}, TASK_STATUSES,
                _old_metrics),
}


@pytest.mark.parametrize("consumer", sorted(_ASKS))
def test_status_after_agrees_with_each_consumers_old_map(consumer: str) -> None:
    kinds, statuses, old = _ASKS[consumer]
    differences = []
    for kind in sorted(EVENTS):
        for current in statuses:
            new = status_after(_body(kind), current)
            if kind not in kinds:
                continue
            if _differs(consumer, kind, current):
                differences.append((kind, current))
                assert new == current, (kind, current)  # it keeps the status it had
            else:
                assert new == old(kind, current), (consumer, kind, current)
    assert len(differences) == {"restore": 4, "rebuild": 4, "metrics": 9}[consumer]


def test_status_after_gives_the_a2a_state_the_task_watch_gave() -> None:
    from barnraise.gateway.a2a_binding import STATE_OF

    assert set(_OLD_A2A) == TASK_EVENTS
    for kind in sorted(TASK_EVENTS):
        status = status_after(_body(kind))
        assert status is not None and STATE_OF[status] == _OLD_A2A[kind], kind
    assert STATE_OF[str(status_after(_body("task_created", "blocked")))] == (
        "TASK_STATE_SUBMITTED")


def test_status_after_gives_the_delegations_status_the_store_gave() -> None:
    for kind in ("task_accepted", "task_completed", "task_failed", "task_cancelled"):
        old = "in_progress" if kind == "task_accepted" else kind.removeprefix("task_")
        assert status_after(_body(kind)) == old
    assert status_after({"event": "task_created"}) == "pending"  # the store's default
    assert status_after(_body("task_created", "blocked")) == "blocked"


def test_status_after_the_whole_table() -> None:
    """Every event type by every status (and none known): the table of the module's
    docstring. An event that moves no status leaves the one given."""
    moved_from = {"task_unblocked": {"blocked", None},
                  "task_requeued": {"in_progress", "awaiting_approval", "failed", None},
                  "approval_resolved": {"awaiting_approval", "in_progress", None}}
    to = {"task_accepted": "in_progress", "approval_requested": "awaiting_approval",
          "task_completed": "completed", "task_failed": "failed",
          "task_cancelled": "cancelled", "task_blocked": "blocked",
          "task_unblocked": "pending", "task_requeued": "pending",
          "approval_resolved": "in_progress", "agent_joined": "active",
          "agent_online": "active", "agent_offline": "offline", "agent_left": "gone",
          "agent_expired": "gone"}
    for kind in sorted(EVENTS):
        for current in (*TASK_STATUSES, *MEMBER_STATUSES, None):
            got = status_after(_body(kind, "blocked"), current)
            if kind == "task_created":
                assert got == "blocked"
            elif kind in to and (kind not in moved_from or current in moved_from[kind]):
                assert got == to[kind], (kind, current)
            else:
                assert got == current, (kind, current)


def test_a_typed_event_and_its_body_give_the_same_status(
        emitted: dict[str, list[bytes]]) -> None:
    for bodies in emitted.values():
        for content in bodies[:5]:
            event = decode(content)
            body = msgspec.json.decode(content)
            for current in (*TASK_STATUSES, None):
                assert status_after(event, current) == status_after(body, current)
