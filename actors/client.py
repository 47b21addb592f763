"""ClientActor: the mailbox of an outside participant (a person, a test, an AI).

It is an ordinary actor, so replies, events and direct messages reach it like
any agent; what arrives is kept for the thread that drives the client
(``barnraise.actors.world.Client``): replies by correlation id, everything else in
arrival order. Both collections are safe to read from another thread. A reply
is taken only from the actor its call went to (:meth:`ClientActor.expect`) or
the dispatcher's own ``error_report``; a letter from anyone else carrying an
awaited correlation id is a dead letter ``forged_reply`` and the call waits on.

:class:`InlineClientActor` is the same mailbox for a driver that is not a waiting
thread (the gateway's event loop, told by ``listener``): its letters are
recorded on the thread that sends them (:class:`InlineMailbox`), so a service's
answer reaches the listener without a hop through the actor's own thread and
the scheduling that costs. The actor's thread still serves pykka's envelopes
(a stop, a read).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from barnraise.actors.base import A2AActor
from barnraise.sim.dispatch.core import answers
from barnraise.sim.dispatch.values import WAKE, Timer
from barnraise.sim.mailbox import PriorityMailbox
from barnraise.sim.messages import Message

__all__ = ["GIVEN_UP_KEPT", "ClientActor", "InlineClientActor", "InlineMailbox"]

#: Calls a client keeps expecting an answer to after their callers stopped waiting.
GIVEN_UP_KEPT: Final = 1024


class ClientActor(A2AActor):
    """Collects what arrives; the driving thread waits on ``arrived``."""

    def __init__(self) -> None:
        # Outside callers cannot be made to read their mail quickly: a bound
        # this large only stops a runaway, it never shapes a normal run.
        super().__init__(mailbox_capacity=100_000, stash_limit=100_000)
        self.agent_type = None
        self.replies: dict[str, Message] = {}
        self.inbox: deque[Message] = deque()
        #: correlation id of a call awaiting its answer -> the actor the call went to
        self.expected: dict[str, str] = {}
        #: expected calls whose caller has stopped waiting (no reply in time), oldest
        #: first; past :data:`GIVEN_UP_KEPT` the oldest is forgotten (its late answer
        #: then goes to the inbox like any letter), so calls never answered pile up nowhere
        self.given_up: dict[str, None] = {}
        self.arrived = threading.Condition()
        #: Called (on this actor's thread, outside the lock) after every arrival:
        #: how a driver that is not a waiting thread (an event loop) hears of mail.
        self.listener: Callable[[], None] | None = None

    def a2a_receive(self, message: Message) -> None:
        correlation_id = message.metadata.correlation_id
        with self.arrived:
            if correlation_id is not None and (
                    asked := self.expected.get(correlation_id)) is not None:
                # The common answer (from the actor asked) without a call; answers() rules.
                if message.from_agent != asked and not answers(message, asked):
                    forged = True  # not from the actor asked: the call waits on
                else:
                    forged = False
                    del self.expected[correlation_id]
                    self.given_up.pop(correlation_id, None)
                    self.replies[correlation_id] = message
            else:
                forged = False
                self.inbox.append(message)
            if not forged:
                self.arrived.notify_all()
        if forged:  # counted and traced by the dispatcher, outside this actor's lock
            self.dispatcher.dead_letter(message, "forged_reply", self.name)
            return
        listener = self.listener
        if listener is not None:
            listener()

    def expect(self, correlation_id: str, recipient: str) -> None:
        """Take the letter carrying ``correlation_id`` as an answer, from ``recipient``
        (the actor the call goes to) only; from anyone else it is ``forged_reply``."""
        with self.arrived:
            self.expected[correlation_id] = recipient

    def awaits(self, correlation_id: str) -> bool:
        """Is a caller still waiting for the answer to ``correlation_id``? (Under a fault
        plan a client that is a session member has its requests sent again until then.)"""
        with self.arrived:
            return correlation_id in self.expected and correlation_id not in self.given_up

    def give_up(self, correlation_id: str) -> None:
        """The caller stopped waiting: the request is not sent again (a late answer is
        still taken as the answer)."""
        with self.arrived:
            if correlation_id in self.expected:
                self.given_up[correlation_id] = None
                while len(self.given_up) > GIVEN_UP_KEPT:
                    oldest = next(iter(self.given_up))
                    del self.given_up[oldest]
                    self.expected.pop(oldest, None)

    def forget(self, correlation_id: str) -> None:
        """Stop expecting an answer (the call was never sent)."""
        with self.arrived:
            self.expected.pop(correlation_id, None)
            self.given_up.pop(correlation_id, None)

    def take_reply(self, correlation_id: str) -> Message | None:
        with self.arrived:
            return self.replies.pop(correlation_id, None)


class InlineMailbox(PriorityMailbox):
    """A mailbox whose letters are handled by the thread that sends them.

    The realtime dispatcher counts a letter offered, then calls :meth:`accept`
    (``inline`` is True), which runs the dispatcher's one delivery step for it
    right there, as the actor's own loop would: the trace record, the dead
    letter for a stopped actor, ``delivered`` and ``handled``. One lock (a
    reentrant one: a fault's timer may route a letter to the same actor)
    serialises the senders, so letters are recorded one at a time, each
    sender's in its order. While the run is held (``dispatcher.holding``)
    letters are kept in order and handled first by the next letter after it
    resumes, or by the ``WAKE`` that ``resume`` offers every actor. pykka's own
    envelopes (stop, proxy calls) still go to the actor's thread.
    """

    __slots__ = ("_kept", "_lock", "owner")

    inline = True

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._kept: deque[Any] = deque()
        self._lock = threading.RLock()
        self.owner: InlineClientActor | None = None

    def accept(self, item: tuple[Message, bytes] | Timer) -> None:
        """Handle ``item`` (a letter or a timer) now, on this thread (or keep it, held)."""
        owner = self.owner
        assert owner is not None, "an InlineMailbox belongs to an InlineClientActor"
        with self._lock:
            if owner.dispatcher.holding:
                self._kept.append(item)
                return
            kept = self._kept
            while kept:
                self._handle(owner, kept.popleft())
            self._handle(owner, item)

    def offer(self, payload: Any, priority: int, *, bounded: bool = True) -> bool:
        if payload is WAKE:  # the run resumed: what was kept meanwhile goes now
            owner = self.owner
            if owner is not None:
                with self._lock:
                    while self._kept and not owner.dispatcher.holding:
                        self._handle(owner, self._kept.popleft())
            return True
        return super().offer(payload, priority, bounded=bounded)

    def __len__(self) -> int:
        """Letters waiting: those kept while the run is held, and pykka's envelopes."""
        return super().__len__() + len(self._kept)

    @staticmethod
    def _handle(owner: InlineClientActor, item: tuple[Message, bytes] | Timer) -> None:
        if isinstance(item, Timer):
            owner._timer_letter(item)  # counts itself handled
            return
        message, encoded = item
        dispatcher = owner.dispatcher
        try:
            dispatcher.deliver(owner, message, encoded, dispatcher.clock.now)
        except Exception as exc:  # a bug in the step itself must not reach the sender
            dispatcher.report_error(owner.name, message.message_type, exc)
        finally:
            owner.handled += 1


class InlineClientActor(ClientActor):
    """A :class:`ClientActor` whose letters are recorded on the sending thread."""

    actor_inbox: InlineMailbox

    def __init__(self) -> None:
        super().__init__()
        self.actor_inbox.owner = self

    @staticmethod
    def _create_actor_inbox() -> InlineMailbox:
        return InlineMailbox(100_000)
