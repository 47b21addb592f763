"""Signed messages from outside: a remote agent's own A2A message, verified and routed.

A room of :class:`barnraise.gateway.hub.Hub` (``hub.signed``), the one owner of the
replay table (the ids of the messages accepted, until they expire). A message is
routed only if it is signed with the agent's key, from that agent, carries an expiry
neither past nor more than ``Limits.max_ttl`` away, was not accepted before, and goes
to a member of the agent's session or to that session's topics; then it is handed to
the dispatcher's ``receive_wire`` in the session's own signed wire form.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from barnraise.gateway.slots import AgentSlot, Refused
from barnraise.sim.messages import (
    SYSTEM_TYPES,
    TOPIC_PREFIX,
    MessageError,
    decode,
    encode,
    topic_name,
    verify,
)

if TYPE_CHECKING:
    from barnraise.gateway.hub import Hub

__all__ = ["SignedMail"]


class SignedMail:
    """Verify and route the signed messages of one hub's agents."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._seen: dict[str, float] = {}  # message_id -> expires_at, for replay refusal

    async def send(self, slot: AgentSlot, data: bytes | str) -> dict[str, Any]:
        """Verify a signed wire message from ``slot``'s agent and route it.

        Raises :class:`Refused` with the reason (``invalid_message``,
        ``bad_signature``, ``reserved_type``, ``wrong_agent``, ``no_expiry``,
        ``expired``, ``replayed``, ``not_a_member``); the refusal is counted. A type of
        one's own is routed as any other; the runtime's reply types
        (:data:`barnraise.sim.messages.SYSTEM_TYPES`) are ``reserved_type``.
        """
        try:
            message = decode(
                data, max_content_bytes=self.hub.simulation.dispatcher.max_content_bytes)
        except MessageError as exc:
            raise self._refuse("invalid_message", str(exc)) from None
        slot.heard = self.hub.loop.time()
        try:
            verify(message, slot.key)
        except MessageError as exc:
            raise self._refuse("bad_signature", exc.problem) from None
        if message.message_type in SYSTEM_TYPES:
            raise self._refuse("reserved_type", f"message_type {message.message_type!r} is "
                               "one of the types only the runtime and its services send "
                               f"({sorted(SYSTEM_TYPES)})")
        if message.from_agent != slot.agent_id:
            raise self._refuse("wrong_agent", f"from_agent is {message.from_agent!r}, but this "
                               f"connection is {slot.agent_id!r}")
        now = self.hub.simulation.now
        if message.expires_at is None:
            raise self._refuse("no_expiry", "a message from outside must carry expires_at "
                               f"(simulated seconds; now is {now:.3f})")
        if message.expires_at <= now:
            raise self._refuse("expired", f"expired at {message.expires_at:.3f}, now is "
                               f"{now:.3f}")
        if message.expires_at > now + self.hub.limits.max_ttl:
            raise self._refuse("invalid_message", f"expires_at is more than "
                               f"{self.hub.limits.max_ttl:g} simulated seconds away")
        self._forget_expired(now)
        if message.message_id in self._seen:
            raise self._refuse("replayed", f"message_id {message.message_id!r} was "
                               "already accepted")
        await self._check_recipient(slot, message.to_agent)
        self._seen[message.message_id] = message.expires_at
        dispatcher = self.hub.simulation.dispatcher
        inner = msgspec.structs.replace(message, signature=None)
        report = dispatcher.receive_wire(encode(inner, dispatcher.secret))
        if report is None:
            raise self._refuse("invalid_message", "the dispatcher refused the message")
        self.hub.counters.add("signed_messages_routed")
        return {"success": True, "message_id": message.message_id, "statuses": report.statuses}

    def _refuse(self, reason: str, text: str) -> Refused:
        self.hub.counters.add(reason)
        return Refused(reason, text)

    def _forget_expired(self, now: float) -> None:
        if len(self._seen) < 4096:
            return
        self._seen = {mid: t for mid, t in self._seen.items() if t > now}

    async def _check_recipient(self, slot: AgentSlot, to: str) -> None:
        """A message from outside goes to a member of the sender's session, or its topics."""
        session_id = slot.session_id
        if session_id is None:
            raise self._refuse("not_a_member", "join a session before sending messages")
        if to.startswith(TOPIC_PREFIX):
            own = f"session:{session_id}"
            try:
                topic = topic_name(to)
            except ValueError as exc:
                raise self._refuse("invalid_message", str(exc)) from None
            if topic == own or topic.startswith(own + ":"):
                return
            raise self._refuse("not_a_member", f"topic {topic!r} is not one of session "
                               f"{session_id}'s topics")
        members = await self._members(slot)
        if to not in members:
            raise self._refuse("not_a_member", f"{to!r} is not a member of {session_id}")

    async def _members(self, slot: AgentSlot) -> frozenset[str]:
        cached = slot.members
        if cached is not None and time.monotonic() - cached[0] < 1.0:
            return cached[1]
        found = await self.hub.call(slot, "a2a_discover", {})
        members = frozenset(a["agent_id"] for a in found.get("agents", ()))
        slot.members = (time.monotonic(), members)
        return members
