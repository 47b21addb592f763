"""Flow 2: an architect delegates "build kernel", then on its result "test kernel".

The architect delegates one build task over a ``size`` x ``size`` region of a
seeded kernel blueprint to the builder and waits for its ``task_result``. On
that result it delegates a test task over the same region to the tester and
waits again. The builder (the shipped role behaviour) accepts, which claims the
region, places the tiles at ``tile_rate`` tiles per simulated second with a
seeded share ``error_rate`` of them wrong, and reports completed; the tester
accepts, runs ``build_test`` and reports passed or failed with the defects.

Parameters: size, tile_rate, error_rate.
Success: for both tasks the trace shows delegate -> accept -> complete -> notify
(the ``task_result`` delivered to the architect) in that order, the test task is
delegated only after the build's result arrived, and the test passed (so with a
non-zero error rate the check fails: the tester found the wrong tiles).

Resumed after a kill (``barnraise resume``, realtime), the architect takes back the
tasks it had delegated from the task queue instead of delegating them again, and
reads a result that came before the kill from the task's record; a result it
read there stands for the ``notify`` step (the queue's answer that carried it).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

from barnraise.actors.agents.participant import FINISHED, Participant, my_delegations
from barnraise.actors.base import WaitTimeout
from barnraise.actors.world import Simulation
from barnraise.scenarios import FRACTION, GRID, RATE, ParamError
from barnraise.scenarios._kit import (
    box,
    current,
    deliveries,
    host_session,
    kernel_blueprint,
    mark,
    rng_for,
    session_events,
    spawn,
)
from barnraise.sim.messages import Message

NAME = "delegation_chain"
PARAMS: dict[str, Any] = {"size": 40, "tile_rate": 800.0, "error_rate": 0.0}
#: What each parameter may be, checked before the run (``barnraise scenarios delegation_chain``).
BOUNDS = {"size": GRID, "tile_rate": RATE, "error_rate": FRACTION}
#: A realtime run resumes by running this script again on the restored world: the
#: architect takes its delegated tasks (and any result) back from the task queue,
#: the builder and tester their requeued work; each task is done once.
RESUMABLE = True
ARCHITECT, BUILDER, TESTER = "architect-1", "builder-1", "tester-1"
STEPS = ("delegate", "accept", "complete", "notify")


def _result_of(task_id: str) -> Callable[[Message], bool]:
    def match(message: Message) -> bool:
        return (message.message_type == "task_result"
                and message.content.get("task_id") == task_id)
    return match


async def chain_architect(agent: Participant) -> None:
    """Delegate the build; on its result delegate the test; keep both results.

    Restarted after a crash, each stage's task is the one delegated before it, if
    any, and its result, if it finished, is read from the queue."""
    region = agent.params["region"]
    outcome = agent.outcome
    outcome["tasks"] = {}
    stages: list[tuple[str, str, str, dict[str, Any]]] = [
        ("build", BUILDER, "build kernel", {}),
        ("test", TESTER, "test kernel", {"region": region})]
    before = {t["type"]: t for t in await my_delegations(agent)} if agent.resuming else {}
    for kind, who, description, payload in stages:
        earlier = before.get(kind)
        if earlier is None:
            delegated = await agent.call("task_delegate", target_agent_id=who, task_type=kind,
                                         region=region if kind == "build" else None,
                                         payload=payload, description=description)
            if not delegated.get("success"):
                mark(agent, "delegate_failed", task=kind, error=delegated.get("error"))
                return
            task_id = delegated["task_id"]
            mark(agent, "delegated", task=kind, task_id=task_id, to=who)
        else:
            task_id = earlier["task_id"]
            mark(agent, "taken_back", task=kind, task_id=task_id, status=earlier["status"])
        outcome["tasks"][kind] = task_id
        if earlier is not None and earlier["status"] in FINISHED:
            result = {"status": earlier["status"], "result": earlier["result"],
                      "reported_by": earlier["assigned_to"]}
        else:
            result = await _result(agent, task_id, kind)
        outcome[kind] = {"status": result["status"], "result": result.get("result", {}),
                         "reported_by": result.get("reported_by")}
        mark(agent, "result", task=kind, status=result["status"])
        if result["status"] != "completed":
            return


async def _result(agent: Participant, task_id: str, kind: str) -> dict[str, Any]:
    """The task's ``task_result`` letter. Under a fault plan the letter may be lost: with
    none come for ``4 * retry`` seconds, the task's record is read from the task queue
    (as the architect does), and a finished one's result is the one its letter had."""
    faults = agent.dispatcher.faults
    poll = None if faults is None else 4 * faults.retry
    while True:
        try:
            message = await agent.receive(_result_of(task_id), timeout=poll,
                                          description=f"the {kind} result")
        except WaitTimeout:
            done = next((t for t in await my_delegations(agent)
                         if t["task_id"] == task_id and t["status"] in FINISHED), None)
            if done is not None:
                return {"status": done["status"], "result": done["result"],
                        "reported_by": done["assigned_to"]}
            continue
        return dict(message.content)


