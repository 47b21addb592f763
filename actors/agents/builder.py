"""The builder: accepts build tasks, claims, places tiles at a rate, reports.

Inputs (``agent.params``):

``blueprint``   the target tiles (numpy uint8 array): what to build in a task's region
``tile_rate``   tiles placed per simulated second (default 500)
``error_rate``  chance that a placed tile is wrong (default 0): seeded, per agent
``backoff``     seconds before retrying a claim that conflicted (default 1), jittered
``max_attempts`` claim attempts before the task is reported blocked (default 8)
``shader``      if set, a shader of that name is loaded over each region built
``cartridge``   if set, each region built is assembled into a cartridge named
                ``{cartridge}-{x}-{y}``
``built``       a resumed run's restored canvas (``barnraise.scenarios._kit.restored_canvas``):
                resuming (``agent.resuming``), a build starts at the first row of its
                region that differs from the blueprint there, where the stopped run's
                builder had got to (a builder cannot read the canvas itself)
``placed_at``   with ``built``: when the stopped run answered this builder's last row
                (from its log); a build resumed past its first row first waits what was
                left of that row's pace, so the rate holds across the stop

A repair task carries ``payload["cells"]``, a list of ``[x, y, tile]``: only those
cells are placed again. A task whose work raises (a refused write, say) is reported
failed with the error and the builder takes the next one. Outcome: ``tasks_done``,
``tasks_failed``, ``tiles_placed``, ``wrong_tiles``, ``claim_retries``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant, start_next

__all__ = ["BUILD_TYPES", "accept_with_backoff", "build_task", "builder", "load_artifacts",
           "rows_built"]

BUILD_TYPES = frozenset({"build", "assemble", "evolve", "migrate"})


async def builder(agent: Participant) -> None:
    params = agent.params
    outcome = agent.outcome
    outcome.update(tasks_done=0, tasks_failed=0, tiles_placed=0, wrong_tiles=0, claim_retries=0)
    while True:
        task = await start_next(agent, BUILD_TYPES, accept_with_backoff)
        try:
            artifacts = await build_task(agent, task, params)
        except Exception as exc:  # the delegator must hear of it; the builder goes on
            await agent.call("task_report", task_id=task["task_id"], status="failed",
                             message=f"{type(exc).__name__}: {exc}")
            outcome["tasks_failed"] += 1
            continue
        await agent.call("task_report", task_id=task["task_id"], status="completed",
                         artifacts=artifacts)
        outcome["tasks_done"] += 1


async def accept_with_backoff(agent: Participant, task: dict[str, Any]) -> dict[str, Any]:
    """Accept the task; on a region conflict wait (seeded backoff) and try again."""
    params = agent.params
    attempts = int(params.get("max_attempts", 8))
    backoff = float(params.get("backoff", 1.0))
    result: dict[str, Any] = {}
    for attempt in range(attempts):
        result = await agent.call("task_accept", task_id=task["task_id"])
        if result.get("error") != "region_conflict":
            return result
        agent.outcome["claim_retries"] += 1
        await agent.sleep(backoff * (attempt + 1) * (0.5 + float(agent.rng.random())))
    return result


def _wrong(tiles: list[int], error_rate: float, rng: np.random.Generator) -> int:
    """Turn a seeded share of ``tiles`` (codes, changed in place) into a different tile;
    how many. One draw per tile, as many as tiles, whatever the rate."""
    if error_rate <= 0 or not tiles:
        return 0
    draws = rng.random(len(tiles)).tolist()
    return _spoil(tiles, [i for i, draw in enumerate(draws) if draw < error_rate])


def _spoil(tiles: list[int], wrong: list[int]) -> int:
    """Turn the ``tiles`` at the indices ``wrong`` into another non-empty tile type than
    the intended one (types 1..7); how many."""
    for i in wrong:
        tiles[i] = tiles[i] % 7 + 1
    return len(wrong)


async def build_task(agent: Participant, task: dict[str, Any],
                     params: dict[str, Any]) -> list[dict[str, Any]]:
    """Build ``task`` (its region from the blueprint, or a repair's cells); the artifacts."""
    blueprint: np.ndarray[Any, Any] = params["blueprint"]
    rate = float(params.get("tile_rate", 500.0))
    error_rate = float(params.get("error_rate", 0.0))
    outcome = agent.outcome
    cells = task.get("payload", {}).get("cells")
    if cells:
        # a repair: only the cells a tester found wrong
        for x, y, tile in cells:
            value = [int(tile)]
            outcome["wrong_tiles"] += _wrong(value, error_rate, agent.rng)
            placed = await agent.call("builder_place_tile", tile_type=value[0], x=x, y=y)
            if not placed.get("success"):  # a cell the payload got wrong, say: the task fails
                raise RuntimeError(f"placing the tile at ({x}, {y}) failed: "
                                   f"{placed.get('message')}")
            outcome["tiles_placed"] += 1
        await agent.sleep(len(cells) / rate)
        return [{"type": "tile", "id": f"{task['task_id']}-repair", "count": len(cells)}]
    region = task["region"]
    x, y, width, height = region["x"], region["y"], region["width"], region["height"]
    done = rows_built(params.get("built"), blueprint, region) if agent.resuming else 0
    if done and params.get("placed_at") is not None:
        await agent.sleep(max(0.0, float(params["placed_at"]) + width / rate - agent.now))
    # The rows as lists, what the calls send anyway: one numpy call for the block, not
    # one a row, and no copy of the blueprint to spoil. A row past the blueprint's end
    # (not in the slice) is indexed as before, so it fails as before.
    first = y + done
    block = blueprint[first:y + height, x:x + width].tolist() if first >= 0 else []
    # The wrong tiles' draws for the whole block in one numpy call, not one a row (each
    # costs 1 to 3 us in a run, its code and data cold between two rows; the whole
    # kernel_build at grid 840 took 0.98 of the time). They are the same numbers, draw
    # for draw, as a row's own call took:
    # a PCG64 double is one step of the generator, and nothing else draws from this
    # builder's generator while it builds. A build that stops part way (a refused row,
    # a crash) steps the generator back to where drawing row by row would have left it:
    # a PCG64 steps on by any count modulo its period, so back as well, to the same
    # state (not its state saved first: reading it costs ~5 us a block in a run).
    rng = agent.rng
    bits = rng.bit_generator  # an actor's is a PCG64, which can be stepped on: see below
    span = len(block[0]) if block and error_rate > 0 and isinstance(bits, np.random.PCG64) \
        else 0
    # Of the block's draws, only where they fall under the rate (the wrong tiles, in
    # order; a couple a block at kernel_build's rate) reaches Python: not one float a
    # tile, nor a row's slice of them searched for its least. A sentinel past the end
    # keeps the row's test to one comparison.
    wrong = (rng.random(span * len(block)) < error_rate).nonzero()[0].tolist() if span \
        else []
    wrong.append(span * len(block))
    next_wrong = wrong[0]
    taken = 0  # how many of ``wrong`` earlier rows spoiled
    drawn = 0  # the rows whose draws drawing row by row would have taken so far
    try:
        for row in range(first, y + height):
            at = row - first
            tiles = block[at] if at < len(block) else blueprint[row, x:x + width].tolist()
            if span:
                drawn = at + 1
                if next_wrong < drawn * span:  # a wrong tile in this row
                    start, end = at * span, drawn * span
                    here: list[int] = []
                    while next_wrong < end:
                        here.append(next_wrong - start)
                        taken += 1
                        next_wrong = wrong[taken]
                    outcome["wrong_tiles"] += _spoil(tiles, here)
            else:
                outcome["wrong_tiles"] += _wrong(tiles, error_rate, rng)
            # made here for this call alone: sent as it is, not copied (Agent.call_fresh)
            placed = await agent.call_fresh("builder_place_tiles", {
                "tiles": [tiles], "region": {"x": x, "y": row, "width": width, "height": 1}})
            if not placed.get("success"):
                raise RuntimeError(f"placing row {row} failed: {placed.get('message')}")
            outcome["tiles_placed"] += width
            await agent.sleep(width / rate)
    finally:
        if span and drawn < len(block):
            assert isinstance(bits, np.random.PCG64)
            bits.advance((drawn - len(block)) * span)  # back by the draws not taken
    artifacts = [{"type": "tile", "id": f"{task['task_id']}-tiles", "count": width * height}]
    return artifacts + await load_artifacts(agent, region, params)


def rows_built(built: np.ndarray[Any, Any] | None, blueprint: np.ndarray[Any, Any],
               region: dict[str, int]) -> int:
    """How many of ``region``'s rows, from its top, equal ``blueprint`` on the canvas
    ``built`` (None: nothing built, 0): where a builder that writes a region row by row,
    in order, had got to when the run stopped."""
    if built is None:
        return 0
    x, y, width, height = (int(region[k]) for k in ("x", "y", "width", "height"))
    for row in range(height):
        if not np.array_equal(built[y + row, x:x + width], blueprint[y + row, x:x + width]):
            return row
    return height


async def load_artifacts(agent: Participant, region: dict[str, int],
                         params: dict[str, Any]) -> list[dict[str, Any]]:
    """The shader and cartridge ``params`` ask for over a built ``region`` (see above)."""
    artifacts: list[dict[str, Any]] = []
    x, y = region["x"], region["y"]
    shader = params.get("shader")
    if shader:
        loaded = await agent.call("builder_load_shader", region=region, shader_name=shader)
        if not loaded.get("success"):
            raise RuntimeError(f"loading shader {shader!r} failed: {loaded.get('message')}")
        artifacts.append({"type": "shader", "id": loaded["shader_id"]})
    cartridge = params.get("cartridge")
    if cartridge:
        made = await agent.call("builder_assemble_cartridge", region=region,
                                name=f"{cartridge}-{x}-{y}")
        if not made.get("success"):
            raise RuntimeError(f"assembling cartridge {cartridge!r} failed: "
                               f"{made.get('message')}")
        artifacts.append({"type": "cartridge", "id": made["cartridge_id"]})
    return artifacts
