"""The coordinator's A2A tools: messages between members, broadcasts, subscriptions to
the session's topics, discovery, and alerts.

A room of :class:`barnraise.actors.coordinator.Coordinator` serving ``a2a_send_message``,
``a2a_broadcast``, ``a2a_subscribe``, ``a2a_discover`` and ``alert_raise`` (an
``agent.alert`` event on the session's topic, the record the Python
:func:`barnraise.actors.agents.alerts.alert` publishes), the one owner of what
``a2a_subscribe`` gave each agent: an identical subscription is answered with the one
held (a second would only deliver every event twice), an agent holds at most
``WorldLimits.max_subscriptions``, and a member that leaves a session hears nothing
more of it (:meth:`SessionMessaging.end`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from barnraise.actors.paging import cursor_offset, fit_lists
from barnraise.actors.service import Call
from barnraise.sim.events import AgentAlert
from barnraise.sim.messages import SYSTEM_TYPES, MessageError, check_type_name, session_topic
from barnraise.sim.tools import STATE_PAGE_DEFAULT, ToolError, ok

if TYPE_CHECKING:
    from barnraise.actors.coordinator import Coordinator

__all__ = ["SessionMessaging"]

_canonical_encoder: Final = msgspec.json.Encoder(order="sorted")
#: The keys of an alert's event of its own: a detail may not take one's name.
_ALERT_FIELDS: Final = frozenset({"event", *AgentAlert.__struct_fields__})


def _canonical(value: Any) -> bytes:
    """``value`` (a subscription filter, from JSON) in one spelling for every key order."""
    try:
        return _canonical_encoder.encode(value)
    except (TypeError, ValueError, msgspec.EncodeError):
        return repr(value).encode()


def _member_type(name: Any) -> str:
    """``name`` as the type of a letter a member sends through the A2A tools: any name
    following the rule (:data:`barnraise.sim.messages.TYPE_NAME_RULE`) but the runtime's
    own reply types (:data:`barnraise.sim.messages.SYSTEM_TYPES`), which a member never
    needs to send by a tool (the tools set no correlation id to answer with)."""
    try:
        check_type_name(name)
    except MessageError as exc:
        raise ToolError("invalid_argument", f"message_type: {exc.problem}",
                        field="message_type") from None
    if name in SYSTEM_TYPES:
        raise ToolError("invalid_argument", f"message_type: {name!r} is one of the types "
                        f"only the runtime and its services send ({sorted(SYSTEM_TYPES)})",
                        field="message_type")
    return str(name)


class SessionMessaging:
    """The A2A tools of every session (see the module doc)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        #: agent -> (topic, its filter in canonical JSON) -> the subscription id it
        #: was given; entries the dispatcher no longer holds are pruned as met.
        self._subscribed: dict[str, dict[tuple[str, bytes], str]] = {}
        #: (session, agent) -> the subscriptions a2a_subscribe gave it (all of them to the
        #: session's own topics): what its leave ends, without a look at anyone else's.
        self._subscriptions: dict[tuple[str, str], list[str]] = {}

    def end(self, session_id: str, agent_id: str) -> None:
        """``agent_id`` left ``session_id``: every subscription it held to the session's
        topics ends (it had joined to hear them)."""
        unsubscribe = self.coordinator.dispatcher.unsubscribe
        for sid in self._subscriptions.pop((session_id, agent_id), ()):
            unsubscribe(sid)

    def tool_a2a_send_message(self, call: Call) -> dict[str, Any]:
        coordinator = self.coordinator
        args = call.args
        named = args["to_agent"]
        if isinstance(named, list):
            recipients = self._recipients(call.session_id, named)
        else:
            recipients = [coordinator.member_id(call.session_id, named, "to_agent")]
        message_type = _member_type(args["message_type"])
        dispatcher = coordinator.dispatcher
        try:  # every letter made (and checked) before the first goes
            letters = [dispatcher.message(call.caller, to, message_type, args["content"],
                                          priority=args["priority"],
                                          expires_in=args.get("expires_in"))
                       for to in recipients]
        except MessageError as exc:  # content that fails its type's schema
            raise ToolError("invalid_argument", str(exc), field=exc.field) from None
        statuses = {m.to_agent: dispatcher.send(dispatcher.seal(m)).statuses[m.to_agent]
                    for m in letters}
        if not isinstance(named, list):
            [message] = letters
            to = message.to_agent
            return ok(message_id=message.message_id, to_agent=to, status=statuses[to])
        return ok(message_ids=[m.message_id for m in letters], to_agent=recipients,
                  statuses=statuses)

    def _recipients(self, session_id: str, named: list[Any]) -> list[str]:
        """The members a list ``to_agent`` names, in its order: each one a member (by id
        or name), none twice, at least one; else ``invalid_argument`` naming the entry."""
        if not named:
            raise ToolError("invalid_argument", "to_agent: an empty list names nobody",
                            field="to_agent")
        recipients: dict[str, None] = {}  # ordered, and a look-up per entry is O(1)
        for i, who in enumerate(named):
            to = self.coordinator.member_id(session_id, who, f"to_agent[{i}]")
            if to in recipients:
                raise ToolError("invalid_argument", f"to_agent[{i}]: {who!r} names "
                                f"{to}, named before", field=f"to_agent[{i}]")
            recipients[to] = None
        return list(recipients)

    def tool_a2a_broadcast(self, call: Call) -> dict[str, Any]:
        coordinator = self.coordinator
        args = call.args
        message_type = _member_type(args["message_type"])
        recipients = [
            member.agent_id for member in coordinator.members[call.session_id].values()
            if not (args["exclude_self"] and member.agent_id == call.caller)
            and not (args.get("agent_type") and member.role != args["agent_type"])]
        dispatcher = coordinator.dispatcher
        try:  # every letter made (and checked) before the first goes
            letters = [dispatcher.message(call.caller, to, message_type, args["content"])
                       for to in recipients]
        except MessageError as exc:  # content that fails its type's schema
            raise ToolError("invalid_argument", str(exc), field=exc.field) from None
        statuses: dict[str, str] = {}
        for message in letters:
            statuses.update(dispatcher.send(dispatcher.seal(message)).statuses)
        delivered = sorted(k for k, v in statuses.items() if v == "delivered")
        return ok(recipients=sorted(statuses), delivered=delivered, statuses=statuses)

    def tool_alert_raise(self, call: Call) -> dict[str, Any]:
        """Publish an ``agent.alert`` from the caller, as the caller (the event's sender
        is the caller, not the coordinator: the same record a behaviour's ``alert``
        makes). A detail named as one of the event's own fields is refused
        ``invalid_argument`` naming it, and nothing is published."""
        args = call.args
        details = args["details"]
        clash = sorted(_ALERT_FIELDS & details.keys())
        if clash:
            raise ToolError("invalid_argument", f"details: {clash[0]!r} is a field of the "
                            f"alert itself ({', '.join(sorted(_ALERT_FIELDS))})",
                            field=f"details.{clash[0]}")
        topic = f"session:{call.session_id}:events"
        event = AgentAlert(session_id=call.session_id, agent_id=call.caller,
                           severity=args["severity"], title=args["title"], body=args["body"],
                           details=dict(details))
        self.coordinator.dispatcher.emit(call.caller, topic, event)
        return ok(delivered=True, severity=event.severity, title=event.title, topic=topic)

    def tool_a2a_subscribe(self, call: Call) -> dict[str, Any]:
        coordinator = self.coordinator
        args = call.args
        if args.get("topic") and args.get("event_type"):
            raise ToolError("invalid_argument", "give event_type or topic, not both",
                            field="topic")
        try:
            topic = session_topic(call.session_id, args.get("topic") or None,
                                  args.get("event_type"))
        except PermissionError as exc:
            raise ToolError("permission_denied", str(exc), field="topic") from None
        except ValueError as exc:
            raise ToolError("invalid_argument", f"topic: {exc}", field="topic") from None
        dispatcher = coordinator.dispatcher
        held = self._subscribed.setdefault(call.caller, {})
        key = (topic, _canonical(args.get("filter")))
        sid = held.get(key)
        if sid is not None and dispatcher.holds_subscription(sid):
            # Identical: a second would only deliver every event twice.
            return ok(subscription_id=sid, topic=topic)
        limit = coordinator.limits.max_subscriptions
        if len(held) >= limit:
            for gone in [k for k, s in held.items() if not dispatcher.holds_subscription(s)]:
                del held[gone]
            if len(held) >= limit:
                raise ToolError("limit_exceeded", f"max_subscriptions: {call.caller} holds "
                                f"{limit} subscriptions, the most one agent may",
                                limit="max_subscriptions")
        try:
            sid = dispatcher.subscribe(dispatcher.actor(call.caller), topic, args.get("filter"))
        except ValueError as exc:
            raise ToolError("invalid_argument", str(exc), field="filter") from None
        held[key] = sid
        self._subscriptions.setdefault((call.session_id, call.caller), []).append(sid)
        return ok(subscription_id=sid, topic=topic)

    async def tool_a2a_discover(self, call: Call) -> dict[str, Any]:
        """The session's members that match every filter given, in join order, a page
        at a time: at most ``limit`` (default 500) from the position ``cursor`` names,
        cut shorter if they would not fit one reply. ``count`` is the number in this
        answer; when more match past it, ``next_cursor`` is added, to pass back. Below
        one page the answer is as it always was (``agents``, ``count``)."""
        coordinator = self.coordinator
        args = call.args
        members = list(coordinator.members[call.session_id].values())
        if args.get("agent_type"):
            members = [m for m in members if m.role == args["agent_type"]]
        if args.get("capability"):
            members = [m for m in members if args["capability"] in m.capabilities]
        if args.get("region_overlaps") is not None:
            found = await coordinator.ask("regions", "_claims_of", session_id=call.session_id,
                                   region=args["region_overlaps"])
            owners = set(found.get("agents", []))
            members = [m for m in members if m.agent_id in owners]
        offset = cursor_offset(args.get("cursor"))
        page = members[offset:offset + args.get("limit", STATE_PAGE_DEFAULT)]
        agents = [{"agent_id": m.agent_id, "name": m.name, "agent_type": m.role,
                   "capabilities": m.capabilities, "color": m.color} for m in page]
        result = ok(agents=agents, count=len(agents))
        shown = fit_lists(result, [agents], coordinator.reply_budget())
        if shown == 0 and page:  # a next_cursor where this one is would never move on
            raise ToolError("invalid_argument", f"cursor: the agent at position {offset} "
                            "does not fit one reply", field="cursor")
        result["count"] = shown
        if offset + shown < len(members):
            result["next_cursor"] = str(offset + shown)
        return result
