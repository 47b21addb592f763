"""ClientActor: the mailbox of an outside participant (a person, a test, an AI).

It is an ordinary actor, so replies, events and direct messages reach it like
any agent; what arrives is kept for the thread that drives the client
(``actors.world.Client``): replies by correlation id, everything else in
arrival order. Both collections are safe to read from another thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from actors.base import A2AActor
from sim.messages import Message

__all__ = ["ClientActor"]


class ClientActor(A2AActor):
    """Collects what arrives; the driving thread waits on ``arrived``."""

    def __init__(self) -> None:
        # Outside callers cannot be made to read their mail quickly: a bound
        # this large only stops a runaway, it never shapes a normal run.
        super().__init__(mailbox_capacity=100_000, stash_limit=100_000)
        self.agent_type = None
        self.replies: dict[str, Message] = {}
        self.inbox: deque[Message] = deque()
        self.expected: set[str] = set()  # correlation ids of calls awaiting an answer
        self.arrived = threading.Condition()
        #: Called (on this actor's thread, outside the lock) after every arrival:
        #: how a driver that is not a waiting thread (an event loop) hears of mail.
        self.listener: Callable[[], None] | None = None

    def a2a_receive(self, message: Message) -> None:
        correlation_id = message.metadata.correlation_id
        with self.arrived:
            if correlation_id is not None and correlation_id in self.expected:
                self.expected.discard(correlation_id)
                self.replies[correlation_id] = message
            else:
                self.inbox.append(message)
            self.arrived.notify_all()
        listener = self.listener
        if listener is not None:
            listener()

    def expect(self, correlation_id: str) -> None:
        with self.arrived:
            self.expected.add(correlation_id)

    def forget(self, correlation_id: str) -> None:
        """Stop expecting an answer (the call was never sent)."""
        with self.arrived:
            self.expected.discard(correlation_id)

    def take_reply(self, correlation_id: str) -> Message | None:
        with self.arrived:
            return self.replies.pop(correlation_id, None)
