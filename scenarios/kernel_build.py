"""The flagship: a crew with fallible builders builds a blueprint to 100%, repairs included.

The architect cuts a seeded "kernel" blueprint into blocks, delegates a build task
per block to the builders and a test task (depending on it) to the testers. Builders
place tiles row by row at ``tile_rate`` tiles per simulated second and get a share
``error_rate`` of them wrong; testers compare each block with the blueprint; every
failed test makes the architect order a repair of exactly the wrong cells and a
retest. An observer records every session event.

Parameters: grid_size, block, builders, testers, error_rate, tile_rate, strategy
(parallel | sequential | cluster).
Success: the canvas matches the blueprint (completion 100%), every test finally
passed (the architect declared the build done), no behaviour failed, and with a
non-zero error rate at least one repair was needed.
"""

from __future__ import annotations

from typing import Any

from scenarios._common import host_session, kernel_blueprint, rng_for, spawn, total
from sim.simulation import Simulation

NAME = "kernel_build"
PARAMS: dict[str, Any] = {
    "grid_size": 120, "block": 30, "builders": 4, "testers": 2, "error_rate": 0.002,
    "tile_rate": 300.0, "strategy": "parallel",
}
# A blueprint travels in one message: a 1000 x 1000 one is a few MB of JSON.
SIMULATION = {"max_content_bytes": 64 * 2**20}


def run(simu: Simulation, *, grid_size: int, block: int, builders: int, testers: int,
        error_rate: float, tile_rate: float, strategy: str) -> dict[str, Any]:
    if strategy not in ("parallel", "sequential", "cluster"):
        raise ValueError(f"strategy must be parallel, sequential or cluster, got {strategy!r}")
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    crew = 1 + builders + testers  # who waits at the ready barrier: all but the observer
    _, sid = host_session(simu, session_name="Linux Kernel Build", grid_size=grid_size,
                          max_agents=crew + 1, blueprint=blueprint.tolist())
    builder_ids = [f"builder-{i + 1}" for i in range(builders)]
    tester_ids = [f"tester-{i + 1}" for i in range(testers)]
    crew_agents = [spawn(simu, sid, name, "builder", crew=crew, blueprint=blueprint,
                         tile_rate=tile_rate, error_rate=error_rate) for name in builder_ids]
    testers_ = [spawn(simu, sid, name, "tester", crew=crew) for name in tester_ids]
    watcher = spawn(simu, sid, "observer-1", "observer", crew=crew)
    boss = spawn(simu, sid, "architect-1", "architect", crew=crew, blueprint=blueprint,
                 block=block, builders=builder_ids, testers=tester_ids, strategy=strategy)
    simu.run(progress_of=lambda: boss.outcome.get("tests_passed", 0)
             / max(1, boss.outcome.get("blocks", 1)))
    return {
        "session_id": sid, "done": bool(boss.outcome.get("done")),
        "blocks": boss.outcome.get("blocks", 0), "repairs": boss.outcome.get("repairs", 0),
        "tests_passed": boss.outcome.get("tests_passed", 0),
        "makespan": boss.outcome.get("makespan"),
        "wrong_tiles": total(crew_agents, "wrong_tiles"),
        "defects_found": total(testers_, "defects_found"),
        "events_observed": watcher.outcome.get("events", 0),
        "error_rate": error_rate,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    repaired = m["repairs"] > 0 or m["error_rate"] == 0
    return (summary["completion_percent"] == 100.0 and m["done"] and repaired
            and summary["behaviour_errors"] == 0)
