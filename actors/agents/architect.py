"""The architect: turns a blueprint into a plan, delegates it, repairs, declares done.

Inputs (``agent.params``):

``blueprint``  the target tiles (numpy uint8 array, grid x grid)
``block``      the side of the square blocks the canvas is cut into (default 50)
``builders``, ``testers``  the agent ids to delegate to
``strategy``   ``parallel`` (blocks dealt round-robin to the builders; independent
               tasks), ``sequential`` (one builder, each block's build depends on
               the previous block's test), or ``cluster`` (parallel, and every
               block is tested twice by different testers: a writer/critic pair)
``max_repairs`` repairs after which the architect gives up (default 1000)

For every block with something to build there is a build task and a test task that
depends on it. A failed test brings a repair task (the wrong cells, as the payload)
and a new test that depends on it. The build is done when every test has passed
and the canvas matches the blueprint; the architect then broadcasts ``build_done``.
Outcome: ``blocks``, ``repairs``, ``tests_passed``, ``completion_percent``, ``done``,
``makespan`` (simulated seconds from the first delegation to the last test),
``shaders_loaded`` and ``cartridges_assembled`` (the session's, at the end).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from actors.agents.participant import Participant

__all__ = ["architect", "plan_blocks"]


def plan_blocks(blueprint: np.ndarray[Any, Any], block: int) -> list[dict[str, int]]:
    """Square blocks (clipped at the edges) that hold at least one tile to build."""
    size_y, size_x = blueprint.shape
    blocks = []
    for y in range(0, size_y, block):
        for x in range(0, size_x, block):
            h, w = min(block, size_y - y), min(block, size_x - x)
            if blueprint[y:y + h, x:x + w].any():
                blocks.append({"x": x, "y": y, "width": w, "height": h})
    return blocks


async def architect(agent: Participant) -> None:
    params = agent.params
    blueprint: np.ndarray[Any, Any] = params["blueprint"]
    builders: list[str] = list(params["builders"])
    testers: list[str] = list(params["testers"])
    strategy = params.get("strategy", "parallel")
    max_repairs = int(params.get("max_repairs", 1000))
    outcome = agent.outcome
    blocks = plan_blocks(blueprint, int(params.get("block", 50)))
    outcome.update(blocks=len(blocks), repairs=0, tests_passed=0, done=False, strategy=strategy)
    start = agent.now

    # test task id -> (block index, how many more passes the block needs)
    waiting: dict[str, int] = {}
    previous_test: str | None = None
    for i, region in enumerate(blocks):
        who = builders[0] if strategy == "sequential" else builders[i % len(builders)]
        depends = [previous_test] if strategy == "sequential" and previous_test else []
        build = await agent.call("task_delegate", target_agent_id=who, task_type="build",
                                 region=region, dependencies=depends,
                                 description=f"build block {i}")
        checks = 2 if strategy == "cluster" and len(testers) > 1 else 1
        for k in range(checks):
            test = await agent.call(
                "task_delegate", target_agent_id=testers[(i + k) % len(testers)],
                task_type="test", dependencies=[build["task_id"]],
                payload={"region": region}, description=f"test block {i}")
            waiting[test["task_id"]] = i
            previous_test = test["task_id"]

    while waiting:
        # Every result comes here, builds' too: left unread they would fill the
        # stash (at 1,000 agents, 509 of them ended as dead letters).
        message = await agent.receive(message_type="task_result",
                                      description="a test result")
        result = message.content
        if result.get("task_id") not in waiting:
            continue
        index = waiting.pop(result["task_id"])
        if result["status"] == "completed":
            outcome["tests_passed"] += 1
            continue
        if outcome["repairs"] >= max_repairs:
            break
        outcome["repairs"] += 1
        cells = result.get("result", {}).get("defects", [])
        region = blocks[index]
        repair = await agent.call(
            "task_delegate", target_agent_id=builders[index % len(builders)],
            task_type="build", region=region, payload={"cells": cells}, priority="high",
            description=f"repair block {index}: {len(cells)} cells")
        test = await agent.call(
            "task_delegate", target_agent_id=testers[index % len(testers)], task_type="test",
            dependencies=[repair["task_id"]], payload={"region": region}, priority="high",
            description=f"retest block {index}")
        waiting[test["task_id"]] = index

    outcome["makespan"] = round(agent.now - start, 6)
    state = await agent.call("session_get_state", include=["progress"])
    progress = state["state"]["progress"]
    completion = progress["completion_percent"]
    outcome["completion_percent"] = completion
    outcome["shaders_loaded"] = progress["shaders_loaded"]
    outcome["cartridges_assembled"] = progress["cartridges_assembled"]
    outcome["done"] = not waiting and completion == 100.0
    if outcome["done"]:
        await agent.call("a2a_broadcast", content={"event": "build_done",
                                                    "repairs": outcome["repairs"]})
