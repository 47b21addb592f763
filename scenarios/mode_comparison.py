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
claims, hence no conflicts. Deterministic: sequential has the longest makespan.
Realtime: sequential's makespan is at least the time its one-at-a-time writers must
take, every cell at ``tile_rate`` (``cells / tile_rate``). Not the comparison: in
realtime a stall of the machine, or a resumed run's restart, adds simulated seconds
to whichever build it falls in (a kill at record 190 once left the free build with
the longer makespan), and a bound that jitter can only exceed holds under any load.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Client, Simulation
from barnraise.scenarios import COUNT, GRID, RATE, WAIT, Bound, ParamError
from barnraise.scenarios._kit import (
    current,
    deliveries,
    host_session,
    resumed_at,
    rng_for,
    seeded_tiles,
    spawn,
)

NAME = "mode_comparison"
PARAMS: dict[str, Any] = {"builders": 3, "width": 8, "overlap": 4, "height": 6,
                          "tile_rate": 8.0, "backoff": 0.5}
#: What each parameter may be, checked before the run (``barnraise scenarios mode_comparison``).
BOUNDS = {"builders": COUNT, "width": GRID, "overlap": Bound(low=0, high=4096),
          "height": GRID, "tile_rate": RATE, "backoff": WAIT}
MODES = ("free", "coordinated", "sequential")
#: A realtime run resumes by running this script again on the restored world: the
#: sessions the stopped run had made resume together, and each builder runs again from its
#: start with the answers its last incarnation was told, read from the stored log, in
#: place of the calls it had made (nothing is written or claimed twice; its start, end,
#: counts and pace are those of the stopped run), then goes on live (see _Told).
RESUMABLE = True


def strips(builders: int, width: int, overlap: int) -> list[dict[str, int]]:
    """The builders' strips (x and width); the grid is as wide as their union."""
    if builders < 1 or width < 1 or not 0 <= overlap < width:
        raise ParamError(f"need builders >= 1, width >= 1 and 0 <= overlap < width; got "
                         f"builders={builders}, width={width}, overlap={overlap}")
    return [{"x": i * (width - overlap), "width": width} for i in range(builders)]


class _Told:
    """A builder's calls, answered from what its last incarnation was told when it resumes.

    A resumed run hands a builder the answers the stopped run's services gave it, in
    order, with their times (``params["told"]``, read from the stored log): the
    behaviour runs again from its start, and each call it makes again gets the stored
    answer instead of acting twice; a sleep between them is already over. Once they run
    out it goes on live: the sleep it was in when the run stopped waits what was left
    of it, and every later call goes to the services. ``now`` is the builder's time:
    the stored answers' while replaying, the clock's after. A claim the stopped run made
    but never answered (the kill came between) is found in the world and not made twice
    (a look, region_query, before the first live call when it is a claim; a later
    resume replays that look too). In a run that is not a resumed one every call is
    live.
    """

    def __init__(self, agent: Participant) -> None:
        self.agent = agent
        #: Its journal, where a crash in the run does not reach (``_kit.Replay`` has the
        #: idea): the answers each incarnation here was told live, and when the first
        #: began, so one its supervisor restarts replays them as it would the log's.
        self.journal: dict[str, Any] = agent.params["journal"]
        self.answers: list[tuple[str, float, dict[str, Any]]] = [
            *(agent.params.get("told") or ()), *self.journal["told"]] \
            if agent.resuming else []
        self.live = not agent.resuming
        started = agent.params.get("started_at") if agent.resuming else None
        if started is None:
            started = self.journal["started_at"]
        self.t = agent.now if started is None else float(started)
        self.journal["started_at"] = self.t

    @property
    def now(self) -> float:
        return self.agent.now if self.live else self.t

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        if not self.live and self.answers:
            told_tool, t, answer = self.answers.pop(0)
            self.t = t
            if told_tool == "region_query" and tool == "region_claim":
                # the look an earlier resumed incarnation took before this claim (below)
                held = self._held(answer, args["region"])
                if held is not None:
                    return held
                if not self.answers:
                    return await self.call(tool, **args)
                told_tool, t, answer = self.answers.pop(0)
                self.t = t
            if told_tool != tool:
                raise RuntimeError(f"resuming, {self.agent.name} called {tool} where its "
                                   f"stopped run had called {told_tool}")
            return answer
        first, self.live = not self.live, True
        if first and tool == "region_claim" and self.agent.resuming:
            # Its first call live may be one the stopped run made and never answered: a
            # claim made then is in the world, under this builder, and is not made twice.
            held = self._held(await self._live("region_query", region=args["region"]),
                              args["region"])
            if held is not None:
                return held
        return await self._live(tool, **args)

    async def _live(self, tool: str, **args: Any) -> dict[str, Any]:
        answer = await self.agent.call(tool, **args)
        self.journal["told"].append((tool, self.agent.now, answer))
        return answer

    def _held(self, query: dict[str, Any], region: dict[str, int]) -> dict[str, Any] | None:
        """A claim of exactly ``region`` this builder holds, from a region_query's answer, as
        region_claim answers it; None when there is none."""
        for c in query.get("claims", ()):
            if c["agent_id"] == self.agent.name and c["bounds"] == region:
                return {"success": True, "claim_id": c["claim_id"], "region": c["bounds"]}
        return None

    async def sleep(self, seconds: float) -> None:
        if self.live:
            await self.agent.sleep(seconds)
            return
        self.t += seconds
        if not self.answers and self.t > self.agent.now:
            self.live = True  # the sleep the stopped run was in: what was left of it
            await self.agent.sleep(self.t - self.agent.now)


