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
    Replay,
    box,
    current,
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
    # Restarted after a crash in this run: what its incarnations here were told is in
    # its journal (``Replay``), and it goes through its script again on those answers.
    journal: list[dict[str, Any]] = params["journal"]
    if agent.resuming and journal and journal[-1]["answer"] is None:
        await _done_unanswered(agent, journal[-1], region)
    io = Replay(agent, journal, journal=journal)
    if agent.resuming and (not journal or journal[0]["tool"] == "region_query"):
        done = rows_built(params.get("built"), plan, region)
        held = await io.call("region_query", region=region)
        claim = next(({"success": True, "claim_id": c["claim_id"]}
                      for c in held.get("claims", ())
                      if c["agent_id"] == agent.name and c["bounds"] == region), {})
        if not claim and done == region["height"]:
            # Built, and its claim gone (the lease outlasts the build): it had released it.
            outcome.update(granted=True, released=True, claim={"success": True})
            mark(agent, "resumed", built=True, released=True)
            await _meet(agent, io)
            return
        mark(agent, "resumed", rows_built=done, claim_id=claim.get("claim_id"))
    else:
        await io.sleep(float(params["stagger"]) * float(agent.rng.random()))
    if not claim:
        claim = await io.call("region_claim", region=region, purpose="parallel build")
    outcome["claim"] = {k: claim.get(k) for k in ("success", "error", "claim_id")}
    if not claim.get("success"):
        mark(agent, "claim_refused", error=claim.get("error"))
        return
    outcome["granted"] = True
    mark(agent, "claimed", claim_id=claim["claim_id"])
    x, y, width = region["x"], region["y"], region["width"]
    rate = float(params["tile_rate"])
    for row in range(done, region["height"]):
        placed = await io.call("builder_place_tiles", region=box(x, y + row, width, 1),
                               tiles=[plan[y + row, x:x + width].tolist()])
        if not placed.get("success"):
            mark(agent, "write_refused", row=row, error=placed.get("error"))
            return
        outcome["tiles_placed"] += placed["tiles_placed"]
        await io.sleep(width / rate)
    mark(agent, "built", tiles=outcome["tiles_placed"])
    released = await io.call("region_release", claim_id=claim["claim_id"])
    outcome["released"] = bool(released.get("released"))
    mark(agent, "released")
    await _meet(agent, io)


async def _done_unanswered(agent: Participant, last: dict[str, Any],
                           region: dict[str, int]) -> None:
    """Restarted after a crash that took the answer to its ``last`` call: what that call
    did is read back from the world and answers it, so it is not done twice. A claim
    granted is held by this builder; a release done has left no claim of it; a barrier
    that let it through is released (the session's recent events). A row written
    again writes what it wrote."""
    tool = last["tool"]
    answer: dict[str, Any] | None = None
    if tool in ("region_claim", "region_release"):
        query = await agent.call("region_query", region=region)
        mine = [c for c in query.get("claims", ())
                if c["agent_id"] == agent.name and c["bounds"] == region]
        if tool == "region_claim" and mine:
            answer = {"success": True, **mine[0]}
        elif tool == "region_release" and not any(
                c["claim_id"] == last["args"].get("claim_id") for c in mine):
            answer = {"success": True, "released": True,
                      "claim_id": last["args"].get("claim_id")}
    elif tool == "a2a_barrier_enter":
        state = await agent.call("session_get_state", include=["events"])
        answer = next(({"success": True, "released": True, **e}
                       for e in state.get("state", {}).get("events", [])
                       if e.get("event") == "barrier_released"
                       and e.get("barrier_id") == BARRIER), None)
    if answer is not None:
        last.update(answered=agent.now, answer=answer)


async def _meet(agent: Participant, io: Replay) -> None:
    """Wait at the barrier for the other builders (unless the stopped run had released it)."""
    passed = agent.params.get("passed")
    if passed is not None:
        barrier = {"released": True, "generation": passed["generation"],
                   "arrived": passed["arrived"], "waited": None}
    else:
        barrier = await io.call("a2a_barrier_enter", barrier_id=BARRIER,
                                expected_count=agent.crew, timeout=PATIENCE,
                                call_timeout=None)
        if agent.resuming and barrier.get("error") == "invalid_argument" \
                and "already waiting" in str(barrier.get("message")):
            # Its last incarnation's wait is still there (a crash in the run): the
            # barrier's release answers that one, and shows in the session's events.
            barrier = await _released_later(agent)
    agent.outcome["barrier"] = {k: barrier.get(k) for k in ("released", "generation",
                                                             "arrived", "waited")}
    mark(agent, "barrier_passed" if barrier.get("released") else "barrier_failed")


async def _released_later(agent: Participant) -> dict[str, Any]:
    """The barrier's release, read from the session's recent events each second (up to
    PATIENCE); not released at the end of it."""
    start = agent.now
    while agent.now - start < PATIENCE:
        state = await agent.call("session_get_state", include=["events"])
        for e in state.get("state", {}).get("events", []):
            if e.get("event") == "barrier_released" and e.get("barrier_id") == BARRIER:
                return {"success": True, **e, "released": True,
                        "waited": round(agent.now - start, 6)}
        await agent.sleep(1.0)
    return {"success": True, "released": False, "reason": "timeout"}


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
                  tile_rate=tile_rate, stagger=stagger, built=built, passed=passed,
                  journal=[])
            for i in range(builders)]
    before = sum(placed_before(simu, a.name)[1] for a in crew)
    simu.run()
    crew = [current(a) for a in crew]  # after a crash, its last incarnation knows it all
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
                and m["tiles"] == m["planned_tiles"]
                and _counted(summary, m["tiles"])
                and m["canvas_matches_plan"] and summary["completion_percent"] == 100.0
                and summary["behaviour_errors"] == 0)


def _counted(summary: dict[str, Any], tiles: int) -> bool:
    """The world counted the tiles the builders were told of. Under a fault plan a crash
    may take the answer to a row's write: the restarted builder writes the row again (the
    same tiles) and the world counts it again, at most a region's row per crash."""
    again = (summary.get("faults") or {}).get("crashed", 0) * summary["params"]["width"]
    return bool(tiles <= summary["tiles_placed"] <= tiles + again)
