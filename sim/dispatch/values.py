"""The value types both dispatchers share, and what they ask of an actor.

:class:`Endpoint` is the contract between a dispatcher and an actor (in
practice ``barnraise.actors.base.A2AActor``); the rest are values a dispatcher hands
out: :class:`SendReport` per send, :class:`RunReport` per run,
:class:`Statistics` on demand, :class:`Waiter` per suspended behaviour, and
:class:`Timer` per scheduled call. :class:`SubscriptionFilter` is what a
subscriber may ask of a topic's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import msgspec

from barnraise.sim.messages import Message, MessageError, Region

if TYPE_CHECKING:
    from barnraise.sim.dispatch.core import Dispatcher

__all__ = [
    "DELIVERED",
    "DROPPED",
    "OFFLINE",
    "WAKE",
    "DeadReason",
    "Endpoint",
    "RunReport",
    "SendReport",
    "Statistics",
    "SubscriptionFilter",
    "Timer",
    "Waiter",
]

DELIVERED: Final = "delivered"
OFFLINE: Final = "offline"
DROPPED: Final = "dropped"


class _Wake:
    """The type of :data:`WAKE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "WAKE"


#: Put in a realtime actor's mailbox when a held run resumes: it wakes the actor's
#: thread to handle the letters it kept while held; it is nothing else.
WAKE: Final = _Wake()

DeadReason = Literal[
    "mailbox_full", "expired", "unknown_recipient", "bad_signature", "invalid", "offline",
    "unhandled", "forged_reply", "no_handler",
]


@dataclass(frozen=True, slots=True)
class Waiter:
    """One behaviour that is suspended, and on what."""

    agent: str
    behaviour: str
    waits_for: str

    def __str__(self) -> str:
        return f"{self.agent}/{self.behaviour} waits for {self.waits_for}"


class Endpoint(Protocol):
    """What a dispatcher needs from an actor. ``barnraise.actors.base.A2AActor`` provides it.

    ``pending`` (deterministic mode: letters queued for it), ``delivered`` and
    ``handled`` (realtime mode: letters handled, daemon timers aside) are
    counters the dispatcher and the actor keep together. ``remote`` is True for the
    mailbox of an agent outside the process (the gateway's): the ids it is given
    (subscriptions, its calls' correlation ids) are drawn from ``secrets``.
    """

    name: str
    agent_type: str | None
    remote: bool
    stopped: bool
    crashed: bool
    actor_inbox: Any
    capacity: int
    pending: int
    delivered: int
    handled: int

    def a2a_bind(self, dispatcher: Dispatcher, name: str) -> None: ...
    def a2a_receive(self, message: Message) -> None: ...
    def a2a_timer(self, timer: Timer) -> None: ...
    def a2a_stopped(self) -> None: ...
    def waiters(self) -> list[Waiter]: ...
    def awaits(self, correlation_id: str) -> bool: ...
    def on_start(self) -> None: ...
    def on_stop(self) -> None: ...


class Timer:
    """A scheduled call on an actor. ``cancel()`` is safe from the actor's own context."""

    __slots__ = (
        "_dispatcher", "args", "callback", "cancelled", "daemon", "due", "fired", "priority",
        "target",
    )

    def __init__(
        self,
        dispatcher: Dispatcher,
        target: Endpoint,
        callback: Callable[..., None],
        args: tuple[Any, ...],
        due: float,
        daemon: bool,
        priority: int,
    ) -> None:
        self._dispatcher = dispatcher
        self.target = target
        self.callback = callback
        self.args = args
        self.due = due
        self.daemon = daemon
        self.priority = priority
        self.cancelled = False
        self.fired = False

    def cancel(self) -> None:
        """Make sure the callback does not run (a no-op once it has run)."""
        self._dispatcher.cancel_timer(self)
        # Callbacks often refer back to whatever holds the timer: drop them so
        # a cancelled timer waiting for its due time holds no cycle for the GC.
        self.args = ()

    def run(self) -> None:
        """Call the callback (the dispatcher does, in the target actor's context)."""
        callback, args = self.callback, self.args
        self.args = ()
        callback(*args)


@dataclass(frozen=True, slots=True)
class SubscriptionFilter:
    """Optional conditions a topic message must meet to reach one subscriber.

    ``region``: the message's ``metadata.region`` must overlap it;
    ``agent_type``: the sender must be of that type (for an event a service
    publishes, the agent it is about: its ``agent_id``, or for a task event the
    ``assigned_to`` or ``by`` agent);
    ``message_type``: the message must be of that type.
    """

    region: Region | None = None
    agent_type: str | None = None
    message_type: str | None = None

    @classmethod
    def parse(
        cls, spec: Mapping[str, Any] | SubscriptionFilter | None
    ) -> SubscriptionFilter | None:
        if spec is None or isinstance(spec, SubscriptionFilter):
            return spec
        unknown = set(spec) - {"region", "agent_type", "message_type"}
        if unknown:
            raise ValueError(f"filter: unknown key(s) {sorted(unknown)}")
        region = spec.get("region")
        if region is not None and not isinstance(region, Region):
            try:
                region = msgspec.convert(region, Region)
            except msgspec.ValidationError as exc:
                raise ValueError(f"filter.region: {exc}") from None
        return cls(region, spec.get("agent_type"), spec.get("message_type"))

    def accepts(self, message: Message, sender_type: str | None) -> bool:
        if self.message_type is not None and message.message_type != self.message_type:
            return False
        if self.agent_type is not None and sender_type != self.agent_type:
            return False
        if self.region is not None:
            r = message.metadata.region
            f = self.region
            if r is None or not (
                r.x < f.x + f.width and f.x < r.x + r.width
                and r.y < f.y + f.height and f.y < r.y + r.height
            ):
                return False
        return True


def region_of(value: Mapping[str, Any]) -> Region | None:
    """The Region of a payload's ``{x, y, width, height}``, or None if it is not one."""
    try:
        return Region(value["x"], value["y"], value["width"], value["height"])
    except (KeyError, TypeError, MessageError):
        return None


class SendReport(msgspec.Struct, gc=False):
    """What happened to a send, per recipient: delivered, offline or dropped.

    "Delivered" means accepted into the recipient's mailbox; the handler runs later.
    """

    message_id: str
    # A direct send keeps its one (recipient, status) pair and builds the dict
    # only if asked: most callers never look. (A Struct, because one is made
    # per send and a Struct is built in C: 60% fewer instructions than a
    # slotted class with an __init__.)
    _statuses: dict[str, str] | None = None
    _one: tuple[str, str] | None = None

    @property
    def statuses(self) -> dict[str, str]:
        """Recipient -> ``delivered`` | ``offline`` | ``dropped``."""
        if self._statuses is None:
            self._statuses = {} if self._one is None else {self._one[0]: self._one[1]}
        return self._statuses

    @property
    def delivered(self) -> list[str]:
        return [k for k, v in self.statuses.items() if v == DELIVERED]

    @property
    def offline(self) -> list[str]:
        return [k for k, v in self.statuses.items() if v == OFFLINE]

    @property
    def dropped(self) -> list[str]:
        return [k for k, v in self.statuses.items() if v == DROPPED]

    @property
    def reached(self) -> bool:
        """True when at least one recipient accepted the message."""
        if self._statuses is None and self._one is not None:
            return self._one[1] == DELIVERED
        return DELIVERED in self.statuses.values()

    @property
    def ok(self) -> bool:
        """True when every recipient got the message (and there was at least one)."""
        if self._statuses is None and self._one is not None:
            return self._one[1] == DELIVERED
        return bool(self.statuses) and all(v == DELIVERED for v in self.statuses.values())

    def __repr__(self) -> str:
        return f"SendReport({self.message_id!r}, {self.statuses!r})"


@dataclass(frozen=True, slots=True)
class Statistics:
    """A snapshot of a dispatcher's counters."""

    mode: str
    now: float
    actors: int
    delivered: int
    queued: int
    dead_letters: Mapping[str, int]
    behaviour_errors: int
    pending_timers: int
    trace_records: int


@dataclass(frozen=True, slots=True)
class RunReport:
    """Why :meth:`Dispatcher.run` returned.

    ``reason`` is ``"quiescent"`` (nothing left to do, nobody waiting),
    ``"deadlock"`` (nothing left to do, ``waiters`` still waiting), ``"until"``
    (the time limit was reached) or ``"max_steps"``.

    ``steps`` counts the deterministic dispatcher's steps; the realtime dispatcher takes
    none (its actors run on their own threads), so it reports None there and
    ``delivered``, the letters its actors handled so far, instead.
    """

    reason: str
    now: float
    steps: int | None
    waiters: tuple[Waiter, ...] = field(default=())
    delivered: int | None = None

    @property
    def deadlock(self) -> bool:
        return self.reason == "deadlock"

    def describe(self) -> str:
        head = f"run ended: {self.reason} at t={self.now:g}"
        if self.steps is not None:
            head += f" after {self.steps} steps"
        elif self.delivered is not None:
            head += f" after {self.delivered} letters delivered"
        if not self.waiters:
            return head
        return head + "\n" + "\n".join(f"  - {w}" for w in self.waiters)
