"""The coordinator's state, folded from a stored log: its share of every reader's fold.

The coordinator (:mod:`barnraise.actors.coordinator`) owns the sessions, their membership and the
checkpoint index. What it held, the log says:

* **sessions**: each session's info from the coordinator's
  :data:`~barnraise.actors.service.SESSION` operation (to every service: regions' copy is read),
  closed by :data:`~barnraise.actors.service.SESSION_CLOSED`; its owner and granted roles from the
  ``session_create`` call and its answer (a session whose creation was never answered is
  dropped: its host never learned of it). The answer may come before regions'
  ``SESSION`` record: the coordinator tells the services and answers at once, and in
  realtime each record is written on its recipient's thread, so the two are matched by
  session id at the end, not in log order;
* **members** (with their colours and join times): :data:`~barnraise.actors.service.MEMBER_JOINED`
  and :data:`~barnraise.actors.service.MEMBER_LEFT` (a join is answered only after regions' copy,
  through a ``_state`` round trip); the world at a time reads ``agent_joined`` and
  ``agent_left`` (:func:`world_event`), colouring the n-th join with the n-th colour, as
  the coordinator does;
* **the checkpoint index**: the ``build_checkpoint`` answers; an automatic checkpoint's
  entry from its ``checkpoint_created`` event, made as the coordinator makes it from what
  the services kept;
* **its serial**: one a session, a checkpoint and a ``plan_start`` answer (a plan's id),
  the ids it drew.

:class:`CoordinatorFold` is its share of a realtime resume's fold
(:mod:`barnraise.actors.stored.resume`); ``Coordinator.restore_session`` takes what it makes.
"""

from __future__ import annotations

from typing import Any, Final

from barnraise.actors.service import MEMBER_JOINED, MEMBER_LEFT, SESSION, SESSION_CLOSED
from barnraise.actors.stored.image import SessionImage, WorldSession
from barnraise.sim.trace import TraceRecord
from barnraise.sim.views import member_colour

__all__ = ["ANSWERS", "EVENTS", "OPS", "WORLD_EVENTS", "CoordinatorFold", "matches", "world_event",
           "world_op"]

#: The coordinator's operations to every service its fold reads (regions' copy of each).
OPS: Final = frozenset({SESSION, SESSION_CLOSED, MEMBER_JOINED, MEMBER_LEFT})
#: The tools whose answers the coordinator's fold reads.
ANSWERS: Final = frozenset({"session_create", "build_checkpoint", "plan_start"})
#: The event types the coordinator's fold reads.
EVENTS: Final = frozenset({"checkpoint_created"})


