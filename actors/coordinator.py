"""The session coordinator: sessions, membership, checkpoints, and the A2A tools.

It owns each session's identity, configuration and membership (names, roles,
colours, invite tokens) and the checkpoint index. Everything else it asks of
the service that owns it, with internal operations (``barnraise.actors.service``):

``regions``  ``_state``, ``_release_all``, ``_auto_claim``, ``_blueprint``,
             ``_checkpoint``, ``_rollback``, ``_claims_of``
``tasks``    ``_state``, ``_requeue_agent``, ``_checkpoint``, ``_rollback``

A checkpoint is kept where its data lives: each service stores its own part
under the checkpoint id, and the coordinator keeps the index (name, time,
contents, size). Times are simulation seconds.

Three rooms of the coordinator serve some of its tools, each the one owner of its own
state: :mod:`barnraise.actors.session_checkpoints` (``build_checkpoint``, ``build_rollback``,
the index and autosave), :mod:`barnraise.actors.session_messaging` (the A2A tools and the
subscriptions they gave, alerts) and :mod:`barnraise.actors.session_plans` (``plan_start``
and the runners it starts). The coordinator itself keeps the sessions' lifecycle:
creation, joins and grants, leaves and expiry, and the session's state.
"""

from __future__ import annotations

import hmac
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

import msgspec

from barnraise.actors.paging import cursor_offset, fit_lists
from barnraise.actors.regions import BLUEPRINT
from barnraise.actors.service import (
    MEMBER_JOINED,
    MEMBER_LEFT,
    REPLY_MARGIN,
    SESSION,
    SESSION_CLOSED,
    Call,
    Member,
    SessionInfo,
    SessionService,
)
from barnraise.actors.session_checkpoints import SessionCheckpoints
from barnraise.actors.session_messaging import SessionMessaging
from barnraise.actors.session_plans import SessionPlans
from barnraise.actors.supervisor import ROOT, Supervisor
from barnraise.sim.dispatch.core import SYSTEM
from barnraise.sim.events import (
    AgentExpired,
    AgentJoined,
    AgentLeft,
    AgentOffline,
)
from barnraise.sim.messages import Message
from barnraise.sim.tools import SERVICES, ToolError, WorldLimits, ok
from barnraise.sim.views import (
    MemberView,
    SessionPart,
    SessionView,
    json_copy,
    member_colour,
)

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["JOIN_STATE_LIMIT", "RECENT_EVENTS", "Coordinator"]

_encode: Final = msgspec.json.encode

#: The events of a session that ``session_get_state(include=["events"])`` returns: its last.
RECENT_EVENTS: Final = 100
#: The longest list in a join's ``session_state`` (``truncated: true`` when cut): a
#: join's answer costs the same in a session of ten members or ten thousand.
JOIN_STATE_LIMIT: Final = 100


def _same_secret(given: object, secret: str) -> bool:
    """``given`` is ``secret``, compared in time that does not depend on where they
    differ (:func:`hmac.compare_digest`): a token guessed a character at a time
    learns nothing from how long a refusal took."""
    return isinstance(given, str) and hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), secret.encode("utf-8", "surrogatepass"))


def _token_role(role_tokens: Mapping[str, str], given: object) -> str | None:
    """The role a role token grants, each token compared as a secret (a session has a
    handful: one a granted role)."""
    found = None
    for token, role in role_tokens.items():
        if _same_secret(given, token):
            found = role  # no early exit: the time does not say which one matched
    return found

@dataclass(slots=True)
class _Session:
    info: SessionInfo
    invite_token: str
    private: bool
    owner: str = ""  # the creator's agent id: it grants the granted roles
    granted_roles: frozenset[str] = frozenset()
    grants: dict[str, str] = field(default_factory=dict)  # agent id -> granted role
    role_tokens: dict[str, str] = field(default_factory=dict)  # token -> role
    joined: int = 0  # members ever joined: the next colour


