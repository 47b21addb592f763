"""The coordination-flow scenarios: what each shows, read from its metrics, trace and world."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from barnraise.actors.world import Simulation
from barnraise.outputs import RunResult
from barnraise.runner import run
from barnraise.scenarios import permissions
from barnraise.scenarios._kit import overlapping_pairs


def events(result: RunResult, *types: str) -> list[dict[str, Any]]:
    """The run's domain events (payload plus seq and t), optionally of some types only."""
    return [{**r.content_obj(), "seq": r.seq, "t": r.t}
            for r in result.trace.records("event")
            if r.recipient.startswith("session:") and (not types or r.type in types)]


def delivered(result: RunResult, recipient: str, message_type: str) -> list[dict[str, Any]]:
    return [r.content_obj() for r in result.trace.records("deliver")
            if r.recipient == recipient and r.type == message_type]


# -- Flow 1: parallel_build ----------------------------------------------------------------


def test_parallel_build_claims_builds_releases_then_meets() -> None:
    result = run("parallel_build", seed=3)
    m, s = result.summary["metrics"], result.summary
    assert result.success
    assert (m["claims"], m["released"], m["barrier_released"]) == (3, 3, 3)
    assert m["tiles"] == m["planned_tiles"] == s["tiles_placed"] > 0
    assert s["conflicts"] == 0 and s["completion_percent"] == 100.0
    claimed = events(result, "region_claimed")
    assert sorted(e["region"]["x"] for e in claimed) == [0, 100, 200]
    assert {e["region"]["y"] for e in claimed} == {0}
    barrier = [e for e in events(result, "barrier_released") if e["barrier_id"] == "all-released"]
    assert len(barrier) == 1 and sorted(barrier[0]["arrived"]) == m["barrier_arrivals"]
    released = [e for e in events(result, "region_released") if e["reason"] == "released"]
    assert len(released) == 3 and all(e["seq"] < barrier[0]["seq"] for e in released)
    # each builder released after it claimed; the canvas holds exactly their work
    claim_seq = {e["agent_id"]: e["seq"] for e in claimed}
    assert all(claim_seq[e["agent_id"]] < e["seq"] for e in released)
    canvas = result.canvas()
    assert canvas is not None and np.count_nonzero(canvas[:40, :300]) == m["tiles"]
    assert not canvas[40:].any()


def test_parallel_build_scales_to_more_narrower_regions() -> None:
    result = run("parallel_build", seed=3, builders=5, width=20, height=10)
    m = result.summary["metrics"]
    assert result.success and m["claims"] == m["barrier_released"] == 5
    assert len(m["barrier_arrivals"]) == 5
    xs = sorted(e["region"]["x"] for e in events(result, "region_claimed"))
    assert xs == [0, 20, 40, 60, 80]


def test_parallel_build_claim_order_follows_the_seed() -> None:
    orders = {tuple(run("parallel_build", seed=s, height=2).summary["metrics"]["claim_order"])
              for s in range(6)}
    assert len(orders) > 1


# -- Flow 2: delegation_chain --------------------------------------------------------------


def test_delegation_chain_delegate_accept_complete_notify_in_order() -> None:
    result = run("delegation_chain", seed=3)
    m = result.summary["metrics"]
    assert result.success and m["chain_in_order"] == {"build": True, "test": True}
    build, test = m["chain"]["build"], m["chain"]["test"]
    assert build["notify"] < test["delegate"]  # the test waits for the build's result
    created = events(result, "task_created")
    assert [e["type"] for e in created] == ["build", "test"]
    assert [e["assigned_to"] for e in created] == ["builder-1", "tester-1"]
    results = delivered(result, "architect-1", "task_result")
    assert [(r["type"], r["status"], r["reported_by"]) for r in results] == [
        ("build", "completed", "builder-1"), ("test", "completed", "tester-1")]
    assert results[1]["result"]["passed"] is True and m["test_score"] == 10.0
    assert result.summary["completion_percent"] == 100.0
    steps = [t["what"] for t in m["timeline"]]
    assert steps == ["delegated", "result", "delegated", "result"]


