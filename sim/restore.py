"""What the services held when a stored run stopped, folded from its log: a realtime resume.

A realtime run cannot be re-executed (its interleaving came from the operating
system's threads), so an interrupted one resumes from its state: :func:`image_of`
folds the whole log into an :class:`Image`, each service's share of each session
at the last committed record, and ``Simulation.restore`` hands every service its
share (their ``restore`` methods) before any agent is let in.

What the log gives, and where from:

* **sessions** (coordinator): each session's info from the coordinator's ``_session``
  operation, its owner and granted roles from the ``session_create`` call, its
  members (with their colours and join times) from ``_member_joined`` and
  ``_member_left``;
* **regions**: the blueprint (``_blueprint``), the canvas with its last-writer layer
  and the tile counts (every tile write whose answer says it succeeded, applied
  when the service took it, paired with its answer as :func:`sim.rebuild.pair_writes`
  does), the claims with their leases (``region_claimed`` and ``region_released``),
  the refusals counted (``conflict_detected``), shaders and cartridges (the calls
  that made them, paired with their answers);
* **tasks**: every task's record (the ``task_assignment`` the queue sent its
  assignee carries all of it; a task for ``"any"`` is read from its
  ``task_delegate`` call, paired with the answer that named it) and its history
  from the task events (accepted, completed, failed, requeued, blocked,
  unblocked, cancelled, approvals, dependencies added), each result from the
  ``task_result`` its delegator got.

What it does not give is refused by :meth:`Image.unsupported` rather than guessed:
a run under a fault plan (lost and doubled letters break the pairing of calls and
answers), checkpoints (their contents are not all in the log), locks and barriers
still held or waited on (their holders are gone anyway: every agent restarts),
role tokens (secrets the log keeps only stand-ins of).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from sim.canvas import TileCanvas, parse_tile
from sim.geometry import Rect
from sim.taskgraph import parse_priority
from sim.tools import SERVICES
from sim.trace import DELIVER, EVENT, TraceRecord

if TYPE_CHECKING:
    from sim.store import StoredRun

__all__ = ["Image", "RegionsImage", "SessionImage", "image_of"]

_WRITES: Final = frozenset({"builder_place_tile", "builder_place_tiles"})
_ARTIFACTS: Final = frozenset({"builder_load_shader", "builder_assemble_cartridge"})
#: Task events and the status each leaves (see actors/taskqueue.py).
_STATUS: Final = {"task_completed": "completed", "task_failed": "failed",
                  "task_cancelled": "cancelled", "task_blocked": "blocked"}
#: Internal operations a resume cannot fold (see the module doc).
_UNFOLDED_OPS: Final = frozenset({"_checkpoint", "_rollback"})


@dataclass
class RegionsImage:
    """One session's share of the regions service."""

    canvas: TileCanvas
    writers: dict[str, int] = field(default_factory=dict)
    tiles_placed: int = 0
    tiles_by_agent: dict[str, int] = field(default_factory=dict)
    lost_work: int = 0
    #: refused claims and transfers (``conflict_detected`` events)
    conflicts: int = 0
    blueprint: NDArray[np.uint8] | None = None
    #: claim id -> agent_id, region, exclusive, claimed_at, expires_at, serial
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    shaders: dict[str, dict[str, Any]] = field(default_factory=dict)
    cartridges: dict[str, dict[str, Any]] = field(default_factory=dict)

    def writer(self, agent_id: str) -> int:
        who = self.writers.get(agent_id)
        if who is None:
            who = self.writers[agent_id] = len(self.writers) + 1
        return who


@dataclass
class SessionImage:
    """One session as the services held it."""

    info: dict[str, Any]
    owner: str = ""
    granted_roles: list[str] = field(default_factory=list)
    #: agent id -> Member fields, in the order they joined
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    joined: int = 0
    regions: RegionsImage | None = None
    #: task id -> TaskRecord fields, in the order the tasks were created
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return str(self.info["session_id"])


@dataclass
class Image:
    """Every session at record :attr:`seq` (exclusive), time :attr:`at`."""

    seq: int
    at: float
    sessions: dict[str, SessionImage]
    #: The largest serial each service had drawn (ids must not be drawn again).
    serials: dict[str, int]
    #: What the fold met and cannot restore, one line each.
    problems: list[str] = field(default_factory=list)
    #: task_completed events by task id: a resumed scenario counts on from these.
    completions: dict[str, int] = field(default_factory=dict)
    #: Session ids a resumed scenario has found again (``scenarios._kit.host_session``).
    taken: set[str] = field(default_factory=set)

    def unsupported(self) -> str | None:
        """Why this image cannot be resumed from (one line), or None."""
        return "; ".join(dict.fromkeys(self.problems)) or None


