"""A2AActor: the pykka actor every barnraise service and agent is built on.

An A2AActor has a bounded priority mailbox, handles A2A messages with methods
named ``handle_<message_type>``, and runs any number of *behaviours*: ``async
def`` coroutines that await effects instead of blocking::

    async def ping(agent: Agent, peer: str) -> None:
        reply = await agent.request(peer, "task_assignment", {"task": "ping"})
        await agent.sleep(1.0)

The actor drives its coroutines itself (no asyncio): each ``await`` hands the
actor an effect (a request waiting for its reply, a sleep, a wait for a
matching message), and the actor resumes the coroutine when the reply, timer
or message reaches its mailbox. The same code runs under both dispatchers.

A message is offered, in order, to: the behaviour waiting for its correlation
id; a behaviour waiting in :meth:`A2AActor.receive` whose match accepts it; the
``handle_<type>`` method; otherwise it is kept (bounded) for a later receive.
Exceptions in handlers and behaviours are reported (trace record and an
``error_report`` on the ``errors`` topic); they never stop the actor or the run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any, ClassVar, Final, TypeVar

import numpy as np
import pykka

from sim.dispatch import Dispatcher, SendReport, SubscriptionFilter, Timer, Waiter, seed_for
from sim.mailbox import DEFAULT_CAPACITY, PriorityMailbox
from sim.messages import Message, Priority, Region
from sim.tools import TOOLS

__all__ = [
    "DEFAULT_TIMEOUT",
    "A2AActor",
    "Agent",
    "Behaviour",
    "DeliveryError",
    "RequestError",
    "WaitTimeout",
]

#: Simulation seconds a request waits for its reply unless told otherwise.
DEFAULT_TIMEOUT: Final = 60.0

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """A request, receive or other wait ran past its timeout."""


class DeliveryError(RuntimeError):
    """A request could not be delivered (unknown, offline or full recipient)."""

    def __init__(self, report: SendReport) -> None:
        super().__init__(f"request not delivered: {report.statuses}")
        self.report = report


class RequestError(RuntimeError):
    """The other side answered a request with an ``error_report``."""

    def __init__(self, reply: Message) -> None:
        content = reply.content
        code = content.get("error_code") or content.get("error") or "error"
        super().__init__(f"{reply.from_agent} answered with {code}: {content.get('detail', '')}")
        self.reply = reply
        self.code = code


_PENDING: Final = object()
_Outcome = tuple[Any, BaseException | None]


class Effect:
    """Something a behaviour awaits. Subclasses say how to arm and describe it."""

    __slots__ = ("_yielded", "daemon", "timeout", "timer")

    def __init__(self, timeout: float | None, daemon: bool = False) -> None:
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self.daemon = daemon
        self.timer: Timer | None = None
        self._yielded = False

    # An effect is its own awaitable iterator: the first step hands the effect
    # to the driving actor, the second returns what the actor resumed with.
    # This avoids creating a generator object for every await.
    def __await__(self) -> Generator[Effect, Any, Any]:
        return self  # type: ignore[return-value]

    def __iter__(self) -> Effect:
        return self

    def __next__(self) -> Effect:
        return self.send(None)

    def send(self, value: Any) -> Effect:
        if not self._yielded:
            self._yielded = True
            return self
        raise StopIteration(value)

    def throw(self, error: BaseException) -> Effect:
        raise error

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        """Register the wait; return ``(value, error)`` to resume at once, or _PENDING."""
        raise NotImplementedError

    def disarm(self, actor: A2AActor) -> None:
        """Forget the registration (the wait timed out)."""

    def outcome(self, message: Message) -> _Outcome:
        """What the behaviour resumes with when ``message`` answers this effect."""
        return message, None

    def describe(self) -> str:
        raise NotImplementedError


class _Request(Effect):
    __slots__ = ("content", "correlation_id", "message_type", "priority", "region", "to")

    def __init__(
        self, to: str, message_type: str, content: dict[str, Any] | None, priority: int,
        region: Region | None, timeout: float | None,
    ) -> None:
        super().__init__(timeout)
        self.to = to
        self.message_type = message_type
        self.content = content
        self.priority = priority
        self.region = region
        self.correlation_id = ""

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        dispatcher = actor.dispatcher
        self.correlation_id = dispatcher.next_id()
        message = dispatcher.message(
            actor.name, self.to, self.message_type, self.content, priority=self.priority,
            correlation_id=self.correlation_id, region=self.region,
        )
        report = dispatcher.send(dispatcher.seal(message))
        if not report.reached:
            return None, DeliveryError(report)
        actor._replies[self.correlation_id] = task
        return _PENDING

    def disarm(self, actor: A2AActor) -> None:
        actor._replies.pop(self.correlation_id, None)

    def outcome(self, message: Message) -> _Outcome:
        if message.message_type == "error_report":
            return None, RequestError(message)
        return message, None

    def describe(self) -> str:
        return f"a reply from {self.to} to {self.message_type} ({self.correlation_id})"


class _ToolCall(_Request):
    """A session tool call: resumes with the result dict, failures included."""

    __slots__ = ("tool",)

    def __init__(self, tool: str, service: str, args: dict[str, Any],
                 timeout: float | None) -> None:
        super().__init__(service, "coordination_request", {"tool": tool, "args": args},
                         Priority.HIGH, None, timeout)
        self.tool = tool

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        outcome = super().arm(actor, task)
        if isinstance(outcome, tuple) and isinstance(outcome[1], DeliveryError):
            return {"success": False, "error": "no_reply",
                    "message": f"{self.to} did not accept the call"}, None
        return outcome

    def outcome(self, message: Message) -> _Outcome:
        return dict(message.content), None

    def describe(self) -> str:
        return f"the result of {self.tool} from {self.to} ({self.correlation_id})"


class _Sleep(Effect):
    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"sleep: seconds must be >= 0, got {seconds!r}")
        super().__init__(None)
        self.seconds = seconds

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        self.timer = actor.dispatcher.call_later(
            self.seconds, actor, actor._resume, task, self, None, None
        )
        return _PENDING

    def describe(self) -> str:
        return f"the end of a {self.seconds:g}s sleep"


class _Receive(Effect):
    __slots__ = ("description", "match")

    def __init__(
        self, match: Callable[[Message], bool], description: str, timeout: float | None,
        daemon: bool,
    ) -> None:
        super().__init__(timeout, daemon)
        self.match = match
        self.description = description

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        stash = actor._stash
        for i, message in enumerate(stash):
            if self.match(message):
                del stash[i]
                return message, None
        actor._receivers.append((task, self))
        return _PENDING

    def disarm(self, actor: A2AActor) -> None:
        actor._receivers = [(t, e) for t, e in actor._receivers if e is not self]

    def describe(self) -> str:
        return self.description


class _Done(Effect):
    """An effect that resumes at once with a value already known."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value

    def arm(self, actor: A2AActor, task: Behaviour) -> _Outcome | object:
        return self.value, None

    def describe(self) -> str:
        return "nothing"


