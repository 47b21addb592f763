"""A call that answers failure changed nothing (issue 23, finding 4), for every tool.

Each tool of the table is called in ways it must refuse: arguments it does not take,
by an agent that is not a member, by a role the policy forbids it, and in the ways its
own rules refuse (a taken name, a conflict, an unknown task, an answer too large to
send...). After each refusal the world's whole state is what it was: sessions, members,
claims, tasks, canvas bytes, artifacts, checkpoints, locks, barriers, subscriptions,
grants and role tokens. Deterministic mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from barnraise.actors.coordinator import Coordinator
from barnraise.actors.world import Client, Simulation
from barnraise.sim.policy import Policy
from barnraise.sim.tools import ERROR_CODES, FAILURE_KEYS, TOOLS
from tests.helpers import box


class World:
    """A session with something of everything in it, and its callers."""

    def __init__(self, simu: Simulation) -> None:
        self.simu = simu
        self.arch = simu.client("arch")
        created = self.arch.session_create(session_name="S", grid_size=60, max_agents=20,
                                           config={"require_approval": False})
        assert created["success"], created
        self.sid = sid = created["session_id"]
        assert self.arch.session_join(session_id=sid, agent_name="Arch",
                                      role="architect")["success"]
        self.a, self.b, self.tester, self.observer = (
            self._join(name, role) for name, role in (
                ("A", "builder"), ("B", "builder"), ("T", "tester"), ("O", "observer")))
        self.outsider = simu.client("outsider")
        ok = [self.arch.blueprint_set(blueprint=[[1] * 60 for _ in range(60)]),
              self.a.region_claim(region=box(0, 0, 10)),
              self.a.builder_place_tiles(region=box(0, 0, 4), tiles=2),
              self.a.builder_load_shader(region=box(0, 0, 2), shader_name="glow"),
              self.a.a2a_lock_acquire(lock_id="L"),
              self.arch.build_checkpoint(checkpoint_name="c1"),
              self.b.a2a_subscribe(event_type="region_claimed"),
              self.arch.session_grant(role="architect")]
        assert all(r["success"] for r in ok), ok
        task = self.arch.task_delegate(task_type="build", region=box(20, 20, 5),
                                       target_agent_id="b")
        assert task["success"], task
        self.task_id = task["task_id"]
        # B waits at a barrier all along (its answer is due only when two more come).
        self.waiting = self.b.submit("a2a_barrier_enter", barrier_id="gate",
                                     expected_count=3, timeout=10_000)
        self.b.messages()  # lets the instant settle: B is at the barrier
        assert [b.barrier_id for b in simu.view(sid).barriers] == ["gate"]

    def _join(self, name: str, role: str) -> Client:
        client = self.simu.client(name.lower())
        joined = client.session_join(session_id=self.sid, agent_name=name, role=role)
        assert joined["success"], joined
        return client

    def snapshot(self) -> Any:
        simu = self.simu
        coordinator = simu.dispatcher.actor("coordinator")
        assert isinstance(coordinator, Coordinator)
        sessions = {}
        for sid in simu.sessions():
            view = simu.view(sid)
            assert view.canvas is not None
            kept = msgspec.structs.replace(
                view, at=0.0, canvas=None, blueprint=None,
                # a refused claim is counted as a conflict: that count is its record
                progress=msgspec.structs.replace(view.progress, conflicts=0))
            session = coordinator._state[sid]
            sessions[sid] = (msgspec.to_builtins(kept), view.canvas.tobytes(),
                             None if view.blueprint is None else view.blueprint.tobytes(),
                             dict(session.grants), sorted(session.role_tokens.values()))
        subscriptions = sorted((sid, topic, sub.endpoint.name) for sid, (topic, sub)
                               in simu.dispatcher._subs_by_id.items())
        return sessions, subscriptions


@pytest.fixture
def world() -> Iterator[World]:
    with Simulation(seed=11, max_content_bytes=16 * 1024) as simu:
        yield World(simu)


def _domain_refusals(w: World) -> list[tuple[Client, str, dict[str, Any]]]:
    """Each tool's own refusals (beyond bad arguments, membership and policy)."""
    sid, claim = w.sid, w.simu.view(w.sid).claims[0].claim_id
    return [
        (w.arch, "session_create", {"session_name": "X", "grid_size": 5000}),
        (w.arch, "session_create", {"session_name": "X", "blueprint": [[1, 2], [3]]}),
        (w.arch, "session_create", {"session_name": "X", "blueprint": [["nope"]]}),
        (w.outsider, "session_join", {"session_id": sid, "agent_name": "A"}),
        (w.outsider, "session_join", {"session_id": sid, "agent_name": "Z",
                                      "role": "architect"}),
        (w.outsider, "session_join", {"session_id": sid, "agent_name": "Z",
                                      "role_token": "role_forged"}),
        (w.a, "session_join", {"session_id": sid, "agent_name": "A2"}),
        (w.outsider, "session_join", {"session_id": "session_none", "agent_name": "Z"}),
        (w.a, "session_grant", {"session_id": sid, "role": "architect"}),
        (w.a, "session_leave", {"handoff_to": "nobody"}),
        (w.a, "session_leave", {"handoff_to": "A"}),
        (w.a, "session_get_state", {"cursor": "x"}),
        (w.a, "region_claim", {"region": box(55, 55, 10)}),
        (w.b, "region_claim", {"region": box(5, 5, 10)}),
        (w.a, "region_release", {"claim_id": "claim_none"}),
        (w.b, "region_release", {"claim_id": claim}),
        (w.a, "region_release", {"claim_id": claim, "transfer_to": "nobody"}),
        (w.a, "region_query", {"region": box(50, 50, 20)}),
        (w.b, "builder_place_tile", {"tile_type": 3, "x": 1, "y": 1}),
        (w.a, "builder_place_tile", {"tile_type": "nonsense", "x": 1, "y": 1}),
        (w.a, "builder_place_tiles", {"region": box(0, 0, 2), "tiles": [[1, 2, 3]]}),
        (w.b, "builder_place_tiles", {"region": box(0, 0, 2), "tiles": 1}),
        (w.b, "builder_load_shader", {"region": box(0, 0, 2), "shader_name": "s"}),
        (w.b, "builder_assemble_cartridge", {"region": box(0, 0, 2), "name": "c"}),
        (w.arch, "blueprint_set", {"blueprint": [[1, 2]]}),
        (w.tester, "build_test", {"region": box(55, 55, 10)}),
        (w.arch, "task_delegate", {"task_type": "build", "dependencies": ["task_none"]}),
        (w.arch, "task_delegate", {"task_type": "build", "target_agent_id": "nobody"}),
        (w.arch, "task_add_dependencies", {"task_id": "task_none", "dependencies": []}),
        (w.arch, "task_add_dependencies", {"task_id": w.task_id,
                                           "dependencies": [w.task_id]}),
        (w.a, "task_accept", {"task_id": "task_none"}),
        (w.a, "task_accept", {"task_id": w.task_id}),
        (w.b, "task_report", {"task_id": w.task_id, "status": "completed"}),
        (w.b, "task_report", {"task_id": "task_none", "status": "failed"}),
        (w.a, "task_get_queue", {"filter": {"assigned_to": 7}}),
        (w.arch, "approval_respond", {"task_id": w.task_id, "decision": "approve"}),
        (w.arch, "build_checkpoint", {"include": ["everything"]}),
        (w.arch, "build_rollback", {"checkpoint_id": "ckpt_none"}),
        (w.a, "a2a_send_message", {"to_agent": "nobody"}),
        (w.a, "a2a_send_message", {"to_agent": "B", "message_type": "Gossip"}),
        (w.a, "a2a_send_message", {"to_agent": "B", "message_type": "error_report"}),
        (w.a, "a2a_broadcast", {"message_type": "gos-sip"}),
        (w.a, "a2a_broadcast", {"message_type": "coordination_response"}),
        (w.a, "a2a_subscribe", {"topic": "session:other:events"}),
        (w.a, "a2a_subscribe", {"topic": "x", "event_type": "y"}),
        (w.a, "a2a_subscribe", {"event_type": "region_claimed", "filter": {"nope": 1}}),
        (w.a, "a2a_discover", {"agent_type": "wizard"}),
        (w.b, "a2a_lock_release", {"lock_id": "L"}),
        (w.a, "a2a_barrier_enter", {"barrier_id": "gate", "expected_count": 4}),
        (w.a, "a2a_barrier_enter", {"barrier_id": "g2", "expected_agents": ["nobody"]}),
        (w.a, "a2a_barrier_enter", {"barrier_id": "g2", "expected_count": 2,
                                    "expected_agents": ["A"]}),
    ]


