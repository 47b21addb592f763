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

Under a fault plan the person is a member like any agent (its letters may be lost): its
calls are retried, and hearing nothing for ``retry`` seconds it reads the queue (a
request or a result it did not hear). The check is the same.

Resumed after a kill (``barnraise resume``, realtime): the person finds its session
again, takes the tasks it had delegated back from the task queue (delegating only
the others), and what it had heard, seen and answered before the kill is read from
the stored log (``_kit.calls_before``, ``_kit.delivered_before``); a task finished
meanwhile is read from its record. A task awaiting approval at the kill is looked
at and answered now, unless the log shows the answer given (its ``approval_resolved``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from barnraise.actors.world import Client, Simulation
from barnraise.scenarios import GRID, RATE, WAIT, Bound, ParamError
from barnraise.scenarios._kit import (
    box,
    calls_before,
    delivered_before,
    host_session,
    rng_for,
    seeded_tiles,
    session_events,
    spawn,
)

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
#: A realtime run resumes by running this script again on the restored world: the
#: person takes its session, its tasks and what it had heard and said back (see above).
RESUMABLE = True
_FINISHED = ("completed", "failed", "cancelled")
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
    _, sid = host_session(simu, host=person, session_name="Approval Gates", grid_size=grid,
                          max_agents=2, config={"require_approval": True,
                                                "approval_timeout": approval_timeout})
    joined = person.call("session_join", session_id=sid, agent_name="Person", role="architect")
    if not joined.get("success"):
        if not (simu.restored and joined.get("error") == "name_taken"):
            raise RuntimeError(f"session_join failed: {joined}")
        person.session_id = sid  # a member still: it joined before the kill
    spawn(simu, sid, BUILDER, "builder", crew=1, blueprint=plan, tile_rate=tile_rate)
    image = simu.restored
    if image is None or sid not in image.sessions or BUILDER not in image.sessions[sid].members:
        # the builder has joined: the person may delegate to it. (Not when it had joined
        # before a kill: its tasks go on at once, and a run to the end would let their
        # approval gates time out before the person is back.)
        simu.run()
    minds = rng_for(simu, "person")
    earlier = _delegated_before(person, simu)
    tasks: list[dict[str, Any]] = []
    for i, decision in enumerate(decisions):
        description = f"block {i} (the person will {decision})"
        if earlier and earlier[0]["description"] == description:
            made = {"task_id": earlier.pop(0)["task_id"]}  # delegated before the kill
        else:
            made = person.call("task_delegate", target_agent_id=BUILDER, task_type="build",
                               region=box(i * block, 0, block, block), description=description)
            if not made.get("success"):
                raise RuntimeError(f"task_delegate failed: {made}")
        tasks.append({"task_id": made["task_id"], "decision": decision, "requested": False,
                      "shown_status": None, "answer": None, "status": None, "message": None,
                      "result": None})
    if earlier:
        raise RuntimeError(f"the person had delegated tasks this run does not know: {earlier}")
    by_id = {t["task_id"]: t for t in tasks}

    def answer(task: dict[str, Any]) -> None:
        """The person looks at a task awaiting approval, then decides."""
        if task["shown_status"] is None:
            queue = person.call("task_get_queue", filter={"assigned_to": BUILDER})
            task["shown_status"] = next((q["status"] for q in queue.get("tasks", [])
                                         if q["task_id"] == task["task_id"]), None)
        if task["decision"] == "timeout" or task["answer"] is not None:
            return  # the person looks away (the gate times out on its own), or had answered
        simu.advance(think * float(minds.random()))
        said = person.call("approval_respond", task_id=task["task_id"],
                           decision=task["decision"], comment="seen by the person")
        task["answer"] = {k: said.get(k) for k in ("success", "decision", "status", "error")}

    if simu.restored is not None:
        for task in _before_kill(simu, sid, person, tasks):
            answer(task)
    patience = approval_timeout + 60.0 + len(decisions) * block * block / tile_rate
    # Under a fault plan the person is a member like any agent: an approval request or a
    # result sent to it may be lost. It then looks at the queue every retry seconds
    # (well inside the approval timeout): a task awaiting approval is one whose request
    # it did not hear, a finished one is read from its record.
    faults = simu.dispatcher.faults
    look = patience if faults is None else min(patience, faults.retry)
    quiet = 0.0
    while any(t["status"] is None for t in tasks):
        message = person.receive(timeout=look)
        if message is None:
            quiet += look
            if faults is None or quiet >= patience:
                break  # nothing more will come: the check will say what is missing
            for task in _looked_up(person, tasks):
                answer(task)
            continue
        quiet = 0.0
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
        answer(task)
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


def _looked_up(person: Client, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Under a fault plan, with nothing heard for a while: the person's tasks as the queue
    shows them. A finished one is filled in from its record; those awaiting approval
    whose request the person did not hear are returned, to look at and answer."""
    queue = person.call("task_get_queue", filter={"status": "all"})
    records = {q["task_id"]: q for q in queue.get("tasks", ())}
    waiting = []
    for task in tasks:
        record = records.get(task["task_id"])
        if record is None or task["status"] is not None:
            continue
        if record["status"] in _FINISHED:
            task.update(status=record["status"], message=record["message"],
                        result=record["result"])
        elif record["status"] == "awaiting_approval" and not task["requested"]:
            task["requested"] = True  # its request was lost on the way
            waiting.append(task)
    return waiting


def _delegated_before(person: Client, simu: Simulation) -> list[dict[str, Any]]:
    """A resumed run: the tasks the person had delegated, oldest first ([] otherwise)."""
    if simu.restored is None:
        return []
    queue = person.call("task_get_queue", filter={"status": "all"})
    mine = [t for t in queue.get("tasks", ()) if t["delegated_by"] == person.agent_id]
    return sorted(mine, key=lambda t: (t["created_at"], t["task_id"]))


def _before_kill(simu: Simulation, sid: str, person: Client,
                 tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A resumed run: fill in ``tasks`` with what the person had heard (approval requests),
    seen (the queue after each) and answered before the kill, from the stored log, and
    each finished task's end from its record; the tasks awaiting approval it had not
    answered (to look at and answer now)."""
    image = simu.restored
    assert image is not None
    by_id = {t["task_id"]: t for t in tasks}
    heard = [m for m in delivered_before(simu, person.agent_id, "status_update")
             if m.content.get("event") == "approval_requested"]
    calls = calls_before(simu, person.agent_id)
    for m in heard:
        task = by_id.get(str(m.content.get("task_id")))
        if task is None:
            continue
        task["requested"] = True
        seen = next((c["answer"] for c in calls if c["tool"] == "task_get_queue"
                     and c["answer"] is not None and c["answered"] >= m.timestamp), None)
        if seen is not None:
            task["shown_status"] = next((q["status"] for q in seen.get("tasks", [])
                                         if q["task_id"] == task["task_id"]), None)
    resolved = {e["task_id"]: e for e in session_events(simu, sid, "approval_resolved")
                if e["seq"] < image.seq}
    for c in calls:
        task = by_id.get(str(c["args"].get("task_id")))
        if c["tool"] != "approval_respond" or task is None:
            continue
        said = c["answer"]
        if said is None and task["task_id"] in resolved:  # the kill took the answer
            said = {"success": True, "decision": resolved[task["task_id"]]["decision"]}
        if said is not None:
            task["answer"] = {k: said.get(k) for k in ("success", "decision", "status",
                                                        "error")}
    queue = person.call("task_get_queue", filter={"status": "all"})
    records = {q["task_id"]: q for q in queue.get("tasks", ())}
    waiting = []
    for task in tasks:
        record = records.get(task["task_id"])
        if record is None:
            continue
        if record["status"] in _FINISHED:
            task.update(status=record["status"], message=record["message"],
                        result=record["result"])
        elif record["status"] == "awaiting_approval":
            task["requested"] = True  # its request went to the person's dead incarnation
            waiting.append(task)
    return waiting


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    return bool(m["as_expected"] == len(m["tasks"])
                and summary["tasks_completed"] == m["approved"] + m["skipped"]
                and summary["tasks_failed"] == m["rejected"] + m["timed_out"]
                and summary["behaviour_errors"] == 0)
