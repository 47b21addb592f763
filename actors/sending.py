"""What an actor says: send, reply, publish, emit.

:class:`Sending` is one room of :class:`barnraise.actors.actor.A2AActor` (the others: its loop and
receive path, its behaviours and their deadline queue, in ``barnraise.actors.actor``). It is a
base class of the actor rather than an object the actor holds because these are the
calls an actor's own code makes on itself (``self.send``, ``self.reply``: the
authoring API, and ``reply`` is every service's answer path, where one more attribute
hop would cost). It holds no state: everything goes through the actor's dispatcher.
"""

from __future__ import annotations

from typing import Any, overload

from barnraise.sim.dispatch.core import Dispatcher
from barnraise.sim.dispatch.values import SendReport
from barnraise.sim.events import Event
from barnraise.sim.messages import (
    BROADCAST,
    TOPIC_PREFIX,
    TYPE_PREFIX,
    Message,
    Metadata,
    Priority,
    Region,
)

__all__ = ["Sending"]


class Sending:
    """Messages and events out of one actor (a base of A2AActor)."""

    #: Set by the dispatcher when it binds the actor (A2AActor.a2a_bind).
    name: str
    dispatcher: Dispatcher

    @overload
    def send(self, to: str, message_type: str, content: dict[str, Any] | None = None, *,
             priority: int = Priority.NORMAL, correlation_id: str | None = None,
             region: Region | None = None, expires_in: float | None = None) -> SendReport: ...

    @overload
    def send(self, to: list[str] | tuple[str, ...], message_type: str,
             content: dict[str, Any] | None = None, *, priority: int = Priority.NORMAL,
             correlation_id: str | None = None, region: Region | None = None,
             expires_in: float | None = None) -> list[SendReport]: ...

    def send(
        self,
        to: str | list[str] | tuple[str, ...],
        message_type: str,
        content: dict[str, Any] | None = None,
        *,
        priority: int = Priority.NORMAL,
        correlation_id: str | None = None,
        region: Region | None = None,
        expires_in: float | None = None,
    ) -> SendReport | list[SendReport]:
        """Send a message now; the report says, per recipient, what became of it.

        ``to`` is one address (an agent id, ``broadcast``, ``topic:NAME``,
        ``type:ROLE``), or a list of agent ids: then one letter goes to each, in the
        list's order, each with its own id (the wire form names one recipient), and the
        answer is their reports in that order. A list is checked whole before anything
        is sent: an empty one, an id that is not a non-empty string, a group address
        or an id named twice is a ValueError, and a letter that cannot be made (a bad
        type, content that fails its type's schema) a MessageError; either way nothing
        was sent.
        """
        dispatcher = self.dispatcher
        if type(to) is not str:
            return self._send_each(to, message_type, content, priority=priority,
                                   correlation_id=correlation_id, region=region,
                                   expires_in=expires_in)
        message = dispatcher.message(
            self.name, to, message_type, content, priority=priority,
            correlation_id=correlation_id, region=region, expires_in=expires_in,
        )
        if dispatcher.sign_messages:
            message = dispatcher.seal(message)
        return dispatcher.send(message)

    def _send_each(self, to: object, message_type: str, content: dict[str, Any] | None, *,
                   priority: int, correlation_id: str | None, region: Region | None,
                   expires_in: float | None) -> list[SendReport]:
        if not isinstance(to, (list, tuple)) or not to:
            raise ValueError(f"to: expected an address or a non-empty list of agent ids, "
                             f"got {to!r}")
        seen: set[str] = set()
        for i, name in enumerate(to):
            if type(name) is not str or not name:
                raise ValueError(f"to[{i}]: expected an agent id, got {name!r}")
            if name == BROADCAST or name.startswith((TOPIC_PREFIX, TYPE_PREFIX)):
                raise ValueError(f"to[{i}]: {name!r} is a group address; a list of "
                                 "recipients names agents (send to the group itself)")
            if name in seen:
                raise ValueError(f"to[{i}]: {name!r} is named twice")
            seen.add(name)
        dispatcher = self.dispatcher
        # Every letter is made (and so checked) before the first goes.
        letters = [dispatcher.message(self.name, name, message_type, content,
                                      priority=priority, correlation_id=correlation_id,
                                      region=region, expires_in=expires_in)
                   for name in to]
        if dispatcher.sign_messages:
            letters = [dispatcher.seal(m) for m in letters]
        return [dispatcher.send(m) for m in letters]

    def reply(
        self, request: Message, message_type: str, content: dict[str, Any] | None = None,
        *, priority: int | None = None,
    ) -> SendReport:
        """Answer ``request`` with its correlation id, to its sender."""
        metadata = request.metadata
        if metadata.region is not None or metadata.capabilities:
            # a reply carries the correlation id only
            metadata = Metadata(None, (), metadata.correlation_id)
        return self.dispatcher.post(
            self.name, request.from_agent, message_type, content,
            request.priority if priority is None else priority, metadata,
        )

    def reply_error(self, request: Message, code: str, detail: str, **extra: Any) -> None:
        """Answer ``request`` with an ``error_report`` (if it expects a reply)."""
        if request.metadata.correlation_id is not None:
            self.reply(request, "error_report", {"error_code": code, "detail": detail, **extra})

    def publish(
        self, topic: str, message_type: str, content: dict[str, Any] | None = None,
        *, priority: int = Priority.NORMAL, region: Region | None = None,
    ) -> SendReport:
        return self.send(f"topic:{topic}", message_type, content, priority=priority, region=region)

    def emit(self, topic: str, event: Event) -> None:
        """Record a domain event and publish it to ``topic`` and ``topic:<its name>``."""
        self.dispatcher.emit(self.name, topic, event)
