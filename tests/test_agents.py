"""Role behaviours under stress: an architect whose builds fail, a builder whose work raises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from barnraise.actors.agents.builder import BUILD_TYPES, accept_with_backoff, builder
from barnraise.actors.agents.observer import observer
from barnraise.actors.agents.participant import Participant, start_next
from barnraise.actors.world import Simulation
from barnraise.scenarios._kit import host_session, kernel_blueprint, spawn
from barnraise.sim.seeds import seed_for
from tests.conftest import MODES
from tests.helpers import session_crew


async def fails_its_first_build(agent: Participant) -> None:
    """Reports its first build task failed without building, then builds as usual."""
    task = await start_next(agent, BUILD_TYPES, accept_with_backoff)
    await agent.call("task_report", task_id=task["task_id"], status="failed",
                     message="dropped the tools")
    agent.outcome["sabotaged"] = task["task_id"]
    await builder(agent)


def crew(simu: Simulation, first_builder: Any, max_repairs: int = 1000,
         **builder_params: Any) -> dict[str, Any]:
    blueprint = kernel_blueprint(40, np.random.default_rng(5))
    _, sid = host_session(simu, session_name="K", grid_size=40, max_agents=6,
                          blueprint=blueprint.tolist())
    params = {"tile_rate": 400.0, **builder_params}
    b1 = spawn(simu, sid, "builder-1", "builder", crew=4, behaviour=first_builder,
               blueprint=blueprint, **params)
    b2 = spawn(simu, sid, "builder-2", "builder", crew=4, blueprint=blueprint,
               tile_rate=400.0)
    spawn(simu, sid, "tester-1", "tester", crew=4)
    boss = spawn(simu, sid, "architect-1", "architect", crew=4, blueprint=blueprint,
                 block=20, builders=["builder-1", "builder-2"], testers=["tester-1"],
                 max_repairs=max_repairs)
    return {"b1": b1, "b2": b2, "boss": boss}


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_build_is_built_again_and_the_architect_finishes(mode: str) -> None:
    with Simulation(seed=3, mode=mode, max_content_bytes=2**22) as simu:
        agents = crew(simu, fails_its_first_build)
        report = simu.dispatcher.run()
        boss = agents["boss"].outcome
        assert report.reason == "quiescent", report.describe()
        assert "sabotaged" in agents["b1"].outcome
        assert boss["done"] and boss["rebuilds"] == 1 and boss["tests_passed"] == boss["blocks"]
        assert boss["completion_percent"] == 100.0


def test_a_builder_whose_work_raises_reports_it_and_the_architect_gives_up_in_time() -> None:
    # builder-1 cannot work out how long a row takes (tile_rate 0): every build it
    # starts raises. It must report each one failed and go on, not die; the
    # architect rebuilds until its budget is spent, then stops.
    with Simulation(seed=3, max_content_bytes=2**22) as simu:
        agents = crew(simu, builder, max_repairs=3, tile_rate=0.0)
        report = simu.dispatcher.run()
        b1, boss = agents["b1"].outcome, agents["boss"].outcome
        assert simu.dispatcher.behaviour_errors == 0
        assert boss["blocks"] == 4  # blocks 0 and 2 are builder-1's
        assert boss["rebuilds"] == 3 and not boss["done"]
        # its two blocks and the three rebuilds all failed, reported one by one
        assert b1["tasks_failed"] == 2 + 3 and b1["tasks_done"] == 0
        assert report.reason == "quiescent", report.describe()


async def looping_observer(agent: Participant) -> None:
    """The observer as a loop over receive(): what its tap must record the same."""
    record: list[list[object]] = []
    agent.outcome.update(events=0, record=record)
    await agent.call("a2a_subscribe")
    while True:
        message = await agent.receive(
            lambda m: m.from_agent != "registry" and "event" in m.content, daemon=True,
            description="the next session event")
        record.append([message.timestamp, message.content["event"]])
        agent.outcome["events"] = len(record)


def late(behaviour: Any) -> Any:
    """``behaviour``, after a nap in which an event-like letter reaches the agent."""
    async def run(agent: Participant) -> None:
        await agent.sleep(1.0)
        await behaviour(agent)
    return run


@pytest.mark.parametrize("start", ["at_once", "late"])
def test_the_observers_tap_records_what_a_receive_loop_records(start: str) -> None:
    outcomes, digests = [], []
    for watch in (observer, looping_observer):
        with Simulation(seed=3, max_content_bytes=2**22) as simu:
            agents = crew(simu, builder)
            sid = simu.sessions()[0]
            behaviour = watch if start == "at_once" else late(watch)
            seen = spawn(simu, sid, "observer-1", "observer", crew=4, behaviour=behaviour)
            # kept in the observer's stash when it starts late, taken first by both
            simu.dispatcher.send(simu.dispatcher.message(
                "host", "observer-1", "status_update", {"event": "hello"}))
            assert simu.dispatcher.run().reason == "quiescent"
            assert agents["boss"].outcome["done"]
            outcomes.append(seen.outcome)
            digests.append(simu.dispatcher.trace_digest)
    tapped, looped = outcomes
    assert tapped == looped and digests[0] == digests[1]
    kinds = [event for _, event in tapped["record"]]
    assert tapped["events"] == len(kinds) and kinds[0] == "hello" and "task_completed" in kinds


def test_a_repair_whose_cell_cannot_be_placed_is_reported_failed() -> None:
    """A repair task's cells come from its delegator: a tile code no canvas has is refused
    by builder_place_tile, and the builder reports the task failed with the reason (it
    does not count the tile as placed nor the repair as done)."""
    with Simulation(seed=3) as simu:
        c = session_crew(simu, grid=10)
        sid = c.sid
        b = spawn(simu, sid, "builder-1", "builder", crew=1,
                  blueprint=np.zeros((10, 10), dtype=np.uint8))
        simu.run()
        task = c.arch.call("task_delegate", task_type="build", target_agent_id="builder-1",
                         region={"x": 0, "y": 0, "width": 2, "height": 2},
                         payload={"cells": [[0, 0, 300]]})
        assert task["success"], task
        simu.run()
        (record,) = [t for t in simu.view(sid).tasks if t.task_id == task["task_id"]]
        assert record.status == "failed" and "placing the tile at (0, 0) failed" in record.message
        assert b.outcome["tasks_failed"] == 1 and b.outcome["tiles_placed"] == 0


def test_a_build_refused_part_way_leaves_the_builders_draws_where_row_by_row_would() -> None:
    """The builder takes its wrong tiles' draws for a whole block at once. A build whose
    third row is refused (a tile code no canvas has) must leave its random stream as
    drawing row by row did: three rows' draws taken, not the block's six."""
    blueprint = np.zeros((10, 10), dtype=np.uint8)
    blueprint[2, :] = 200  # not a tile type: the row is refused, however it is spoilt
    with Simulation(seed=3) as simu:
        c = session_crew(simu, grid=10)
        b = spawn(simu, c.sid, "builder-1", "builder", crew=1, blueprint=blueprint,
                  error_rate=0.25)
        simu.run()
        task = c.arch.call("task_delegate", task_type="build", target_agent_id="builder-1",
                           region={"x": 0, "y": 0, "width": 4, "height": 6})
        assert task["success"], task
        simu.run()
        (record,) = [t for t in simu.view(c.sid).tasks if t.task_id == task["task_id"]]
        assert record.status == "failed" and "placing row 2 failed" in record.message
        assert b.outcome["tiles_placed"] == 2 * 4
        row_by_row = np.random.default_rng(seed_for(3, "builder-1"))
        for _ in range(3):
            row_by_row.random(4)
        assert b.rng.bit_generator.state == row_by_row.bit_generator.state
        assert b.rng.random() == row_by_row.random()
