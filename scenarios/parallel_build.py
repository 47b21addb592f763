"""Flow 1: builders claim adjacent regions, build them in parallel, release, meet at a barrier.

Builder ``i`` claims the region ``x = i * width`` on the top row of the grid
(``width`` x ``height``: x = 0, 100, 200 with the defaults), places its part of a
seeded plan row by row at ``tile_rate`` tiles per simulated second, releases its
claim and enters the barrier ``all-released`` (expecting every builder). Each
starts after a seeded delay of up to ``stagger`` seconds, so the claims come in
an order the seed decides. The plan is also the session's blueprint.

Parameters: builders, width, height, tile_rate, stagger.
Success: every claim granted at the first attempt (no conflict in the session),
every claim released before the barrier released, the barrier released every
builder in one generation, and the canvas equals the plan (completion 100%).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, RATE, WAIT, ParamError
from barnraise.scenarios._kit import (
    PATIENCE,
    box,
    host_session,
    mark,
    placed_before,
    restored_canvas,
    rng_for,
    rows_built,
    seeded_tiles,
    session_events,
    spawn,
)

NAME = "parallel_build"
PARAMS: dict[str, Any] = {
    "builders": 3, "width": 100, "height": 40, "tile_rate": 2000.0, "stagger": 0.5,
}
#: What each parameter may be, checked before the run (``barnraise scenarios parallel_build``).
BOUNDS = {"builders": COUNT, "width": GRID, "height": GRID, "tile_rate": RATE,
          "stagger": WAIT}
#: A realtime run resumes by running this script again on the restored world: each
#: builder goes on from its claim (region_query) and the rows built on the restored canvas
#: the script hands it, or knows it had built and released its region; a barrier release
#: and the tiles the stopped run's builders were told of are read from the stored log
#: (docs/store.md).
RESUMABLE = True
# The plan travels as the session's blueprint: a grid of builders * width cells a side.
SIMULATION = {"max_content_bytes": 16 * 2**20}
BARRIER = "all-released"


async def region_builder(agent: Participant) -> None:
    """Claim one region, build it from the plan, release it, wait for the others.

    Resuming (the run was stopped and is resumed, ``agent.resuming``) it goes on from
    where the world says it was: its claim still held (region_query) and the rows built
    on the restored canvas (``params["built"]``); a region built with no claim left was
    built and released; a barrier the stopped run released (``params["passed"]``, from
    its log: barriers are not restored) is not entered again.
    """
    params = agent.params
    region = params["region"]
    plan: np.ndarray[Any, Any] = params["plan"]
    outcome = agent.outcome
    outcome.update(region=region, granted=False, released=False, tiles_placed=0)
    claim: dict[str, Any] = {}
    done = 0
    if agent.resuming:
        done = rows_built(params.get("built"), plan, region)
        held = await agent.call("region_query", region=region)
        claim = next(({"success": True, "claim_id": c["claim_id"]}
                      for c in held.get("claims", ())
                      if c["agent_id"] == agent.name and c["bounds"] == region), {})
        if not claim and done == region["height"]:
            # Built, and its claim gone (the lease outlasts the build): it had released it.
            outcome.update(granted=True, released=True, claim={"success": True})
            mark(agent, "resumed", built=True, released=True)
            await _meet(agent)
            return
        mark(agent, "resumed", rows_built=done, claim_id=claim.get("claim_id"))
    else:
        await agent.sleep(float(params["stagger"]) * float(agent.rng.random()))
    if not claim:
        claim = await agent.call("region_claim", region=region, purpose="parallel build")
    outcome["claim"] = {k: claim.get(k) for k in ("success", "error", "claim_id")}
    if not claim.get("success"):
        mark(agent, "claim_refused", error=claim.get("error"))
        return
    outcome["granted"] = True
    mark(agent, "claimed", claim_id=claim["claim_id"])
    x, y, width = region["x"], region["y"], region["width"]
    rate = float(params["tile_rate"])
    for row in range(done, region["height"]):
        placed = await agent.call("builder_place_tiles", region=box(x, y + row, width, 1),
                                  tiles=[plan[y + row, x:x + width].tolist()])
        if not placed.get("success"):
            mark(agent, "write_refused", row=row, error=placed.get("error"))
            return
        outcome["tiles_placed"] += placed["tiles_placed"]
        await agent.sleep(width / rate)
    mark(agent, "built", tiles=outcome["tiles_placed"])
    released = await agent.call("region_release", claim_id=claim["claim_id"])
    outcome["released"] = bool(released.get("released"))
    mark(agent, "released")
    await _meet(agent)


async def _meet(agent: Participant) -> None:
    """Wait at the barrier for the other builders (unless the stopped run had released it)."""
    passed = agent.params.get("passed")
    if passed is not None:
        barrier = {"released": True, "generation": passed["generation"],
                   "arrived": passed["arrived"], "waited": None}
    else:
        barrier = await agent.call("a2a_barrier_enter", barrier_id=BARRIER,
                                   expected_count=agent.crew, timeout=PATIENCE,
                                   call_timeout=None)
    agent.outcome["barrier"] = {k: barrier.get(k) for k in ("released", "generation",
                                                             "arrived", "waited")}
    mark(agent, "barrier_passed" if barrier.get("released") else "barrier_failed")


def run(simu: Simulation, *, builders: int, width: int, height: int, tile_rate: float,
        stagger: float) -> dict[str, Any]:
    if builders < 1 or width < 1 or height < 1:
        raise ParamError("builders, width and height must be at least 1")
    grid = max(builders * width, height)
    # The plan: seeded tiles over the builders' row of regions, empty elsewhere.
    plan = np.zeros((grid, grid), dtype=np.uint8)
    plan[:height, :builders * width] = seeded_tiles(
        rng_for(simu, "plan"), height, builders * width, empty=0.1, draw_dtype=np.int64)
    _, sid = host_session(simu, session_name="Parallel Region Building", grid_size=grid,
                          max_agents=builders, blueprint=plan.tolist())
    # A resumed run: the world as the stopped run left it, and the barrier if it had
    # released it (a barrier is not restored; its release is in the log).
    built = restored_canvas(simu, sid)
    passed = next((e for e in session_events(simu, sid, "barrier_released")
                   if e["barrier_id"] == BARRIER), None)
    crew = [spawn(simu, sid, f"builder-{i + 1}", "builder", crew=builders,
                  behaviour=region_builder, plan=plan, region=box(i * width, 0, width, height),
                  tile_rate=tile_rate, stagger=stagger, built=built, passed=passed)
            for i in range(builders)]
    before = sum(placed_before(simu, a.name)[1] for a in crew)
    simu.run()
    claimed = session_events(simu, sid, "region_claimed")
    released = session_events(simu, sid, "region_released")
    opened = [e for e in session_events(simu, sid, "barrier_released")
              if e["barrier_id"] == BARRIER]
    barrier_seq = opened[0]["seq"] if opened else -1
    passed = [a for a in crew if a.outcome.get("barrier", {}).get("released")]
    arrived = {tuple(a.outcome["barrier"]["arrived"]) for a in passed}
    canvas = simu.view(sid).canvas
    assert canvas is not None
    return {
        "session_id": sid,
        "claims": sum(1 for a in crew if a.outcome.get("granted")),
        "claims_refused": sum(1 for a in crew if a.outcome.get("claim", {}).get("error")),
        "released": sum(1 for a in crew if a.outcome.get("released")),
        "released_before_barrier": sum(1 for e in released
                                       if e["reason"] == "released" and e["seq"] < barrier_seq),
        "barrier_released": len(passed),
        "barrier_generations": sorted({a.outcome["barrier"]["generation"] for a in passed}),
        "barrier_arrivals": sorted(next(iter(arrived))) if len(arrived) == 1 else [],
        "claim_order": [e["agent_id"] for e in claimed],
        # what the builders were told they placed (a resumed run's stopped run's from the log)
        "tiles": before + sum(a.outcome.get("tiles_placed", 0) for a in crew),
        "planned_tiles": int(np.count_nonzero(plan)),
        "canvas_matches_plan": bool(np.array_equal(canvas, plan)),
        "builders": builders,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    n = m["builders"]
    return bool(m["claims"] == n and m["claims_refused"] == 0 and summary["conflicts"] == 0
                and m["released"] == n and m["released_before_barrier"] == n
                and m["barrier_released"] == n and m["barrier_generations"] == [1]
                and len(m["barrier_arrivals"]) == n
                and m["tiles"] == m["planned_tiles"] == summary["tiles_placed"]
                and m["canvas_matches_plan"] and summary["completion_percent"] == 100.0
                and summary["behaviour_errors"] == 0)
