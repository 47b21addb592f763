"""The architect: turns a blueprint into a plan, delegates it, repairs, declares done.

Inputs (``agent.params``):

``blueprint``  the target tiles (numpy uint8 array, grid x grid)
``block``      the side of the square blocks the canvas is cut into (default 50)
``builders``, ``testers``  the agent ids to delegate to
``strategy``   ``parallel`` (blocks dealt round-robin to the builders; independent
               tasks), ``sequential`` (one builder, one block at a time: the next
               block is delegated when this one's test has passed), or
               ``cluster`` (the design notes' writer/critic cluster: each block's build
               asks its builder, a
               :func:`~barnraise.actors.agents.critic.writer`, to refine a draft with a
               critic, a :func:`~barnraise.actors.agents.critic.critic_tester`, before it
               commits; then the block is tested as in the other strategies)
``threshold``, ``max_iterations``  the cluster's approval score (7) and rounds (3)
``max_repairs`` repairs and rebuilds after which the architect gives up (default
               :func:`repair_cap`: ten per block, at least 1000, so it follows the grid);
               reaching it sets ``outcome["gave_up"]`` and ends the build undone

Restarted after a crash (``agent.resuming``), it rebuilds what it knows from the
task queue (:func:`resume_plan`) and goes on.

The architect follows the build through the session's ``task_completed`` events
(``outcome["progress"]``: simulated time and tasks completed, one entry per event)
and decides on the task results the task queue sends it.

For every block with something to build there is a build task and a test task that
depends on it. A failed test brings a repair task (the wrong cells, as the payload)
and a new test that depends on it. A build or repair that fails (or cannot start)
leaves its test blocked for good, so the block is delegated again from scratch
(``rebuilds``). The build is done when every test has passed
and the canvas matches the blueprint; the architect then broadcasts ``build_done``.
Outcome: ``blocks``, ``repairs``, ``rebuilds``, ``tests_passed``, ``completion_percent``, ``done``,
``makespan`` (simulated seconds from the first delegation to the last test),
``max_repairs`` (the cap it worked to) and ``gave_up`` (True when it was reached),
``shaders_loaded`` and ``cartridges_assembled`` (the session's, at the end),
``progress``; with ``cluster`` also ``iterations`` (reviews per block, in block
order) and ``first_review_approval_rate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from barnraise.actors.agents.participant import Participant, results_read, wait_for
from barnraise.actors.base import WaitTimeout
from barnraise.sim.messages import Message

__all__ = ["ResumePlan", "architect", "finished_tasks", "plan_blocks", "repair_cap",
           "resume_plan"]


def repair_cap(blocks: int) -> int:
    """The repairs and rebuilds an architect orders before it gives up, by default.

    Ten per block, and never fewer than 1000 (the old fixed cap, which a default-size
    build never comes near): a 1200 x 1200 kernel build (1347 blocks, 1113 failed
    tests) was cut off at a fixed 1000, undone.
    """
    return max(1000, 10 * blocks)


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


async def finished_tasks(agent: Participant, open_ids: set[str]) -> list[dict[str, Any]]:
    """The records of the tasks in ``open_ids`` that have finished (completed, failed or
    cancelled), from the task queue: what their ``task_result`` letters would have said."""
    queue = await agent.call("task_get_queue", filter={"status": "all"})
    return [task for task in queue.get("tasks", ())
            if task["task_id"] in open_ids
            and task.get("status") in ("completed", "failed", "cancelled")]


def _result_or_progress(m: Message) -> bool:
    return m.message_type == "task_result" or m.content.get("event") == "task_completed"


@dataclass
class ResumePlan:
    """What a restarted architect learns from the task queue (see :func:`resume_plan`)."""

    start: float
    next_block: int
    #: When the last of its tests that had passed completed (None: none had).
    finished: float | None = None
    passed: int = 0
    repairs: int = 0
    rebuilds: int = 0
    rebuild: list[int] = field(default_factory=list)  # blocks to delegate afresh
    #: (block, build or repair task, "test" or "retest"): a build no test waits for yet
    retest: list[tuple[int, str, str]] = field(default_factory=list)
    repair: list[tuple[int, list[Any]]] = field(default_factory=list)  # (block, cells)


async def resume_plan(agent: Participant, blocks: list[dict[str, int]], waiting: dict[str, int],
                      builds: dict[str, tuple[int, str]], heard: set[str],
                      sequential: bool = False) -> ResumePlan:
    """Rebuild a restarted architect's state from the tasks it delegated (its resume hook).

    Per block: passed if a test of it completed; else its open test (pending, in
    progress, or waiting for a build that may still finish) goes back into
    ``waiting`` (and that build into ``builds``); else its newest build or repair,
    done or still to do (not failed, cancelled or blocked), has no test yet (the run
    stopped between the two delegations: delegate its test); else the newest test
    failed (order a repair of its defects) or died with its build, or none was ever
    delegated (delegate the block afresh).
    Sequential, the next block is delegated when every block begun has passed.
    ``heard`` gets every completed task.
    """
    queue = await agent.call("task_get_queue", filter={"status": "all"})
    mine = [t for t in queue.get("tasks", ()) if t.get("delegated_by") == agent.name]
    results_read(agent, mine)
    index = {_key(b): i for i, b in enumerate(blocks)}
    by_id = {t["task_id"]: t for t in mine}
    plan = ResumePlan(start=min((t["created_at"] for t in mine), default=agent.now),
                      next_block=0)
    tests: dict[int, list[dict[str, Any]]] = {}
    made: dict[int, list[dict[str, Any]]] = {}  # builds and repairs, by block
    started: set[int] = set()
    for t in mine:
        if t["status"] == "completed":
            heard.add(t["task_id"])
        if t["type"] == "test":
            i = index.get(_key(t.get("payload", {}).get("region") or {}))
            if i is not None:
                tests.setdefault(i, []).append(t)
                started.add(i)
        elif t.get("region") is not None and _key(t["region"]) in index:
            i = index[_key(t["region"])]
            started.add(i)
            made.setdefault(i, []).append(t)
            if t.get("payload", {}).get("cells"):
                plan.repairs += 1
            else:
                plan.rebuilds += 1
    plan.rebuilds = max(0, plan.rebuilds - len(started))
    # every block is due at once, but in sequential order only those begun and the next
    plan.next_block = (max(started, default=-1) + 1 if sequential else len(blocks))
    for i in range(plan.next_block):
        mine_i = sorted(tests.get(i, ()), key=lambda t: (t.get("completed_at") or math.inf,
                                                          t["created_at"]))
        if any(t["status"] == "completed" for t in mine_i):
            plan.passed += 1
            done_at = max(t["completed_at"] for t in mine_i if t["status"] == "completed")
            plan.finished = done_at if plan.finished is None else max(plan.finished, done_at)
            continue
        live = None
        for t in mine_i:
            deps = [by_id.get(d) for d in t.get("dependencies", ())]
            dead = any(d is not None and d["status"] in ("failed", "cancelled") for d in deps)
            if t["status"] in ("pending", "in_progress", "blocked") and not dead:
                live = t
                for d in deps:
                    if d is not None and d["status"] not in ("completed", "failed", "cancelled"):
                        builds[d["task_id"]] = (i, t["task_id"])
        newest = max(made.get(i, ()), key=lambda t: t["created_at"], default=None)
        if live is not None:
            waiting[live["task_id"]] = i
        elif newest is not None and newest["status"] in ("pending", "in_progress", "completed") \
                and not any(newest["task_id"] in t.get("dependencies", ()) for t in mine_i):
            repair = bool(newest.get("payload", {}).get("cells"))
            plan.retest.append((i, newest["task_id"], "retest" if repair else "test"))
        elif mine_i and mine_i[-1]["status"] == "failed":
            plan.repair.append((i, mine_i[-1].get("result", {}).get("defects", [])))
        else:
            plan.rebuild.append(i)
    if sequential and plan.passed == plan.next_block < len(blocks):
        # every block begun has passed (or none was begun): the next one is due
        plan.rebuild.append(plan.next_block)
        plan.next_block += 1
    return plan


def _key(region: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(region.get(k) for k in ("x", "y", "width", "height"))


async def architect(agent: Participant) -> None:
    params = agent.params
    blueprint: np.ndarray[Any, Any] = params["blueprint"]
    builders: list[str] = list(params["builders"])
    testers: list[str] = list(params["testers"])
    strategy = params.get("strategy", "parallel")
    outcome = agent.outcome
    blocks = plan_blocks(blueprint, int(params.get("block", 50)))
    max_repairs = int(params.get("max_repairs") or repair_cap(len(blocks)))
    outcome.update(blocks=len(blocks), repairs=0, rebuilds=0, tests_passed=0, done=False,
                   strategy=strategy, progress=[], max_repairs=max_repairs, gave_up=False)
    first_approved: list[bool] = []
    if strategy == "cluster":
        outcome.update(iterations=[0] * len(blocks), first_review_approval_rate=None)
    watching = await agent.call("a2a_subscribe", event_type="task_completed")
    if not watching.get("success"):
        raise RuntimeError(f"cannot follow the session's events: {watching.get('message')}")
    start = agent.now

    # test task id -> block index; build or repair task id -> (block index, its test)
    waiting: dict[str, int] = {}
    builds: dict[str, tuple[int, str]] = {}

    def builder_for(i: int) -> str:
        return builders[0] if strategy == "sequential" else builders[i % len(builders)]

    async def delegate_block(i: int) -> None:
        region = blocks[i]
        payload: dict[str, Any] = {}
        if strategy == "cluster":
            payload = {"mode": "refine", "critic": testers[i % len(testers)],
                       "threshold": float(params.get("threshold", 7.0)),
                       "max_iterations": int(params.get("max_iterations", 3))}
        build = await agent.call("task_delegate", target_agent_id=builder_for(i),
                                 task_type="build", region=region, payload=payload,
                                 description=f"build block {i}")
        await delegate_test(i, build["task_id"], "test")

    async def delegate_test(i: int, build_id: str, what: str) -> None:
        test = await agent.call(
            "task_delegate", target_agent_id=testers[i % len(testers)],
            task_type="test", dependencies=[build_id], payload={"region": blocks[i]},
            priority="medium" if what == "test" else "high", description=f"{what} block {i}")
        waiting[test["task_id"]] = i
        builds[build_id] = (i, test["task_id"])

    # Sequential: one block at a time, the next delegated once this one's test has
    # passed (repairs included). Task dependencies cannot say "after the block
    # passes": a failed test would block the next build for good.
    async def order_repair(i: int, cells: list[Any]) -> None:
        outcome["repairs"] += 1
        repair = await agent.call(
            "task_delegate", target_agent_id=builder_for(i),
            task_type="build", region=blocks[i], payload={"cells": cells}, priority="high",
            description=f"repair block {i}: {len(cells)} cells")
        await delegate_test(i, repair["task_id"], "retest")

    heard: set[str] = set()  # tasks whose task_completed event has come
    end: float | None = None  # when the build ended, if not when the loop below ends
    if agent.resuming:
        # Restarted after a crash: what was delegated, passed and still open is in
        # the task queue, not in memory (see resume_plan).
        plan = await resume_plan(agent, blocks, waiting, builds, heard,
                                 sequential=strategy == "sequential")
        start = plan.start
        next_block = plan.next_block
        outcome.update(repairs=plan.repairs, rebuilds=plan.rebuilds,
                       tests_passed=plan.passed)
        if heard:  # where the build stood (an entry stands for tasks completed: none yet)
            outcome["progress"].append([round(agent.now, 6), len(heard)])
        for i in plan.rebuild:
            await delegate_block(i)
        for i, cells in plan.repair:
            await order_repair(i, cells)
        for i, build_id, what in plan.retest:
            await delegate_test(i, build_id, what)
        if not waiting and not builds:
            # Every test had passed before the run stopped: the build ended then.
            end = plan.finished
    else:
        next_block = 1 if strategy == "sequential" else len(blocks)
        for i in range(min(next_block, len(blocks))):
            await delegate_block(i)

    # Under faults a result may be lost: with none come for a while, the architect
    # reads the results of its open tasks from the task queue instead. A result
    # heard twice (a duplicate, or read after it came) counts once: each is taken
    # out of ``waiting`` / ``builds`` when first heard.
    faults = agent.dispatcher.faults
    poll = None if faults is None else 4 * faults.retry
    backlog: list[dict[str, Any]] = []
    while waiting:
        if backlog:
            result = backlog.pop(0)
        else:
            # Every result comes here, builds' too: left unread they would fill the
            # stash (at 1,000 agents, 509 of them ended as dead letters).
            try:
                message = await wait_for(_result_or_progress, "a test result", timeout=poll)
            except WaitTimeout:
                backlog.extend(await finished_tasks(agent, {*waiting, *builds}))
                continue
            result = message.content
            if message.message_type != "task_result":
                if result.get("task_id") not in heard:
                    heard.add(str(result.get("task_id")))
                    outcome["progress"].append([round(agent.now, 6), len(heard)])
                continue
        if result.get("task_id") in builds:
            index, test_id = builds.pop(result["task_id"])
            record = result.get("result") or {}
            if result["status"] == "completed":
                if strategy == "cluster" and "iterations" in record:
                    outcome["iterations"][index] = int(record["iterations"])
                    first_approved.append(bool(record.get("first_review_approved")))
                continue
            # The build failed (or could not start): its test is blocked for good
            # and will never report. Build the block again, with a new test.
            waiting.pop(test_id, None)
            if outcome["repairs"] + outcome["rebuilds"] >= max_repairs:
                outcome["gave_up"] = True
                break
            outcome["rebuilds"] += 1
            await delegate_block(index)
            continue
        if result.get("task_id") not in waiting:
            continue
        index = waiting.pop(result["task_id"])
        if result["status"] == "completed":
            outcome["tests_passed"] += 1
            if next_block < len(blocks):
                await delegate_block(next_block)
                next_block += 1
            continue
        if outcome["repairs"] + outcome["rebuilds"] >= max_repairs:
            outcome["gave_up"] = True
            break
        await order_repair(index, result.get("result", {}).get("defects", []))

    outcome["makespan"] = round((agent.now if end is None else end) - start, 6)
    if strategy == "cluster":
        outcome["first_review_approval_rate"] = (
            round(sum(first_approved) / len(first_approved), 4) if first_approved else None)
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
