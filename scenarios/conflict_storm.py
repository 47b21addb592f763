"""A storm of agents claiming random regions: conflict rate, claim latency, no overlaps.

What it shows: the region manager under contention. ``agents`` builders each make
``claims_per_agent`` exclusive claims of a ``claim_size`` x ``claim_size`` square at a
seeded random place on a ``grid`` x ``grid`` canvas. Between claims an agent thinks
for an exponential time of mean ``1 / rate`` (``rate``: claim attempts per simulated
second per agent). A granted claim is filled with the agent's tile (one
``builder_place_tiles`` call), held ``hold`` seconds and released, except the
agent's last claim, which it keeps (so the end state has claims to check). Claims
are judged alike in every mode; the mode decides who may write: in ``sequential``
mode another agent may hold the write token, and the fill is refused.
A refused claim (region_conflict) is retried at the same place after a seeded
backoff of about ``backoff`` x attempt seconds (attempt capped at 4, jittered by
x0.5 to x1.5), ``patience`` times; after that, at once at the place the refusal
suggests (the nearest free one), when there is one. ``patience`` 0 always moves to
the suggestion; a large ``patience`` insists on the random place. After
``max_attempts`` attempts the claim is abandoned.

Parameters: agents, grid, claim_size, coordination_mode (free | coordinated |
sequential), rate, hold, claims_per_agent, patience, backoff, max_attempts.
Metrics: attempted, granted, refused, abandoned, conflict_rate (refused /
attempted), latency_mean / latency_p95 / latency_max (simulated seconds from a
claim's first attempt to its grant), writes_ok, writes_refused, agents_with_claim,
final_claims, overlaps_at_end (pairs of exclusive claims overlapping in the regions
actor's final state) and overlaps_during (pairs of granted claims that overlapped in
space while both were held, from the agents' grant and release times).
Success: the figures are consistent (granted + refused == attempted, granted +
abandoned == agents x claims_per_agent, 0 <= conflict_rate <= 1, and the regions
actor counted exactly the refusals the agents saw), no two exclusive claims ever
overlapped (during the run or at its end), and every agent got at least one claim.

Resumed after a kill (``barnraise resume``, realtime): how far each agent had got is
not in the world's state, so its next incarnation goes through its script again
(``_kit.Replay``): the calls it had made are answered from the stored log, not
made again, with the same random draws and the logged times, and it goes on live
from the first call the log holds no answer to. A last call whose answer the kill
took but whose effect the log shows (a claim granted, a refusal counted, a
release) is answered from that effect, so no claim is made twice and every
refusal the regions counted is one an agent saw.

Under a fault plan an agent may crash in the run: its supervisor restarts it on the
same script, which replays the agent's journal (``Replay``'s, in its params: what its
incarnations were answered) and goes on live, and a claim whose answer the crash took is
read back from the world (``region_query``). A refusal whose answer the crash took is
counted by the regions and not by the agent, so under a plan the check allows the regions
one refusal more than the agents saw per crash.
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.participant import Participant
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, RATE, WAIT, Bound, ParamError
from barnraise.scenarios._kit import (
    Replay,
    calls_before,
    current,
    host_session,
    mean,
    percentile,
    session_events,
    spawn,
    total,
)
from barnraise.sim.geometry import Rect

NAME = "conflict_storm"
PARAMS: dict[str, Any] = {
    "agents": 8, "grid": 64, "claim_size": 8, "coordination_mode": "coordinated",
    "rate": 1.0, "hold": 1.0, "claims_per_agent": 5, "patience": 3, "backoff": 0.5,
    "max_attempts": 20,
}
#: What each parameter may be, checked before the run (``barnraise scenarios conflict_storm``).
BOUNDS = {"agents": COUNT, "grid": GRID, "claim_size": GRID,
          "coordination_mode": Bound(choices=("free", "coordinated", "sequential")),
          "rate": RATE, "hold": WAIT, "claims_per_agent": COUNT, "patience": WAIT,
          "backoff": WAIT, "max_attempts": COUNT}
BACKOFF_CAP = 4  # the backoff grows with the attempt number up to this many times
#: A realtime run resumes by running this script again on the restored world, each
#: agent replaying its stored calls before it goes on live (see above).
RESUMABLE = True
_TOOLS = frozenset({"region_claim", "builder_place_tiles", "region_release"})


async def _claimer(agent: Participant) -> None:
    p = agent.params
    rng = agent.rng
    journal: list[dict[str, Any]] = p["journal"]
    if agent.resuming and journal and journal[-1]["answer"] is None:
        await _claimed_unanswered(agent, journal[-1], int(p["grid"]))
    # its calls before the kill (a resumed run), then those of its incarnations in this run
    io = Replay(agent, [*p.get("before", ()), *journal], journal=journal)
    grid, size, claims = int(p["grid"]), int(p["claim_size"]), int(p["claims_per_agent"])
    out = agent.outcome
    out.update(attempted=0, granted=0, refused=0, abandoned=0, writes_ok=0, writes_refused=0)
    latencies: list[float] = []
    held: list[list[Any]] = []  # [granted at, released at (None: kept), bounds]
    out.update(latencies=latencies, held=held)
    for k in range(claims):
        await io.sleep(float(rng.exponential(1 / float(p["rate"]))))
        x, y = (int(v) for v in rng.integers(0, grid - size + 1, size=2))
        region = {"x": x, "y": y, "width": size, "height": size}
        first, refused_before = io.now, out["refused"]
        granted: dict[str, Any] = {}
        for attempt in range(1, int(p["max_attempts"]) + 1):
            out["attempted"] += 1
            granted = await io.call("region_claim", region=region, purpose=f"storm {k}",
                                    timeout=0)
            if granted.get("success"):
                break
            if granted.get("error") != "region_conflict":
                raise RuntimeError(f"region_claim {region} failed: {granted.get('message')}")
            out["refused"] += 1
            suggestion = granted.get("suggestion_region")
            if suggestion and out["refused"] - refused_before > int(p["patience"]):
                region = suggestion
                continue
            wait = float(p["backoff"]) * min(attempt, BACKOFF_CAP)
            await io.sleep(wait * (0.5 + float(rng.random())))
        if not granted.get("success"):
            out["abandoned"] += 1
            continue
        out["granted"] += 1
        latencies.append(io.now - first)
        record: list[Any] = [io.now, None, granted["region"]]
        held.append(record)
        wrote = await io.call("builder_place_tiles", region=granted["region"],
                              tiles=int(p["tile"]))
        out["writes_ok" if wrote.get("success") else "writes_refused"] += 1
        if k == claims - 1:
            break  # the last claim is kept
        await io.sleep(float(p["hold"]))
        record[1] = io.now  # before the release is sent: never after it took effect
        await io.call("region_release", claim_id=granted["claim_id"])


async def _claimed_unanswered(agent: Participant, last: dict[str, Any], grid: int) -> None:
    """Restarted after a crash that took the answer to its ``last`` call: a claim the
    regions granted it then is in the world, and is that call's answer (so it is not
    claimed a second time). Its other claims are those its journal was told of."""
    if last["tool"] != "region_claim":
        return  # a write or a release made again does no harm
    held = await agent.call("region_query", region={"x": 0, "y": 0, "width": grid,
                                                    "height": grid})
    known = {str((c.get("answer") or {}).get("claim_id")) for c in agent.params["journal"]}
    for claim in held.get("claims", ()):
        if claim["agent_id"] == agent.name and claim["claim_id"] not in known:
            last.update(answered=agent.now, answer={
                "success": True, "claim_id": claim["claim_id"], "agent_id": agent.name,
                "region": claim["bounds"], "exclusive": claim["exclusive"],
                "expires_at": claim["expires_at"], "conflicts": []})
            return


def overlaps_during(held: list[list[Any]]) -> int:
    """Pairs of claims overlapping in space whose [granted, released) times overlap."""
    spans = sorted((start, float("inf") if end is None else end, Rect.parse(bounds))
                   for start, end, bounds in held)
    return _overlapping(spans)


def overlaps_at_end(regions: list[Rect]) -> int:
    """Pairs of ``regions`` that share a cell."""
    return _overlapping([(0.0, float("inf"), r) for r in regions])


def _overlapping(spans: list[tuple[float, float, Rect]]) -> int:
    """Pairs of ``spans`` (sorted by start) overlapping in space and in time.

    Each is looked for among the spans still held when it starts (ends are exclusive)
    in the squares of a grid as wide as the widest span that it covers: the cost grows
    with the spans near it, not with all of them (a pass over every earlier span made
    a storm of 10,000 agents take minutes to score)."""
    side = max((max(r.width, r.height) for _, _, r in spans), default=1)
    squares: dict[tuple[int, int], list[int]] = {}
    found = 0
    for k, (start, _end, rect) in enumerate(spans):
        keys = [(i, j) for i in range(rect.x // side, (rect.x2 - 1) // side + 1)
                for j in range(rect.y // side, (rect.y2 - 1) // side + 1)]
        seen: set[int] = set()
        for key in keys:
            square = squares.setdefault(key, [])
            square[:] = [m for m in square if spans[m][1] > start]  # starts only grow
            for m in square:
                if m not in seen:
                    seen.add(m)
                    found += spans[m][2].overlaps(rect)
            square.append(k)
    return found


def _before_kill(simu: Simulation, sid: str, agent_id: str) -> list[dict[str, Any]]:
    """A resumed run: ``agent_id``'s calls of the script's tools before the kill, each one
    a kill left unanswered answered from what the log shows it did (if it did)."""
    image = simu.restored
    assert image is not None
    calls = [c for c in calls_before(simu, agent_id) if c["tool"] in _TOOLS]
    events = session_events(simu, sid, "region_claimed", "conflict_detected", "region_released")
    for call in calls:
        if call["answer"] is not None:
            continue
        end = call["until"] if call["until"] is not None else image.seq
        for e in events:
            if not call["seq"] < e["seq"] < end or e["agent_id"] != agent_id:
                continue
            answer: dict[str, Any] | None = None
            if call["tool"] == "region_claim" and e["event"] == "region_claimed":
                answer = {"success": True, "claim_id": e["claim_id"], "agent_id": agent_id,
                          "region": e["region"], "exclusive": e["exclusive"],
                          "expires_at": e["expires_at"], "conflicts": []}
            elif call["tool"] == "region_claim" and e["event"] == "conflict_detected":
                # refused; the suggestion went with the answer: none is known
                answer = {"success": False, "error": "region_conflict",
                          "message": "refused before the kill", "suggestion_region": None}
            elif call["tool"] == "region_release" and e["event"] == "region_released" \
                    and e["claim_id"] == call["args"].get("claim_id"):
                answer = {"success": True, "claim_id": e["claim_id"]}
            if answer is not None:
                call.update(answer=answer, answered=e["t"])
                break
    return calls


def run(simu: Simulation, *, agents: int, grid: int, claim_size: int, coordination_mode: str,
        rate: float, hold: float, claims_per_agent: int, patience: int, backoff: float,
        max_attempts: int) -> dict[str, Any]:
    if not 1 <= claim_size <= grid or rate <= 0 or claims_per_agent < 1 or max_attempts < 1:
        raise ParamError("need 1 <= claim_size <= grid, rate > 0, claims_per_agent >= 1 "
                         "and max_attempts >= 1")
    _, sid = host_session(simu, session_name="Conflict storm", grid_size=grid,
                          max_agents=agents, coordination_mode=coordination_mode)
    crew = [spawn(simu, sid, f"agent-{i + 1}", "builder", crew=agents, behaviour=_claimer,
                  grid=grid, claim_size=claim_size, rate=rate, hold=hold,
                  claims_per_agent=claims_per_agent, patience=patience, backoff=backoff,
                  max_attempts=max_attempts, tile=1 + i % 7, journal=[],
                  **({"before": _before_kill(simu, sid, f"agent-{i + 1}")}
                     if simu.restored is not None else {}))
            for i in range(agents)]
    simu.run(progress_of=lambda: (total(map(current, crew), "granted")
                                  + total(map(current, crew), "abandoned"))
             / (agents * claims_per_agent))
    crew = [current(a) for a in crew]  # after a crash, its last incarnation knows it all
    latencies = [t for a in crew for t in a.outcome.get("latencies", [])]
    held = [h for a in crew for h in a.outcome.get("held", [])]
    final = [c for c in simu.view(sid, canvas=False).claims if c.exclusive]
    attempted, refused = total(crew, "attempted"), total(crew, "refused")
    return {
        "session_id": sid, "attempted": attempted, "granted": total(crew, "granted"),
        "refused": refused, "abandoned": total(crew, "abandoned"),
        "conflict_rate": round(refused / attempted, 4) if attempted else 0.0,
        "latency_mean": round(mean(latencies), 4),
        "latency_p95": round(percentile(latencies, 95), 4),
        "latency_max": round(max(latencies, default=0.0), 4),
        "writes_ok": total(crew, "writes_ok"), "writes_refused": total(crew, "writes_refused"),
        "agents_with_claim": sum(1 for a in crew if a.outcome.get("granted", 0) > 0),
        "final_claims": len(final),
        "overlaps_at_end": overlaps_at_end([c.region for c in final]),
        "overlaps_during": overlaps_during(held),
    }


def check(summary: dict[str, Any]) -> bool:
    m, p = summary["metrics"], summary["params"]
    return bool(m["granted"] + m["refused"] == m["attempted"]
                and m["granted"] + m["abandoned"] == p["agents"] * p["claims_per_agent"]
                and 0.0 <= m["conflict_rate"] <= 1.0
                and _refusals_agree(summary)
                and m["overlaps_at_end"] == 0 and m["overlaps_during"] == 0
                and m["agents_with_claim"] == p["agents"]
                and summary["behaviour_errors"] == 0)


def _refusals_agree(summary: dict[str, Any]) -> bool:
    """The regions counted the refusals the agents saw. Under a fault plan a crash may
    take the answer to a claim the regions refused (the agent, restarted, asks again and
    counts that answer only): at most one uncounted refusal per crash."""
    counted, seen = summary["conflicts"], summary["metrics"]["refused"]
    crashed = (summary.get("faults") or {}).get("crashed", 0)
    return bool(seen <= counted <= seen + crashed)