def test_delegation_chain_with_wrong_tiles_fails_the_test() -> None:
    result = run("delegation_chain", seed=3, error_rate=0.02)
    m = result.summary["metrics"]
    assert not result.success
    assert m["build_status"] == "completed" and m["test_status"] == "failed"
    assert not m["test_passed"] and m["defects_found"] == m["wrong_tiles"] > 0
    assert m["chain"]["test"]["complete"] == -1  # failed, never completed
    failed = events(result, "task_failed")
    assert [e["task_id"] for e in failed] == [m["tasks"]["test"]]


# -- Flow 3: conflict_resolution -----------------------------------------------------------


def test_conflict_resolution_refuses_then_grants_the_suggestion() -> None:
    result = run("conflict_resolution", seed=3)
    m = result.summary["metrics"]
    assert result.success and m["conflicts"] == 1 and result.summary["conflicts"] == 1
    suggestion = m["suggestion"]
    a = {"x": 0, "y": 0, "width": 100, "height": 100}
    assert suggestion["width"] == suggestion["height"] == 100
    assert overlapping_pairs([a, suggestion]) == []
    assert m["final_claims"] == {"agent-a": a, "agent-b": suggestion}
    assert f"({suggestion['x']}, {suggestion['y']})" in m["suggestion_text"]
    (conflict,) = events(result, "conflict_detected")
    assert conflict["agent_id"] == "agent-b" and conflict["agents"] == ["agent-a"]
    assert conflict["overlapping_region"] == {"x": 50, "y": 50, "width": 50, "height": 50}
    claimed = [(e["agent_id"], e["region"]) for e in events(result, "region_claimed")]
    assert claimed == [("agent-a", a), ("agent-b", suggestion)]


def test_conflict_resolution_with_more_contenders_keeps_claims_disjoint() -> None:
    result = run("conflict_resolution", seed=3, contenders=3)
    m = result.summary["metrics"]
    assert result.success and m["conflicts"] == m["refused_by_a"] == 3
    finals = list(m["final_claims"].values())
    assert len(finals) == 4 and m["overlapping_pairs"] == 0
    assert overlapping_pairs(finals) == []
    # the third contender's request overlapped both earlier claims there
    conflicts = events(result, "conflict_detected")
    assert [e["agent_id"] for e in conflicts] == ["agent-b", "agent-c", "agent-d"]
    assert "agent-b" in conflicts[1]["agents"]


def test_conflict_resolution_without_overlap_has_nothing_to_resolve() -> None:
    result = run("conflict_resolution", seed=3, second=[150, 150, 100, 100])
    m = result.summary["metrics"]
    assert not result.success and m["conflicts"] == 0 and m["suggestion"] is None
    assert m["final_claims"]["agent-b"] == {"x": 150, "y": 150, "width": 100, "height": 100}


# -- checkpoint_rollback -------------------------------------------------------------------


def test_checkpoint_rollback_restores_the_checkpoint_exactly() -> None:
    result = run("checkpoint_rollback", seed=3)
    m, s = result.summary["metrics"], result.summary
    assert result.success
    assert m["restored"] == m["checkpoint_contents"] == {
        "tiles": m["tiles_before"], "shaders": 2, "cartridges": 0}
    assert m["lost"] == {"tiles": m["changed_after"], "shaders": 2, "cartridges": 0}
    assert m["tiles_placed_before_rollback"] > s["tiles_placed"] == m["tiles_before"]
    (created,) = events(result, "checkpoint_created")
    (rollback,) = events(result, "rollback")
    assert created["checkpoint_id"] == rollback["checkpoint_id"] == m["checkpoint_id"]
    assert created["seq"] < rollback["seq"] and rollback["lost_items"] == m["lost"]
    for builder in ("builder-1", "builder-2"):
        notes = [c for c in delivered(result, builder, "status_update")
                 if c.get("event") == "rollback"]
        assert [n["checkpoint_id"] for n in notes] == [m["checkpoint_id"]]
    assert result.canvas() is not None
    assert np.count_nonzero(result.canvas()) == m["tiles_before"]
    assert not result.canvas()[12:].any()  # the rows built after the checkpoint are gone


