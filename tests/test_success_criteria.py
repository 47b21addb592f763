"""The design notes' eight success criteria, end to end through clients, in both modes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from barnraise.actors.world import Client, Simulation
from tests.conftest import MODES


@pytest.fixture(params=MODES)
def simu(request: pytest.FixtureRequest) -> Iterator[Simulation]:
    options: dict[str, Any] = {"time_scale": 50.0} if request.param == "realtime" else {}
    with Simulation(seed=11, mode=request.param, **options) as s:
        yield s


def crew(simu: Simulation) -> tuple[str, Client, list[Client], Client, Client]:
    """An architect, three builders, a tester and an observer in one session."""
    arch = simu.client()
    sid = arch.session_create(session_name="Linux Kernel Build", grid_size=300)["session_id"]
    assert arch.session_join(session_id=sid, agent_name="Architect-1",
                             role="architect")["success"]
    builders = []
    for i in range(3):
        b = simu.client()
        assert b.session_join(session_id=sid, agent_name=f"Builder-{i}")["success"]
        builders.append(b)
    tester = simu.client()
    assert tester.session_join(session_id=sid, agent_name="Tester-1", role="tester")["success"]
    observer = simu.client()
    assert observer.session_join(session_id=sid, agent_name="Observer-1",
                                 role="observer")["success"]
    return sid, arch, builders, tester, observer


def square(x: int, y: int, size: int = 100) -> dict[str, int]:
    return {"x": x, "y": y, "width": size, "height": size}


def test_1_three_or_more_agents_join(simu: Simulation) -> None:
    _, arch, _, _, _ = crew(simu)
    agents = arch.session_get_state(include=["agents"])["state"]["agents"]
    assert len(agents) == 6
    assert len({a["color"] for a in agents}) == 6


def test_2_overlapping_claims_are_refused_with_a_suggestion_that_then_succeeds(
    simu: Simulation,
) -> None:
    _, _, (a, b, _), _, _ = crew(simu)
    assert a.region_claim(region=square(0, 0))["success"]
    refused = b.region_claim(region=square(50, 50))
    assert refused["error"] == "region_conflict"
    assert refused["conflicting_agents"][0]["agent_id"] == a.agent_id
    assert refused["conflicting_agents"][0]["overlapping_region"] == square(50, 50, 50)
    assert refused["suggestion"]
    suggested = refused["suggestion_region"]
    granted = b.region_claim(region=suggested)
    assert granted["success"] and granted["region"] == suggested


def test_3_delegate_accept_complete_notify(simu: Simulation) -> None:
    _, arch, (builder, _, _), tester, _ = crew(simu)
    build = arch.task_delegate(target_agent_id=builder.agent_id, task_type="build",
                               region=square(0, 0), description="Build kernel entry",
                               priority="high")
    test = arch.task_delegate(target_agent_id=tester.agent_id, task_type="test",
                              region=square(0, 0), dependencies=[build["task_id"]])
    assert build["status"] == "pending" and build["assigned_to"] == builder.agent_id
    accepted = builder.task_accept(task_id=build["task_id"])
    assert accepted["status"] == "in_progress" and accepted["claimed_region"]
    builder.builder_place_tiles(region=square(0, 0), tiles="system")
    done = builder.task_report(task_id=build["task_id"], status="completed",
                               artifacts=[{"type": "tile", "id": "block-0"}])
    assert done["success"] and done["unblocked_tasks"] == [test["task_id"]]
    assert arch.agent_id in done["notified_agents"]
    # the notification travels on its own: in realtime mode it may still be on its way
    notice = None
    for _ in range(20):
        notice = arch.receive(timeout=5)
        if notice is None or notice.message_type == "task_result":
            break
    assert notice is not None and notice.content["task_id"] == build["task_id"]
    assert tester.task_accept(task_id=test["task_id"])["success"]
    assert tester.task_report(task_id=test["task_id"], status="completed",
                              result={"passed": True})["success"]


def test_4_session_state_is_visible_to_all(simu: Simulation) -> None:
    _, arch, builders, tester, observer = crew(simu)
    builders[0].region_claim(region=square(0, 0))
    views = [c.session_get_state() for c in (arch, *builders, tester, observer)]
    assert all(v["success"] for v in views)
    assert all(len(v["state"]["agents"]) == 6 for v in views)
    assert all(len(v["state"]["regions"]) == 1 for v in views)


def test_5_a_barrier_releases_three_agents(simu: Simulation) -> None:
    _, _, builders, _, _ = crew(simu)
    pending = [b.submit("a2a_barrier_enter", barrier_id="phase-1", expected_count=3,
                        timeout=60) for b in builders]
    results = [p.result() for p in pending]
    assert all(r["success"] and r["released"] for r in results)
    assert sorted(results[0]["arrived"]) == sorted(b.agent_id for b in builders)


def test_6_checkpoint_modify_rollback_verify(simu: Simulation) -> None:
    _, arch, (builder, _, _), _, _ = crew(simu)
    builder.region_claim(region=square(0, 0))
    builder.builder_place_tiles(region=square(0, 0, 10), tiles="code")  # 100 tiles
    checkpoint = arch.build_checkpoint(checkpoint_name="pre-migration")
    assert checkpoint["success"] and checkpoint["contents"]["tiles"] == 100
    builder.builder_place_tiles(region={"x": 10, "y": 0, "width": 5, "height": 6},
                                tiles="data")  # 30 more
    builder.builder_load_shader(region=square(0, 0, 10), shader_name="glow")
    rolled = arch.build_rollback(checkpoint_id=checkpoint["checkpoint_id"])
    assert rolled["success"] and rolled["rolled_back_to"] == checkpoint["checkpoint_id"]
    assert rolled["restored"]["tiles"] == 100
    assert rolled["lost"]["tiles"] == 30 and rolled["lost"]["shaders"] == 1
    progress = arch.session_get_state(include=["progress"])["state"]["progress"]
    assert progress["shaders_loaded"] == 0
    missing = arch.build_rollback(checkpoint_id="ckpt_nope")
    assert missing["error"] == "checkpoint_not_found"


def test_7_subscribers_receive_events(simu: Simulation) -> None:
    _, arch, (builder, _, _), _, observer = crew(simu)
    assert observer.a2a_subscribe()["success"]
    claim = builder.region_claim(region=square(0, 0))
    builder.region_release(claim_id=claim["claim_id"])
    task = arch.task_delegate(target_agent_id="any", task_type="build")
    events: list[str] = []
    for _ in range(10):
        message = observer.receive(timeout=5)
        if message is None:
            break
        events.append(message.content["event"])
        if message.content["event"] == "task_created":
            break
    assert events == ["region_claimed", "region_released", "task_created"], events
    assert task["success"]


def test_8_builders_cannot_delegate_and_observers_cannot_write(simu: Simulation) -> None:
    _, _, (builder, _, _), _, observer = crew(simu)
    denied = builder.task_delegate(target_agent_id="any", task_type="build")
    assert denied["error"] == "permission_denied"
    for call in (
        lambda: observer.builder_place_tile(tile_type="system", x=1, y=1),
        lambda: observer.region_claim(region=square(0, 0)),
        lambda: observer.task_accept(task_id="task_x"),
    ):
        assert call()["error"] == "permission_denied"
