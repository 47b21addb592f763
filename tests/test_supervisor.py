"""Supervision (actors/supervisor.py): backoff, intensity limits, escalation, death watch,
and restarts that resume from the world's state. Deterministic mode throughout."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from barnraise.actors.base import Agent
from barnraise.actors.supervisor import Backoff, Supervisor
from barnraise.actors.world import Simulation
from barnraise.scenarios import kernel_build
from barnraise.scenarios._kit import current


@pytest.fixture
def simu() -> Iterator[Simulation]:
    with Simulation(seed=3) as s:
        yield s


class Fragile(Agent):
    """Lives ``life`` simulated seconds, then its behaviour fails: it crashes."""

    crash_on_error = True

    def __init__(self, life: float = 1.0, **options: Any) -> None:
        async def live(agent: Agent) -> None:
            await agent.sleep(life)
            raise RuntimeError("worn out")

        super().__init__(agent_type="worker", behaviours=(live,), **options)


def supervision_events(simu: Simulation) -> list[tuple[str, dict[str, Any]]]:
    return [(r.type, r.content_obj()) for r in simu.dispatcher.trace.records("event")
            if r.recipient == "supervision"]


def test_backoff_grows_by_its_factor_up_to_its_cap_with_bounded_jitter() -> None:
    backoff = Backoff(base=1.0, factor=2.0, cap=8.0, jitter=0.2)
    assert [backoff.delay(n, 0.5) for n in range(6)] == [1, 2, 4, 8, 8, 8]
    assert backoff.delay(2, 0.0) == pytest.approx(3.2)
    assert backoff.delay(2, 0.999999) == pytest.approx(4.8, rel=1e-5)
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(base=0)


def test_restarts_wait_longer_each_time_then_the_limit_gives_up(simu: Simulation) -> None:
    d = simu.dispatcher
    sup = d.spawn(Supervisor, "crew", max_restarts=4, within=1000.0,
                  backoff=Backoff(base=1.0, factor=2.0, cap=100.0, jitter=0.2))
    sup.install()
    simu.client("watcher")
    sup.start_child(Fragile, "w1")
    d.watch("watcher", "w1")
    d.run()
    waits = [wait for _, _, wait in sup.delays]
    assert [attempt for _, attempt, _ in sup.delays] == [0, 1, 2, 3]
    assert all(later > earlier for earlier, later in itertools.pairwise(waits))
    assert d.actor("w1").incarnation == 4  # four restarts, then the fifth crash was one too many
    assert sup.gave_up and d.actor("w1").stopped
    kinds = [kind for kind, _ in supervision_events(simu)]
    assert kinds.count("child_crashed") == 5 and kinds.count("child_restarted") == 4
    assert kinds[-2:] == ["supervisor_escalated", "supervisor_gave_up"]
    notices = [m.content for m in simu.clients[0].messages()]
    assert notices == [{"event": "terminated", "agent_id": "w1",
                        "reason": "supervisor_gave_up"}]


def test_the_intensity_window_forgets_old_restarts(simu: Simulation) -> None:
    d = simu.dispatcher
    # two restarts in any 10 seconds; a crash every ~20 seconds never reaches it
    sup = d.spawn(Supervisor, "crew", max_restarts=2, within=10.0,
                  backoff=Backoff(base=0.5, cap=1.0), max_error_restarts=None)
    sup.install()
    sup.start_child(Fragile, "w1", life=20.0)
    d.run(until=200.0)
    assert not sup.gave_up
    assert d.actor("w1").incarnation >= 8


def test_a_child_supervisor_escalates_and_its_parent_restarts_the_group(
        simu: Simulation) -> None:
    d = simu.dispatcher
    root = simu.supervisor
    group = root.child_supervisor("group", strategy="all_for_one", max_restarts=1,
                                  within=1000.0, backoff=Backoff(base=0.5, cap=1.0))
    group.start_child(Fragile, "a", life=1.0)
    group.start_child(Fragile, "b", life=1000.0)
    d.run(until=30.0)
    events = supervision_events(simu)
    kinds = [kind for kind, _ in events]
    # a's first crash: the group restarts a and b (all for one)
    first = [e["child"] for kind, e in events if kind == "child_restarted"][:2]
    assert sorted(first) == ["a", "b"]
    # a's second crash is over the group's limit: it escalates, the root restarts it
    assert {"supervisor": "group", "parent": "supervisor", "event": "supervisor_escalated"} in [
        e for _, e in events]
    assert "supervisor_gave_up" not in kinds or kinds.index("supervisor_escalated") < \
        kinds.index("supervisor_gave_up")
    assert d.actor("b").incarnation >= 2


def test_the_top_supervisor_reports_and_stops_the_group_when_its_limit_is_passed(
        simu: Simulation) -> None:
    d = simu.dispatcher
    root = d.spawn(Supervisor, "top", max_restarts=1, within=1000.0,
                   backoff=Backoff(base=0.5, cap=1.0))
    root.install()
    group = root.child_supervisor("group", max_restarts=1, within=1000.0,
                                  backoff=Backoff(base=0.5, cap=1.0))
    group.start_child(Fragile, "a", life=1.0)
    group.start_child(Fragile, "b", life=1000.0)
    simu.client("watcher")
    d.watch("watcher", "b")
    d.run()
    assert root.gave_up and group.gave_up
    assert d.actor("a").stopped and d.actor("b").stopped
    gave_up = [e for kind, e in supervision_events(simu) if kind == "supervisor_gave_up"]
    assert gave_up[-1]["supervisor"] == "top"
    assert [m.content["agent_id"] for m in simu.clients[0].messages()] == ["b"]


def test_death_watch_tells_of_a_stop_and_of_an_unsupervised_crash(simu: Simulation) -> None:
    d = simu.dispatcher
    watcher = simu.client("watcher")
    d.spawn(Agent, "plain")
    d.spawn(Agent, "loner")
    d.watch("watcher", "plain")
    d.watch("watcher", "loner")
    d.stop_actor("plain")
    d.crash("loner")  # nobody supervises it: it stays down
    assert [(m.content["agent_id"], m.content["reason"]) for m in watcher.messages()] == [
        ("plain", "stopped"), ("loner", "crash")]
    d.watch("watcher", "plain")  # already gone: told at once
    assert [m.content["agent_id"] for m in watcher.messages()] == ["plain"]


def test_a_supervised_crash_is_not_an_end(simu: Simulation) -> None:
    d = simu.dispatcher
    watcher = simu.client("watcher")
    simu.supervisor.start_child(Agent, "kept")
    d.watch("watcher", "kept")
    d.crash("kept")
    simu.advance(60.0)
    assert d.actor("kept").incarnation == 1 and not d.actor("kept").stopped
    assert watcher.messages() == []


@pytest.mark.parametrize(("who", "at"), [("builder-1", 3.0), ("tester-1", 5.0),
                                         ("architect-1", 4.0), ("builder-2", 0.05)])
def test_a_crashed_crew_member_resumes_from_the_world_and_no_task_is_done_twice(
        who: str, at: float) -> None:
    with Simulation(seed=0, max_content_bytes=64 * 2**20) as simu:
        d = simu.dispatcher
        d.call_later(at, d.actor("registry"), lambda: d.crash(who))
        metrics = kernel_build.run(simu, **kernel_build.PARAMS)
        agent = current(d.actor(who))  # type: ignore[arg-type]
        assert agent.incarnation == 1
        assert metrics["done"] and metrics["tests_passed"] == metrics["blocks"]
        assert metrics["completed_twice"] == []
        tasks = simu.view(metrics["session_id"]).task_counts()
        assert metrics["completion_events"] == tasks["completed"]
        assert metrics["shaders_loaded"] == metrics["cartridges_assembled"] == metrics["blocks"]
        requeued = [r.content_obj() for r in d.trace.records("event")
                    if r.type == "task_requeued"]
        assert all(e["reason"] == "agent_crashed" and e["by"] == who for e in requeued)


def test_a_crashed_builder_resumes_in_a_signed_simulation() -> None:
    """With message signing on, a crash's requeue and the events the crew waits for are
    signed too: the build ends as it does unsigned, and no letter is dropped."""
    with Simulation(seed=0, sign_messages=True, max_content_bytes=64 * 2**20) as simu:
        d = simu.dispatcher
        d.call_later(3.0, d.actor("registry"), lambda: d.crash("builder-1"))
        metrics = kernel_build.run(simu, **kernel_build.PARAMS)
        assert current(d.actor("builder-1")).incarnation == 1  # type: ignore[arg-type]
        assert metrics["done"] and metrics["tests_passed"] == metrics["blocks"]
        assert d.statistics().dead_letters == {}


def test_restarts_replay_with_the_seed() -> None:
    def delays(seed: int) -> list[tuple[str, int, float]]:
        with Simulation(seed=seed) as simu:
            simu.supervisor.start_child(Fragile, "w1", life=2.0)
            simu.advance(30.0)
            return list(simu.supervisor.delays)

    assert delays(5) == delays(5)
    assert delays(5) != delays(6)


def test_a_supervised_agent_the_registry_marks_offline_is_restarted(simu: Simulation) -> None:
    d = simu.dispatcher
    hung = simu.supervisor.start_child(Agent, "hung", heartbeat_interval=1.0)
    loose = d.spawn(Agent, "loose", heartbeat_interval=1.0)  # nobody supervises it
    simu.advance(2.0)
    hung.pause_heartbeats()  # as a hung agent would
    loose.pause_heartbeats()
    simu.advance(20.0)
    assert d.actor("hung") is not hung and d.actor("hung").incarnation == 1
    assert not d.actor("hung").stopped and d.is_online("hung")
    assert d.actor("loose") is loose and not loose.stopped and not d.is_online("loose")
    crashes = [r.content_obj() for r in d.trace.records("fault") if r.type == "crash"]
    assert crashes == [{"agent": "hung", "reason": "offline"}]
