"""One blueprint under free, coordinated and sequential modes: lost work against makespan.

What it shows: the trade-off the coordination modes make. A seeded blueprint
(``height`` rows, every cell to build) is cut into ``builders`` vertical strips
``width`` columns wide, each overlapping the next by ``overlap`` columns, so
neighbours' work overlaps. It is built three times in one simulation, in three
sessions one after the other, one per coordination mode, by the same kind of crew:
builders that place their strip a row at a time at ``tile_rate`` tiles per
simulated second.

* ``free``: nobody claims; each builder builds its whole strip. Where strips
  overlap both builders write the same cells and the second write is lost work.
* ``coordinated``: writes need claims. Each builder claims its strip; refused
  (region_conflict), it claims only the free part (``region_query``'s
  ``free_subregions``) and leaves the rest to the neighbour holding it, so every
  cell is built once, at the price of conflicts.
* ``sequential``: the same claiming protocol, and one writer at a time holds
  the session's write token until it releases its claims; the others retry
  refused writes after a seeded backoff. No lost work, no parallelism.

Parameters: builders, width, overlap (< width), height, tile_rate, backoff.
Metrics per mode (``free``, ``coordinated``, ``sequential``): lost_work, conflicts,
makespan (simulated seconds from the crew's start to the last builder's end),
completion (percent of the blueprint built), tiles_placed, write_refusals; and
``cells``, the blueprint's cell count.
Success: every mode reaches 100% completion; coordinated and sequential lose no
work; free mode loses work when strips overlap (none otherwise) and makes no
claims, hence no conflicts; sequential has the longest makespan.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.agents.participant import Participant
from actors.world import Client, Simulation
from scenarios import COUNT, GRID, RATE, WAIT, Bound, ParamError
from scenarios._kit import host_session, rng_for, seeded_tiles, spawn

NAME = "mode_comparison"
PARAMS: dict[str, Any] = {"builders": 3, "width": 8, "overlap": 4, "height": 6,
                          "tile_rate": 8.0, "backoff": 0.5}
#: What each parameter may be, checked before the run (``barnraise scenarios mode_comparison``).
BOUNDS = {"builders": COUNT, "width": GRID, "overlap": Bound(low=0, high=4096),
          "height": GRID, "tile_rate": RATE, "backoff": WAIT}
MODES = ("free", "coordinated", "sequential")


def strips(builders: int, width: int, overlap: int) -> list[dict[str, int]]:
    """The builders' strips (x and width); the grid is as wide as their union."""
    if builders < 1 or width < 1 or not 0 <= overlap < width:
        raise ParamError(f"need builders >= 1, width >= 1 and 0 <= overlap < width; got "
                         f"builders={builders}, width={width}, overlap={overlap}")
    return [{"x": i * (width - overlap), "width": width} for i in range(builders)]


async def _claim_my_part(agent: Participant, strip: dict[str, int]) -> list[dict[str, Any]]:
    """Claim ``strip``; if refused, claim the parts nobody holds. The claims granted."""
    outcome = agent.outcome
    granted = await agent.call("region_claim", region=strip, purpose="my strip", timeout=0)
    if granted.get("success"):
        return [granted]
    if granted.get("error") != "region_conflict":
        raise RuntimeError(f"claiming {strip} failed: {granted.get('message')}")
    outcome["refused"] += 1
    claims: list[dict[str, Any]] = []
    for _ in range(int(agent.params.get("max_attempts", 10))):
        query = await agent.call("region_query", region=strip)
        free = query.get("free_subregions", [])
        if not free:
            break  # the rest of the strip is held by neighbours, who build it
        for part in free:
            granted = await agent.call("region_claim", region=part, purpose="my strip (part)",
                                       timeout=0)
            if granted.get("success"):
                claims.append(granted)
            else:
                outcome["refused"] += 1
    return claims