def _refusals(w: World) -> list[tuple[Client, str, dict[str, Any]]]:
    attempts: list[tuple[Client, str, dict[str, Any]]] = []
    policy = Policy()
    for name, tool in TOOLS.items():
        session = {"session_id": w.sid} if "session_id" in tool.input_schema["properties"] \
            else {}
        caller = w.outsider if name == "session_join" else w.arch
        attempts.append((caller, name, {**session, "no_such_argument": 1}))
        first = next(iter(p for p in tool.input_schema["properties"] if p != "session_id"),
                     None)
        if first is not None:
            attempts.append((caller, name, {**session, first: {"not": ["what it takes"]}}))
        if tool.member_only:
            attempts.append((w.outsider, name, dict(session)))
            if not policy.decide(name, role="observer", agent_id="o"):
                attempts.append((w.observer, name, dict(session)))
    return attempts + _domain_refusals(w)


def test_every_refused_call_of_every_tool_leaves_the_world_as_it_was(world: World) -> None:
    refused: dict[str, set[str]] = {name: set() for name in TOOLS}
    before = world.snapshot()
    for caller, name, args in _refusals(world):
        answer = caller.call_any(name, args)
        assert answer["success"] is False, (repr(caller), name, args, answer)
        assert answer["error"] in ERROR_CODES
        assert set(answer) <= {*FAILURE_KEYS, *TOOLS[name].result}, (name, answer)
        refused[name].add(answer["error"])
        after = world.snapshot()
        assert after == before, (repr(caller), name, args, answer)
    assert all(refused.values()), [n for n, codes in refused.items() if not codes]
    covered = set().union(*refused.values())
    assert {"invalid_argument", "not_a_member", "permission_denied", "name_taken",
            "region_conflict", "claim_not_found", "not_owner", "task_not_found",
            "checkpoint_not_found", "lock_not_held", "invalid_token"} <= covered, covered
    assert world.waiting.poll() is None  # B still waits at its barrier


def test_an_answer_too_large_to_send_is_refused_only_by_a_read(world: World) -> None:
    """Reads past the message limit are refused and change nothing; the same world
    answers a call that changed it with a cut answer (test_joins: the broadcast)."""
    for i in range(120):
        assert world.a.region_claim(region=box(i % 12 * 5, 30 + i // 12 * 3, 2),
                                    purpose="p" * 40)["success"]
    before = world.snapshot()
    for name, args in (("region_query", {"region": box(0, 0, 60)}),):
        answer = world.a.call_any(name, args)
        assert answer["error"] == "invalid_argument" and "too large" in answer["message"]
        assert world.snapshot() == before
    page = world.a.session_get_state(include=["regions"])
    assert page["success"] and "next_cursor" in page  # paged, not refused
