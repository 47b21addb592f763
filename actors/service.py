"""SessionService: the base of the actors that own a session's state and serve its tools.

There are four, one owner per piece of state, each an actor named after its
service in :data:`barnraise.sim.tools.SERVICES`:

* ``coordinator`` (actors/coordinator.py): sessions, membership, checkpoints, A2A tools
* ``regions`` (actors/regions.py): claims, the canvas, artifacts, the blueprint
* ``tasks`` (actors/taskqueue.py): the task graph, approvals
* ``coordination`` (actors/coordination.py): named locks and barriers

A tool call is a ``coordination_request`` whose content is ``{"tool": NAME,
"args": {...}}``; the answer is a ``coordination_response`` whose content is the
result dict. The service validates the arguments against the tool table,
checks that the session exists and the caller is a member, and asks the
policy, before it runs ``tool_<NAME>``; so no surface can go around any of it.

``tool_<NAME>(call)`` returns the result dict, raises :class:`ToolError`, is an
``async def`` (run as a behaviour, for tools that must ask another service), or
returns :data:`DEFERRED` after keeping ``call.message`` to answer it later with
``_answer`` (a barrier answers when the last agent arrives).

Services talk to each other with internal operations: a ``coordination_request``
whose content has ``op`` (always starting with ``_``), served by ``op_<name>``
methods and accepted only from another service. A ``tool_<NAME>`` or ``op_<name>``
method is the service's own or one of its rooms' (:attr:`SessionService.rooms`: an
object per concern, the one owner of its own state, such as the task queue's approval
gates), found by name. The coordinator keeps every
service's copy of the session list and membership current with ``_session``,
``_member_joined`` and ``_member_left``, sent before it answers the caller, so a
member's next call always finds itself known.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, overload

import msgspec
import numpy as np

from barnraise.actors.base import A2AActor
from barnraise.sim.dispatch import seed_for
from barnraise.sim.events import AgentOffline, SessionEvent
from barnraise.sim.messages import Message, MessageError, Priority
from barnraise.sim.policy import Policy
from barnraise.sim.tools import READ_ONLY_TOOLS, SERVICES, TOOLS, Tool, ToolError, fail
from barnraise.sim.validation import validator

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["CHECKPOINT", "DEFERRED", "MEMBER_JOINED", "MEMBER_LEFT", "OP_PREFIX", "REPLY_MARGIN",
           "ROLLBACK", "SESSION", "SESSION_CLOSED", "Call", "Deferred", "Member", "SessionInfo",
           "SessionService", "fit_prefix", "op_name", "shrink_to_fit"]

_copy: Final = msgspec.to_builtins
_encode: Final = msgspec.json.encode
#: Room left in a reply for what is not a paged list (its envelope, counts, a cursor).
REPLY_MARGIN: Final = 4096
#: Calls whose answers a service keeps under a fault plan, to answer a repeat the same.
ANSWERS_KEPT: Final = 100_000
#: The top supervisor (``barnraise.actors.supervisor.ROOT``): it may tell the services of a crash.
SUPERVISOR: Final = "supervisor"

#: Every member of every session reaches its services through these mailboxes.
SERVICE_CAPACITY: Final = 1_000_000

#: An answer's priority (an enum member's look-up costs a property call per use).
_HIGH: Final = Priority.HIGH
#: The services' names, to tell a service's call from an outsider's.
_SERVICE_NAMES: Final = frozenset(SERVICES)

#: What every operation's name starts with, and no tool's.
OP_PREFIX: Final = "_"


def op_name(name: str) -> str:
    """The operation served by a service's method ``op_<name>``, as the log spells it."""
    if not name or name.startswith(OP_PREFIX):
        raise ValueError(f"an operation's name after {OP_PREFIX!r}, not {name!r}")
    return OP_PREFIX + name


# The operations the coordinator sends the session services, and the names a stored log
# keeps them by (the services' folds of a log, ``actors/*_log.py``, read them so): changing
# one makes the stores already written unreadable, like any change to the log's schema.
#: To every service: ``session``, a new session's info (:meth:`SessionService.op_session`).
SESSION: Final = "_session"
#: To every service: ``session_id``, a session closed.
SESSION_CLOSED: Final = "_session_closed"
#: To every service: ``session_id``, ``member`` (a :class:`Member`'s fields).
MEMBER_JOINED: Final = "_member_joined"
#: To every service: ``session_id``, ``agent_id``.
MEMBER_LEFT: Final = "_member_left"
#: To regions, and to the task queue when the checkpoint keeps the session state:
#: ``session_id``, ``checkpoint_id``, and to regions ``include`` (any of ``tiles``,
#: ``shaders``, ``cartridges``): each keeps its part.
CHECKPOINT: Final = "_checkpoint"
#: To regions, and to the task queue as for its checkpoint: ``session_id``, ``checkpoint_id``.
ROLLBACK: Final = "_rollback"