class Coordinator(SessionService):
    service_name = "coordinator"

    def __init__(self, *, limits: WorldLimits | None = None, **options: Any) -> None:
        super().__init__(**options)
        self._state: dict[str, _Session] = {}
        self._serial = 0
        self.limits = limits or WorldLimits()
        self._recent: dict[str, deque[tuple[float, str, Any]]] = {}
        self._stop_listening: Callable[[], None] = lambda: None
        # session id -> its members' display names: a join checks its name in O(1)
        # (a pass over the members made joining a crew of n cost n * n)
        self._names: dict[str, set[str]] = {}
        self._leaving: set[tuple[str, str]] = set()  # (session, agent) being removed
        # The rooms, each the one owner of its state and serving its tools: the
        # checkpoint index and autosave, and the A2A tools with the subscriptions.
        self.checkpoints = SessionCheckpoints(self)
        self.messaging = SessionMessaging(self)
        self.plans = SessionPlans(self)
        self.rooms = (self.checkpoints, self.messaging, self.plans)

    def on_start(self) -> None:
        # The registry notices lost heartbeats; sessions hear of it from here.
        self.subscribe("registry:events:agent_offline")
        self._stop_listening = self.dispatcher.trace.listen(self._heard)

    def on_stop(self) -> None:
        self._stop_listening()
        super().on_stop()

    def handle_status_update(self, message: Message) -> None:
        content = message.content
        if message.from_agent == SYSTEM:
            # "terminated": a member's actor stopped for good (watched since it joined):
            # stopped, crashed with nobody to restart it, or given up on by its
            # supervisor. "expire": the host says it is gone (Simulation.expire).
            agent_id, event = content.get("agent_id"), content.get("event")
            if isinstance(agent_id, str) and event == "terminated":
                self.expire(agent_id, "terminated")
            elif isinstance(agent_id, str) and event == "expire":
                self.expire(agent_id, str(content.get("reason", "expired")))
            return
        if message.from_agent != "registry" or content.get("event") != "agent_offline":
            return
        agent_id = content.get("agent_id")
        if not isinstance(agent_id, str):
            return
        member_of = False
        for session_id, members in self.members.items():
            member = members.get(agent_id)
            if member is not None:
                member_of = True
                self.emit_event(AgentOffline(
                    session_id=session_id, agent_id=member.agent_id, name=member.name,
                    last_heartbeat=content.get("last_heartbeat")))
        # Offline is gone, unless a supervisor brings it back: a restarted member is
        # still a member and rebuilds from the world's state (Agent.resuming), so only
        # an unsupervised one leaves its sessions, and its tasks go to others.
        supervisor = self.dispatcher.actors.get(ROOT)
        if member_of and not (isinstance(supervisor, Supervisor)
                              and supervisor.supervises(agent_id)):
            self.expire(agent_id, "offline")

    # -- reading ------------------------------------------------------------------------

    def session_ids(self) -> tuple[str, ...]:
        """The open sessions, oldest first. Call it in this actor's own context."""
        return tuple(self._state)

    def view_of(self, session_id: str) -> SessionPart:
        """This service's part of a :class:`~barnraise.sim.views.WorldView`: the session, its
        members in join order, its checkpoint index. LookupError for an unknown
        session. Call it in this actor's own context: ``Simulation.view`` does."""
        session = self._state.get(session_id)
        if session is None:
            raise LookupError(f"no session {session_id!r}")
        info = session.info
        members = self.members.get(session_id, {})
        return SessionPart(
            session=SessionView(info.session_id, info.session_name, info.grid_size,
                                info.coordination_mode, json_copy(info.config),
                                info.created_at, info.max_agents, session.private),
            members=tuple(MemberView(m.agent_id, m.name, m.role, m.color,
                                     tuple(m.capabilities), m.joined_at)
                          for m in members.values()),
            checkpoints=self.checkpoints.views(session_id))

    def new_id(self, prefix: str) -> str:
        """A new id: ``prefix``, a seeded random part and the coordinator's serial."""
        self._serial += 1
        return f"{prefix}_{int(self.rng.integers(0, 2**32)):08x}{self._serial:x}"

    def _tell_services(self, op: str, **content: Any) -> None:
        # The coordinator owns membership, so it applies the change to itself at
        # once (two joins back to back must both see it); the others get it at
        # HIGH priority before the caller hears back, so by the time the caller's
        # next request reaches a service, the update is ahead of it.
        self.handler(f"op{op}")(content)
        for service in SERVICES:
            if service != self.name:
                self.send(service, "coordination_request", {"op": op, **content}, priority=8)

    # -- sessions ----------------------------------------------------------------------

    def _check_limits(self, args: dict[str, Any]) -> None:
        """Refuse a session the host's limits do not allow, before anything exists."""
        limits, grid = self.limits, args["grid_size"]
        if grid > limits.max_grid_size:
            raise ToolError("invalid_argument", f"grid_size: at most {limits.max_grid_size} "
                            f"on this host, got {grid}", field="grid_size")
        cells = sum(s.info.grid_size ** 2 for s in self._state.values())
        if cells + grid * grid > limits.max_total_cells:
            raise ToolError("invalid_argument", f"grid_size: the open sessions hold {cells:,} "
                            f"cells and this host allows {limits.max_total_cells:,} in all; a "
                            f"{grid} x {grid} canvas does not fit", field="grid_size")
        if len(self._state) >= limits.max_sessions:
            raise ToolError("invalid_argument", f"this host holds at most "
                            f"{limits.max_sessions} sessions", field="session_name")
        interval = args["config"]["checkpoint_interval"]
        if 0 < interval < limits.min_checkpoint_interval:
            raise ToolError("invalid_argument", "config.checkpoint_interval: 0 (off) or at "
                            f"least {limits.min_checkpoint_interval:g} simulated seconds, got "
                            f"{interval!r}", field="config.checkpoint_interval")

    async def tool_session_create(self, call: Call) -> dict[str, Any]:
        args = call.args
        self._check_limits(args)
        config = args["config"]
        session_id = self.new_id("session")
        info = SessionInfo(
            session_id=session_id, session_name=args["session_name"],
            grid_size=args["grid_size"], coordination_mode=args["coordination_mode"],
            config=config, created_at=self.now, max_agents=args["max_agents"],
        )
        # The invite token is a capability: from the operating system, never from the
        # seed. The trace shows the seeded stand-in instead, so digests stay reproducible
        # (and the draw keeps the coordinator's random stream where it always was).
        stand_in = f"join_{int(self.rng.integers(0, 2**48)):012x}"
        token = f"join_{secrets.token_urlsafe(18)}"
        self.dispatcher.trace.redact(token, stand_in)
        self._state[session_id] = _Session(info, token, config["private"], owner=call.caller,
                                           granted_roles=frozenset(args["granted_roles"]))
        self._tell_services(SESSION, session=info.to_dict())
        if args.get("blueprint") is not None:
            result = await self.ask("regions", BLUEPRINT, session_id=session_id,
                                    blueprint=args["blueprint"])
            if not result.get("success"):
                self._drop_session(session_id)
                raise ToolError("invalid_argument", f"blueprint: {result.get('message')}",
                                field="blueprint")
        self.checkpoints.open(session_id, config["checkpoint_interval"])
        return ok(session_id=session_id, session_name=info.session_name,
                  created_at=info.created_at, invite_token=token,
                  coordination_mode=info.coordination_mode, grid_size=info.grid_size,
                  state={"agents_count": 0, "regions_claimed": 0, "tasks_pending": 0,
                         "progress_percent": 0.0})

    def resume_serial(self, serials: Mapping[str, int]) -> None:
        self._serial = max(self._serial, serials["coordinator"])

    def restore_session(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """A resumed session: its owner, granted roles and members as they were, a new
        invite token (the log keeps only stand-ins; the host's code is given the new one
        by ``Simulation.restore``); role tokens handed out before are void."""
        info = self.sessions[image.session_id]
        stand_in = f"join_resumed_{len(self._state) + 1}"
        token = f"join_{secrets.token_urlsafe(18)}"
        self.dispatcher.trace.redact(token, stand_in)
        self._state[info.session_id] = _Session(
            info, token, info.config["private"], owner=image.owner,
            granted_roles=frozenset(image.granted_roles), joined=image.joined)
        for member in self.members[info.session_id].values():
            self.dispatcher.set_session(member.agent_id, info.session_id)
        self._names[info.session_id] = {m.name for m in self.members[info.session_id].values()}
        self.checkpoints.open(info.session_id, info.config["checkpoint_interval"],
                              image.checkpoints)

    def _drop_session(self, session_id: str) -> None:
        self._state.pop(session_id, None)
        self._tell_services(SESSION_CLOSED, session_id=session_id)

    def op_session_closed(self, content: dict[str, Any]) -> None:
        self.sessions.pop(content["session_id"], None)
        self.members.pop(content["session_id"], None)
        self._names.pop(content["session_id"], None)
        self.checkpoints.close(content["session_id"])

    def op_member_joined(self, content: Mapping[str, Any]) -> None:
        super().op_member_joined(content)
        self._names.setdefault(content["session_id"], set()).add(content["member"]["name"])

    def op_member_left(self, content: Mapping[str, Any]) -> None:
        member = self.members.get(content["session_id"], {}).get(content["agent_id"])
        super().op_member_left(content)
        if member is not None:
            self._names.get(content["session_id"], set()).discard(member.name)

    async def tool_session_join(self, call: Call) -> dict[str, Any]:
        args = call.args
        session = self._state[call.session_id]
        members = self.members[call.session_id]
        token_role = _token_role(session.role_tokens, args["role_token"]) \
            if "role_token" in args else None
        if "role_token" in args and token_role is None:
            raise ToolError("invalid_token", "role_token: not one of this session's role "
                            "tokens", field="role_token")
        if session.private and token_role is None and not _same_secret(
                args.get("invite_token"), session.invite_token):
            raise ToolError("invalid_token", "this session is private; the invite token "
                            "given does not match")
        role = args["role"]
        if role in session.granted_roles and call.caller != session.owner and (
                session.grants.get(call.caller) != role and token_role != role):
            raise ToolError("permission_denied", f"role {role!r} is granted in this session, "
                            "not open: the session's owner grants it (session_grant), to "
                            "this agent or as a role token", field="role", role=role)
        if call.caller in members:
            raise ToolError("name_taken", f"{call.caller} has already joined as "
                            f"{members[call.caller].name}")
        if args["agent_name"] in self._names.get(call.session_id, ()):
            raise ToolError("name_taken", f"agent_name {args['agent_name']!r} is taken "
                            "in this session", field="agent_name")
        if len(members) >= session.info.max_agents:
            raise ToolError("session_full", f"the session has its {session.info.max_agents} "
                            "agents")
        member = Member(call.caller, args["agent_name"], args["role"],
                        list(args["capabilities"]), member_colour(session.joined), self.now)
        session.joined += 1
        self._tell_services(MEMBER_JOINED, session_id=call.session_id,
                            member=member.to_dict())
        self.dispatcher.set_agent_type(call.caller, member.role)
        self.dispatcher.set_session(call.caller, call.session_id)
        # Told when its actor stops for good (not a crash its supervisor repairs):
        # then it leaves its sessions at once (expire, reason terminated). One watch
        # an agent, whatever the number of its sessions (_remove_member ends it).
        if sum(call.caller in m for m in self.members.values()) == 1:
            self.dispatcher.watch(self.name, call.caller)
        self.emit_event(AgentJoined(session_id=call.session_id, agent_id=member.agent_id,
                                    name=member.name, role=member.role))
        try:
            return await self._welcome(call, session, member)
        except Exception:
            # The join cannot answer (a bug, a service that did not): it did not happen.
            await self._undo_join(call.session_id, member)
            raise

    async def _undo_join(self, session_id: str, member: Member) -> None:
        """Take back a join that failed after the member was let in: its claims (an
        auto-assigned region), its membership everywhere, its binding; ``agent_left``
        says so to whoever heard ``agent_joined``."""
        try:
            await self.ask("regions", "_release_all", session_id=session_id,
                           agent_id=member.agent_id, handoff_to=None)
        finally:
            self._tell_services(MEMBER_LEFT, session_id=session_id,
                                agent_id=member.agent_id)
            self.dispatcher.set_session(member.agent_id, None)
            self.emit_event(AgentLeft(session_id=session_id, agent_id=member.agent_id,
                                      name=member.name, reason="join_failed"))

    async def _welcome(self, call: Call, session: _Session, member: Member) -> dict[str, Any]:
        """The answer to a join that took effect: its region, if one is assigned, and a
        first look at the session."""
        assigned = None
        config = session.info.config
        if config["auto_assign_regions"] and member.role == "builder":
            claim = await self.ask("regions", "_auto_claim", session_id=call.session_id,
                                   agent_id=member.agent_id, size=config["auto_region_size"])
            assigned = claim if claim.get("success") else None
        state = await self._state_of(call.session_id, ("agents", "regions", "tasks"),
                                     0, JOIN_STATE_LIMIT)
        session_state: dict[str, Any] = {"agents": state["agents"],
                                         "claimed_regions": state["regions"],
                                         "pending_tasks": state["pending_tasks"]}
        result = ok(agent_id=member.agent_id, session_id=call.session_id, role=member.role,
                    name=member.name, assigned_color=member.color, assigned_region=assigned,
                    session_state=session_state)
        # A big session's state is a first look (the rest: session_get_state), cut to
        # fit one reply: the join took effect, so its answer must be sendable.
        lists = list(session_state.values())
        longest = max(len(x) for x in lists)
        if fit_lists(result, lists, self.reply_budget()) < longest or (
                state["agents_total"] > JOIN_STATE_LIMIT or
                state["claims_total"] > JOIN_STATE_LIMIT
                or state["pending_total"] > len(state["pending_tasks"])):
            session_state["truncated"] = True
        return result

    def tool_session_grant(self, call: Call) -> dict[str, Any]:
        args = call.args
        session = self._state[call.session_id]
        if call.caller != session.owner:
            raise ToolError("permission_denied", "only the session's owner (the agent that "
                            "created it) grants roles")
        role = args["role"]
        if "agent_id" in args:
            self.grant(call.session_id, args["agent_id"], role)
            return ok(role=role, agent_id=args["agent_id"])
        # A capability: from the operating system; the trace shows a stand-in counted
        # per session, so digests stay a function of the seed.
        token = f"role_{secrets.token_urlsafe(18)}"
        stand_in = f"role_{call.session_id}_{len(session.role_tokens) + 1}"
        session.role_tokens[token] = role
        self.dispatcher.trace.redact(token, stand_in)
        return ok(role=role, role_token=token)

    def grant(self, session_id: str, agent_id: str, role: str) -> None:
        """Let ``agent_id`` join ``session_id`` as ``role`` (the owner's grant).

        The host's Python code calls it through :meth:`barnraise.actors.world.Simulation.grant`
        (in this actor's context); remote owners through the ``session_grant`` tool.
        KeyError for an unknown session.
        """
        self._state[session_id].grants[agent_id] = role

    async def tool_session_leave(self, call: Call) -> dict[str, Any]:
        if call.member is None:
            raise ToolError("not_a_member", f"{call.caller} is not in {call.session_id}")
        handoff = call.args.get("handoff_to")
        if handoff is not None:
            resolved = self.member_id(call.session_id, handoff)
            if resolved is None:
                raise ToolError("invalid_argument", f"handoff_to: {handoff!r} is not a member",
                                field="handoff_to")
            handoff = resolved
        if handoff == call.caller:
            raise ToolError("invalid_argument", "handoff_to: cannot hand off to yourself",
                            field="handoff_to")
        removed = await self._remove_member(call.session_id, call.caller, handoff)
        if removed is None:
            raise ToolError("not_a_member", f"{call.caller} is leaving {call.session_id} "
                            "already (it expired)")
        released, requeued = removed
        self.emit_event(AgentLeft(session_id=call.session_id, agent_id=call.caller,
                                  name=call.member.name, reason="left"))
        return ok(released_regions=released.get("released_regions", []),
                  transferred_to=released.get("transferred_to"),
                  requeued_tasks=requeued.get("requeued", []))

    async def _remove_member(self, session_id: str, agent_id: str, handoff: str | None,
                             ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Take ``agent_id`` out of ``session_id``: its claims released (or handed to
        ``handoff``), its tasks back to the queue, its membership gone from every
        service, every subscription it held to the session's topics ended. The answers
        of ``regions`` and ``tasks``; None if it is being removed already (a leave and
        an expiry at once: the first does it)."""
        key = (session_id, agent_id)
        if key in self._leaving:
            return None
        self._leaving.add(key)
        try:
            released = await self.ask("regions", "_release_all", session_id=session_id,
                                      agent_id=agent_id, handoff_to=handoff)
            requeued = await self.ask("tasks", "_requeue_agent", session_id=session_id,
                                      agent_id=agent_id)
            self._tell_services(MEMBER_LEFT, session_id=session_id, agent_id=agent_id)
            self.dispatcher.set_session(agent_id, None)
            if not any(agent_id in members for members in self.members.values()):
                self.dispatcher.unwatch(self.name, agent_id)
            # A leaver hears nothing more of the session (it had joined to hear it).
            self.messaging.end(session_id, agent_id)
        finally:
            self._leaving.discard(key)
        return released, requeued

    # -- liveness -------------------------------------------------------------------------

    def expire(self, agent_id: str, reason: str) -> None:
        """``agent_id`` is gone (its heartbeats stopped, or a remote agent's time to live
        ran out): it leaves every session it is a member of, as a leave would, and each
        gets an ``agent_expired`` event. Call it in this actor's own context
        (:meth:`barnraise.actors.world.Simulation.expire` does)."""
        for session_id, members in self.members.items():
            if agent_id in members:
                self.start_behaviour(self._expire, session_id, agent_id, reason,
                                     name="expire")

    async def _expire(self, _actor: Any, session_id: str, agent_id: str, reason: str) -> None:
        member = self.members.get(session_id, {}).get(agent_id)
        if member is None:
            return  # it left, or its session closed, meanwhile
        removed = await self._remove_member(session_id, agent_id, None)
        if removed is None:
            return
        released, requeued = removed
        self.emit_event(AgentExpired(
            session_id=session_id, agent_id=agent_id, name=member.name, reason=reason,
            released_regions=released.get("released_regions", []),
            requeued_tasks=requeued.get("requeued", [])))

    async def tool_session_get_state(self, call: Call) -> dict[str, Any]:
        """The session's state; ``agents`` and ``regions`` a page at a time.

        A page holds at most ``limit`` of each list, from the position ``cursor`` names
        (the first by default), cut shorter if it would not fit one reply; when either
        list goes on past it the answer adds ``next_cursor``, to pass back. Below one
        page the answer is as it always was."""
        args = call.args
        include = set(args["include"])
        if "all" in include:
            include = {"agents", "regions", "tasks", "progress", "events"}
        offset = cursor_offset(args.get("cursor"))
        state = await self._state_of(call.session_id, tuple(include), offset, args["limit"])
        out: dict[str, Any] = {}
        for key in ("agents", "regions", "tasks", "progress"):
            if key in include:
                out[key] = state[key]
        if "events" in include:
            out["events"] = self._recent_events(call.session_id)
        result = ok(session_id=call.session_id, session_name=call.session.session_name
                    if call.session else "", now=self.now, state=out)
        paged = [out[key] for key in ("agents", "regions") if key in out]
        had = any(paged)
        shown = fit_lists(result, paged, self.reply_budget())
        if shown == 0 and had:  # a next_cursor where this one is would never move on
            raise ToolError("invalid_argument", f"cursor: the item at position {offset} "
                            "does not fit one reply beside the rest of the answer; ask for "
                            "fewer parts (include)", field="cursor")
        totals = [state["agents_total"] if "agents" in out else 0,
                  state["claims_total"] if "regions" in out else 0]
        if offset + shown < max(totals, default=0):
            result["next_cursor"] = str(offset + shown)
        return result

    def reply_budget(self) -> int:
        """The bytes of JSON an answer's lists may take (a message's limit, less a margin)."""
        return int(self.dispatcher.max_content_bytes) - REPLY_MARGIN

    async def _state_of(self, session_id: str, include: tuple[str, ...], offset: int = 0,
                        limit: int | None = None) -> dict[str, Any]:
        """The parts of ``_state`` asked for; with ``limit``, a page of the agents (join
        order) and of the claims (oldest first) from ``offset``, each part asking only
        about the agents on it: the cost is the page's, not the session's.
        ``agents_total`` and ``claims_total`` count the whole lists."""
        members = self.members.get(session_id, {})
        page = list(members.values() if limit is None
                    else islice(members.values(), offset, offset + limit))
        ids = [m.agent_id for m in page]
        regions: dict[str, Any] = {"claims": [], "progress": {}}
        tasks: dict[str, Any] = {"counts": {}, "by_agent": {}, "pending_tasks": []}
        wanted = set(include)
        if {"regions", "progress", "agents"} & wanted:
            # completion compares the whole canvas with the blueprint: only when asked
            regions = await self.ask("regions", "_state", session_id=session_id,
                                     progress="progress" in include, offset=offset,
                                     limit=limit if "regions" in wanted else 0,
                                     claims_of=ids if "agents" in wanted else [])
        if {"tasks", "agents"} & wanted:
            tasks = await self.ask("tasks", "_state", session_id=session_id,
                                   agents=ids if "agents" in wanted else [])
        claims = regions.get("claims", [])
        claimed_by = regions.get("claimed_by", {})
        completed_by = tasks.get("by_agent", {})
        agents = [{
            "agent_id": m.agent_id, "name": m.name, "role": m.role, "color": m.color,
            "capabilities": m.capabilities, "joined_at": m.joined_at,
            "regions_claimed": claimed_by.get(m.agent_id, 0),
            "tasks_completed": completed_by.get(m.agent_id, 0),
        } for m in page]
        return {"agents": agents, "regions": claims, "tasks": tasks.get("counts", {}),
                "pending_tasks": tasks.get("pending_tasks", []),
                "pending_total": tasks.get("pending_total", 0),
                "progress": regions.get("progress", {}), "agents_total": len(members),
                "claims_total": regions.get("claims_total", len(claims))}

    def _recent_events(self, session_id: str) -> list[dict[str, Any]]:
        return [{"t": t, "type": event_type, **body}
                for t, event_type, body in self._recent.get(f"session:{session_id}:events", ())]

    def _heard(self, t: float, sender: str, topic: str, event_type: str, body: Any) -> None:
        # Every domain event passes here (on the thread that records it): each session's
        # last RECENT_EVENTS are kept, so session_get_state never scans the trace, which
        # took 1.5 s a call at a million records.
        recent = self._recent.get(topic)
        if recent is None:  # a session's first event, or not a session's events topic
            if not (topic.endswith(":events") and topic.startswith("session:")):
                return
            recent = self._recent[topic] = deque(maxlen=RECENT_EVENTS)
        recent.append((t, event_type, body))

    # -- checkpoints -------------------------------------------------------------------

    # -- A2A ------------------------------------------------------------------------------

