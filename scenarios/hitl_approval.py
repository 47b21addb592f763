"""Human-in-the-loop approval gates: a person approves, rejects, lets time out and skips builds.

The session has ``require_approval`` on and an ``approval_timeout`` of a few
simulated seconds. A person (an outside client that joined as the architect)
delegates one build task per entry of ``decisions`` to a builder, each over its
own ``block`` x ``block`` region of a seeded plan. The builder (the shipped role
behaviour) builds them one after another and reports each completed; each then
awaits approval, and the person hears of it (the ``approval_requested`` status
update every architect gets). The person checks the queue shows the task as
``awaiting_approval``, thinks for a seeded moment and answers with
``approval_respond``: ``approve``, ``reject`` or ``skip``; for ``timeout`` it
says nothing and lets the gate time out.

Parameters: decisions (a list of approve | reject | timeout | skip; default one
of each), block, tile_rate, approval_timeout, think (the person's longest
thinking time, which must stay below approval_timeout).
Success: every task waited for approval, then ended as its decision says:
approve completed; reject failed with "Rejected"; timeout failed with "Approval
timed out"; skip completed with result {"skipped": true}; and the session counts
agree (completed = approvals + skips, failed = rejections + timeouts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.world import Simulation
from scenarios import GRID, RATE, WAIT, Bound, ParamError
from scenarios._kit import box, rng_for, seeded_tiles, spawn

NAME = "hitl_approval"
PARAMS: dict[str, Any] = {
    "decisions": ["approve", "reject", "timeout", "skip"], "block": 8, "tile_rate": 200.0,
    "approval_timeout": 10.0, "think": 0.5,
}
#: What each parameter may be, checked before the run (``barnraise scenarios hitl_approval``).
BOUNDS = {"decisions": Bound(choices=("approve", "reject", "timeout", "skip")),
          "block": GRID, "tile_rate": RATE, "approval_timeout": Bound(above=0, high=86_400),
          "think": WAIT}
BUILDER, PERSON = "builder-1", "person"
#: What each decision must lead to: the task's final status and its message.
EXPECTED: dict[str, tuple[str, str]] = {
    "approve": ("completed", ""), "reject": ("failed", "Rejected"),
    "timeout": ("failed", "Approval timed out"), "skip": ("completed", ""),
}


def run(simu: Simulation, *, decisions: list[str], block: int, tile_rate: float,
        approval_timeout: float, think: float) -> dict[str, Any]:
    unknown = [d for d in decisions if d not in EXPECTED]
    if unknown or not decisions:
        raise ParamError(f"decisions must be a non-empty list of {sorted(EXPECTED)}; "
                         f"got {decisions!r}")
    if not 0 <= think < approval_timeout:
        raise ParamError("think must be at least 0 and below approval_timeout")
    grid = block * len(decisions)
    plan = seeded_tiles(rng_for(simu, "plan"), grid, grid, empty=0.1, draw_dtype=np.int64)
    person = simu.client(PERSON)
    created = person.call("session_create", session_name="Approval Gates", grid_size=grid,
                          max_agents=2, config={"require_approval": True,
                                                "approval_timeout": approval_timeout})
    if not created.get("success"):
        raise RuntimeError(f"session_create failed: {created}")
    sid = str(created["session_id"])
    person.call("session_join", session_id=sid, agent_name="Person", role="architect")
    spawn(simu, sid, BUILDER, "builder", crew=1, blueprint=plan, tile_rate=tile_rate)
    simu.run()  # the builder has joined: the person may delegate to it
    minds = rng_for(simu, "person")
    decided: dict[str, str] = {}
    tasks: list[dict[str, Any]] = []
    for i, decision in enumerate(decisions):
        made = person.call("task_delegate", target_agent_id=BUILDER, task_type="build",
                           region=box(i * block, 0, block, block),
                           description=f"block {i} (the person will {decision})")
        if not made.get("success"):
            raise RuntimeError(f"task_delegate failed: {made}")
        decided[made["task_id"]] = decision
        tasks.append({"task_id": made["task_id"], "decision": decision, "requested": False,
                      "shown_status": None, "answer": None, "status": None, "message": None,
                      "result": None})
    by_id = {t["task_id"]: t for t in tasks}
    patience = approval_timeout + 60.0 + len(decisions) * block * block / tile_rate
    while any(t["status"] is None for t in tasks):
        message = person.receive(timeout=patience)
        if message is None:
            break  # nothing more will come: the check will say what is missing
        content = message.content
        task = by_id.get(str(content.get("task_id")))
        if task is None:
            continue
        if message.message_type == "task_result":
            task.update(status=content["status"], message=content.get("message"),
                        result=content.get("result"))
            continue
        if content.get("event") != "approval_requested":
            continue
        task["requested"] = True
        queue = person.call("task_get_queue", filter={"assigned_to": BUILDER})
        task["shown_status"] = next((q["status"] for q in queue.get("tasks", [])
                                     if q["task_id"] == task["task_id"]), None)
        if task["decision"] == "timeout":
            continue  # the person looks away; the gate times out on its own
        simu.advance(think * float(minds.random()))
        answer = person.call("approval_respond", task_id=task["task_id"],
                             decision=task["decision"], comment="seen by the person")
        task["answer"] = {k: answer.get(k) for k in ("success", "decision", "status", "error")}
    outcomes = {}
    for t in tasks:
        want_status, want_message = EXPECTED[t["decision"]]
        outcomes[t["task_id"]] = (
            t["requested"] and t["shown_status"] == "awaiting_approval"
            and t["status"] == want_status and (t["message"] or "") == want_message
            and (t["decision"] != "skip" or (t["result"] or {}).get("skipped") is True)
            and (t["decision"] == "timeout") == (t["answer"] is None))
    return {
        "session_id": sid,
        "tasks": tasks,
        "as_expected": sum(outcomes.values()),
        "approved": decisions.count("approve"), "rejected": decisions.count("reject"),
        "timed_out": decisions.count("timeout"), "skipped": decisions.count("skip"),
        "outcomes": [t["status"] for t in tasks],
        "messages": [t["message"] for t in tasks],
    }


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return bool(m["as_expected"] == len(m["tasks"])
                and summary["tasks_completed"] == m["approved"] + m["skipped"]
                and summary["tasks_failed"] == m["rejected"] + m["timed_out"]
                and summary["behaviour_errors"] == 0)