def test_checkpoint_rollback_without_overlap_loses_only_the_new_rows() -> None:
    result = run("checkpoint_rollback", seed=4, builders=3, overlap=0)
    m = result.summary["metrics"]
    assert result.success
    # nothing before the checkpoint was rewritten: every lost cell is a new tile
    assert m["lost"]["tiles"] == m["changed_after"] == m["tiles_after"]
    assert m["lost"]["shaders"] == m["restored"]["shaders"] == 3


# -- permissions ---------------------------------------------------------------------------


def test_permissions_denies_what_roles_forbid_and_lets_the_foreman_delegate() -> None:
    result = run("permissions", seed=3)
    m, s = result.summary["metrics"], result.summary
    assert result.success
    assert m["denials"] == m["forbidden_calls"] == 5
    assert m["denied"] == ["builder-1:task_delegate", "foreman:build_checkpoint",
                           "observer-1:builder_place_tile", "observer-1:region_claim",
                           "tester-1:task_delegate"]
    assert m["visible_states"] == m["members"] == 5
    assert s["tiles_placed"] == 0 and not events(result, "region_claimed")
    (created,) = events(result, "task_created")
    assert (created["delegated_by"], created["assigned_to"]) == ("foreman", "tester-1")
    assert {"agent_joined", "task_created", "task_accepted", "task_completed"} <= set(
        m["event_types"])
    assert m["events_received"] >= 4 + 3  # four crew joins, three task events
    # the architect's subscription was to task_completed only
    topics = [c for c in delivered(result, "architect-1", "status_update") if "event" in c]
    assert {c["event"] for c in topics} == {"task_completed"}


def test_permissions_more_builders_more_denials() -> None:
    m = run("permissions", seed=3, builders=3).summary["metrics"]
    assert m["denials"] == m["forbidden_calls"] == 6 and m["visible_states"] == 6


def test_permissions_without_the_policy_rule_the_foreman_is_refused() -> None:
    with Simulation(seed=3) as simu:  # the role matrix alone
        m = permissions.run(simu, builders=2)
        simu.dispatcher.run()
        foreman = simu.dispatcher.actor("foreman").outcome  # type: ignore[attr-defined]
    assert not m["foreman_delegated"] and foreman["delegated"]["error"] == "permission_denied"
    assert not m["reviewed"] and not m["subscriber_heard"]


# -- locks_barriers ------------------------------------------------------------------------


def _lock_events_alternate(result: RunResult) -> bool:
    """The lock is never granted while someone else holds it.

    The service announces a release (or expiry) before it grants the lock to the
    next holder, so the trail alternates: grant, release, grant, release...
    """
    holder: str | None = None
    for event in events(result, "lock_granted", "lock_released", "lock_expired"):
        if event["event"] == "lock_granted":
            if holder is not None:
                return False
            holder = event["holder"]
        elif event["holder"] != holder:
            return False
        else:
            holder = None
    return holder is None


def test_locks_barriers_one_at_a_time_then_all_meet() -> None:
    result = run("locks_barriers", seed=3)
    m = result.summary["metrics"]
    assert result.success and m["max_concurrent"] == 1
    assert m["acquisitions"] == m["releases"] == 6 and m["waits"] > 0
    assert len(m["holders"]) == 6 and sorted(set(m["holders"])) == [
        "builder-1", "builder-2", "builder-3"]
    passed = [e for e in events(result, "lock_released") if e["next_holder"] is not None]
    assert passed  # the lock went straight from one holder to a waiter
    assert _lock_events_alternate(result)
    (done,) = [e for e in events(result, "barrier_released") if e["barrier_id"] == "done"]
    assert sorted(done["arrived"]) == ["builder-1", "builder-2", "builder-3"]


