"""Parallel against sequential delegation: the same build tasks, makespan speedup >= 2.8.

What it shows: the design notes' performance criterion (a 3x speedup for independent
tasks done in parallel). One seeded blueprint is cut into ``tasks`` independent
blocks (a row of ``block`` x ``block`` squares, every cell to build). It is built
twice in one simulation, in two sessions one after the other, each with an
architect, ``builders`` builders and a tester:

* ``parallel``: the architect deals the blocks round-robin to the builders;
* ``sequential``: one builder builds block after block (each build waits for the
  previous block's test).

Builders place a row at a time at ``tile_rate`` tiles per simulated second, with no
errors, so building time dominates. The makespan (simulated seconds from the first
delegation to the last passed test, from the architect) is read from the clock in
both modes. In realtime mode it includes scheduling jitter: every tool call and
timer costs a fraction of a wall millisecond, i.e. a few hundredths of a simulated
second at the runner's time_scale of 50, and a stall of the machine costs the
short parallel build relatively more than the sequential one. Hence the defaults:
few rows (10 per block), each a long build (2.5 simulated seconds), and a parallel
build of about half a wall second; measured realtime speedups stay within 2.9-3.0,
also with the machine's CPUs busy.

Parameters: tasks (blocks), builders, block (side of a block), tile_rate.
Metrics: speedup (sequential makespan / parallel makespan), makespan_parallel,
makespan_sequential, tasks, builders, ideal (tasks / ceil(tasks / builders)) and the
completion of each session.
Success: both builds reach 100% with every test passed, at least 3 tasks on at
least 3 builders, and speedup >= 2.8.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from actors.world import Client, Simulation
from scenarios import COUNT, GRID, RATE, ParamError
from scenarios._kit import host_session, rng_for, seeded_tiles, spawn

NAME = "parallel_speedup"
PARAMS: dict[str, Any] = {"tasks": 3, "builders": 3, "block": 10, "tile_rate": 4.0}
#: What each parameter may be, checked before the run (``barnraise scenarios parallel_speedup``).
BOUNDS = {"tasks": COUNT, "builders": COUNT, "block": GRID, "tile_rate": RATE}
TARGET = 2.8


def _build(simu: Simulation, host: Client, strategy: str, blueprint: np.ndarray[Any, Any], *,
           builders: int, block: int, tile_rate: float) -> dict[str, Any]:
    """One session building ``blueprint`` with ``strategy``; the architect's outcome."""
    crew = 1 + builders + 1
    _, sid = host_session(simu, host=host, session_name=f"speedup {strategy}",
                         grid_size=blueprint.shape[0], max_agents=crew,
                         blueprint=blueprint.tolist())
    prefix = strategy[:3]
    builder_ids = [f"{prefix}-builder-{i + 1}" for i in range(builders)]
    for name in builder_ids:
        spawn(simu, sid, name, "builder", crew=crew, blueprint=blueprint, tile_rate=tile_rate)
    spawn(simu, sid, f"{prefix}-tester-1", "tester", crew=crew)
    boss = spawn(simu, sid, f"{prefix}-architect", "architect", crew=crew, blueprint=blueprint,
                 block=block, builders=builder_ids, testers=[f"{prefix}-tester-1"],
                 strategy=strategy)
    simu.run()
    return {"session_id": sid, **boss.outcome}


def run(simu: Simulation, *, tasks: int, builders: int, block: int,
        tile_rate: float) -> dict[str, Any]:
    if tasks < 1 or builders < 1 or block < 1 or tile_rate <= 0:
        raise ParamError("tasks, builders, block and tile_rate must be positive")
    # A square grid with the tasks' blocks side by side along its top: the architect
    # finds exactly `tasks` blocks with something to build (the rest is empty).
    size = tasks * block
    blueprint = np.zeros((size, size), dtype=np.uint8)
    blueprint[:block, :] = seeded_tiles(rng_for(simu, "blueprint"), block, size)
    host = simu.client("host")
    runs = {strategy: _build(simu, host, strategy, blueprint, builders=builders, block=block,
                             tile_rate=tile_rate)
            for strategy in ("parallel", "sequential")}
    par, seq = runs["parallel"], runs["sequential"]
    done = par.get("done") and seq.get("done")
    speedup = seq["makespan"] / par["makespan"] if done and par["makespan"] else 0.0
    return {
        "session_id": par["session_id"], "tasks": par.get("blocks", 0), "builders": builders,
        "speedup": round(speedup, 3), "target": TARGET,
        "ideal": round(tasks / math.ceil(tasks / builders), 3),
        "makespan_parallel": par.get("makespan"), "makespan_sequential": seq.get("makespan"),
        "done_parallel": bool(par.get("done")), "done_sequential": bool(seq.get("done")),
        "completion_parallel": par.get("completion_percent", 0.0),
        "completion_sequential": seq.get("completion_percent", 0.0),
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return bool(m["done_parallel"] and m["done_sequential"] and m["tasks"] >= 3
                and m["builders"] >= 3 and m["speedup"] >= TARGET
                and summary["behaviour_errors"] == 0)