def fit_prefix(items: list[Any], budget: int, used: int = 0) -> int:
    """How many of ``items``, from the first, fit in ``budget`` bytes of JSON (with
    ``used`` taken already): a list cut to it is sendable by construction."""
    # The common case, a list that fits whole, with one encoding: its length is the
    # items' and one comma each, plus a bracket, so more than the sum measured below.
    # (One encoding an item made a join in a session of n claims cost n encodings.)
    if used + len(_encode(items)) <= budget:
        return len(items)
    for i, item in enumerate(items):
        used += len(_encode(item)) + 1
        if used > budget:
            return i
    return len(items)


def shrink_to_fit(result: dict[str, Any], budget: int) -> dict[str, Any] | None:
    """``result`` with every list and dict in it (at its top and one level down) cut to
    one common length that fits ``budget`` bytes of JSON, and ``truncated: true``; None
    if even empty lists do not fit (a long string).

    The answer of a call that took effect but says too much to send (a broadcast's
    statuses for thousands of members, a leave's released claims): it stays a success,
    so a caller never hears "failed" from a call that changed the world."""
    def cut(value: Any, n: int) -> Any:
        if isinstance(value, list):
            return value[:n]
        if isinstance(value, dict):
            if len(value) > n and not any(isinstance(v, (list, dict)) for v in value.values()):
                return dict(list(value.items())[:n])
            return {k: cut(v, n) if isinstance(v, (list, dict)) else v
                    for k, v in value.items()}
        return value

    longest = max((len(v) for v in result.values() if isinstance(v, (list, dict))), default=0)
    n = longest
    while True:
        shrunk = {k: cut(v, n) for k, v in result.items()}
        shrunk["truncated"] = True
        if len(_encode(shrunk)) <= budget:
            return shrunk
        if n == 0:
            return None
        n //= 2


