"""Flow 3: a claim overlapping another is refused with a suggestion, which is then granted.

Agent A claims ``first`` (0, 0, 100 x 100 by default) and fills it with seeded
tiles. Then each of ``contenders`` agents in turn (B, then C, ...; each starts
when the one before is settled) claims ``second`` (50, 50, 100 x 100), which
overlaps A's claim (and the claims granted before it). It is refused with
``region_conflict``, naming the conflicting agents and a ``suggestion_region``:
the nearest free placement of the same size. The contender claims the suggestion,
is granted it, and fills it with seeded tiles too.

Parameters: grid_size, first, second (regions as [x, y, width, height]),
contenders.
Success: every contender's first claim was refused with A among the conflicting
agents and a suggestion; every suggested claim was granted at once; no two final
claims overlap; the session counted exactly one conflict per contender; and every
agent's tiles are on the canvas where it claimed.

Resumed after a kill (``barnraise resume``, realtime): each agent's next incarnation
goes through its script again (``_kit.Replay``): the calls it had made are answered
from the stored log, not made again (its seeded tiles are drawn again, the same),
the turn it had been given is taken from the log, and it goes on live from the
first call the log holds no answer to; a last claim the kill left unanswered but
the log shows granted or refused is answered from that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import GRID, Bound, ParamError
from barnraise.scenarios._kit import (
    Replay,
    box,
    calls_before,
    delivered_before,
    host_session,
    mark,
    overlapping_pairs,
    seeded_tiles,
    session_events,
    spawn,
)
from barnraise.sim.geometry import find_free_placement

NAME = "conflict_resolution"
PARAMS: dict[str, Any] = {
    "grid_size": 300, "first": [0, 0, 100, 100], "second": [50, 50, 100, 100],
    "contenders": 1,
}
#: What each parameter may be, checked before the run (``barnraise scenarios conflict_resolution``).
BOUNDS = {"grid_size": GRID, "first": Bound(low=0, high=4096),
          "second": Bound(low=0, high=4096), "contenders": Bound(low=0, high=10_000)}
#: A realtime run resumes by running this script again on the restored world, each
#: agent replaying its stored calls before it goes on live (see above).
RESUMABLE = True
_TOOLS = frozenset({"region_claim", "builder_place_tiles", "a2a_send_message"})


async def _fill(agent: Participant, io: Replay, region: dict[str, int]) -> bool:
    tiles = seeded_tiles(agent.rng, region["height"], region["width"], empty=0.2,
                         draw_dtype=np.int64)
    placed = await io.call("builder_place_tiles", region=region, tiles=tiles.tolist())
    agent.outcome["tiles"] = tiles
    return bool(placed.get("success"))


async def _go_on(agent: Participant, io: Replay) -> None:
    following = agent.params.get("next")
    if following:
        await io.call("a2a_send_message", to_agent=following,
                         content={"event": "your_turn", "after": agent.agent_name})


async def claimant(agent: Participant) -> None:
    """Wait for one's turn (unless first), claim; on a conflict claim the suggestion."""
    params = agent.params
    outcome = agent.outcome
    # a resumed run: its calls before the kill, and the turn if it had come
    io = Replay(agent, params.get("before", ()), params.get("inbox", ()))
    outcome.update(attempts=[], final=None, filled=False)
    if params.get("after"):
        await io.receive(lambda m: m.content.get("event") == "your_turn",
                            description="its turn to claim")
    region = params["region"]
    while region is not None and len(outcome["attempts"]) < 3:
        answer = await io.call("region_claim", region=region, purpose="flow 3", timeout=0)
        attempt = {"region": region, "granted": bool(answer.get("success")),
                   "error": answer.get("error"),
                   "conflicting": [c["agent_name"] for c in answer.get("conflicting_agents", [])],
                   "suggestion_region": answer.get("suggestion_region"),
                   "suggestion": answer.get("suggestion")}
        outcome["attempts"].append(attempt)
        mark(agent, "granted" if attempt["granted"] else "refused", region=region,
             conflicting=attempt["conflicting"])
        if attempt["granted"]:
            outcome["final"] = region
            outcome["filled"] = await _fill(agent, io, region)
            break
        region = attempt["suggestion_region"]
    await _go_on(agent, io)


def _refusal(simu: Simulation, sid: str, event: dict[str, Any]) -> dict[str, Any]:
    """The region_conflict answer the kill took, rebuilt from its ``conflict_detected``
    event and the claims the run stopped with (the contenders go in turn: nothing was
    claimed or released between the refusal and the kill), as the regions service
    builds it: the suggestion is the nearest free placement of the same size."""
    assert simu.restored is not None
    part = simu.restored.sessions[sid].regions
    assert part is not None
    occupied = np.zeros(part.canvas.tiles.shape, dtype=bool)
    for claim in part.claims.values():
        r = claim["region"]
        occupied[r["y"]:r["y"] + r["height"], r["x"]:r["x"] + r["width"]] = True
    want = event["region"]
    spot = find_free_placement(occupied, want["width"], want["height"],
                               near=(want["x"], want["y"]))
    return {"success": False, "error": "region_conflict",
            "conflicting_agents": [{"agent_id": a, "agent_name": a,
                                    "overlapping_region": event["overlapping_region"]}
                                   for a in event["agents"]],
            "suggestion": None if spot is None else
            f"Claim region starting at ({spot.x}, {spot.y}) to avoid conflict",
            "suggestion_region": None if spot is None else spot.to_dict()}