class _Pairs:
    """An agent's calls to one service, paired in order with the answers it got.

    Regions' tools are synchronous, so it answers an agent's calls in the order it
    takes them. The task queue's are not all (``task_accept`` asks regions first),
    but an agent waits for each answer before its next call to the queue, as every
    shipped behaviour does; a pairing is only used where the answer names what the
    call made (a task id), which checks it.
    """

    def __init__(self) -> None:
        self.waiting: dict[tuple[str, str], deque[tuple[int, Any]]] = {}

    def call(self, service: str, agent: str, seq: int, content: Any) -> None:
        self.waiting.setdefault((service, agent), deque()).append((seq, content))

    def answer(self, service: str, agent: str) -> tuple[int, Any] | None:
        queue = self.waiting.get((service, agent))
        return queue.popleft() if queue else None


class _Fold:
    def __init__(self) -> None:
        self.sessions: dict[str, SessionImage] = {}
        self.pairs = _Pairs()
        self.serials: dict[str, int] = {"regions": 0, "tasks": 0, "coordinator": 0}
        self.problems: list[str] = []
        self.completions: dict[str, int] = {}
        #: the task queue's last claim request for a task_accept (agent, region, task id)
        self.claiming: tuple[str, str, str] | None = None
        #: claim id -> the task it was made for, by task_accept
        self.task_claims: dict[str, str] = {}

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    # -- deliveries ------------------------------------------------------------------------

    def deliver(self, r: TraceRecord) -> None:
        if r.type == "coordination_request":
            content = r.content_obj()
            if not isinstance(content, dict):
                return
            if content.get("op") == "_agent_crashed" and content.get("reason") == "resumed":
                # A resumed run starts here (Simulation.restore, before any agent of it
                # calls): the stopped run's unanswered calls died with it and are never
                # answered, so the next answers pair with the resumed agents' calls.
                self.pairs = _Pairs()
                return
            if r.sender in SERVICES:
                self.internal(r, content)
            elif r.recipient in ("regions", "tasks", "coordinator") and "tool" in content:
                self.pairs.call(r.recipient, r.sender, r.seq, content)
        elif r.type == "coordination_response" and r.sender in ("regions", "tasks",
                                                                 "coordinator"):
            if r.recipient in SERVICES:
                return
            paired = self.pairs.answer(r.sender, r.recipient)
            if paired is not None:
                self.answered(r, paired[1], r.content_obj())
        elif r.type == "task_assignment" and r.sender == "tasks":
            self.assignment(r.content_obj())
        elif r.type == "task_result" and r.sender == "tasks":
            self.result(r.content_obj())

    def internal(self, r: TraceRecord, content: dict[str, Any]) -> None:
        op = content.get("op")
        if op in _UNFOLDED_OPS:
            if not self.problems or "checkpoints" not in self.problems[-1]:
                self.problems.append(f"the run took checkpoints (the first at t={r.t:g}), "
                                     "whose contents the log does not hold")
            return
        if r.recipient != "regions":
            return  # every membership operation goes to each service: regions' copy serves
        if op == "_claim_for" and str(content.get("purpose", "")).startswith("task "):
            self.claiming = (str(content.get("agent_id")), _key(content.get("region")),
                             str(content["purpose"]).removeprefix("task "))
            return
        if op == "_session" and isinstance(content.get("session"), dict):
            info = dict(content["session"])
            sid = str(info["session_id"])
            self.sessions[sid] = SessionImage(
                info, regions=RegionsImage(TileCanvas(int(info["grid_size"]))))
            self.serials["coordinator"] += 1  # session ids are the coordinator's draws
        elif op == "_session_closed":
            self.sessions.pop(str(content.get("session_id")), None)
        elif op == "_member_joined":
            s = self.session(content.get("session_id"))
            if s is not None and isinstance(content.get("member"), dict):
                member = dict(content["member"])
                s.members[str(member["agent_id"])] = member
                s.joined += 1
        elif op == "_member_left":
            s = self.session(content.get("session_id"))
            if s is not None:
                s.members.pop(str(content.get("agent_id")), None)
        elif op == "_blueprint":
            s = self.session(content.get("session_id"))
            if s is not None and s.regions is not None and content.get("blueprint") is not None:
                s.regions.blueprint = _rows(content["blueprint"])

    def answered(self, r: TraceRecord, call: dict[str, Any], answer: Any) -> None:
        if not isinstance(answer, dict) or not answer.get("success"):
            return
        tool, args = call.get("tool"), call.get("args") or {}
        if tool == "session_create":
            s = self.session(answer.get("session_id"))
            if s is not None:
                s.owner = r.recipient
                s.granted_roles = list(args.get("granted_roles") or ["architect"])
            return
        s = self.session(args.get("session_id"))
        if s is None:
            return
        if tool in _WRITES and s.regions is not None:
            self.write(s.regions, r.recipient, tool, args)
        elif tool == "builder_load_shader" and s.regions is not None:
            sid_ = str(answer["shader_id"])
            self.serials["regions"] = max(self.serials["regions"], _serial(sid_))
            s.regions.shaders.setdefault(sid_, {
                "shader_id": sid_, "name": args.get("shader_name"),
                "region": dict(answer["region"]), "agent_id": r.recipient,
                "created_at": r.t})
        elif tool == "builder_assemble_cartridge" and s.regions is not None:
            cid = str(answer["cartridge_id"])
            self.serials["regions"] = max(self.serials["regions"], _serial(cid))
            s.regions.cartridges[cid] = {
                "cartridge_id": cid, "name": args.get("name"), "region": dict(answer["region"]),
                "agent_id": r.recipient, "created_at": r.t, "tiles": answer.get("tiles", 0)}
        elif tool == "task_report":
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
                _delegated(task, args)

    def write(self, g: RegionsImage, agent: str, tool: str, args: dict[str, Any]) -> None:
        if tool == "builder_place_tile":
            rect = Rect(int(args["x"]), int(args["y"]), 1, 1)
            values: Any = int(parse_tile(args["tile_type"]))
        else:
            rect = Rect.parse(args["region"], "region")
            tiles = args["tiles"]
            values = int(parse_tile(tiles)) if isinstance(tiles, (int, str)) else _rows(tiles)
        done = g.canvas.put(rect, values, g.writer(agent))
        g.tiles_placed += done.placed
        if done.placed:
            g.tiles_by_agent[agent] = g.tiles_by_agent.get(agent, 0) + done.placed
        g.lost_work += done.lost_work

    def assignment(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        task = s.tasks.get(str(body.get("task_id"))) if s is not None else None
        if task is None or task.get("_full"):
            return
        for key in ("description", "region", "priority", "assigned_to", "delegated_by",
                    "created_at", "deadline", "max_retries", "payload"):
            if key in body:
                task[key] = body[key]
        task["dependencies"] = list(body.get("dependencies") or [])
        task["_full"] = True

    def result(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        task = s.tasks.get(str(body.get("task_id"))) if s is not None else None
        if task is not None:
            task["result"] = dict(body.get("result") or {})
            task["artifacts"] = [dict(a) for a in body.get("artifacts") or ()]
            task["message"] = str(body.get("message") or "")

    # -- events --------------------------------------------------------------------------------

    def event(self, r: TraceRecord) -> None:
        if not r.type.startswith(("task_", "region_", "approval_", "conflict_")):
            return
        body = r.content_obj()
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        if s is None:
            return
        kind = r.type
        if kind == "region_claimed" and s.regions is not None:
            cid = str(body["claim_id"])
            serial = _serial(cid)
            self.serials["regions"] = max(self.serials["regions"], serial)
            s.regions.claims[cid] = {
                "agent_id": str(body["agent_id"]), "region": dict(body["region"]),
                "exclusive": bool(body.get("exclusive", True)), "claimed_at": r.t,
                "expires_at": body.get("expires_at"), "serial": serial}
            if self.claiming is not None and self.claiming[:2] == (
                    str(body["agent_id"]), _key(body["region"])):
                self.task_claims[cid] = self.claiming[2]
            self.claiming = None
            return
        if kind == "region_released" and s.regions is not None:
            s.regions.claims.pop(str(body.get("claim_id")), None)
            return
        if kind == "conflict_detected":
            if s.regions is not None:
                s.regions.conflicts += 1
            return
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
                "approval_requested_at": None, "payload": {}}
            # The call that made it, when the log ends before its answer and before the
            # assignment: the delegator's oldest unanswered call to the queue (it waits
            # for each answer before its next call), if it asked for this task.
            waiting = self.pairs.waiting.get(("tasks", str(body.get("delegated_by"))))
            call = waiting[0][1] if waiting else None
            if call is not None and call.get("tool") == "task_delegate":
                args = call.get("args") or {}
                if args.get("task_type") == body.get("type"):
                    _delegated(s.tasks[tid], args)
            return
        task = s.tasks.get(tid)
        if task is None:
            return
        if kind in ("task_completed", "task_failed", "task_blocked"):
            self.reported(task, str(body.get("by")))
        if kind == "task_accepted":
            task.update(status="in_progress", accepted_at=r.t, claim_id=body.get("claim_id"),
                        _held=False)
            if task["assigned_to"] == "any":
                task["assigned_to"] = str(body.get("agent_id"))
        elif kind in _STATUS:
            if kind == "task_blocked" and "by" in body:
                task["_held"] = True  # blocked by a report, not by a dependency
            task["status"] = _STATUS[kind]
            if kind != "task_blocked":  # finished: its claim released, no approval waited
                task.update(claim_id=None, approval_requested_at=None)
            if kind == "task_completed":
                task["completed_at"] = r.t
            if kind == "task_failed":
                task["message"] = str(body.get("message", ""))
        elif kind == "task_unblocked":
            if task["status"] == "blocked":
                task["status"] = "pending"
        elif kind == "task_requeued":
            task.update(status="pending", accepted_at=None, claim_id=None,
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
        waiting = self.pairs.waiting.get(("tasks", by))
        call = waiting[0][1] if waiting else None
        if call is None or call.get("tool") != "task_report":
            return
        args = call.get("args") or {}
        if args.get("task_id") == task["task_id"]:
            task.update(result=dict(args.get("result") or {}),
                        artifacts=[dict(a) for a in args.get("artifacts") or ()],
                        message=str(args.get("message") or ""))


def _delegated(task: dict[str, Any], args: dict[str, Any]) -> None:
    """What a ``task_delegate`` call's ``args`` say of the task it made."""
    task.update(description=args.get("description", ""), region=args.get("region"),
                dependencies=list(dict.fromkeys(args.get("dependencies") or ())),
                deadline=args.get("deadline"), max_retries=int(args.get("max_retries", 0) or 0),
                payload=dict(args.get("payload") or {}))


def _key(region: Any) -> str:
    return repr(sorted(dict(region).items())) if isinstance(region, dict) else repr(region)


def _serial(identifier: str) -> int:
    """The serial at the end of an id such as ``claim_000012`` (0 when there is none)."""
    tail = identifier.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _rows(tiles: Any) -> NDArray[np.uint8]:
    if all(type(v) is int for row in tiles for v in row):
        return np.array(tiles, dtype=np.uint8)
    return np.array([[int(parse_tile(v)) for v in row] for row in tiles], dtype=np.uint8)


def fold(records: Iterable[TraceRecord], *, faults: bool = False,
         upto: int | None = None) -> Image:
    """The :class:`Image` after ``records`` (a log from its first record; with ``upto``,
    only its records before seq ``upto``)."""
    f = _Fold()
    if faults:
        f.problems.append("the run had a fault plan: lost and doubled letters break the "
                          "pairing of calls and answers the fold relies on")
    seq, at = 0, 0.0
    for r in records:
        if upto is not None and r.seq >= upto:
            break
        if r.kind == EVENT:
            f.event(r)
        elif r.kind == DELIVER:
            f.deliver(r)
        seq, at = r.seq + 1, r.t
    for s in f.sessions.values():
        for task in s.tasks.values():
            task.pop("_full", None)
            # Held by hand only while blocked (the graph clears it on any other way out).
            task["held"] = bool(task.pop("_held", False)) and task["status"] == "blocked"
            # A failed or completed task whose result went to nobody keeps {}.
            task["priority"] = str(task["priority"])
            parse_priority(task["priority"])  # a ValueError here is a fold bug
    # A claim task_accept made whose acceptance the log does not hold: the task is still
    # pending (its assignee accepts it again, claiming again), so the claim is no one's.
    for s in f.sessions.values():
        if s.regions is not None:
            for cid, tid in f.task_claims.items():
                if cid in s.regions.claims and s.tasks.get(tid, {}).get("claim_id") != cid:
                    del s.regions.claims[cid]
    # A session whose creation was never answered is not kept: its host never learned
    # of it, no agent can have joined it, and a resumed scenario makes it again.
    for sid in [sid for sid, s in f.sessions.items() if not s.owner]:
        del f.sessions[sid]
    f.serials["seq"] = seq
    return Image(seq, at, f.sessions, f.serials, f.problems, f.completions)


def image_of(run: StoredRun, upto: int | None = None) -> Image:
    """Fold every committed record of ``run`` (see the module doc), or those before seq
    ``upto``."""
    records = run.records(0)
    try:
        faults = bool(run.info is not None and run.info.options.get("faults"))
        return fold(records, faults=faults, upto=upto)
    finally:
        records.close()