async def _strip_builder(agent: Participant) -> None:
    params = agent.params
    plan: np.ndarray[Any, Any] = params["plan"]
    mode, rate, backoff = params["mode"], float(params["tile_rate"]), float(params["backoff"])
    strip = {"x": params["x"], "y": 0, "width": params["width"], "height": plan.shape[0]}
    outcome = agent.outcome
    outcome.update(start=agent.now, refused=0, tiles_placed=0, write_refusals=0)
    if mode == "free":
        parts, claims = [strip], []
    else:
        claims = await _claim_my_part(agent, strip)
        parts = [c["region"] for c in claims]
    for row in range(strip["height"]):
        cells = 0
        for part in parts:
            x, w = part["x"], part["width"]
            region = {"x": x, "y": row, "width": w, "height": 1}
            tiles = [plan[row, x:x + w].tolist()]
            while True:
                placed = await agent.call("builder_place_tiles", region=region, tiles=tiles)
                if placed.get("success"):
                    break
                if placed.get("error") != "write_refused":
                    raise RuntimeError(f"placing {region} failed: {placed.get('message')}")
                # sequential mode: another builder holds the write token
                outcome["write_refusals"] += 1
                await agent.sleep(backoff * (0.5 + float(agent.rng.random())))
            outcome["tiles_placed"] += placed["tiles_placed"]
            cells += w
        await agent.sleep(cells / rate)
    for claim in claims:  # in sequential mode this hands the write token on
        await agent.call("region_release", claim_id=claim["claim_id"])
    outcome["end"] = agent.now


def _build(simu: Simulation, host: Client, mode: str, plan: np.ndarray[Any, Any],
           layout: list[dict[str, int]], **params: Any) -> dict[str, Any]:
    """Build ``plan`` in a new session of ``mode``; that session's figures."""
    size = plan.shape[1]
    blueprint = np.zeros((size, size), dtype=np.uint8)
    blueprint[:plan.shape[0]] = plan
    _, sid = host_session(simu, host=host, session_name=f"{mode} build", grid_size=size,
                         coordination_mode=mode, max_agents=len(layout),
                         blueprint=blueprint.tolist())
    crew = [spawn(simu, sid, f"{mode}-builder-{i + 1}", "builder", crew=len(layout),
                  behaviour=_strip_builder, plan=plan, mode=mode, x=s["x"], width=s["width"],
                  **params)
            for i, s in enumerate(layout)]
    simu.run()
    progress = simu.view(sid, canvas=False, completion=True).progress
    ends = [a.outcome["end"] for a in crew if "end" in a.outcome]
    start = min(a.outcome.get("start", 0.0) for a in crew)
    return {
        "session_id": sid, "lost_work": progress.lost_work, "conflicts": progress.conflicts,
        "makespan": round(max(ends) - start, 6) if len(ends) == len(crew) else None,
        "completion": progress.completion_percent,
        "tiles_placed": progress.tiles_placed,
        "write_refusals": sum(a.outcome.get("write_refusals", 0) for a in crew),
        "finished": len(ends),
    }


def run(simu: Simulation, *, builders: int, width: int, overlap: int, height: int,
        tile_rate: float, backoff: float) -> dict[str, Any]:
    layout = strips(builders, width, overlap)
    size = max(height, layout[-1]["x"] + width)
    plan = seeded_tiles(rng_for(simu, "blueprint"), height, size)
    host = simu.client("host")
    figures = {mode: _build(simu, host, mode, plan, layout, tile_rate=tile_rate,
                            backoff=backoff)
               for mode in MODES}
    main = figures["coordinated"].pop("session_id")
    for mode in ("free", "sequential"):
        figures[mode].pop("session_id")
    return {"session_id": main, "cells": height * size, **figures}


def describe(summary: dict[str, Any]) -> list[str]:
    """The three modes side by side, for the text summary."""
    m = summary["metrics"]
    columns = ("completion", "makespan", "lost_work", "conflicts", "write_refusals",
               "tiles_placed")
    lines = [f"{m['cells']} cells to build, once per mode:",
             "  " + f"{'mode':12}" + "".join(f"{c:>16}" for c in columns)]
    for mode in MODES:
        row = m[mode]
        lines.append("  " + f"{mode:12}" + "".join(
            f"{'-' if row.get(c) is None else format(row[c], 'g'):>16}" for c in columns))
    return lines


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    free, coordinated, sequential = (m[mode] for mode in MODES)
    if any(m[mode]["completion"] != 100.0 or m[mode]["makespan"] is None for mode in MODES):
        return False
    overlapping = summary["params"]["overlap"] > 0 and summary["params"]["builders"] > 1
    return bool((free["lost_work"] > 0) == overlapping
                and coordinated["lost_work"] == 0 and sequential["lost_work"] == 0
                and free["conflicts"] == 0
                and sequential["makespan"] > max(free["makespan"], coordinated["makespan"])
                and summary["behaviour_errors"] == 0)