class _Bind:
    """Awaits a tool call, then binds the agent to the session it created or joined."""

    __slots__ = ("agent", "call", "tool")

    def __init__(self, agent: Agent, tool: str, call: _ToolCall) -> None:
        self.agent = agent
        self.tool = tool
        self.call = call

    def __await__(self) -> Generator[Effect, Any, dict[str, Any]]:
        result: dict[str, Any] = yield from self.call.__await__()
        if result.get("success"):
            if self.tool == "session_join" or (
                    self.tool == "session_create" and self.agent.session_id is None):
                self.agent.session_id = result["session_id"]
            elif self.tool == "session_leave":
                self.agent.session_id = None
        return result


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


class A2AActor(pykka.ThreadingActor):
    """Base of every barnraise actor: services (``agent_type`` None) and agents.

    Construct through a dispatcher (``dispatcher.spawn(Cls, name, ...)``), which
    names the actor and, in realtime mode, starts its thread.
    """

    agent_type: str | None = None
    actor_inbox: PriorityMailbox
    use_daemon_thread = True  # a forgotten shutdown must not hang the interpreter
    _handlers: ClassVar[dict[str, Callable[[Any, Message], None]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = dict(cls._handlers)
        for attr, fn in vars(cls).items():
            if attr.startswith("handle_") and callable(fn):
                handlers[attr[len("handle_"):]] = fn
        cls._handlers = handlers

    def __init__(self, *, mailbox_capacity: int | None = None, stash_limit: int = 1000) -> None:
        super().__init__()
        self.name = ""
        self.dispatcher: Dispatcher = None  # type: ignore[assignment]  # set by a2a_bind
        self.stopped = False
        self.capacity = DEFAULT_CAPACITY
        self.pending = 0  # deterministic mode: letters queued in the dispatcher's heap
        self.delivered = 0
        self.handled = 0  # realtime mode: letters handled, daemon timers aside
        self._capacity_override = mailbox_capacity
        self._stash_limit = stash_limit
        self._stash: deque[Message] = deque()
        self._replies: dict[str, Behaviour] = {}
        self._receivers: list[tuple[Behaviour, _Receive]] = []
        self.behaviours: list[Behaviour] = []
        self._rng: np.random.Generator | None = None
        self._serials: dict[str, int] = {}

    @staticmethod
    def _create_actor_inbox() -> PriorityMailbox:
        return PriorityMailbox(DEFAULT_CAPACITY)

    # -- wiring (called by the dispatcher) ------------------------------------------

    def a2a_bind(self, dispatcher: Dispatcher, name: str) -> None:
        self.dispatcher = dispatcher
        self.name = name
        self.capacity = self._capacity_override or dispatcher.mailbox_capacity
        self.actor_inbox.capacity = self.capacity

    @property
    def now(self) -> float:
        return self.dispatcher.now

    @property
    def rng(self) -> np.random.Generator:
        """This actor's random stream, seeded from the run's seed and the actor's name."""
        if self._rng is None:  # made on first use: 100,000 idle agents never pay for it
            self._rng = np.random.default_rng(seed_for(self.dispatcher.seed, self.name))
        return self._rng

    def _actor_loop_running(self) -> None:
        # Realtime mode: the body of this actor's thread, in place of pykka's
        # (the hook pykka offers implementors of new actor types, alongside
        # _create_actor_inbox). barnraise mail comes out of the mailbox as a
        # (message, encoded) tuple or a Timer and goes straight to its handler;
        # anything else is a pykka envelope: a stop request, or a proxy call.
        get = self.actor_inbox.get
        stopped = self.actor_stopped
        dispatcher = self.dispatcher
        clock = dispatcher.clock
        trace = dispatcher.trace
        records = trace._records
        trace_seq = trace._seq
        name = self.name
        receive = self.a2a_receive
        while not stopped.is_set():
            item = get()
            kind = type(item)
            if kind is tuple:
                # A message: the common case, inlined (this loop is the hot path).
                msg, encoded = item
                try:
                    expires = msg.expires_at
                    if self.stopped:
                        dispatcher._dead_letter(msg, "offline", name)
                    elif expires is not None and expires <= clock.now:
                        dispatcher._dead_letter(msg, "expired", name)
                    else:
                        if trace.enabled:
                            records.append((next(trace_seq), clock.now, "deliver",
                                            msg.from_agent, name, msg.message_type, encoded))
                        self.delivered += 1
                        receive(msg)
                except Exception as exc:
                    dispatcher.report_error(name, msg.message_type, exc)
                finally:
                    self.handled += 1
            elif kind is Timer:
                self._timer_letter(item)
            else:
                self._envelope(item)

    def _envelope(self, envelope: Any) -> None:
        try:
            response = self._handle_receive(envelope.message)
        except Exception as exc:
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
            else:
                self.dispatcher.report_error(self.name, "pykka message", exc)
        except BaseException:
            self._stop()
            raise
        else:
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)

    def _timer_letter(self, timer: Timer) -> None:
        try:
            if not self.stopped:
                self.a2a_timer(timer)
        except Exception as exc:
            self.dispatcher.report_error(self.name, "timer", exc)
        finally:
            if not timer.daemon:
                self.handled += 1

    def next_serial(self, sequence: str) -> int:
        """The next number (1, 2, ...) of this actor's sequence ``sequence``.

        For ids that behaviours make (requests, delegations, plan runs): each
        sequence counts on its own, and the numbers depend only on the order of
        calls, so they repeat with the seed.
        """
        number = self._serials.get(sequence, 0) + 1
        self._serials[sequence] = number
        return number

    def a2a_timer(self, timer: Timer) -> None:
        if not timer.cancelled:
            timer.run()

    def a2a_receive(self, message: Message) -> None:
        correlation_id = message.metadata.correlation_id
        if correlation_id is not None and self._replies:
            task = self._replies.pop(correlation_id, None)
            if task is not None and task.waiting is not None:
                value, error = task.waiting.outcome(message)
                self._resume(task, task.waiting, value, error)
                return
        if self._receivers:
            for i, (task, effect) in enumerate(self._receivers):
                if effect.match(message):
                    del self._receivers[i]
                    self._resume(task, effect, message, None)
                    return
        handler = self._handlers.get(message.message_type)
        if handler is not None:
            handler(self, message)
        else:
            self.handle_message(message)

    def handle_message(self, message: Message) -> None:
        """Fallback for a message no behaviour or handler wants: keep it for ``receive``."""
        if len(self._stash) >= self._stash_limit:
            self.dispatcher._dead_letter(self._stash.popleft(), "unhandled", self.name)
        self._stash.append(message)

    def waiters(self) -> list[Waiter]:
        return [
            Waiter(self.name, task.name, task.waiting.describe())
            for task in self.behaviours
            if task.waiting is not None and not task.waiting.daemon and not task.done
        ]

    # -- sending ----------------------------------------------------------------------

    def send(
        self,
        to: str,
        message_type: str,
        content: dict[str, Any] | None = None,
        *,
        priority: int = Priority.NORMAL,
        correlation_id: str | None = None,
        region: Region | None = None,
        expires_in: float | None = None,
    ) -> SendReport:
        """Send a message now; the report says, per recipient, what became of it."""
        dispatcher = self.dispatcher
        message = dispatcher.message(
            self.name, to, message_type, content, priority=priority,
            correlation_id=correlation_id, region=region, expires_in=expires_in,
        )
        return dispatcher.send(dispatcher.seal(message))

    def reply(
        self, request: Message, message_type: str, content: dict[str, Any] | None = None,
        *, priority: int | None = None,
    ) -> SendReport:
        """Answer ``request`` with its correlation id, to its sender."""
        return self.send(
            request.from_agent, message_type, content,
            priority=request.priority if priority is None else priority,
            correlation_id=request.metadata.correlation_id,
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

    def subscribe(
        self, topic: str, filter: Mapping[str, Any] | SubscriptionFilter | None = None
    ) -> str:
        return self.dispatcher.subscribe(self, topic, filter)

    def unsubscribe(self, subscription_id: str) -> bool:
        return self.dispatcher.unsubscribe(subscription_id)

    def emit(self, topic: str, event_type: str, payload: dict[str, Any]) -> None:
        """Record a domain event and publish it to ``topic`` and ``topic:event_type``."""
        self.dispatcher.emit(self.name, topic, event_type, payload)

    def call_later(self, delay: float, callback: Callable[[], None], *,
                   daemon: bool = False) -> Timer:
        return self.dispatcher.call_later(delay, self, callback, daemon=daemon)

    # -- behaviours -------------------------------------------------------------------

    def start_behaviour(
        self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None,
    ) -> Behaviour:
        """Run ``fn(self, *args)`` as a behaviour, starting on this actor's next turn."""
        coro = fn(self, *args)
        task = Behaviour(name or str(getattr(fn, "__name__", "behaviour")), coro)
        self.behaviours.append(task)
        self.dispatcher.call_later(0.0, self, self._advance, task, None, None)
        return task

    def request(
        self, to: str, message_type: str, content: dict[str, Any] | None = None, *,
        priority: int = Priority.NORMAL, region: Region | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> Awaitable[Message]:
        """Send and wait for the reply. Raises DeliveryError, RequestError or WaitTimeout."""
        return _Request(to, message_type, content, priority, region, timeout)

    def sleep(self, seconds: float) -> Awaitable[None]:
        """Let ``seconds`` of simulation time pass."""
        return _Sleep(seconds)

    def receive(
        self,
        match: Callable[[Message], bool] | None = None,
        *,
        message_type: str | None = None,
        from_agent: str | None = None,
        timeout: float | None = None,
        daemon: bool = False,
        description: str | None = None,
    ) -> Awaitable[Message]:
        """Wait for a message that meets every condition given.

        ``daemon=True`` marks a standing wait (a server loop) that is not a
        deadlock when the run runs dry. Raises WaitTimeout after ``timeout``.
        """
        conditions: list[Callable[[Message], bool]] = []
        words = []
        if message_type is not None:
            conditions.append(lambda m: m.message_type == message_type)
            words.append(f"type {message_type}")
        if from_agent is not None:
            conditions.append(lambda m: m.from_agent == from_agent)
            words.append(f"from {from_agent}")
        if match is not None:
            conditions.append(match)
            words.append(getattr(match, "__name__", "a predicate"))
        text = description or ("a message" + (" (" + ", ".join(words) + ")" if words else ""))
        return _Receive(lambda m: all(c(m) for c in conditions), text, timeout, daemon)

    def _advance(self, task: Behaviour, value: Any, error: BaseException | None) -> None:
        while True:
            try:
                effect = task.coro.throw(error) if error is not None else task.coro.send(value)
            except StopIteration as stop:
                task.done, task.result, task.waiting = True, stop.value, None
                return
            except Exception as exc:
                task.done, task.error, task.waiting = True, exc, None
                self.dispatcher.report_error(self.name, task.name, exc)
                return
            if not isinstance(effect, Effect):
                value, error = None, TypeError(
                    f"behaviour {task.name} awaited {effect!r}; barnraise behaviours may "
                    "await only their actor's effects (request, sleep, receive)"
                )
                continue
            outcome = effect.arm(self, task)
            if outcome is _PENDING:
                task.waiting = effect
                if effect.timeout is not None:
                    effect.timer = self.dispatcher.call_later(
                        effect.timeout, self, self._time_out, task, effect
                    )
                return
            value, error = outcome  # type: ignore[misc]

    def _resume(
        self, task: Behaviour, effect: Effect, value: Any, error: BaseException | None
    ) -> None:
        if task.waiting is not effect:
            return  # already resumed (a reply raced its timeout)
        task.waiting = None
        if effect.timer is not None:
            effect.timer.cancel()
        self._advance(task, value, error)

    def _time_out(self, task: Behaviour, effect: Effect) -> None:
        if task.waiting is not effect:
            return
        effect.disarm(self)
        effect.timer = None
        self._resume(task, effect, None, WaitTimeout(f"timed out waiting for {effect.describe()}"))


class Agent(A2AActor):
    """A participant: registered with the registry, typed, optionally heartbeating.

    ``behaviours`` are started when the agent starts. With a
    ``heartbeat_interval`` the agent sends a heartbeat to the registry that often.
    """

    agent_type: str | None = "agent"

    def __init__(
        self,
        *,
        agent_type: str | None = None,
        capabilities: tuple[str, ...] | list[str] = (),
        region: Region | None = None,
        behaviours: tuple[Callable[..., Coroutine[Any, Any, Any]], ...] = (),
        heartbeat_interval: float | None = None,
        registry: str = "registry",
        mailbox_capacity: int | None = None,
        stash_limit: int = 1000,
    ) -> None:
        super().__init__(mailbox_capacity=mailbox_capacity, stash_limit=stash_limit)
        if agent_type is not None:
            self.agent_type = agent_type
        self.capabilities = tuple(capabilities)
        self.region = region
        self._initial_behaviours = behaviours
        self.heartbeat_interval = heartbeat_interval
        self.registry = registry
        self._stop_heartbeat: Callable[[], None] | None = None
        self.session_id: str | None = None  # the session this agent joined, if any

    def on_start(self) -> None:
        dispatcher = self.dispatcher
        if self.registry in dispatcher.actors:
            content: dict[str, Any] = {
                "op": "register", "agent_type": self.agent_type,
                "capabilities": list(self.capabilities),
            }
            if self.region is not None:
                r = self.region
                content["region"] = {"x": r.x, "y": r.y, "width": r.width, "height": r.height}
            if self.heartbeat_interval:
                content["heartbeat_interval"] = self.heartbeat_interval
            self.send(self.registry, "registry_query", content)
            if self.heartbeat_interval:
                self._stop_heartbeat = dispatcher.call_every(
                    self.heartbeat_interval, self, self.heartbeat
                )
        for fn in self._initial_behaviours:
            self.start_behaviour(fn)

    def call(self, tool: str, /, *, call_timeout: float | None = DEFAULT_TIMEOUT,
             **args: Any) -> Awaitable[dict[str, Any]]:
        """Call a session tool (``sim.tools.TOOLS``); resumes with its result dict.

        Like a client, the agent is bound to the session it creates or joins and
        may then omit ``session_id``. An unknown tool resumes at once with an
        ``unknown_tool`` failure; a call with no answer in ``call_timeout``
        simulated seconds raises WaitTimeout (tools' own ``timeout`` arguments,
        a barrier's say, pass through untouched).
        """
        spec = TOOLS.get(tool)
        if spec is None:
            return _Done({"success": False, "error": "unknown_tool",
                          "message": f"no tool {tool!r}"})
        if ("session_id" in spec.input_schema["properties"] and "session_id" not in args
                and self.session_id is not None):
            args["session_id"] = self.session_id
        return _Bind(self, tool, _ToolCall(tool, spec.service, args, call_timeout))

    def heartbeat(self) -> None:
        self.send(self.registry, "heartbeat", {}, priority=Priority.LOW)

    def pause_heartbeats(self) -> None:
        """Stop heartbeating (as a hung agent would) without leaving."""
        if self._stop_heartbeat is not None:
            self._stop_heartbeat()
            self._stop_heartbeat = None

    def set_status(self, status: str) -> None:
        self.send(self.registry, "registry_query", {"op": "set_status", "status": status})

    def on_stop(self) -> None:
        self.pause_heartbeats()
        if self.registry in self.dispatcher.actors:
            self.send(self.registry, "registry_query", {"op": "unregister"})