async def _claim_my_part(agent: Participant, told: _Told,
                         strip: dict[str, int]) -> list[dict[str, Any]]:
    """Claim ``strip``; if refused, claim the parts nobody holds. The claims granted."""
    outcome = agent.outcome
    granted = await told.call("region_claim", region=strip, purpose="my strip", timeout=0)
    if granted.get("success"):
        return [granted]
    if granted.get("error") != "region_conflict":
        raise RuntimeError(f"claiming {strip} failed: {granted.get('message')}")
    outcome["refused"] += 1
    claims: list[dict[str, Any]] = []
    for _ in range(int(agent.params.get("max_attempts", 10))):
        query = await told.call("region_query", region=strip)
        free = query.get("free_subregions", [])
        if not free:
            break  # the rest of the strip is held by neighbours, who build it
        for part in free:
            granted = await told.call("region_claim", region=part, purpose="my strip (part)",
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
    told = _Told(agent)  # resuming: the stopped run's answers first (see _Told)
    outcome.update(start=told.now, refused=0, tiles_placed=0, write_refusals=0)
    if mode == "free":
        parts, claims = [strip], []
    else:
        claims = await _claim_my_part(agent, told, strip)
        parts = [c["region"] for c in claims]
    for row in range(strip["height"]):
        cells = 0
        for part in parts:
            x, w = part["x"], part["width"]
            region = {"x": x, "y": row, "width": w, "height": 1}
            tiles = [plan[row, x:x + w].tolist()]
            while True:
                placed = await told.call("builder_place_tiles", region=region, tiles=tiles)
                if placed.get("success"):
                    break
                if placed.get("error") != "write_refused":
                    raise RuntimeError(f"placing {region} failed: {placed.get('message')}")
                # sequential mode: another builder holds the write token
                outcome["write_refusals"] += 1
                await told.sleep(backoff * (0.5 + float(agent.rng.random())))
            outcome["tiles_placed"] += placed["tiles_placed"]
            cells += w
        await told.sleep(cells / rate)
    for claim in claims:  # in sequential mode this hands the write token on
        await told.call("region_release", claim_id=claim["claim_id"])
    outcome["end"] = told.now


def _start(simu: Simulation, host: Client, mode: str, plan: np.ndarray[Any, Any],
           layout: list[dict[str, int]], **params: Any) -> tuple[str, list[Participant]]:
    """A new session of ``mode`` to build ``plan``, its crew started; (its id, the crew)."""
    size = plan.shape[1]
    blueprint = np.zeros((size, size), dtype=np.uint8)
    blueprint[:plan.shape[0]] = plan
    _, sid = host_session(simu, host=host, session_name=f"{mode} build", grid_size=size,
                          coordination_mode=mode, max_agents=len(layout),
                          blueprint=blueprint.tolist())
    crew = []
    for i, s in enumerate(layout):
        name = f"{mode}-builder-{i + 1}"
        crew.append(spawn(simu, sid, name, "builder", crew=len(layout),
                          behaviour=_strip_builder, plan=plan, mode=mode, x=s["x"],
                          width=s["width"], journal={"told": [], "started_at": None},
                          **_told_before(simu, name), **params))
    return sid, crew


def _told_before(simu: Simulation, builder: str) -> dict[str, Any]:
    """In a resumed run, what the stopped run told ``builder`` once its crew had started
    (read from the stored log): ``started_at``, when it heard the crew was ready, and
    ``told``, the regions service's answers to its calls in order, as (tool, time,
    answer). Nothing in a run that is not a resumed one."""
    start = resumed_at(simu)
    if not start:
        return {}
    answers = [d for d in deliveries(simu, builder, "coordination_response")
               if d["seq"] < start]
    ready = [d["t"] for d in answers if d["from"] == "coordination"
             and d["content"].get("barrier_id") == "ready" and d["content"].get("released")]
    # Each answer goes with the oldest call still unanswered (the service answers in
    # order); a call left unanswered when a run stopped (a kill-resume-kill log has
    # more than one stop) never is: the next resumed run begins with the op that
    # crashes the stopped crew (Simulation.restore).
    records = [(d["seq"], "call", d["t"], d["content"]["tool"])
               for d in deliveries(simu, "regions", "coordination_request")
               if d["seq"] < start and d["from"] == builder]
    records += [(d["seq"], "answer", d["t"], d["content"]) for d in answers
                if d["from"] == "regions"]
    records += [(d["seq"], "stop", d["t"], None)
                for d in deliveries(simu, "tasks", "coordination_request")
                if d["seq"] < start and d["content"].get("op") == "_agent_crashed"
                and d["content"].get("reason") == "resumed"]
    told: list[tuple[str, float, dict[str, Any]]] = []
    pending: list[str] = []
    for _, what, t, body in sorted(records, key=lambda r: r[0]):
        if what == "call":
            pending.append(body)
        elif what == "stop":
            pending.clear()
        elif pending:
            told.append((pending.pop(0), t, body))
    return {"started_at": ready[0] if ready else None, "told": told}


def _figures(simu: Simulation, sid: str, crew: list[Participant]) -> dict[str, Any]:
    """One session's figures, once its build is over."""
    crew = [current(a) for a in crew]
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


def _made(simu: Simulation, mode: str) -> bool:
    """Had the stopped run of a resumed run made the session of ``mode``?"""
    return simu.restored is not None and any(
        s.info.get("session_name") == f"{mode} build" for s in simu.restored.sessions.values())


def run(simu: Simulation, *, builders: int, width: int, overlap: int, height: int,
        tile_rate: float, backoff: float) -> dict[str, Any]:
    layout = strips(builders, width, overlap)
    size = max(height, layout[-1]["x"] + width)
    plan = seeded_tiles(rng_for(simu, "blueprint"), height, size)
    host = simu.client("host")
    params = {"tile_rate": tile_rate, "backoff": backoff}
    # One mode after the other. A resumed run's sessions that the stopped run had made
    # resume together: one must not wait (its clock running) while the crew of one
    # before it replays its work and the run goes quiet.
    crews = {mode: _start(simu, host, mode, plan, layout, **params)
             for mode in MODES if _made(simu, mode)}
    if crews:
        simu.run()
    for mode in MODES:
        if mode not in crews:
            crews[mode] = _start(simu, host, mode, plan, layout, **params)
            simu.run()
    figures = {mode: _figures(simu, *crews[mode]) for mode in MODES}
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
                and free["conflicts"] == 0 and _slowest(summary)
                and summary["behaviour_errors"] == 0)


def _slowest(summary: dict[str, Any]) -> bool:
    """Sequential took longest (deterministic), or at least its cells' time one writer at a
    time (realtime, where wall-clock jitter moves every makespan; see the module doc)."""
    m = summary["metrics"]
    sequential = m["sequential"]["makespan"]
    if summary.get("mode") == "realtime":
        # makespans are rounded to 6 decimals: allow that much below the bound
        return bool(sequential >= m["cells"] / summary["params"]["tile_rate"] - 1e-6)
    return bool(sequential > max(m["free"]["makespan"], m["coordinated"]["makespan"]))
