"""Role behaviours under stress: an architect whose builds fail, a builder whose work raises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from actors.agents.builder import BUILD_TYPES, accept_with_backoff, builder
from actors.agents.participant import Participant, start_next
from actors.world import Simulation
from scenarios._kit import host_session, kernel_blueprint, spawn
from tests.conftest import MODES


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
