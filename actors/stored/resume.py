"""What the services held when a stored run stopped, folded from its log: a realtime resume.

A realtime run cannot be re-executed (its interleaving came from the operating
system's threads), so an interrupted one resumes from its state: :func:`image_of`
folds the whole log into an :class:`Image`, each service's share of each session
at the last committed record, and ``Simulation.restore`` hands every service its
share (their ``restore`` methods) before any agent is let in.

What the log gives, and where from:

* **sessions** (coordinator): each session's info from the coordinator's ``_session``
  operation, its owner and granted roles from the ``session_create`` call and its
  answer (a session whose creation was never answered is dropped: its host never
  learned of it). The answer may come before regions' ``_session`` record: the
  coordinator tells the services and answers at once, and in realtime each record is
  written on its recipient's thread, so the two are matched by session id at the end,
  not in log order. Its members (with their colours and join times) from
  ``_member_joined`` and ``_member_left`` (a join is answered only after regions'
  copy, through a ``_state`` round trip), its checkpoint index from the
  ``build_checkpoint`` answers (an automatic checkpoint's from its event);
* **regions**: the blueprint (``_blueprint``), the canvas with its last-writer layer
  and the tile counts (every tile write whose answer says it succeeded, applied when
  the service took it, paired with its answer by the rules of :mod:`sim.log`), the
  claims with their leases (``region_claimed`` and ``region_released``),
  the refusals counted (``conflict_detected``), shaders and cartridges (the calls
  that made them, paired with their answers), and
  what each checkpoint kept of them (``_checkpoint``, ``_rollback``);
* **tasks**: every task's record (the ``task_assignment`` the queue sent its
  assignee carries all of it; a task for ``"any"`` is read from its
  ``task_delegate`` call, paired with the answer that named it) and its history
  from the task events (accepted, completed, failed, requeued, blocked by a report
  or by a dependency, unblocked, cancelled, approvals, dependencies added), each
  reported result from the report, checkpoints of the session state;
* **coordination**: locks held with their leases (``lock_granted``, released,
  expired) and each barrier's releases. Waits for a lock or at a barrier are not
  kept: the agents waiting were the stopped run's, and are gone.

The services' operations named above (``_session``, ``_checkpoint``, ...) are declared by
the services that serve them (:mod:`actors.service`, :mod:`actors.regions`) as part of the
log's schema; the fold reads them by those names.

Every answer the fold uses is checked against the call it was paired with (same
region, same task); one that does not fit makes the image unsupported. What the fold
cannot give is refused by :meth:`Image.unsupported` rather than guessed: a run under
a fault plan (lost and doubled letters break the pairing of calls and answers), a
log whose calls and answers do not pair. Role tokens are secrets the log keeps only
stand-ins of: a restored session has a new invite token and no role tokens.
"""

from __future__ import annotations

import copy
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from actors.regions import BLUEPRINT, CLAIM_FOR
from actors.service import (
    CHECKPOINT,
    MEMBER_JOINED,
    MEMBER_LEFT,
    ROLLBACK,
    SESSION,
    SESSION_CLOSED,
)
from sim.canvas import TileCanvas, parse_tile
from sim.events import status_after
from sim.geometry import Rect
from sim.log import ANSWER, CALL, RESUMED, Calls, decode, is_answer, is_call
from sim.store import StoredLog
from sim.taskgraph import parse_priority
from sim.tools import SERVICES
from sim.trace import DELIVER, EVENT, TraceRecord

__all__ = ["Image", "RegionsImage", "SessionImage", "image_of"]

_WRITES: Final = frozenset({"builder_place_tile", "builder_place_tiles"})
_RECT_KEYS: Final = frozenset({"x", "y", "width", "height"})
#: The tools whose answers :meth:`_Fold.answered` reads (to any other call's answer it
#: does nothing, whatever the answer says).
_ANSWERS_USED: Final = frozenset({"session_create", "builder_place_tile", "builder_place_tiles",
                                  "builder_load_shader", "builder_assemble_cartridge",
                                  "build_checkpoint", "task_report", "task_delegate"})
