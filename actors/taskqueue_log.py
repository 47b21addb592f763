"""The task queue's state, folded from a stored log: its share of every reader's fold.

The task queue (:mod:`barnraise.actors.taskqueue`) owns the tasks, their graph and their approvals.
What it held, the log says:

* **every task's record**: the ``task_assignment`` letter the queue sent its assignee
  carries all of it; a task for ``"any"`` is read from its ``task_delegate`` call, paired
  with the answer that named it; each reported result from the report (or the
  ``task_result`` letter);
* **its history**: the task events (:data:`EVENTS`: created, accepted, completed,
  failed, requeued, blocked by a report or by a dependency, unblocked, cancelled,
  approvals, dependencies added), each status as :func:`barnraise.sim.events.status_after` gives it;
* **the graph's edges**: the dependencies of the ``task_delegate`` call the queue took just
  before each ``task_created`` it recorded, and ``task_dependencies_added``;
* **checkpoints of the session state**: a :data:`barnraise.actors.service.CHECKPOINT` to the queue
  keeps every task, a :data:`barnraise.actors.service.ROLLBACK` puts every one back, with no event
  per task.

The readers in :mod:`barnraise.actors.stored` drive these folds: :class:`TasksFold` for a realtime
resume (``TaskQueue.restore_session`` takes what it makes), :func:`world_letter` and
:func:`world_event` for the world at a time, :class:`GraphOps` for the task board.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from barnraise.actors.service import CHECKPOINT, ROLLBACK
from barnraise.sim.events import TASK_EVENTS, status_after
from barnraise.sim.log import CALL, Calls, decode
from barnraise.sim.taskgraph import parse_priority
from barnraise.sim.tools import SERVICES
from barnraise.sim.trace import TraceRecord

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage, WorldSession

__all__ = ["ANSWERS", "EVENTS", "LETTERS", "WORLD_EVENTS", "GraphOps", "TaskShape", "TasksFold",
           "graph", "graph_event", "graph_letter", "matches", "world_event", "world_letter"]

#: The tools whose answers the task queue's fold reads.
ANSWERS: Final = frozenset({"task_report", "task_delegate"})
#: The event types the task queue's fold reads.
EVENTS: Final = frozenset({
    "task_created", "task_accepted", "task_completed", "task_failed", "task_cancelled",
    "task_blocked", "task_unblocked", "task_requeued", "task_dependencies_added",
    "approval_requested", "approval_resolved"})
#: The letters from the task queue its fold reads.
LETTERS: Final = frozenset({"task_assignment", "task_result"})
#: Task events that end (or block) a task's work: its status from barnraise.sim.events.status_after.
_ENDS: Final = frozenset({"task_completed", "task_failed", "task_cancelled", "task_blocked"})
_AWAITING: Final = "awaiting_approval"


# -- a realtime resume ---------------------------------------------------------------------


class TasksFold:
    """The task queue's share of a realtime resume's fold (:mod:`barnraise.actors.stored.resume`):
    each session's ``tasks`` and ``task_checkpoints`` in ``sessions``, ``serials["tasks"]``,
    and :attr:`completions`. ``calls``: the log's calls not yet answered (the fold's one
    pairing), which tell what a task was made with when the log holds nothing else."""

    def __init__(self, sessions: dict[str, SessionImage], serials: dict[str, int],
                 calls: Calls[tuple[int, Any]]) -> None:
        self.sessions = sessions
        self.serials = serials
        self.calls = calls
        #: task_completed events by task id: a resumed scenario counts on from these.
        self.completions: dict[str, int] = {}

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    def op(self, op: Any, content: dict[str, Any]) -> None:
        """A checkpoint of the session state kept or rolled back to."""
        s = self.session(content.get("session_id"))
        cid = str(content.get("checkpoint_id"))
        if s is None or s.regions is None:
            return
        if op == CHECKPOINT:
            s.task_checkpoints[cid] = copy.deepcopy(s.tasks)
        elif op == ROLLBACK and cid in s.task_checkpoints:
            s.tasks = copy.deepcopy(s.task_checkpoints[cid])

    def answered(self, r: TraceRecord, tool: str, args: dict[str, Any],
                 answer: dict[str, Any]) -> None:
        """A successful answer of the queue to ``r.recipient``'s call of ``tool`` (one of
        :data:`ANSWERS`), which :func:`matches` the call."""
        s = self.session(args.get("session_id"))
        if s is None:
            return
        if tool == "task_report":
            # An accepted report keeps what it says, whatever the status (a blocked or
            # requeued task's too; only a finished one's goes to its delegator).
            task = s.tasks.get(str(args.get("task_id")))
            if task is not None:
                task.update(result=dict(args.get("result") or {}),
                            artifacts=[dict(a) for a in args.get("artifacts") or ()],
                            message=str(args.get("message") or ""))
        elif tool == "task_delegate":
            task = s.tasks.get(str(answer.get("task_id")))
            if task is not None and not task.get("_full"):
                _described(task, args)

    def letter(self, kind: str, body: Any) -> None:
        """A letter of :data:`LETTERS` the queue sent."""
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        task = s.tasks.get(str(body.get("task_id"))) if s is not None else None
        if task is None:
            return
        if kind == "task_result":
            task["result"] = dict(body.get("result") or {})
            task["artifacts"] = [dict(a) for a in body.get("artifacts") or ()]
            task["message"] = str(body.get("message") or "")
            return
        if task.get("_full"):
            return
        for key in ("description", "region", "priority", "assigned_to", "delegated_by",
                    "created_at", "deadline", "max_retries", "payload"):
            if key in body:
                task[key] = body[key]
        task["dependencies"] = list(body.get("dependencies") or [])
        task["_full"] = True

    def event(self, s: SessionImage, r: TraceRecord, body: dict[str, Any]) -> None:
        """An event of :data:`EVENTS` in session ``s``."""
        kind = r.type
        tid = str(body.get("task_id"))
        if kind == "task_completed":
            self.completions[tid] = self.completions.get(tid, 0) + 1
        if kind == "task_created":
            self.serials["tasks"] += 1
            s.tasks[tid] = {
                "task_id": tid, "type": str(body.get("type")), "description": "",
                "region": None, "priority": str(body.get("priority", "medium")),
                "assigned_to": str(body.get("assigned_to")),
                "delegated_by": str(body.get("delegated_by")), "created_at": r.t,
                "seq": len(s.tasks), "dependencies": [],
                "status": str(body.get("status", "pending")), "accepted_at": None,
                "completed_at": None, "deadline": None, "max_retries": 0, "retries_used": 0,
                "result": {}, "artifacts": [], "message": "", "claim_id": None,
                "approval_requested_at": None, "payload": {}, "_created_seq": r.seq}
            return
        task = s.tasks.get(tid)
        if task is None:
            return
        if kind in ("task_completed", "task_failed", "task_blocked"):
            self.reported(task, str(body.get("by")))
        if kind == "task_accepted":
            task.update(status=status_after(body, task["status"]), accepted_at=r.t,
                        claim_id=body.get("claim_id"), _held=False)
            if task["assigned_to"] == "any":
                task["assigned_to"] = str(body.get("agent_id"))
        elif kind in _ENDS:
            if kind == "task_blocked" and "by" in body:
                task["_held"] = True  # blocked by a report, not by a dependency
            task["status"] = status_after(body, task["status"])
            if kind != "task_blocked":  # finished: its claim released, no approval waited
                task.update(claim_id=None, approval_requested_at=None)
            if kind == "task_completed":
                task["completed_at"] = r.t
            if kind == "task_failed":
                task["message"] = str(body.get("message", ""))
        elif kind == "task_unblocked":
            task["status"] = status_after(body, task["status"])
        elif kind == "task_requeued":
            task.update(status=status_after(body, task["status"]), accepted_at=None, claim_id=None,
                        retries_used=int(body.get("retries_used", task["retries_used"])))
            if body.get("reason") == "agent_left":
                task["assigned_to"] = "any"
        elif kind == "approval_requested":
            task["approval_requested_at"] = r.t
            # the report that asked for it: what it said is in the request
            task.update(result=dict(body.get("result") or {}),
                        artifacts=[dict(a) for a in body.get("artifacts") or ()])
        elif kind == "approval_resolved":
            task["approval_requested_at"] = None
            if body.get("decision") == "skip":  # what approval_respond puts in its place
                task["result"] = {"skipped": True}
        elif kind == "task_dependencies_added":
            for dep in body.get("added") or ():
                if dep not in task["dependencies"]:
                    task["dependencies"].append(dep)

    def reported(self, task: dict[str, Any], by: str) -> None:
        """A task ended (or blocked) by ``by``'s report, when the log ends before the report's
        answer and before the result went out: what the report said, from the call (the
        reporter's oldest unanswered call to the queue)."""
        oldest = self.calls.oldest("tasks", by)
        call = None if oldest is None else oldest[1]
        if type(call) is not dict or call.get("tool") != "task_report":
            return
        args = call.get("args") or {}
        if args.get("task_id") == task["task_id"]:
            task.update(result=dict(args.get("result") or {}),
                        artifacts=[dict(a) for a in args.get("artifacts") or ()],
                        message=str(args.get("message") or ""))

    def resumed(self) -> None:
        """The log goes on with a resumed run (whose calls start afresh): a task made by a
        call the stopped run never answered is described from that call now."""
        for s in self.sessions.values():
            for task in s.tasks.values():
                if not task.get("_full") and not task.get("_described"):
                    self.unanswered_delegation(s, task)

    def unanswered_delegation(self, s: SessionImage, task: dict[str, Any]) -> bool:
        """A task the log has no assignment of, nor an answer naming it (the run stopped
        between its creation and both): its delegator's newest ``task_delegate`` call
        that nothing answered and that came before its creation made it (an agent waits
        for each answer before its next call to the queue)."""
        calls = self.calls.waiting.get(("tasks", task["delegated_by"]), ())
        made = [(seq, c) for seq, c in calls if seq < task["_created_seq"]
                and type(c) is dict and c.get("tool") == "task_delegate"
                and (c.get("args") or {}).get("session_id") == s.session_id
                and (c.get("args") or {}).get("task_type") == task["type"]]
        if made:
            _described(task, max(made, key=lambda sc: sc[0])[1].get("args") or {})
        return bool(made)

    def finish(self, problems: list[str]) -> None:
        """The records as ``TaskQueue.restore_session`` takes them; a task the log cannot
        describe is a problem."""
        for s in self.sessions.values():
            for task in s.tasks.values():
                if not task.get("_full") and not task.get("_described") \
                        and not self.unanswered_delegation(s, task):
                    problems.append(f"task {task['task_id']}: the log holds neither its "
                                    "assignment nor the call that made it")
            for tasks in (s.tasks, *s.task_checkpoints.values()):
                for task in tasks.values():
                    for temporary in ("_created_seq", "_described", "_full"):
                        task.pop(temporary, None)
                    # Held by hand only while blocked (the graph clears it on any other way).
                    task["held"] = bool(task.pop("_held", False)) and task["status"] == "blocked"
                    task["priority"] = str(task["priority"])
                    parse_priority(task["priority"])  # a ValueError here is a fold bug


def matches(tool: Any, args: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Does a successful ``answer`` fit a call of ``tool`` (one of :data:`ANSWERS`) with
    ``args``? (Each answer the fold uses names what its call was about.)"""
    if tool == "task_report":
        return answer.get("task_id") == args.get("task_id")
    if tool == "task_delegate":
        return "task_id" in answer and "position_in_queue" in answer
    return True


def _described(task: dict[str, Any], args: dict[str, Any]) -> None:
    """Fill ``task``'s description, region, dependencies, deadline, retries and payload from
    the ``task_delegate`` arguments that made it."""
    task.update(description=args.get("description", ""), region=args.get("region"),
                dependencies=list(dict.fromkeys(args.get("dependencies") or ())),
                deadline=args.get("deadline"), max_retries=int(args.get("max_retries", 0) or 0),
                payload=dict(args.get("payload") or {}), _described=True)


# -- the world at a time -------------------------------------------------------------------

#: The event types the task queue's part of the world reads.
WORLD_EVENTS: Final = TASK_EVENTS


def world_letter(sessions: dict[str, WorldSession], r: TraceRecord, content: Any,
                 notes: list[str]) -> None:
    """A letter another service sent the queue (its decoded ``content``): the session
    state's checkpoints and rollbacks, which keep and put back every record at once, with
    no event per task."""
    if not isinstance(content, dict) or content.get("op") not in (CHECKPOINT, ROLLBACK):
        return
    sid = content.get("session_id")
    s = sessions.get(sid) if isinstance(sid, str) else None
    cid = str(content.get("checkpoint_id"))
    if s is None:
        return
    if content["op"] == CHECKPOINT:
        s.task_checkpoints[cid] = {tid: list(t) for tid, t in s.tasks.items()}
    elif cid in s.task_checkpoints:
        s.tasks = {tid: list(t) for tid, t in s.task_checkpoints[cid].items()}
    elif cid in s.unknown:
        notes.append(f"a rollback of the tasks to {cid} at t={r.t:g}: the "
                     "checkpoint was taken before the snapshot this fold started "
                     "from; the tasks are shown as they were before the rollback")


def world_event(s: WorldSession, kind: str, body: dict[str, Any]) -> None:
    """An event of :data:`WORLD_EVENTS` in session ``s``: each task's status, assignee and
    whether it awaits an approval."""
    if kind == "task_created":
        s.tasks[str(body["task_id"])] = [str(body.get("status", "pending")),
                                         body.get("assigned_to"), False]
        return
    task = s.tasks.get(str(body.get("task_id")))
    if task is None:
        return
    if kind == "approval_requested":  # shown as awaiting_approval while the flag is up
        task[2] = True
    elif kind == "approval_resolved":
        task[2] = False
    else:
        task[0] = status_after(body, task[0])
        if kind == "task_accepted" and task[1] == "any":
            task[1] = body.get("agent_id")
        elif kind == "task_requeued" and body.get("reason") == "agent_left":
            task[1] = "any"  # its member left: anyone may take it


# -- the task graph ------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskShape:
    """What the log says of a task besides its status: its type, its dependencies and
    its place in the order the tasks were made."""

    type: str | None
    dependencies: tuple[str, ...]
    order: int


#: By session: the graph's operations, (seq, op, data), in log order.
GraphOps = dict[str, list[tuple[int, str, Any]]]


def graph_letter(ops: GraphOps, r: TraceRecord) -> tuple[str, tuple[str, ...]] | None:
    """A letter the queue took: a ``task_delegate`` call (its session and dependencies,
    returned: the next ``task_created`` the queue records is its task), or a checkpoint
    or rollback of the session state (kept in ``ops``)."""
    if r.type != CALL:
        return None
    try:
        content = decode(r.content)
    except msgspec.DecodeError:
        return None
    if not isinstance(content, dict):
        return None
    if content.get("tool") == "task_delegate":
        args = content.get("args") or {}
        deps = args.get("dependencies") or []
        if isinstance(args.get("session_id"), str) and isinstance(deps, list):
            return (args["session_id"], tuple(dict.fromkeys(str(d) for d in deps)))
    elif content.get("op") in (CHECKPOINT, ROLLBACK) and r.sender in SERVICES:
        sid = content.get("session_id")
        if isinstance(sid, str):
            ops.setdefault(sid, []).append(
                (r.seq, str(content["op"]), str(content.get("checkpoint_id"))))
    return None


def graph_event(ops: GraphOps, notes: list[str], r: TraceRecord, sid: str,
                body: dict[str, Any], delegate: tuple[str, tuple[str, ...]] | None,
                orders: dict[str, int]) -> None:
    """An event in session ``sid``: a task the queue made (with the dependencies of
    ``delegate``, the call it took just before), or dependencies added."""
    if r.type == "task_created" and r.sender == "tasks":
        tid = str(body.get("task_id"))
        order = orders[sid] = orders.get(sid, 0) + 1
        if delegate is None or delegate[0] != sid:
            notes.append(f"task {tid} (t={r.t:g}): no task_delegate call found "
                         "before it; its dependencies are not known")
            deps = None
        else:
            deps = delegate[1]
        ops.setdefault(sid, []).append(
            (r.seq, "create", (tid, body.get("type"), deps, order)))
    elif r.type == "task_dependencies_added" and isinstance(body.get("added"), list):
        ops.setdefault(sid, []).append(
            (r.seq, "add", (str(body.get("task_id")), [str(d) for d in body["added"]])))


def graph(ops: Iterable[tuple[int, str, Any]], upto: int) -> dict[str, TaskShape | None]:
    """Every task after records ``0 .. upto - 1``, replaying one session's ``ops``: its
    shape, or None when the log does not say what it depends on."""
    tasks: dict[str, TaskShape | None] = {}
    kept: dict[str, dict[str, TaskShape | None]] = {}
    for seq, op, data in ops:
        if seq >= upto:
            break
        if op == "create":
            tid, kind, deps, order = data
            tasks[tid] = None if deps is None else TaskShape(
                None if kind is None else str(kind), deps, order)
        elif op == "add":
            tid, added = data
            shape = tasks.get(tid)
            if shape is not None:
                more = tuple(d for d in added if d not in shape.dependencies)
                tasks[tid] = TaskShape(shape.type, shape.dependencies + more, shape.order)
        elif op == CHECKPOINT:
            kept[data] = dict(tasks)
        elif op == ROLLBACK and data in kept:
            tasks = dict(kept[data])
    return tasks
