"""Many builders fill a big canvas block by block, a row per step: throughput at scale.

What it shows: the region manager and the dispatcher at volume. The canvas
(``grid`` x ``grid``) is cut into ``builders`` square blocks (``builders`` must be a
square number whose root divides ``grid``); each builder claims its block once and
then places one whole row of it per step (one ``builder_place_tiles`` call with a
1-row region, never a call per cell), sleeping ``step`` simulated seconds between
rows. The plan is seeded and has no empty cell, and it is the session's blueprint,
so 100% completion means the canvas equals the plan. The defaults are small for the
test suite; the benchmark (``benchmarks/scenarios_bench.py``) runs the full size:
grid 1000 and 100 builders, 100 x 100 blocks, 100 steps, 1,000,000 tiles.

Parameters: grid, builders, step.
Metrics: block, steps, tiles_expected, tiles_placed (what the builders were told
was placed), calls (tile-placing calls), claims.
Success: every tile placed as planned (completion 100%, so the canvas equals the
plan), tiles_placed == builders * block * block in the world and in the builders'
own counts, every builder claimed its block, and no behaviour failed.

Under a fault plan a builder may crash in the run: restarted by its supervisor, it
replays its journal (``Replay``'s: the answers its incarnations were given) and goes on
from the first row it had not been told was placed; a claim whose answer the crash took
is found in the world, not made again. A row whose answer the crash took is written
again (the same tiles, so the canvas still equals the plan), and the world counts its
tiles twice: under a plan the check allows the world's count up to one block's row per
crash more than the tiles expected.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, WAIT, ParamError
from barnraise.scenarios._kit import (
    Replay,
    current,
    host_session,
    placed_before,
    restored_canvas,
    rng_for,
    rows_built,
    seeded_tiles,
    spawn,
    total,
)

NAME = "grid_build"
PARAMS: dict[str, Any] = {"grid": 120, "builders": 9, "step": 1.0}
#: What each parameter may be, checked before the run (``barnraise scenarios grid_build``).
BOUNDS = {"grid": GRID, "builders": COUNT, "step": WAIT}
#: A realtime run resumes by running this script again on the restored world: each
#: builder finds its claim in the world (region_query) and how many rows of its block
#: were built on the restored canvas the script hands it, and builds the rest; the calls
#: and tiles the stopped run's builders were told of are read from the stored log and
#: counted on (docs/store.md).
RESUMABLE = True
# The blueprint travels in one message: a 1000 x 1000 one is a few MB of JSON.
SIMULATION = {"max_content_bytes": 64 * 2**20}


def layout(grid: int, builders: int) -> tuple[int, int]:
    """(blocks per side, block side) for ``builders`` square blocks tiling the grid."""
    side = math.isqrt(builders)
    if builders < 1 or side * side != builders or grid % side:
        raise ParamError(f"builders must be a square number whose root divides grid; "
                         f"got builders={builders}, grid={grid}")
    return side, grid // side


async def _block_builder(agent: Participant) -> None:
    params = agent.params
    plan: np.ndarray[Any, Any] = params["plan"]
    x, y, side = params["x"], params["y"], params["block"]
    step = float(params["step"])
    outcome = agent.outcome
    outcome.update(claimed=False, tiles_placed=0, calls=0)
    block = {"x": x, "y": y, "width": side, "height": side}
    # Restarted after a crash in this run: what its incarnations here were told is in
    # its journal (``Replay``), and it goes through its script again on those answers.
    journal: list[dict[str, Any]] = params["journal"]
    if agent.resuming and journal and journal[-1]["answer"] is None:
        await _claimed_unanswered(agent, journal[-1], block)
    io = Replay(agent, journal, journal=journal)
    done = 0
    if agent.resuming and (not journal or journal[0]["tool"] == "region_query"):
        # Back after the run stopped (or a crash before its first call): the claim the
        # last incarnation made (if the stopped run recorded it) and the rows it built
        # are in the world.
        held = await io.call("region_query", region=block)
        outcome["claimed"] = any(c["agent_id"] == agent.name and c["bounds"] == block
                                 for c in held.get("claims", ()))
        done = rows_built(params.get("built"), plan, block)
    if not outcome["claimed"]:
        claim = await io.call("region_claim", region=block, purpose="my block", timeout=0)
        if not claim.get("success"):
            raise RuntimeError(f"claiming block ({x}, {y}) failed: {claim.get('message')}")
        outcome["claimed"] = True
    for row in range(y + done, y + side):
        placed = await io.call("builder_place_tiles", tiles=[plan[row, x:x + side].tolist()],
                               region={"x": x, "y": row, "width": side, "height": 1})
        if not placed.get("success"):
            raise RuntimeError(f"placing row {row} failed: {placed.get('message')}")
        outcome["tiles_placed"] += placed["tiles_placed"]
        outcome["calls"] += 1
        if step > 0:
            await io.sleep(step)


async def _claimed_unanswered(agent: Participant, last: dict[str, Any],
                              block: dict[str, int]) -> None:
    """Restarted after a crash that took the answer to its ``last`` call: a claim of its
    block that the regions granted then is in the world, and answers it (so the block
    is not claimed twice). A row placed again writes what it wrote."""
    if last["tool"] != "region_claim":
        return
    held = await agent.call("region_query", region=block)
    for claim in held.get("claims", ()):
        if claim["agent_id"] == agent.name and claim["bounds"] == block:
            last.update(answered=agent.now, answer={"success": True, **claim})
            return


def run(simu: Simulation, *, grid: int, builders: int, step: float) -> dict[str, Any]:
    side, block = layout(grid, builders)
    plan = seeded_tiles(rng_for(simu, "plan"), grid, grid)
    _, sid = host_session(simu, session_name="Grid build", grid_size=grid,
                          max_agents=builders, blueprint=plan.tolist())
    built = restored_canvas(simu, sid)  # one copy for the crew, not one each
    crew = [spawn(simu, sid, f"builder-{i + 1}", "builder", crew=builders,
                  behaviour=_block_builder, plan=plan, block=block, step=step, built=built,
                  x=(i % side) * block, y=(i // side) * block, journal=[])
            for i in range(builders)]
    # A resumed run: what the builders' last incarnations were told, from the log.
    before = [placed_before(simu, a.name) for a in crew]
    simu.run(progress_of=lambda: (sum(c for c, _ in before) + total(map(current, crew), "calls"))
             / (builders * block))
    crew = [current(a) for a in crew]  # after a crash, its last incarnation knows it all
    return {
        "session_id": sid, "block": block, "steps": block,
        "tiles_expected": builders * block * block,
        "tiles_placed": sum(t for _, t in before) + total(crew, "tiles_placed"),
        "calls": sum(c for c, _ in before) + total(crew, "calls"),
        "claims": sum(1 for a in crew if a.outcome.get("claimed")),
    }



def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    builders = summary["params"]["builders"]
    # Under a fault plan a crash may take the answer to a row's write: the restarted
    # builder writes the row again (the same tiles), which the world counts again.
    again = (summary.get("faults") or {}).get("crashed", 0) * m["block"]
    return bool(summary["completion_percent"] == 100.0
                and m["tiles_expected"] == m["tiles_placed"]
                and m["tiles_expected"] <= summary["tiles_placed"] <= m["tiles_expected"] + again
                and m["claims"] == builders and m["calls"] == builders * m["steps"]
                and summary["behaviour_errors"] == 0)