_DIGITS: Final = re.compile(r"[0-9]+")
#: The record types the fold reads (the log holds others: status updates, heartbeats...).
_FOLDED: Final = frozenset({
    CALL, ANSWER, "task_assignment", "task_result",
    RESUMED, "task_created", "task_accepted", "task_completed", "task_failed",
    "task_cancelled", "task_blocked", "task_unblocked", "task_requeued",
    "task_dependencies_added", "approval_requested", "approval_resolved", "region_claimed",
    "region_released", "lock_granted", "lock_released", "lock_expired", "barrier_released",
    "checkpoint_created", "conflict_detected"})
#: Task events that end (or block) a task's work: its status from sim.events.status_after.
_ENDS: Final = frozenset({"task_completed", "task_failed", "task_cancelled", "task_blocked"})


@dataclass
class RegionsImage:
    """One session's share of the regions service."""

    canvas: TileCanvas
    writers: dict[str, int] = field(default_factory=dict)
    tiles_placed: int = 0
    tiles_by_agent: dict[str, int] = field(default_factory=dict)
    lost_work: int = 0
    #: Claims refused for a conflict (``conflict_detected`` events).
    conflicts: int = 0
    blueprint: NDArray[np.uint8] | None = None
    #: claim id -> agent_id, region, exclusive, claimed_at, expires_at, serial
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    shaders: dict[str, dict[str, Any]] = field(default_factory=dict)
    cartridges: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: checkpoint id -> what regions keeps of it: the canvas (compressed) and its tile
    #: count, ``tiles_placed`` and ``tiles_by_agent``, the shaders and the cartridges (None
    #: for a part the checkpoint's ``include`` left out)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)

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
    #: checkpoint id -> the tasks as a checkpoint of the session state kept them
    task_checkpoints: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: checkpoint id -> the coordinator's index entry (what build_checkpoint answers)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: lock id -> holder, expires_at (a lock's waiters were the stopped run's: gone)
    locks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: barrier id -> releases so far (arrivals waiting were the stopped run's: gone)
    barrier_releases: dict[str, int] = field(default_factory=dict)

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


class _Fold:
    def __init__(self) -> None:
        self.sessions: dict[str, SessionImage] = {}
        #: Each agent's calls to each service not yet answered: (seq, decoded body). The
        #: task queue's tools are not all synchronous (``task_accept`` asks regions
        #: first), but an agent waits for each answer before its next call to the queue;
        #: a pairing is only used where the answer names what the call made (a task
        #: id), which checks it (:func:`_matches`).
        self.calls: Calls[tuple[int, Any]] = Calls()
        self.serials: dict[str, int] = {"regions": 0, "tasks": 0, "coordinator": 0}
        self.problems: list[str] = []
        self.completions: dict[str, int] = {}
        #: session id -> (owner, granted roles), from each answered session_create. Kept
        #: apart from the sessions: in a realtime log the answer can come before the
        #: ``_session`` record the session is made from (see the module doc).
        self.owners: dict[str, tuple[str, list[str]]] = {}
        #: the task queue's last claim request for a task_accept (agent, region, task id)
        self.claiming: tuple[str, str, str] | None = None
        #: claim id -> the task it was made for, by task_accept
        self.task_claims: dict[str, str] = {}
        #: Claims whose task_accepted the log holds (the service kept them, whatever
        #: became of the task later: a rollback leaves its claim in place).
        self.accepted_claims: set[str] = set()

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    # -- deliveries ------------------------------------------------------------------------

    def fold_rows(self, rows: Iterable[tuple[Any, ...]], upto: int | None) -> tuple[int, float]:
        """Fold ``rows`` (a stored log's rows: seq, t, kind, sender, recipient, type,
        content, packed), those before seq ``upto``; (the seq after the last one, its
        time).

        One loop over plain tuples: a record the fold passes over costs a comparison or
        two, and the two kinds most of a log is made of (a call to a service, queued to
        pair with its answer, and the answer) are handled here without a record object.
        """
        calls = self.calls
        seq, at = 0, 0.0
        for rseq, t, kind, sender, recipient, rtype, content, packed in rows:
            if upto is not None and rseq >= upto:
                break
            seq, at = rseq + 1, t
            if packed:
                content = zlib.decompress(content)
            if kind == DELIVER:
                if rtype == ANSWER:
                    if not is_answer(kind, rtype, sender, recipient):
                        continue
                    paired = calls.answer(sender, recipient)
                    if paired is None:
                        continue
                    call = paired[1]
                    tool = call.get("tool") if type(call) is dict else None
                    if type(tool) is not str or tool not in _ANSWERS_USED:
                        continue  # answered() would do nothing with it: not even decoded
                    answer = decode(content)
                    if not self.placed(recipient, call, answer):
                        self.answered(TraceRecord(rseq, t, kind, sender, recipient, rtype,
                                                  content), call, answer)
                elif rtype == CALL:
                    body = decode(content)
                    if is_call(kind, rtype, sender, recipient):
                        calls.call(recipient, sender, (rseq, body))
                    elif sender in SERVICES and isinstance(body, dict):
                        self.internal(TraceRecord(rseq, t, kind, sender, recipient, rtype,
                                                  content), body)
                elif rtype == "task_assignment" and sender == "tasks":
                    self.assignment(decode(content))
                elif rtype == "task_result" and sender == "tasks":
                    self.result(decode(content))
            elif kind == EVENT:
                self.event(TraceRecord(rseq, t, kind, sender, recipient, rtype, content))
        return seq, at

    def placed(self, agent: str, call: dict[str, Any], answer: Any) -> bool:
        """:meth:`answered` for the answer most of a log's answers are, a successful
        ``builder_place_tiles`` whose region is the call's: the write applied. False
        (nothing done) for any other answer, which :meth:`answered` then takes."""
        if call.get("tool") != "builder_place_tiles" or not isinstance(answer, dict) \
                or not answer.get("success") or "tiles_placed" not in answer:
            return False
        args = call.get("args") or {}
        region = args.get("region")
        # What _matches checks, when the call's region has exactly a region's four keys.
        if type(region) is not dict or region.keys() != _RECT_KEYS \
                or answer.get("region") != region:
            return False
        s = self.session(args.get("session_id"))
        if s is None or s.regions is None:
            return True
        # A builder's row (nearly every write): its Rect made here, as write() would
        # (Rect.parse of four ints), and its codes taken as bytes by _codes.
        x, y, width, tiles = region["x"], region["y"], region["width"], args.get("tiles")
        if region["height"] == 1 and type(region["height"]) is int and type(x) is int \
                and type(y) is int and type(width) is int and type(tiles) is list:
            try:
                rect = Rect(x, y, width, 1)
            except (TypeError, ValueError):
                pass  # a Rect the constructor refuses: write() says why
            else:
                self.put(s.regions, agent, rect, _codes(tiles, rect))
                return True
        self.write(s.regions, agent, "builder_place_tiles", args)
        return True

    def internal(self, r: TraceRecord, content: dict[str, Any]) -> None:
        op = content.get("op")
        if op in (CHECKPOINT, ROLLBACK):
            self.checkpoint(r.recipient, str(op), content)
            return
        if r.recipient != "regions":
            return  # every membership operation goes to each service: regions' copy serves
        if op == CLAIM_FOR and str(content.get("purpose", "")).startswith("task "):
            self.claiming = (str(content.get("agent_id")), _key(content.get("region")),
                             str(content["purpose"]).removeprefix("task "))
            return
        if op == SESSION and isinstance(content.get("session"), dict):
            info = dict(content["session"])
            sid = str(info["session_id"])
            self.sessions[sid] = SessionImage(
                info, regions=RegionsImage(TileCanvas(int(info["grid_size"]))))
            self.serials["coordinator"] += 1  # session ids are the coordinator's draws
        elif op == SESSION_CLOSED:
            self.sessions.pop(str(content.get("session_id")), None)
        elif op == MEMBER_JOINED:
            s = self.session(content.get("session_id"))
            if s is not None and isinstance(content.get("member"), dict):
                member = dict(content["member"])
                s.members[str(member["agent_id"])] = member
                s.joined += 1
        elif op == MEMBER_LEFT:
            s = self.session(content.get("session_id"))
            if s is not None:
                s.members.pop(str(content.get("agent_id")), None)
        elif op == BLUEPRINT:
            s = self.session(content.get("session_id"))
            if s is not None and s.regions is not None and content.get("blueprint") is not None:
                s.regions.blueprint = _rows(content["blueprint"])

    def checkpoint(self, service: str, op: str, content: dict[str, Any]) -> None:
        """A checkpoint kept or rolled back to, by regions or by the task queue (each
        keeps its part, as the services do)."""
        s = self.session(content.get("session_id"))
        cid = str(content.get("checkpoint_id"))
        if s is None or s.regions is None:
            return
        g = s.regions
        if service == "regions" and op == CHECKPOINT:
            include = set(content.get("include") or ())
            tiles = "tiles" in include
            g.checkpoints[cid] = {
                "canvas": g.canvas.compress() if tiles else None,
                "tiles": g.canvas.count_nonempty() if tiles else 0,
                "tiles_placed": g.tiles_placed,
                "shaders": dict(g.shaders) if "shaders" in include else None,
                "cartridges": dict(g.cartridges) if "cartridges" in include else None,
                "tiles_by_agent": dict(g.tiles_by_agent)}
        elif service == "regions" and op == ROLLBACK and cid in g.checkpoints:
            kept = g.checkpoints[cid]
            if kept["canvas"] is not None:
                g.canvas.restore(TileCanvas.decompress(kept["canvas"]).snapshot())
                g.tiles_placed = kept["tiles_placed"]
                g.tiles_by_agent = dict(kept["tiles_by_agent"])
            if kept["shaders"] is not None:
                g.shaders = dict(kept["shaders"])
            if kept["cartridges"] is not None:
                g.cartridges = dict(kept["cartridges"])
        elif service == "tasks" and op == CHECKPOINT:
            s.task_checkpoints[cid] = copy.deepcopy(s.tasks)
        elif service == "tasks" and op == ROLLBACK and cid in s.task_checkpoints:
            s.tasks = copy.deepcopy(s.task_checkpoints[cid])

    def answered(self, r: TraceRecord, call: dict[str, Any], answer: Any) -> None:
        if not isinstance(answer, dict) or not answer.get("success"):
            return
        tool, args = call.get("tool"), call.get("args") or {}
        if not _matches(tool, args, answer):
            self.problems.append(f"the answer at record {r.seq} does not fit the call it was "
                                 f"paired with ({tool} of {r.recipient}): the log's calls "
                                 "and answers cannot be paired")
            return
        if tool == "session_create":
            self.owners[str(answer.get("session_id"))] = (
                r.recipient, list(args.get("granted_roles") or ["architect"]))
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
        elif tool == "build_checkpoint":
            entry = {k: v for k, v in answer.items() if k != "success"}
            s.checkpoints[str(answer["checkpoint_id"])] = entry
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
                _described(task, args)

    def resumed(self) -> None:
        """The log goes on with a resumed run: what the stopped run left unanswered is
        never answered (its services are gone), so a later answer to the same agent is
        paired with that agent's calls from here on, not with a stale one."""
        for s in self.sessions.values():
            for task in s.tasks.values():
                if not task.get("_full") and not task.get("_described"):
                    self.unanswered_delegation(s, task)
        self.calls.clear()

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

    def write(self, g: RegionsImage, agent: str, tool: str, args: dict[str, Any]) -> None:
        if tool == "builder_place_tile":
            rect = Rect(int(args["x"]), int(args["y"]), 1, 1)
            values: Any = int(parse_tile(args["tile_type"]))
        else:
            rect = Rect.parse(args["region"], "region")
            tiles = args["tiles"]
            values = int(parse_tile(tiles)) if isinstance(tiles, (int, str)) \
                else _codes(tiles, rect)
        self.put(g, agent, rect, values)

    @staticmethod
    def put(g: RegionsImage, agent: str, rect: Rect, values: bytes | NDArray[np.uint8] | int
            ) -> None:
        """A write the service accepted, applied to ``g``'s canvas and counted."""
        done = g.canvas.put(rect, values, g.writers.get(agent) or g.writer(agent))
        placed = done.placed
        if placed:
            g.tiles_placed += placed
            g.tiles_by_agent[agent] = g.tiles_by_agent.get(agent, 0) + placed
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
        kind = r.type
        if kind == RESUMED:
            self.resumed()
            return
        if not kind.startswith(("task_", "region_", "approval_", "lock_", "barrier_",
                                "checkpoint_", "conflict_detected")):
            return
        body = decode(r.content)
        if not isinstance(body, dict):
            return
        s = self.session(body.get("session_id"))
        if s is None:
            return
        if kind == "conflict_detected":
            if s.regions is not None:
                s.regions.conflicts += 1
            return
        if kind == "lock_granted":
            s.locks[str(body["lock_id"])] = {"holder": str(body["holder"]),
                                            "expires_at": body.get("expires_at")}
            return
        if kind in ("lock_released", "lock_expired"):
            s.locks.pop(str(body.get("lock_id")), None)  # a next holder's grant follows
            return
        if kind == "barrier_released":
            s.barrier_releases[str(body["barrier_id"])] = int(body["generation"])
            return
        if kind == "checkpoint_created":
            self.serials["coordinator"] += 1
            _created(s, r, body)
            return
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
            if body.get("claim_id") is not None:
                self.accepted_claims.add(str(body["claim_id"]))
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


def _key(region: Any) -> str:
    return repr(sorted(region.items())) if isinstance(region, dict) else repr(region)


def _created(s: SessionImage, r: TraceRecord, body: dict[str, Any]) -> None:
    """The coordinator's index entry of a checkpoint, at its ``checkpoint_created`` event.

    A checkpoint an agent asked for gets its exact entry from the answer (later in the
    log); an automatic one (the session's checkpoint_interval) is answered to no one, so
    its entry is made here as the coordinator makes it, the size estimated from the
    regions part the fold keeps (the task part's encoding is not redone)."""
    cid = str(body["checkpoint_id"])
    kept = s.regions.checkpoints.get(cid, {}) if s.regions is not None else {}
    include = [part for part, here in (("tiles", kept.get("canvas") is not None),
                                       ("shaders", kept.get("shaders") is not None),
                                       ("cartridges", kept.get("cartridges") is not None),
                                       ("session_state", cid in s.task_checkpoints)) if here]
    size = len(kept.get("canvas") or b"")
    s.checkpoints[cid] = {
        "checkpoint_id": cid, "checkpoint_name": str(body.get("name") or cid),
        "description": "automatic", "created_at": r.t, "include": include,
        "contents": {"tiles": kept.get("tiles", 0), "shaders": len(kept.get("shaders") or {}),
                     "cartridges": len(kept.get("cartridges") or {})},
        "size_kb": round(size / 1024, 2)}


#: The tools that make something over a region, and the key their answer names it by.
_MADE_OVER_A_REGION: Final = {"builder_place_tiles": "tiles_placed",
                              "builder_load_shader": "shader_id",
                              "builder_assemble_cartridge": "cartridge_id"}


def _matches(tool: Any, args: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Does a successful ``answer`` fit a call of ``tool`` with ``args``? (Each answer the
    fold uses names what its call was about: a check of the pairing.)"""
    if tool == "session_create":
        return answer.get("session_name") == args.get("session_name")
    if tool == "builder_place_tile":
        return answer.get("region") == {"x": args.get("x"), "y": args.get("y"),
                                        "width": 1, "height": 1}
    if tool in _MADE_OVER_A_REGION:
        # The same region is not enough: under a fault plan a shader's answer can meet a
        # cartridge's call over the same block. What the answer says it made must fit too.
        region = args.get("region")
        return isinstance(region, dict) and _MADE_OVER_A_REGION[tool] in answer and \
            answer.get("region") == {k: region.get(k) for k in ("x", "y", "width", "height")}
    if tool == "task_report":
        return answer.get("task_id") == args.get("task_id")
    if tool == "task_delegate":
        return "task_id" in answer and "position_in_queue" in answer
    if tool == "build_checkpoint":  # a checkpoint without a name is called by its id
        return answer.get("checkpoint_name") in (args.get("checkpoint_name") or
                                                 answer.get("checkpoint_id"),)
    return True


def _described(task: dict[str, Any], args: dict[str, Any]) -> None:
    """Fill ``task``'s description, region, dependencies, deadline, retries and payload from
    the ``task_delegate`` arguments that made it."""
    task.update(description=args.get("description", ""), region=args.get("region"),
                dependencies=list(dict.fromkeys(args.get("dependencies") or ())),
                deadline=args.get("deadline"), max_retries=int(args.get("max_retries", 0) or 0),
                payload=dict(args.get("payload") or {}), _described=True)


def _serial(identifier: str) -> int:
    """The serial at the end of an id such as ``claim_000012`` (0 when there is none)."""
    tail = identifier.rsplit("_", 1)[-1]
    # ASCII digits only: str.isdigit() takes "²", which int() refuses (a log's ids are
    # data, and a crafted one must not make the fold a traceback).
    return int(tail) if _DIGITS.fullmatch(tail) else 0


def _codes(tiles: Any, rect: Rect) -> bytes | NDArray[np.uint8]:
    """The tile rows of a write over ``rect`` as the canvas takes them: their codes as
    bytes, row-major, when they are ``rect.height`` lists of ``rect.width`` codes (a
    builder's rows, nearly every write), else as :func:`_rows` makes them. The canvas
    stores the same either way, without a numpy array made for each write."""
    if type(tiles) is list and len(tiles) == rect.height and tiles \
            and type(tiles[0]) is list and len(tiles[0]) == rect.width:
        joined = _joined(tiles)
        if joined is not None:
            return joined
    return _rows(tiles)


def _joined(tiles: Any) -> bytes | None:
    """Rows of equal length of codes as their bytes, row-major; None for anything else
    (names, numbers bytes() does not take, ragged or empty rows, not lists)."""
    if type(tiles) is list and tiles and all(type(row) is list for row in tiles):
        width = len(tiles[0])
        if width and all(len(row) == width for row in tiles):
            try:  # bytes() takes ints in 0..255 only (bools as 0 and 1, as numpy does)
                return bytes(tiles[0]) if len(tiles) == 1 else b"".join(map(bytes, tiles))
            except (TypeError, ValueError):
                return None
    return None


def _rows(tiles: Any) -> NDArray[np.uint8]:
    """Tile rows as codes. Only writes the service accepted are folded, so every value is
    a valid code or tile name: numbers convert at once, names are looked up.

    Rows of equal length of codes (a blueprint, 840 rows of 840) are joined as bytes and
    viewed as an array: numpy's conversion of the nested lists costs four times that."""
    joined = _joined(tiles)
    if joined is not None:
        return np.frombuffer(bytearray(joined), dtype=np.uint8).reshape(len(tiles), -1)
    try:
        return np.array(tiles, dtype=np.uint8)
    except (ValueError, TypeError, OverflowError):
        return np.array([[int(parse_tile(v)) for v in row] for row in tiles], dtype=np.uint8)


def fold(records: Iterable[TraceRecord], *, faults: bool = False,
         upto: int | None = None, last: TraceRecord | None = None) -> Image:
    """The :class:`Image` after ``records`` (a log from its first record; with ``upto``,
    only its records before seq ``upto``).

    ``last``: the log's last record (before ``upto``), when ``records`` leave some out
    (:func:`image_of` reads only the types the fold uses). The image stands after it,
    not after the last record folded: :attr:`Image.seq` is where the stopped run's log
    ends and the resumed run's begins (``scenarios._kit.run_records`` and the
    scenarios' reading of what was done before the kill count on it), whatever type
    the log's last records are of (a ``delegation.*`` event, a status update)."""
    return _folded(((*r, 0) for r in records), faults=faults, upto=upto, last=last)


def _folded(rows: Iterable[tuple[Any, ...]], *, faults: bool, upto: int | None,
            last: TraceRecord | None) -> Image:
    """:func:`fold` of a stored log's rows (:meth:`_Fold.fold_rows`)."""
    f = _Fold()
    if faults:
        f.problems.append("the run had a fault plan: lost and doubled letters break the "
                          "pairing of calls and answers the fold relies on")
    seq, at = f.fold_rows(rows, upto)
    if last is not None and last.seq >= seq and (upto is None or last.seq < upto):
        seq, at = last.seq + 1, max(at, last.t)
    for s in f.sessions.values():
        for task in s.tasks.values():
            if not task.get("_full") and not task.get("_described") \
                    and not f.unanswered_delegation(s, task):
                f.problems.append(f"task {task['task_id']}: the log holds neither its "
                                  "assignment nor the call that made it")
        for tasks in (s.tasks, *s.task_checkpoints.values()):
            for task in tasks.values():
                for temporary in ("_created_seq", "_described", "_full"):
                    task.pop(temporary, None)
                # Held by hand only while blocked (the graph clears it on any other way).
                task["held"] = bool(task.pop("_held", False)) and task["status"] == "blocked"
                task["priority"] = str(task["priority"])
                parse_priority(task["priority"])  # a ValueError here is a fold bug
    # A claim task_accept made whose acceptance the log does not hold: the task is still
    # pending (its assignee accepts it again, claiming again), so the claim is no one's.
    for s in f.sessions.values():
        if s.regions is not None:
            for cid in f.task_claims:
                if cid in s.regions.claims and cid not in f.accepted_claims:
                    del s.regions.claims[cid]
    # Each session's owner, from the answer to its creation, wherever that is in the log.
    # A session whose creation was never answered is not kept: its host never learned
    # of it, no agent can have joined it, and a resumed scenario makes it again.
    for sid, s in f.sessions.items():
        if sid in f.owners:
            s.owner, s.granted_roles = f.owners[sid][0], list(f.owners[sid][1])
    for sid in [sid for sid, s in f.sessions.items() if not s.owner]:
        del f.sessions[sid]
    f.serials["seq"] = seq
    return Image(seq, at, f.sessions, f.serials, f.problems, f.completions)


def image_of(run: StoredLog, upto: int | None = None) -> Image:
    """Fold every committed record of ``run`` (see the module doc), or those before seq
    ``upto``. The image stands after the log's last record (before ``upto``), of
    whatever type."""
    last = run.last()
    if last is not None and upto is not None and last.seq >= upto:
        tail = run.records(max(0, upto - 1))
        try:
            last = next(tail, None) if upto > 0 else None
        finally:
            tail.close()
    rows = run.rows(types=_FOLDED, upto=upto)
    try:
        faults = bool(run.info is not None and run.info.options.get("faults"))
        return _folded(rows, faults=faults, upto=upto, last=last)
    finally:
        rows.close()