class CoordinatorFold:
    """The coordinator's share of a realtime resume's fold: the sessions (made here, into
    ``sessions``), their members and owners, the checkpoint index,
    ``serials["coordinator"]``."""

    def __init__(self, sessions: dict[str, SessionImage], serials: dict[str, int]) -> None:
        self.sessions = sessions
        self.serials = serials
        #: session id -> (owner, granted roles), from each answered session_create. Kept
        #: apart from the sessions: in a realtime log the answer can come before the
        #: ``SESSION`` record the session is made from (see the module doc).
        self.owners: dict[str, tuple[str, list[str]]] = {}

    def session(self, sid: Any) -> SessionImage | None:
        return self.sessions.get(sid) if isinstance(sid, str) else None

    def op(self, op: Any, content: dict[str, Any]) -> SessionImage | None:
        """One of :data:`OPS` (regions' copy); the session it made, if it made one."""
        if op == SESSION and isinstance(content.get("session"), dict):
            info = dict(content["session"])
            s = SessionImage(info)
            self.sessions[str(info["session_id"])] = s
            self.serials["coordinator"] += 1  # session ids are the coordinator's draws
            return s
        if op == SESSION_CLOSED:
            self.sessions.pop(str(content.get("session_id")), None)
            return None
        part = self.session(content.get("session_id"))
        if op == MEMBER_JOINED:
            if part is not None and isinstance(content.get("member"), dict):
                member = dict(content["member"])
                part.members[str(member["agent_id"])] = member
                part.joined += 1
        elif op == MEMBER_LEFT and part is not None:
            part.members.pop(str(content.get("agent_id")), None)
        return None

    def answered(self, r: TraceRecord, tool: str, args: dict[str, Any],
                 answer: dict[str, Any]) -> None:
        """A successful answer of the coordinator to ``r.recipient``'s call of ``tool`` (one
        of :data:`ANSWERS`), which :func:`matches` the call."""
        if tool == "session_create":
            self.owners[str(answer.get("session_id"))] = (
                r.recipient, list(args.get("granted_roles") or ["architect"]))
            return
        if tool == "plan_start":
            self.serials["coordinator"] += 1  # a plan's id is the coordinator's draw
            return
        s = self.session(args.get("session_id"))
        if s is not None and tool == "build_checkpoint":
            entry = {k: v for k, v in answer.items() if k != "success"}
            s.checkpoints[str(answer["checkpoint_id"])] = entry

    def event(self, s: SessionImage, r: TraceRecord, body: dict[str, Any]) -> None:
        """A ``checkpoint_created`` event in session ``s``: the coordinator's index entry.

        A checkpoint an agent asked for gets its exact entry from the answer (later in
        the log); an automatic one (the session's checkpoint_interval) is answered to no
        one, so its entry is made here as the coordinator makes it, the size estimated
        from the regions part the fold keeps (the task part's encoding is not redone)."""
        self.serials["coordinator"] += 1
        cid = str(body["checkpoint_id"])
        include, contents, size = s.regions.kept(cid) if s.regions is not None \
            else ([], {"tiles": 0, "shaders": 0, "cartridges": 0}, 0)
        if cid in s.task_checkpoints:
            include.append("session_state")
        s.checkpoints[cid] = {
            "checkpoint_id": cid, "checkpoint_name": str(body.get("name") or cid),
            "description": "automatic", "created_at": r.t, "include": include,
            "contents": contents, "size_kb": round(size / 1024, 2)}

    def finish(self) -> None:
        """Each session's owner, from the answer to its creation, wherever that is in the
        log. A session whose creation was never answered is not kept: its host never
        learned of it, no agent can have joined it, and a resumed scenario makes it
        again."""
        for sid, s in self.sessions.items():
            if sid in self.owners:
                s.owner, s.granted_roles = self.owners[sid][0], list(self.owners[sid][1])
        for sid in [sid for sid, s in self.sessions.items() if not s.owner]:
            del self.sessions[sid]


def matches(tool: Any, args: dict[str, Any], answer: dict[str, Any]) -> bool:
    """Does a successful ``answer`` fit a call of ``tool`` (one of :data:`ANSWERS`) with
    ``args``? (Each answer the fold uses names what its call was about.)"""
    if tool == "session_create":
        return answer.get("session_name") == args.get("session_name")
    if tool == "build_checkpoint":  # a checkpoint without a name is called by its id
        return answer.get("checkpoint_name") in (args.get("checkpoint_name") or
                                                 answer.get("checkpoint_id"),)
    if tool == "plan_start":
        plan = args.get("plan")
        return isinstance(plan, dict) and answer.get("plan") == plan.get("name")
    return True


# -- the world at a time -------------------------------------------------------------------

#: The event types the coordinator's part of the world reads (expired: left without asking).
WORLD_EVENTS: Final = frozenset({"agent_joined", "agent_left", "agent_expired"})


def world_op(sessions: dict[str, WorldSession], op: Any, content: dict[str, Any]
             ) -> WorldSession | None:
    """One of :data:`OPS` (regions' copy): the session it made, if it made one (a session
    a snapshot gave is kept)."""
    if op == SESSION and isinstance(content.get("session"), dict):
        return sessions.setdefault(content["session"]["session_id"], WorldSession())
    if op == SESSION_CLOSED:
        sessions.pop(content.get("session_id"), None)  # type: ignore[arg-type]
    return None


def world_event(s: WorldSession, kind: str, body: dict[str, Any]) -> None:
    """An event of :data:`WORLD_EVENTS` in session ``s``: the members, the n-th join
    coloured with the n-th colour."""
    if kind == "agent_joined":
        s.members[str(body["agent_id"])] = (str(body.get("name")), str(body.get("role")),
                                            member_colour(s.joined))
        s.joined += 1
    else:
        s.members.pop(str(body.get("agent_id")), None)