class Deferred:
    """The type of :data:`DEFERRED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED"


#: What a tool handler returns when it keeps the request to answer it later.
DEFERRED: Final = Deferred()


@dataclass(slots=True)
class SessionInfo:
    """What every service knows about a session (the coordinator owns it)."""

    session_id: str
    session_name: str
    grid_size: int
    coordination_mode: str
    config: dict[str, Any]
    created_at: float
    max_agents: int = 10

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Member:
    """A session member as every service sees it. ``agent_id`` is its actor name."""

    agent_id: str
    name: str
    role: str
    capabilities: list[str] = field(default_factory=list)
    color: str = "#888888"
    joined_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Call(msgspec.Struct):
    """One tool call as its service sees it: validated args, session and caller.

    A Struct rather than a dataclass: one is made per call, and a Struct's
    ``__init__`` runs in C (a dataclass's is Python, about 2.5x the time).
    ``caller`` and ``session_id`` are fields, set once by the service, rather than
    properties: the handlers read them about twice a call, and a property is a
    Python call each time. ``session_id`` is "" for a tool that takes no session."""

    tool: str
    args: dict[str, Any]
    session: SessionInfo | None
    member: Member | None
    message: Message
    #: The caller's name (``message.from_agent``).
    caller: str
    #: The session's id (``session.session_id``), "" when the tool takes none.
    session_id: str


class SessionService(A2AActor):
    """Validation, membership, policy and replies for one service's tools."""

    service_name: ClassVar[str] = ""
    #: The tools, and internal operations by their op name, whose handlers build every
    #: list and dict of their result for that one answer: none of it is kept, put in an
    #: event or sent elsewhere. Such a result is the caller's already and is answered as
    #: it is, without the copy every other answer gets (``_answer``); a failure is
    #: always copied. Under a fault plan, whose table keeps every answer, all are copied.
    fresh_results: ClassVar[frozenset[str]] = frozenset()
    #: The objects besides the actor that serve some of its ``tool_<name>`` and ``op_<name>``
    #: handlers: its rooms, one per concern, each the one owner of its own state (the task
    #: queue's approval gates, say). Set by a subclass in its ``__init__``.
    rooms: tuple[object, ...] = ()

    def __init__(self, *, policy: Policy | None = None) -> None:
        super().__init__(mailbox_capacity=SERVICE_CAPACITY)
        self.policy = policy or Policy()
        self.sessions: dict[str, SessionInfo] = {}
        self.members: dict[str, dict[str, Member]] = {}
        # tool name -> (bound handler, is it a coroutine function, is its result
        # fresh): looked up once
        self._tool_handlers: dict[str, tuple[Callable[[Call], Any], bool, bool]] = {}
        # op name -> its bound handler (the service's or a room's): looked up once
        self._op_handlers: dict[str, Callable[[Mapping[str, Any]], Any]] = {}
        # tool name -> (the tool, its arguments' check, does it take a session id), for
        # the tools of the table this service serves: what _admit asks, asked once.
        self._served: dict[str, tuple[Tool, Callable[[Mapping[str, Any]], dict[str, Any]],
                                      bool]] = {
            name: (tool, validator(tool), "session_id" in tool.input_schema["properties"])
            for name, tool in TOOLS.items() if tool.service == self.service_name}
        # Under a fault plan only (made in a2a_bind): (caller, correlation id) -> the
        # answer given, or None while the call is being served. A request sent again
        # (a retry, or a duplicated letter) is answered with the answer it got,
        # never served twice. Without faults nothing is sent twice: no table.
        # The last ANSWERS_KEPT calls are remembered: a retry comes within seconds, and
        # a table of every call of a long run would only grow.
        self._answers: OrderedDict[tuple[str, str], dict[str, Any] | None] | None = None

    def handler(self, name: str) -> Callable[..., Any]:
        """The method serving ``name`` (``tool_<tool>`` or ``op_<op>``): the actor's own,
        else its room's (:attr:`rooms`); AttributeError if none serves it."""
        found = getattr(self, name, None)
        if found is None:
            for room in self.rooms:
                found = getattr(room, name, None)
                if found is not None:
                    break
            else:
                raise AttributeError(f"{type(self).__name__} serves no {name}")
        return found  # type: ignore[no-any-return]

    def a2a_bind(self, dispatcher: Any, name: str) -> None:
        super().a2a_bind(dispatcher, name)
        if dispatcher.faults is not None:
            self._answers = OrderedDict()

    # -- requests ---------------------------------------------------------------------

    def handle_coordination_request(self, message: Message) -> None:
        content = message.content
        op = content.get("op")
        if op is not None:
            self._internal(str(op), message)
            return
        answers = self._answers
        if answers is not None and message.metadata.correlation_id is not None:
            key = (message.from_agent, message.metadata.correlation_id)
            if key in answers:
                answered = answers[key]
                if answered is not None:  # served: the same answer again (a copy of it)
                    self.reply(message, "coordination_response", _copy(answered),
                               priority=Priority.HIGH)
                return  # still being served: its answer is on the way
            answers[key] = None
            if len(answers) > ANSWERS_KEPT:
                answers.popitem(last=False)
        try:
            call = self._admit(message)
            served = self._tool_handlers.get(call.tool)
            if served is None:
                handler: Callable[[Call], Any] = self.handler(f"tool_{call.tool}")
                served = self._tool_handlers[call.tool] = (
                    handler, inspect.iscoroutinefunction(handler),
                    call.tool in self.fresh_results)
            handler, is_async, fresh = served
            if is_async:
                self.start_behaviour(self._serve_async, handler, call, name=call.tool)
                return
            result = handler(call)
        except ToolError as exc:
            result, fresh = exc.result(), False
        except Exception as exc:  # a bug: counted and traced, and the caller still hears
            result, fresh = self._crashed(content.get("tool"), exc), False
        if result is not DEFERRED:
            self._answer(message, result, fresh)

    def _crashed(self, what: object, exc: Exception) -> dict[str, Any]:
        """A handler raised something other than a ToolError: a bug in barnraise.

        It is reported like any handler error (counted, traced, on the errors
        topics), and the caller gets ``internal_error`` at once rather than
        waiting out its timeout for a reply that would never come.
        """
        self.dispatcher.report_error(self.name, f"handler {what}", exc)
        return fail("internal_error", f"{self.service_name} failed on {what} "
                    f"({type(exc).__name__}); the failure is counted and traced")

    def _admit(self, message: Message) -> Call:
        content = message.content
        name = content.get("tool")
        served = self._served.get(name) if isinstance(name, str) else None
        if served is None:
            raise ToolError("unknown_tool", f"no tool {name!r} here; see the tool table")
        tool, check, takes_session = served
        args = check(content.get("args", {}))
        session = member = None
        session_id = args.get("session_id")
        if takes_session:
            if session_id is None:
                raise ToolError("invalid_argument", "session_id: required", field="session_id")
            session = self.sessions.get(session_id)
            if session is None:
                raise ToolError("session_not_found", f"no session {session_id!r}")
            members = self.members.get(session_id)
            if members is not None:
                member = members.get(message.from_agent)
        if tool.member_only:
            if member is None:
                raise ToolError("not_a_member",
                                f"{message.from_agent} has not joined session {session_id}")
            if not self.policy.decide(tool.name, role=member.role, agent_id=member.agent_id):
                raise ToolError("permission_denied",
                                f"a {member.role} may not call {tool.name}",
                                role=member.role, tool=tool.name)
        return Call(tool.name, args, session, member, message, message.from_agent,
                    "" if session is None else session.session_id)

    async def _serve_async(self, _actor: A2AActor, handler: Callable[[Call], Awaitable[Any]],
                           call: Call) -> None:
        try:
            result = await handler(call)
        except ToolError as exc:
            result = exc.result()
        except Exception as exc:
            result = self._crashed(call.tool, exc)
        self._answer(call.message, result)

    def _answer(self, request: Message, result: dict[str, Any], fresh: bool = False) -> None:
        """Send ``result`` to the caller of ``request`` (durable first, if there is a store).

        ``fresh``: the handler made every container of ``result`` for this answer alone
        (see :attr:`fresh_results`), so it is sent as it is rather than as a copy.
        """
        correlation_id = request.metadata.correlation_id
        if correlation_id is None:
            return
        # Acknowledged means durable: what the call changed is committed before its
        # caller can hear the answer (Dispatcher.make_durable, inlined: without a store
        # there is nothing to do, and every answer would pay a call to find that out).
        durable = self.dispatcher.durable
        if durable is not None and request.from_agent not in _SERVICE_NAMES:
            durable(request.from_agent)
        answers = self._answers
        try:
            # A copy of its own (every list and dict new): a caller that changes what it
            # got (a checkpoint's list, a member's capabilities) changes nothing here.
            # A fresh result is nobody else's: copying it would only make another (1.4%
            # of a kernel_build run's instructions at grid 840, docs/benchmarks.md).
            self.reply(request, "coordination_response",
                       result if fresh and answers is None else _copy(result), priority=_HIGH)
        except (MessageError, TypeError) as exc:
            problem: Exception = exc
            if fresh:  # not copied: what the copy says of a result that is not JSON data
                try:
                    _copy(result)
                except TypeError as not_data:
                    problem = not_data
            # A result over the content limit (a query over thousands of claims)
            # would raise here and leave the caller waiting for ever: say so instead.
            # A call that changed the world is never answered "failed": its answer is
            # cut to fit (``truncated``) instead; a read answers that it is too large.
            shrunk = None
            if isinstance(problem, MessageError) and result.get("success") and (
                    request.content.get("tool") not in READ_ONLY_TOOLS):
                shrunk = shrink_to_fit(result, self.dispatcher.max_content_bytes
                                       - REPLY_MARGIN)
            if shrunk is not None:
                result = _copy(shrunk)
            elif isinstance(problem, MessageError):
                result = fail("invalid_argument", f"the result is too large to send "
                              f"({problem.problem}); ask about a smaller region or fewer "
                              "items")
            else:  # not JSON data: a bug in the service, counted
                result = self._crashed(request.content.get("tool"), problem)
            self.reply(request, "coordination_response", result, priority=Priority.HIGH)
        if answers is not None and "op" not in request.content:
            answers[(request.from_agent, correlation_id)] = result

    def handle_error_report(self, message: Message) -> None:
        """A service's own mail bounced (a subscriber's mailbox was full, say).

        The dead letter is already counted and traced by the dispatcher; a
        service has nobody to tell, and keeping the report would only fill its
        stash.
        """

    # -- internal operations ------------------------------------------------------------

    def _internal(self, op: str, message: Message) -> None:
        if message.from_agent not in SERVICES and message.from_agent != SUPERVISOR:
            self._answer(message, fail("permission_denied", f"{op} is internal to the services"))
            return
        handler = self._op_handlers.get(op)
        if handler is None:
            try:
                handler = self._op_handlers[op] = self.handler(f"op{op}")
            except AttributeError:
                self._answer(message, fail("unknown_tool", f"no internal operation {op!r}"))
                return
        fresh = op in self.fresh_results
        try:
            result = handler(message.content)
        except ToolError as exc:
            result, fresh = exc.result(), False
        except Exception as exc:
            result, fresh = self._crashed(op, exc), False
        if result is not None:
            self._answer(message, result, fresh)

    def op_session(self, content: Mapping[str, Any]) -> None:
        info = SessionInfo(**content["session"])
        self.sessions[info.session_id] = info
        self.members.setdefault(info.session_id, {})
        self.on_session(info)

    def op_member_joined(self, content: Mapping[str, Any]) -> None:
        member = Member(**content["member"])
        self.members.setdefault(content["session_id"], {})[member.agent_id] = member

    def op_member_left(self, content: Mapping[str, Any]) -> None:
        self.members.get(content["session_id"], {}).pop(content["agent_id"], None)

    def on_session(self, info: SessionInfo) -> None:
        """A new session exists: subclasses set up their share of its state."""

    def restore(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """Take ``image``'s session as this service held it when a stored realtime run
        stopped (:mod:`barnraise.actors.stored.resume`): its info and members, then
        :meth:`restore_session`
        for this service's share. Run in this actor's context, before any agent is in."""
        info = SessionInfo(**image.info)
        self.sessions[info.session_id] = info
        self.members[info.session_id] = {aid: Member(**m) for aid, m in image.members.items()}
        self.on_session(info)
        self.restore_session(image, serials)

    def restore_session(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """Subclasses put back their share of ``image``."""

    def resume_ids(self, serials: Mapping[str, int]) -> None:
        """A resumed run draws no id the stopped one drew (:mod:`barnraise.actors.stored.resume`'s
        ``Image.serials``: the largest serial each service had drawn, and the log's
        length). Called once per service, before any session is restored, and whether
        or not the image holds any: a session the fold left out (its creation never
        answered) had drawn its id too, and the stopped run's records of it stay in the
        log that a resumed scenario reads.

        Ids are drawn from the actor's seeded stream: a resumed run draws from another
        one; subclasses also go on from their serial (:meth:`resume_serial`)."""
        self._rng = np.random.default_rng(seed_for(self.dispatcher.seed,
                                                   f"{self.name}:resumed:{serials['seq']}"))
        self.resume_serial(serials)

    def resume_serial(self, serials: Mapping[str, int]) -> None:
        """Subclasses that number their ids go on from ``serials``' entry of theirs."""

    # -- helpers --------------------------------------------------------------------------

    def emit_event(self, event: SessionEvent | AgentOffline) -> None:
        """Trace a domain event and publish it on its session's event topics (an
        ``agent_offline`` of a member: the coordinator's, which names the session)."""
        # A2AActor.emit, inlined: every domain event of a session comes this way.
        self.dispatcher.emit(self.name, f"session:{event.session_id}:events", event)

    async def ask(self, service: str, op: str, **content: Any) -> dict[str, Any]:
        """Run an internal operation on another service and return its result."""
        reply = await self.request(service, "coordination_request", {"op": op, **content},
                                   priority=Priority.HIGH)
        return dict(reply.content)

    def holder_live(self, session_id: str, agent_id: str) -> bool:
        """Whether the holder of a lease (a claim, a lock) in ``session_id`` is live: still
        a member of the session, with an actor of its name in the run.

        A member stops being one when it leaves or when the coordinator expires it: on
        the registry's ``agent_offline`` (silent for ``missed_limit`` heartbeat
        intervals, and no supervisor to bring it back), when its actor stops for good
        (a crash without restart), or when the gateway expires a remote agent at its
        agent TTL; that leave releases its claims and locks at once. A member that a
        supervisor is restarting stays one, so its leases outlive the restart. The
        actor check catches a resumed run's leases whose holders were the stopped
        run's agents and never came back.

        The coordinator owns membership and announces every change to the services
        (``_member_left``); a lease owner only reads its copy when a term runs out. So a
        heartbeat or a call costs a lease nothing: no renewal message per heartbeat,
        no second record of last-seen times to keep in step (docs/reliability.md,
        "Leases")."""
        return agent_id in self.members.get(session_id, ()) and \
            agent_id in self.dispatcher.actors

    def member_name(self, session_id: str, agent_id: str) -> str:
        member = self.members.get(session_id, {}).get(agent_id)
        return member.name if member is not None else agent_id

    @overload
    def member_id(self, session_id: str, who: str, field: str) -> str: ...

    @overload
    def member_id(self, session_id: str, who: str, field: None = None) -> str | None: ...

    def member_id(self, session_id: str, who: str, field: str | None = None) -> str | None:
        """The agent id of the member ``who`` names, by agent id or by display name.

        A name that is no member's: with ``field``, raises ``invalid_argument``
        naming that argument ("to_agent: 'x' is not a member of session_..."),
        without it returns None. An id wins over a name (names are unique in a
        session, ids are unique everywhere).
        """
        members = self.members.get(session_id, {})
        if who in members:
            return who
        for member in members.values():
            if member.name == who:
                return member.agent_id
        if field is None:
            return None
        raise ToolError("invalid_argument", f"{field}: {who!r} is not a member of {session_id}",
                        field=field)
