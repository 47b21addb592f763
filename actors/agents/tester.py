"""The tester: accepts test tasks, runs build_test against the blueprint, reports.

A test task names the region to test in ``payload["region"]`` (or as its own
region). Passed: reported completed with the score. Failed: reported failed with
the defects as ``[x, y, expected]`` cells, so the architect can order a repair.
Outcome: ``tests_run``, ``tests_passed``, ``defects_found``.
"""

from __future__ import annotations

from typing import Any

from barnraise.actors.agents.participant import Participant, accept_next
from barnraise.sim.canvas import Tile

__all__ = ["tester"]

TEST_TYPES = frozenset({"test", "review"})


async def _accept(agent: Participant, task: dict[str, Any]) -> dict[str, Any]:
    return await agent.call("task_accept", task_id=task["task_id"])


async def tester(agent: Participant) -> None:
    outcome = agent.outcome
    outcome.update(tests_run=0, tests_passed=0, defects_found=0)
    while True:
        task, accepted = await accept_next(agent, TEST_TYPES, _accept)
        if not accepted.get("success"):
            continue
        region = task.get("payload", {}).get("region") or task.get("region")
        result = await agent.call("build_test", region=region, max_defects=100_000)
        outcome["tests_run"] += 1
        if not result.get("success"):
            await agent.call("task_report", task_id=task["task_id"], status="failed",
                             message=f"build_test: {result.get('error')}")
            continue
        if result["passed"]:
            outcome["tests_passed"] += 1
            await agent.call("task_report", task_id=task["task_id"], status="completed",
                             result={"passed": True, "score": result["score"]})
            continue
        cells = [[d["x"], d["y"], int(Tile[str(d["expected"]).upper()])]
                 for d in result["defects"]]
        outcome["defects_found"] += len(cells)
        await agent.call("task_report", task_id=task["task_id"], status="failed",
                         result={"passed": False, "score": result["score"], "region": region,
                                 "defects": cells},
                         message=f"{len(cells)} wrong cells")