def _before_kill(simu: Simulation, sid: str, agent_id: str) -> dict[str, Any]:
    """A resumed run: ``agent_id``'s calls before the kill (a claim a kill left unanswered
    answered from the event the log shows for it) and the messages it had been
    delivered; {} in a run that was not resumed."""
    image = simu.restored
    if image is None:
        return {}
    calls = [c for c in calls_before(simu, agent_id) if c["tool"] in _TOOLS]
    events = session_events(simu, sid, "region_claimed", "conflict_detected")
    for call in calls:
        if call["answer"] is not None or call["tool"] != "region_claim":
            continue
        end = call["until"] if call["until"] is not None else image.seq
        for e in events:
            if call["seq"] < e["seq"] < end and e["agent_id"] == agent_id:
                answer = {"success": True, "claim_id": e.get("claim_id"),
                          "agent_id": agent_id, "region": e["region"],
                          "exclusive": e.get("exclusive"), "expires_at": e.get("expires_at"),
                          "conflicts": []} if e["event"] == "region_claimed" \
                    else _refusal(simu, sid, e)
                call.update(answered=e["t"], answer=answer)
                break
    return {"before": calls, "inbox": delivered_before(simu, agent_id, "status_update")}


def run(simu: Simulation, *, grid_size: int, first: list[int], second: list[int],
        contenders: int) -> dict[str, Any]:
    if len(first) != 4 or len(second) != 4:
        raise ParamError("first and second are regions: [x, y, width, height]")
    if contenders < 1:
        raise ParamError(f"contenders must be at least 1, got {contenders}")
    names = ["agent-a", *[f"agent-{chr(ord('b') + i)}" for i in range(contenders)]]
    crew = len(names)
    _, sid = host_session(simu, session_name="Conflict Resolution", grid_size=grid_size,
                          max_agents=crew)
    agents = []
    for i, name in enumerate(names):
        region = box(*first) if i == 0 else box(*second)
        agents.append(spawn(simu, sid, name, "builder", crew=crew, behaviour=claimant,
                            region=region, after=names[i - 1] if i else None,
                            next=names[i + 1] if i + 1 < crew else None,
                            **_before_kill(simu, sid, name)))
    simu.run()
    a, others = agents[0], agents[1:]
    finals = [x.outcome.get("final") for x in agents]
    placed = [f for f in finals if f is not None]
    overlapping = len(overlapping_pairs(placed))
    canvas = simu.view(sid).canvas
    assert canvas is not None
    in_place = all(
        x.outcome.get("filled") and np.array_equal(
            canvas[f["y"]:f["y"] + f["height"], f["x"]:f["x"] + f["width"]], x.outcome["tiles"])
        for x, f in zip(agents, finals, strict=True) if f is not None)
    first_tries = [x.outcome["attempts"][0] for x in others if x.outcome.get("attempts")]
    # granted at the second attempt, exactly the region suggested at the first
    took_suggestion = [len(t) == 2 and not t[0]["granted"] and t[1]["granted"]
                       and t[1]["region"] == t[0]["suggestion_region"]
                       for t in (x.outcome.get("attempts", []) for x in others)]
    return {
        "session_id": sid,
        "a_granted": bool(a.outcome.get("attempts") and a.outcome["attempts"][0]["granted"]),
        "conflicts": sum(1 for x in others for t in x.outcome.get("attempts", [])
                         if t["error"] == "region_conflict"),
        "refused_by_a": sum(1 for t in first_tries if t["error"] == "region_conflict"
                            and "agent-a" in t["conflicting"]),
        "suggestion": first_tries[0]["suggestion_region"] if first_tries else None,
        "suggestion_text": first_tries[0]["suggestion"] if first_tries else None,
        "suggestions_granted": sum(took_suggestion),
        "final_claims": {x.agent_name: x.outcome.get("final") for x in agents},
        "overlapping_pairs": overlapping,
        "conflict_events": len(session_events(simu, sid, "conflict_detected")),
        "tiles_in_place": bool(in_place),
        "contenders": contenders,
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    n = m["contenders"]
    return bool(m["a_granted"] and m["conflicts"] == n and m["refused_by_a"] == n
                and m["suggestion"] is not None and m["suggestions_granted"] == n
                and all(f is not None for f in m["final_claims"].values())
                and m["overlapping_pairs"] == 0
                and summary["conflicts"] == m["conflict_events"] == n
                and m["tiles_in_place"] and summary["behaviour_errors"] == 0)
