"""Effects: what a behaviour awaits, and the running coroutine that awaits them.

A behaviour is an ``async def`` driven by its actor (no asyncio). Each
``await`` hands the actor an :class:`Effect`; the actor *arms* it (sends the
request, sets the sleep's timer, looks in the stash) and resumes the
coroutine with the effect's outcome when the reply, timer or message arrives.

What callers can rely on: an effect is awaited once; a wait with a timeout
raises :class:`~barnraise.actors.errors.WaitTimeout` at exactly ``timeout`` simulated
seconds after it was armed, unless answered first; a request that nothing
accepted raises :class:`~barnraise.actors.errors.DeliveryError` at once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Final

from barnraise.actors.errors import DeliveryError, RequestError
from barnraise.sim.dispatch.values import Timer
from barnraise.sim.messages import Message, MessageError, Priority, Region

if TYPE_CHECKING:
    from barnraise.actors.actor import A2AActor

__all__ = ["DEFAULT_TIMEOUT", "PENDING", "Behaviour", "Effect", "Outcome"]

#: Simulation seconds a request waits for its reply unless told otherwise.
DEFAULT_TIMEOUT: Final = 60.0

#: A tool call's priority (an enum member's look-up costs a property call per use).
_HIGH: Final = Priority.HIGH
_NORMAL: Final = Priority.NORMAL

#: What :meth:`Effect.arm` returns when the behaviour must wait.
PENDING: Final = object()
Outcome = tuple[Any, BaseException | None]


class Effect:
    """Something a behaviour awaits. Subclasses say how to arm and describe it.

    ``held`` is True while the wait sits in its actor's deadline queue and is
    counted as live work (see ``A2AActor``).
    """

    __slots__ = ("daemon", "held", "timeout")

    def __init__(self, timeout: float | None, daemon: bool = False) -> None:
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self.daemon = daemon
        self.held = False

    # The first step hands the effect to the driving actor, the second returns
    # what the actor resumed with. A generator costs one small object per
    # await, but its return reaches the coroutine without a StopIteration
    # being raised in Python: an effect that was its own iterator (and raised
    # StopIteration from send) cost twice as much per await (benchmarks/runtime
    # request_reply, measured in instructions under callgrind).
    def __await__(self) -> Generator[Effect, Any, Any]:
        return (yield self)

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        """Register the wait; return ``(value, error)`` to resume at once, or PENDING."""
        raise NotImplementedError

    def disarm(self, actor: A2AActor) -> None:
        """Forget the registration (the wait timed out)."""

    def outcome(self, message: Message) -> Outcome:
        """What the behaviour resumes with when ``message`` answers this effect."""
        return message, None

    def describe(self) -> str:
        raise NotImplementedError


class Request(Effect):
    """Send a request and wait for the reply that carries its correlation id.

    The request's message id doubles as its correlation id.
    """

    __slots__ = ("content", "correlation_id", "message_type", "priority", "region", "to")

    def __init__(
        self, to: str, message_type: str, content: dict[str, Any] | None, priority: int,
        region: Region | None, timeout: float | None,
    ) -> None:
        # Effect.__init__, inlined: one request is made per round trip.
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self.daemon = False
        self.held = False
        self.to = to
        self.message_type = message_type
        self.content = content
        self.priority = priority
        self.region = region
        self.correlation_id = ""

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        try:
            report = actor.dispatcher.post(actor.name, self.to, self.message_type,
                                           self.content, self.priority, None, self.region)
        except MessageError as exc:  # content that is not JSON, or too large
            return None, exc  # raised in the behaviour, where its except can see it
        self.content = None  # sent: the wait need not keep it alive
        self.correlation_id = report.message_id
        if not report.reached:
            return None, DeliveryError(report)
        # the actor files the wait under correlation_id once this returns PENDING
        return PENDING

    def disarm(self, actor: A2AActor) -> None:
        actor.forget_reply(self.correlation_id)

    def outcome(self, message: Message) -> Outcome:
        if message.message_type == "error_report":
            return None, RequestError(message)
        return message, None

    def describe(self) -> str:
        return f"a reply from {self.to} to {self.message_type} ({self.correlation_id})"


class ToolCall(Request):
    """A session tool call: resumes with the result dict, failures included."""

    __slots__ = ("tool",)

    def __init__(self, tool: str, service: str, args: dict[str, Any],
                 timeout: float | None) -> None:
        # Request's own init: inlining it here measured within the noise of identical
        # runs (under 0.1% of kernel_build's instructions), not worth a second copy.
        super().__init__(service, "coordination_request", {"tool": tool, "args": args},
                         _HIGH, None, timeout)
        self.tool = tool

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        # Request.arm, inlined, with its two failures as results: a call is answered
        # with a result dict, whatever happens to it.
        try:
            report = actor.dispatcher.post(actor.name, self.to, "coordination_request",
                                           self.content, _HIGH, None, None)
        except MessageError as exc:  # arguments that are not JSON, or too large
            return {"success": False, "error": "invalid_argument",
                    "message": f"arguments: {exc.problem}"}, None
        self.content = None
        self.correlation_id = report.message_id
        if not report.reached:
            return {"success": False, "error": "no_reply",
                    "message": f"{self.to} did not accept the call"}, None
        return PENDING

    def outcome(self, message: Message) -> Outcome:
        # The answer's content is the caller's own: a service answers with a copy made
        # for that answer alone (SessionService._answer), and the letter, once it has
        # answered the call, is read by nobody else (the trace keeps its bytes).
        return message.content, None

    def describe(self) -> str:
        return f"the result of {self.tool} from {self.to} ({self.correlation_id})"


class Sleep(Effect):
    """Let simulated time pass: one timer, which resumes the behaviour."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"sleep: seconds must be >= 0, got {seconds!r}")
        # Effect.__init__, inlined (no timeout to check): a builder sleeps after every row.
        self.timeout = None
        self.daemon = False
        self.held = False
        self.seconds = seconds

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        # Dispatcher.call_later, inlined (seconds was checked when the sleep was made):
        # a builder sleeps after every row. The timer steps the behaviour on itself: a
        # sleep is in no other queue (nothing else can end it first) and holds no work,
        # so resume()'s checks have nothing to do.
        dispatcher = actor.dispatcher
        dispatcher._schedule(Timer(dispatcher, actor, actor._advance, (task, None, None),
                                   dispatcher.clock.now + self.seconds, False, _NORMAL))
        return PENDING

    def describe(self) -> str:
        return f"the end of a {self.seconds:g}s sleep"


class Receive(Effect):
    """Wait for a message that ``match`` accepts (looking in the stash first)."""

    __slots__ = ("description", "match")

    def __init__(
        self, match: Callable[[Message], bool], description: str, timeout: float | None,
        daemon: bool,
    ) -> None:
        # Effect.__init__, inlined: a participant waits for its next letter this way.
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self.daemon = daemon
        self.held = False
        self.match = match
        self.description = description

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        message = actor.take_stashed(self.match)
        if message is not None:
            return message, None
        actor.add_receiver(task, self)
        return PENDING

    def disarm(self, actor: A2AActor) -> None:
        actor.remove_receiver(self)

    def describe(self) -> str:
        return self.description


class Done(Effect):
    """An effect that resumes at once with a value already known."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value

    def arm(self, actor: A2AActor, task: Behaviour) -> Outcome | object:
        return self.value, None

    def describe(self) -> str:
        return "nothing"


class Behaviour:
    """One running coroutine of an actor."""

    __slots__ = ("coro", "done", "error", "name", "result", "waiting")

    def __init__(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        self.name = name
        self.coro = coro
        self.waiting: Effect | None = None
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        state = "done" if self.done else ("waiting" if self.waiting else "ready")
        return f"<Behaviour {self.name} {state}>"