def _chain(simu: Simulation, sid: str, task_id: str) -> dict[str, int]:
    """Trace positions (seq) of each step of one task; -1 for a step that never came."""
    seqs = dict.fromkeys(STEPS, -1)
    names = {"task_created": "delegate", "task_accepted": "accept",
             "task_completed": "complete"}
    for event in session_events(simu, sid, *names):
        if event["task_id"] == task_id and seqs[names[event["event"]]] < 0:
            seqs[names[event["event"]]] = event["seq"]
    for note in deliveries(simu, ARCHITECT, "task_result"):
        if note["content"].get("task_id") == task_id and seqs["notify"] < 0:
            seqs["notify"] = note["seq"]
    if seqs["notify"] < 0:
        # Finished before a kill, its result not yet sent, or its letter lost to a fault
        # plan: the architect read it in the task queue's answer.
        for note in deliveries(simu, ARCHITECT, "coordination_response"):
            if note["from"] == "tasks" and any(
                    t.get("task_id") == task_id and t.get("status") in FINISHED
                    for t in note["content"].get("tasks", ())):
                seqs["notify"] = note["seq"]
                break
    return seqs


def run(simu: Simulation, *, size: int, tile_rate: float, error_rate: float) -> dict[str, Any]:
    if size < 1:
        raise ParamError(f"size must be at least 1, got {size}")
    blueprint = kernel_blueprint(size, rng_for(simu, "blueprint"))
    _, sid = host_session(simu, session_name="Delegation Chain", grid_size=size,
                          max_agents=3, blueprint=blueprint.tolist())
    region = box(0, 0, size, size)
    architect = spawn(simu, sid, ARCHITECT, "architect", crew=3, behaviour=chain_architect,
                      region=region)
    builder = spawn(simu, sid, BUILDER, "builder", crew=3, blueprint=blueprint,
                    tile_rate=tile_rate, error_rate=error_rate)
    tester = spawn(simu, sid, TESTER, "tester", crew=3)
    simu.run()
    architect = current(architect)  # after a crash, its last incarnation (its tasks taken back)
    tasks: dict[str, str] = architect.outcome.get("tasks", {})
    chains = {kind: _chain(simu, sid, task_id) for kind, task_id in tasks.items()}
    ordered = {kind: all(0 <= seqs[a] < seqs[b] for a, b in pairwise(STEPS))
               for kind, seqs in chains.items()}
    build, test = chains.get("build"), chains.get("test")
    test_result = architect.outcome.get("test", {})
    return {
        "session_id": sid,
        "tasks": tasks,
        "chain": chains,
        "chain_in_order": ordered,
        # the test was delegated only once the build's result had reached the architect
        "test_after_build": bool(build and test and 0 <= build["notify"] < test["delegate"]),
        "build_status": architect.outcome.get("build", {}).get("status"),
        "test_status": test_result.get("status"),
        "test_passed": bool(test_result.get("result", {}).get("passed")),
        "test_score": test_result.get("result", {}).get("score"),
        "wrong_tiles": builder.outcome.get("wrong_tiles", 0),
        "defects_found": tester.outcome.get("defects_found", 0),
        "timeline": architect.outcome.get("timeline", []),
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    in_order = m["chain_in_order"]
    return bool(set(in_order) == {"build", "test"} and all(in_order.values())
                and m["test_after_build"] and m["build_status"] == "completed"
                and m["test_status"] == "completed" and m["test_passed"]
                and summary["tasks_completed"] == 2 and summary["behaviour_errors"] == 0)
