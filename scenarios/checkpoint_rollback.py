"""Checkpoints enable rollback: build, checkpoint, build more, roll back, verify.

Each builder claims its own ``band`` x ``band`` column of the grid, places
``before`` rows of seeded tiles and loads a shader; at the barrier ``built`` the
architect takes a checkpoint, and lets them go on (barrier ``checkpointed``). Each
builder then places ``after`` more rows, starting ``overlap`` rows above where it
stopped (so it rewrites some of its own tiles as well as adding new ones), and
loads a second shader. At the barrier ``modified`` the architect rolls back to
the checkpoint; every builder is told so (a ``rollback`` status update).

Parameters: builders, band, before, after, overlap.
Success: the checkpoint counted the tiles and shaders made before it; the
rollback restored exactly those counts and reported lost exactly the cells the
builders changed afterwards and the shaders they loaded afterwards; the canvas
equals the checkpointed canvas (and what the builders placed before it), the
session's tiles_placed is back to its value at the checkpoint, and every builder
heard of the rollback.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant
from barnraise.actors.stored.run import StoredRun
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, Bound, ParamError
from barnraise.scenarios._kit import PATIENCE, box, host_session, mark, seeded_tiles, spawn

NAME = "checkpoint_rollback"
PARAMS: dict[str, Any] = {"builders": 2, "band": 24, "before": 12, "after": 8, "overlap": 4}
#: What each parameter may be, checked before the run (``barnraise scenarios checkpoint_rollback``).
BOUNDS = {"builders": COUNT, "band": GRID, "before": Bound(low=0, high=4096),
          "after": Bound(low=0, high=4096), "overlap": Bound(low=0, high=4096)}
ARCHITECT = "architect-1"
#: A realtime run resumes from where the stopped one had got to: the checkpoint taken or
#: not, the rollback made or not, each builder's claim and first rows (``_resume_hints``);
#: every agent skips what was done, and a builder that had not heard of a rollback made
#: before the kill is told by the architect.
RESUMABLE = True


async def _barrier(agent: Participant, name: str) -> bool:
    entered = await agent.call("a2a_barrier_enter", barrier_id=name, expected_count=agent.crew,
                               timeout=PATIENCE, call_timeout=None)
    mark(agent, f"barrier {name}", released=bool(entered.get("released")))
    return bool(entered.get("released"))


async def band_builder(agent: Participant) -> None:
    """Build, wait for the checkpoint, build over part of it, hear of the rollback.

    In a resumed run (``params["resume"]``, see :func:`_resume_hints`) it skips what the
    stopped run had done: its claim, its first rows (written in one call: there or not),
    the barriers already passed. Its tiles come from its own seeded stream, so it draws
    both phases again to know them; writing its second rows or loading a shader again
    puts back what is already there.
    """
    params = agent.params
    hints: dict[str, Any] = params.get("resume") or {}
    stage = hints.get("stage", "build")
    region: dict[str, int] = params["region"]
    before, after, overlap = int(params["before"]), int(params["after"]), int(params["overlap"])
    outcome = agent.outcome
    x, width = region["x"], region["width"]
    mine = np.zeros((region["height"], width), dtype=np.uint8)  # my band as I wrote it
    if not hints.get("claimed"):
        claim = await agent.call("region_claim", region=region, purpose="band", timeout=0)
        if not claim.get("success"):
            mark(agent, "claim_refused", error=claim.get("error"))
            return
    phase1 = seeded_tiles(agent.rng, before, width, empty=0.25, draw_dtype=np.int64)
    if not hints.get("wrote"):
        await agent.call("builder_place_tiles", region=box(x, 0, width, before),
                         tiles=phase1.tolist())
    mine[:before] = phase1
    shader = await agent.call("builder_load_shader", region=region,
                              shader_name=f"{agent.agent_name}-base")
    outcome.update(before=mine.copy(), tiles_before=int(np.count_nonzero(phase1)),
                   shaders_before=int(bool(shader.get("success"))))
    mark(agent, "phase 1 built", tiles=outcome["tiles_before"])
    if stage == "build" and (not await _barrier(agent, "built")
                             or not await _barrier(agent, "checkpointed")):
        return
    start = before - overlap
    phase2 = seeded_tiles(agent.rng, after, width, empty=0.25, draw_dtype=np.int64)
    if stage != "done":
        await agent.call("builder_place_tiles", region=box(x, start, width, after),
                         tiles=phase2.tolist())
        shader = await agent.call("builder_load_shader", region=region,
                                  shader_name=f"{agent.agent_name}-extra")
    changed = int(np.count_nonzero(mine[start:start + after] != phase2))
    mine[start:start + after] = phase2
    outcome.update(changed_after=changed, shaders_after=int(bool(shader.get("success"))),
                   tiles_after=int(np.count_nonzero(phase2)))
    mark(agent, "phase 2 built", changed=changed)
    if stage != "done" and not await _barrier(agent, "modified"):
        return
    if hints.get("heard"):  # the stopped run's incarnation heard it
        outcome["rollback_heard"] = hints["heard"]
        return
    notice = await agent.receive(lambda m: m.content.get("event") == "rollback",
                                 timeout=PATIENCE, description="the rollback notice")
    outcome["rollback_heard"] = notice.content.get("checkpoint_id")
    mark(agent, "rollback heard")


async def rollback_architect(agent: Participant) -> None:
    """Checkpoint once the builders are done, roll back once they have changed things.

    In a resumed run it takes the checkpoint the stopped run took, if it took one, and
    the rollback it made, if it made it; then it tells each builder that had not heard
    of that rollback (the notice went with the stopped process)."""
    outcome = agent.outcome
    hints: dict[str, Any] = agent.params.get("resume") or {}
    stage = hints.get("stage", "build")
    if stage == "build":
        if not await _barrier(agent, "built"):
            return
        checkpoint = await agent.call("build_checkpoint", checkpoint_name="before-changes",
                                      description="phase 1 built")
    else:
        checkpoint = {"success": True, **hints["checkpoint"]}
    outcome["checkpoint"] = {k: checkpoint.get(k) for k in (
        "success", "checkpoint_id", "contents", "size_kb", "include")}
    mark(agent, "checkpointed", contents=checkpoint.get("contents"))
    if stage == "done":
        done = hints["rollback"]
        outcome["rollback"] = {"success": True, "rolled_back_to": done["checkpoint_id"],
                               "restored": dict(checkpoint["contents"]),
                               "lost": dict(done["lost_items"])}
        for builder in hints["unheard"]:
            await agent.call("a2a_send_message", to_agent=builder,
                             message_type="status_update",
                             content={"event": "rollback",
                                      "checkpoint_id": done["checkpoint_id"]})
        return
    if stage == "build" and not await _barrier(agent, "checkpointed"):
        return
    if not await _barrier(agent, "modified"):
        return
    before = await agent.call("session_get_state", include=["progress"])
    outcome["progress_before_rollback"] = before.get("state", {}).get("progress")
    rollback = await agent.call("build_rollback", checkpoint_id=checkpoint["checkpoint_id"])
    outcome["rollback"] = {k: rollback.get(k) for k in (
        "success", "rolled_back_to", "restored", "lost")}
    mark(agent, "rolled back", lost=rollback.get("lost"))
    after = await agent.call("session_get_state", include=["progress"])
    outcome["progress_after_rollback"] = after.get("state", {}).get("progress")


def run(simu: Simulation, *, builders: int, band: int, before: int, after: int,
        overlap: int) -> dict[str, Any]:
    if builders < 1 or not 0 < before <= band or not 0 <= overlap <= before:
        raise ParamError("need builders >= 1 and 0 < before <= band and 0 <= overlap <= before")
    if before - overlap + after > band:
        raise ParamError(f"the rows after the checkpoint ({after}, from row "
                         f"{before - overlap}) do not fit in the band of {band}")
    grid = builders * band
    crew = builders + 1
    _, sid = host_session(simu, session_name="Checkpoint and Rollback", grid_size=grid,
                          max_agents=crew)
    names = [f"builder-{i + 1}" for i in range(builders)]
    hints = _resume_hints(simu, sid, names)
    boss = spawn(simu, sid, ARCHITECT, "architect", crew=crew, behaviour=rollback_architect,
                 **({"resume": hints["architect"]} if hints else {}))
    team = [spawn(simu, sid, name, "builder", crew=crew, behaviour=band_builder,
                  region=box(i * band, 0, band, band), before=before, after=after,
                  overlap=overlap, **({"resume": hints[name]} if hints else {}))
            for i, name in enumerate(names)]
    simu.run()
    checkpoint = boss.outcome.get("checkpoint", {})
    rollback = boss.outcome.get("rollback", {})
    world = simu.view(sid)
    canvas = world.canvas
    assert canvas is not None
    expected = np.zeros_like(canvas)
    for i, agent in enumerate(team):
        if "before" in agent.outcome:
            expected[:band, i * band:(i + 1) * band] = agent.outcome["before"]
    stored = world.checkpoint(str(checkpoint.get("checkpoint_id")))
    checkpointed = None if stored is None else stored.tiles()
    heard = [a.outcome.get("rollback_heard") for a in team]
    return {
        "session_id": sid,
        "checkpoint_id": checkpoint.get("checkpoint_id"),
        "checkpoint_contents": checkpoint.get("contents"),
        "restored": rollback.get("restored"),
        "lost": rollback.get("lost"),
        "tiles_before": sum(a.outcome.get("tiles_before", 0) for a in team),
        "shaders_before": sum(a.outcome.get("shaders_before", 0) for a in team),
        "changed_after": sum(a.outcome.get("changed_after", 0) for a in team),
        "shaders_after": sum(a.outcome.get("shaders_after", 0) for a in team),
        "tiles_after": sum(a.outcome.get("tiles_after", 0) for a in team),
        "tiles_placed_before_rollback": (boss.outcome.get("progress_before_rollback")
                                         or {}).get("tiles_placed"),
        "canvas_equals_checkpoint": checkpointed is not None
        and bool(np.array_equal(canvas, checkpointed)),
        "canvas_equals_phase1": bool(np.array_equal(canvas, expected)),
        "rollback_heard": sum(1 for h in heard if h and h == checkpoint.get("checkpoint_id")),
        "builders": builders,
    }


def _resume_hints(simu: Simulation, sid: str, builders: list[str]) -> dict[str, Any] | None:
    """In a resumed run, where the stopped one had got to, for each agent (None: not a
    resumed run, or the session is new): its stage (``build``: no checkpoint yet;
    ``changes``: checkpoint taken, no rollback; ``done``: rolled back), the checkpoint's
    index entry, the rollback's event, and per builder whether it held its claim, had
    written its first rows (its tile count) and had heard of the rollback."""
    image = simu.restored
    if image is None or sid not in image.sessions or simu.store is None:
        return None
    session = image.sessions[sid]
    checkpoint = next((e for e in session.checkpoints.values()
                       if e.get("checkpoint_name") == "before-changes"), None)
    log = StoredRun(simu.store.path)
    rollback = next((e["content"] for e in log.entries(type="rollback", kind="event")
                     if e["seq"] < image.seq), None)
    heard: dict[str, str] = {}
    for r in log.records(types=["status_update"]):
        if r.seq >= image.seq:
            break
        body = r.content_obj()
        if r.recipient in builders and isinstance(body, dict) and body.get("event") == "rollback":
            heard[r.recipient] = str(body.get("checkpoint_id"))
    stage = "build" if checkpoint is None else "changes" if rollback is None else "done"
    regions = session.regions
    claimed = set() if regions is None else {c["agent_id"] for c in regions.claims.values()}
    wrote = {} if regions is None else regions.tiles_by_agent
    out: dict[str, Any] = {"architect": {
        "stage": stage, "checkpoint": checkpoint, "rollback": rollback,
        "unheard": [b for b in builders if b not in heard]}}
    for name in builders:
        out[name] = {"stage": stage, "claimed": name in claimed,
                     "wrote": wrote.get(name, 0) > 0, "heard": heard.get(name)}
    return out


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    contents, restored, lost = m["checkpoint_contents"], m["restored"], m["lost"]
    if not (contents and restored and lost):
        return False
    return bool(contents["tiles"] == restored["tiles"] == m["tiles_before"]
                and contents["shaders"] == restored["shaders"] == m["shaders_before"]
                and lost["tiles"] == m["changed_after"] and lost["shaders"] == m["shaders_after"]
                and m["changed_after"] > 0 and m["canvas_equals_checkpoint"]
                and m["canvas_equals_phase1"] and summary["tiles_placed"] == m["tiles_before"]
                and m["rollback_heard"] == m["builders"] and summary["behaviour_errors"] == 0)