def test_locks_barriers_a_lease_shorter_than_the_hold_is_renewed_and_exclusion_holds() -> None:
    """A live holder's lease is extended term by term (it once lapsed mid-hold and let a
    second agent in): every grant past the six acquisitions is a renewal."""
    result = run("locks_barriers", seed=3, lease=0.1, hold_min=0.5)
    m = result.summary["metrics"]
    assert result.success
    assert m["lease_expired"] == 0 and m["max_concurrent"] == 1 and m["release_refused"] == 0
    granted = events(result, "lock_granted")
    assert m["acquisitions"] == 6 and len(granted) > 6 * 5  # holds of >= 0.5 s, terms of 0.1


def test_locks_barriers_in_realtime_too() -> None:
    result = run("locks_barriers", seed=3, mode="realtime", agents=4, rounds=1)
    m = result.summary["metrics"]
    assert result.success and m["acquisitions"] == 4 and m["max_concurrent"] == 1


# -- hitl_approval -------------------------------------------------------------------------


def test_hitl_approval_each_decision_has_its_outcome() -> None:
    result = run("hitl_approval", seed=3)
    m, s = result.summary["metrics"], result.summary
    assert result.success and m["as_expected"] == 4
    assert m["outcomes"] == ["completed", "failed", "failed", "completed"]
    assert m["messages"] == ["", "Rejected", "Approval timed out", ""]
    assert m["tasks"][3]["result"] == {"skipped": True}
    assert all(t["shown_status"] == "awaiting_approval" for t in m["tasks"])
    assert (s["tasks_completed"], s["tasks_failed"]) == (2, 2)
    resolved = {e["task_id"]: e for e in events(result, "approval_resolved")}
    assert [(resolved[t["task_id"]]["decision"], resolved[t["task_id"]]["by"])
            for t in m["tasks"]] == [("approve", "person"), ("reject", "person"),
                                     ("timeout", "timeout"), ("skip", "person")]
    requested = {e["task_id"]: e["t"] for e in events(result, "approval_requested")}
    assert len(requested) == 4
    timed_out = resolved[m["tasks"][2]["task_id"]]
    assert timed_out["t"] - requested[timed_out["task_id"]] == pytest.approx(10.0)
    answered = [e["t"] - requested[e["task_id"]] for e in resolved.values()
                if e["by"] == "person"]
    assert all(0 <= t <= 0.5 for t in answered)  # the person thinks at most `think`


def test_hitl_approval_follows_the_decisions_given() -> None:
    result = run("hitl_approval", seed=3, decisions=["skip", "approve", "approve"],
                 approval_timeout=3.0)
    m, s = result.summary["metrics"], result.summary
    assert result.success and m["outcomes"] == ["completed"] * 3
    assert (s["tasks_completed"], s["tasks_failed"]) == (3, 0)
    assert not events(result, "task_failed")


def test_hitl_approval_timeout_follows_the_session_config() -> None:
    result = run("hitl_approval", seed=3, decisions=["timeout"], approval_timeout=2.5)
    assert result.success and result.summary["metrics"]["messages"] == ["Approval timed out"]
    (requested,) = events(result, "approval_requested")
    (resolved,) = events(result, "approval_resolved")
    assert requested["timeout"] == 2.5 and resolved["t"] - requested["t"] == pytest.approx(2.5)


# -- every flow scenario -------------------------------------------------------------------

FLOWS = ["parallel_build", "delegation_chain", "conflict_resolution", "checkpoint_rollback",
         "permissions", "locks_barriers", "hitl_approval"]


@pytest.mark.parametrize("name", FLOWS)
def test_flow_scenarios_end_quietly_and_report_their_session(name: str) -> None:
    result = run(name, seed=11)
    s = result.summary
    assert result.success and s["run_end"] == "quiescent" and not s["waiting"]
    assert s["behaviour_errors"] == 0 and s["messages_dropped"] == 0
    assert s["agents"] >= 1 and "session_id" not in s["metrics"]
