"""A2AActor: the pykka actor every barnraise service and agent is built on.

An A2AActor has a bounded priority mailbox, handles A2A messages with methods
named ``handle_<message_type>``, and runs any number of *behaviours*: ``async
def`` coroutines that await effects (``barnraise.actors.effects``) instead of blocking::

    async def ping(agent: Agent, peer: str) -> None:
        reply = await agent.request(peer, "task_assignment", {"task": "ping"})
        await agent.sleep(1.0)

The actor drives its coroutines itself (no asyncio): each ``await`` hands the
actor an effect (a request waiting for its reply, a sleep, a wait for a
matching message), and the actor resumes the coroutine when the reply, timer
or message reaches its mailbox. The same code runs under both dispatchers.

A message is offered, in order, to: the behaviour waiting for its correlation
id, if it comes from the actor that request was sent to (or is the dispatcher's
own ``error_report`` about it; anything else carrying that id is a dead letter
``forged_reply`` and the wait goes on); a behaviour waiting in
:meth:`A2AActor.receive` whose match accepts it; the ``handle_<type>`` method;
otherwise it is kept (bounded) for a later receive, unless it is of an agents' type
(one's own, or ``task_request``, ``task_response``, ``notification``, ``data_share``) and
no behaviour of the actor runs: then it is a dead letter ``no_handler`` with the reason
in words (:meth:`A2AActor.handle_message`, :meth:`A2AActor.drop_unread`).
Exceptions in handlers and behaviours are reported (trace record and an
``error_report`` on the ``errors`` topic); they never stop the actor or the run.

**Timeouts cost no timer per wait.** A wait with a timeout goes into the
actor's deadline queue (one FIFO per timeout value: deadlines made with the
same timeout come in time order) and is counted as live work with the
dispatcher (:meth:`~barnraise.sim.dispatch.core.Dispatcher.add_live_work`) until it is
answered or times out. One daemon timer per actor, the *sweeper*, is set for
the earliest deadline; when it fires it raises :class:`WaitTimeout` in every
wait whose deadline has come, drops the answered ones, and sets itself for
the next. So an answered request neither keeps a run going nor leaves a
timer behind, and an unanswered one keeps the run going until it times out.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ClassVar

import numpy as np
import pykka

from barnraise.actors.effects import (
    DEFAULT_TIMEOUT,
    PENDING,
    Behaviour,
    Effect,
    Receive,
    Request,
    Sleep,
    ToolCall,
)
from barnraise.actors.errors import WaitTimeout
from barnraise.actors.sending import Sending
from barnraise.sim.dispatch.core import Dispatcher, answers
from barnraise.sim.dispatch.values import WAKE, SubscriptionFilter, Timer, Waiter
from barnraise.sim.failures import Failure
from barnraise.sim.mailbox import DEFAULT_CAPACITY, PriorityMailbox
from barnraise.sim.messages import (
    BROADCAST,
    RUNTIME_TYPES,
    TOPIC_PREFIX,
    TYPE_PREFIX,
    Message,
    Priority,
    Region,
)
from barnraise.sim.seeds import seed_for

__all__ = ["A2AActor"]

_GROUP_PREFIXES = (TOPIC_PREFIX, TYPE_PREFIX)

# A deadline queue entry: (deadline, behaviour, the effect it waits on).
_Deadline = tuple[float, Behaviour, Effect]


class A2AActor(Sending, pykka.ThreadingActor):
    """Base of every barnraise actor: services (``agent_type`` None) and agents.

    Construct through a dispatcher (``dispatcher.spawn(Cls, name, ...)``), which
    names the actor and, in realtime mode, starts its thread.
    """

    agent_type: str | None = None
    #: "Let it crash": a behaviour error this actor does not handle is reported and
    #: then crashes it (``Dispatcher.crash``), for its supervisor to restart; False
    #: (the default here, and every service's) reports the error and keeps the actor
    #: going. Role agents (``Participant``) set it True.
    crash_on_error: bool = False
    #: The reported error that crashed it (``crash_on_error``), for its supervisor to
    #: note whether a restart followed; None for any other crash.
    crashed_by: Failure | None = None
    # Class-level defaults that an instance overrides only when it changes them: an
    # instance with more attributes than CPython's shared key table holds gets a dict
    # of its own (about 800 bytes more an agent, and a slower spawn of 100,000 agents).
    #: Set when the actor was crashed (``Dispatcher.crash``): it stopped without goodbyes.
    crashed: bool = False
    #: 0 in an actor's first life, n after its n-th restart by a supervisor.
    incarnation: int = 0
    #: The mailbox of an agent outside the process (the gateway's Clients): the ids
    #: it is given are drawn from ``secrets`` rather than the seeded counter.
    remote: bool = False
    actor_inbox: PriorityMailbox
    use_daemon_thread = True  # a forgotten shutdown must not hang the interpreter
    _handlers: ClassVar[dict[str, Callable[[Any, Message], None]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers = dict(cls._handlers)
        for attr, fn in vars(cls).items():
            # handle_message is the fallback, not the handler of a type "message".
            if attr.startswith("handle_") and callable(fn) and attr != "handle_message":
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
        self._receivers: list[tuple[Behaviour, Receive]] = []
        self.behaviours: list[Behaviour] = []
        self._rng: np.random.Generator | None = None
        self._serials: dict[str, int] = {}
        # timeout -> deadlines made with it, oldest first (made on first use:
        # 100,000 idle agents never pay for a dict); and the one sweeper
        self._deadlines: dict[float, deque[_Deadline]] | None = None
        self._sweeper: Timer | None = None

    @staticmethod
    def _create_actor_inbox() -> PriorityMailbox:
        return PriorityMailbox(DEFAULT_CAPACITY)

    # -- wiring (called by the dispatcher) ------------------------------------------

    def a2a_bind(self, dispatcher: Dispatcher, name: str) -> None:
        self.dispatcher = dispatcher
        self.name = name
        self.capacity = self._capacity_override or dispatcher.mailbox_capacity
        self.actor_inbox.capacity = self.capacity

    def a2a_stopped(self) -> None:
        """The actor has stopped: none of its waits will be answered or time out.

        Releases the live work they held, so that a stopped actor's requests do
        not keep a run going. The dispatcher calls this (deterministic mode) or
        the actor's own thread does, as its loop ends (realtime mode).
        """
        for queue in (self._deadlines or {}).values():
            for _, _, effect in queue:
                if effect.held:
                    effect.held = False
                    self.dispatcher.add_live_work(-1)
        self._deadlines = None
        # A behaviour started but never run (its first step was still queued when the
        # actor stopped: an async tool call a service took just before) is closed here;
        # left to the collector, it would be reported as a coroutine never awaited, in
        # whatever code happened to be running then.
        for task in self.behaviours:
            if not task.done and inspect.getcoroutinestate(task.coro) == inspect.CORO_CREATED:
                task.coro.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

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
        # (message, encoded) tuple or a Timer; a message goes through the
        # dispatcher's one delivery step, as in deterministic mode. Anything
        # else is a pykka envelope: a stop request, or a proxy call.
        # While the run is held (dispatcher.holding, a viewer's pause) letters and
        # timers are kept, in the order taken, and handled first once it resumes
        # (WAKE in the mailbox wakes the thread for that); proxy calls, the read
        # API's, are answered all the while.
        get = self.actor_inbox.get
        stopped = self.actor_stopped
        dispatcher = self.dispatcher
        clock = dispatcher.clock
        deliver = dispatcher.deliver
        kept: deque[Any] = deque()
        while not stopped.is_set():
            item = kept.popleft() if kept and not dispatcher.holding else get()
            kind = type(item)
            if kind is tuple or kind is Timer:
                if dispatcher.holding:
                    kept.append(item)
                    continue
            elif item is WAKE:
                continue
            if kind is tuple:
                message, encoded = item
                try:
                    deliver(self, message, encoded, clock.now)
                except Exception as exc:  # a bug in the step itself must not end the thread
                    dispatcher.report_error(self.name, message.message_type, exc)
                finally:
                    self.handled += 1
            elif kind is Timer:
                self._timer_letter(item)
            else:
                self._envelope(item)
        self.a2a_stopped()

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
            # Timer.run, inlined: every sleep's end and every sweep comes this way.
            callback, args = timer.callback, timer.args
            timer.args = ()
            callback(*args)

    def a2a_receive(self, message: Message) -> None:
        correlation_id = message.metadata.correlation_id
        if correlation_id is not None and self._replies:
            task = self._replies.pop(correlation_id, None)
            if task is not None:
                effect = task.waiting
                if effect is not None:
                    # Only requests are filed in _replies: effect.to is whom it asked.
                    if not answers(message, effect.to):  # type: ignore[attr-defined]
                        # Not from the actor asked: the wait goes on, the letter is dead.
                        self._replies[correlation_id] = task
                        self.dispatcher.dead_letter(message, "forged_reply", self.name)
                        return
                    kind = type(effect)
                    value: Any
                    error: BaseException | None
                    if kind is ToolCall:
                        value, error = message.content, None  # ToolCall.outcome, inlined
                    elif kind is Request and message.message_type != "error_report":
                        value, error = message, None  # Request.outcome, inlined
                    else:
                        value, error = effect.outcome(message)
                    # resume(), inlined: this is every reply's path.
                    task.waiting = None
                    held = effect.held
                    self._advance(task, value, error)
                    if held:
                        effect.held = False
                        self.dispatcher.add_live_work(-1)
                    return
        if self._receivers:
            for i, (task, receive) in enumerate(self._receivers):
                if receive.match(message):
                    del self._receivers[i]
                    self.resume(task, receive, message, None)
                    return
        handler = self._handlers.get(message.message_type)
        if handler is not None:
            handler(self, message)
        elif (correlation_id is not None and message.message_type == "coordination_response"
              and self.dispatcher.faults is not None):
            # Under faults: the second answer to a request sent twice, or one whose
            # wait has ended. Nobody asked for it; kept, it would only fill the stash.
            return
        else:
            self.handle_message(message)

    def handle_message(self, message: Message) -> None:
        """Fallback for a message no behaviour or handler wants: keep it for ``receive``.

        A letter of an agents' type (a type of one's own, or one of
        :data:`~barnraise.sim.messages.AGENT_TYPES`) that reaches an actor with no
        ``handle_<type>`` and no behaviour still running, which no receive can ever take,
        is a dead letter ``no_handler`` at once, with the reason in words (``no handler
        for 'ping' on builder-3``). One kept for a receive that never comes is one at the
        end of the run (:meth:`drop_unread`). A letter of the runtime's vocabulary
        (:data:`~barnraise.sim.messages.RUNTIME_TYPES`) is kept, as it always was.
        """
        if message.message_type not in RUNTIME_TYPES and not self._running():
            self.dispatcher.dead_letter(message, "no_handler", self.name,
                                        self._no_handler(message, "and no behaviour running"))
            return
        if len(self._stash) >= self._stash_limit:
            self.dispatcher.dead_letter(self._stash.popleft(), "unhandled", self.name)
        self._stash.append(message)

    def _running(self) -> bool:
        return any(not task.done for task in self.behaviours)

    def _no_handler(self, message: Message, why: str) -> str:
        return (f"no handler for {message.message_type!r} on {self.name} "
                f"(no handle_{message.message_type} {why})")

    def drop_unread(self) -> int:
        """End of a run: the letters of agents' types (see :meth:`handle_message`) still
        kept for a receive that never took them become dead letters ``no_handler``;
        returns how many. Kept letters of the runtime's vocabulary stay kept (services
        answer more than a behaviour asks for: an unread one is no mistake)."""
        stash = self._stash
        unread = [m for m in stash if m.message_type not in RUNTIME_TYPES]
        if not unread:
            return 0
        self._stash = deque(m for m in stash if m.message_type in RUNTIME_TYPES)
        for message in unread:
            self.dispatcher.dead_letter(message, "no_handler", self.name,
                                        self._no_handler(message, "and no receive took it"))
        return len(unread)

    def waiters(self) -> list[Waiter]:
        return [
            Waiter(self.name, task.name, task.waiting.describe())
            for task in self.behaviours
            if task.waiting is not None and not task.waiting.daemon and not task.done
        ]

    # -- what effects use ----------------------------------------------------------------

    def awaits(self, correlation_id: str) -> bool:
        """Is a behaviour of this actor still waiting for the answer to ``correlation_id``?"""
        return correlation_id in self._replies

    def forget_reply(self, correlation_id: str) -> None:
        self._replies.pop(correlation_id, None)

    def take_stashed(self, match: Callable[[Message], bool]) -> Message | None:
        """Remove and return the oldest kept message ``match`` accepts, if any."""
        stash = self._stash
        for i, message in enumerate(stash):
            if match(message):
                del stash[i]
                return message
        return None

    def add_receiver(self, task: Behaviour, receive: Receive) -> None:
        self._receivers.append((task, receive))

    def remove_receiver(self, receive: Receive) -> None:
        self._receivers = [(t, e) for t, e in self._receivers if e is not receive]

    # -- subscriptions and timers (the actor itself is the endpoint) --------------------

    def subscribe(
        self, topic: str, filter: Mapping[str, Any] | SubscriptionFilter | None = None
    ) -> str:
        return self.dispatcher.subscribe(self, topic, filter)

    def unsubscribe(self, subscription_id: str) -> bool:
        return self.dispatcher.unsubscribe(subscription_id)

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

    def behaviour_name(self, task: Behaviour) -> str:
        """The name an error report gives ``task`` (its ``where``): the name it was
        started under. A subclass that wraps its behaviours names the one inside."""
        return task.name

    def request(
        self, to: str, message_type: str, content: dict[str, Any] | None = None, *,
        priority: int = Priority.NORMAL, region: Region | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> Awaitable[Message]:
        """Send and wait for the reply. Raises DeliveryError, RequestError or WaitTimeout.

        ``to`` names one actor (a service by its actor name): only that actor's answer
        is taken. A group address (``broadcast``, ``topic:``, ``type:``) raises
        ValueError: send() to the group and receive() the answers instead.
        """
        if to == BROADCAST or to.startswith(_GROUP_PREFIXES):
            raise ValueError(f"request to {to!r}: a request is answered by the one actor it "
                             "names, not a group; send() to the group and receive() answers")
        return Request(to, message_type, content, priority, region, timeout)

    def sleep(self, seconds: float) -> Awaitable[None]:
        """Let ``seconds`` of simulation time pass."""
        return Sleep(seconds)

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
        # Tested against every letter while the wait lasts: one condition is used as it
        # is, two without a generator; no condition at all accepts anything.
        accept: Callable[[Message], bool]
        if len(conditions) == 1:
            accept = conditions[0]
        elif len(conditions) == 2:
            first, second = conditions
            accept = lambda m: first(m) and second(m)  # noqa: E731
        else:
            accept = lambda m: all(c(m) for c in conditions)  # noqa: E731
        return Receive(accept, text, timeout, daemon)

    def _advance(self, task: Behaviour, value: Any, error: BaseException | None) -> None:
        # Whatever it waited on is over (a sleep's timer calls this directly: a sleep is
        # in no other queue, so nothing else can resume it first, and it holds no work).
        task.waiting = None
        while True:
            try:
                effect = task.coro.throw(error) if error is not None else task.coro.send(value)
            except StopIteration as stop:
                task.done, task.result, task.waiting = True, stop.value, None
                return
            except Exception as exc:
                task.done, task.error, task.waiting = True, exc, None
                failure = self.dispatcher.report_error(self.name, self.behaviour_name(task), exc)
                if self.crash_on_error:
                    self.crashed_by = failure
                    self.dispatcher.crash(self.name, f"behaviour_error: {type(exc).__name__}")
                return
            if not isinstance(effect, Effect):
                value, error = None, TypeError(
                    f"behaviour {task.name} awaited {effect!r}; barnraise behaviours may "
                    "await only their actor's effects (request, sleep, receive)"
                )
                continue
            try:
                outcome = effect.arm(self, task)
            except Exception as exc:  # an effect that cannot start: the behaviour hears why
                value, error = None, exc
                continue
            if outcome is PENDING:
                task.waiting = effect
                if isinstance(effect, Request):  # its reply resumes it
                    self._replies[effect.correlation_id] = task
                timeout = effect.timeout
                if timeout is not None:
                    # Into the deadline queue (see the module docstring): only here, and
                    # no method of its own, as every request with a timeout comes this way.
                    dispatcher = self.dispatcher
                    deadline = dispatcher.clock.now + timeout
                    deadlines = self._deadlines
                    if deadlines is None:
                        deadlines = self._deadlines = {}
                    queue = deadlines.get(timeout)
                    if queue is None:
                        queue = deadlines[timeout] = deque()
                    elif queue and queue[0][1].waiting is not queue[0][2]:
                        # The oldest was answered: drop it now, one per append, so
                        # that a burst of requests at one instant (all answered long
                        # before their deadline) does not pile up until the sweep.
                        queue.popleft()
                    queue.append((deadline, task, effect))
                    if not effect.daemon:  # a standing wait's poll keeps nothing going
                        effect.held = True
                        dispatcher.add_live_work(1)
                    sweeper = self._sweeper
                    if sweeper is None or deadline < sweeper.due:
                        self._set_sweeper(deadline)
                return
            value, error = outcome  # type: ignore[misc]

    def resume(
        self, task: Behaviour, effect: Effect, value: Any, error: BaseException | None
    ) -> None:
        """Resume ``task`` waiting on ``effect`` with a value or an error (effects call this)."""
        if task.waiting is not effect:
            return  # already resumed (a reply raced its timeout)
        task.waiting = None
        held = effect.held
        self._advance(task, value, error)
        if held:
            # Released after the behaviour's next step: whatever it sends is
            # already counted, so a realtime idle check never sees a gap.
            effect.held = False
            self.dispatcher.add_live_work(-1)

    # -- the deadline queue ---------------------------------------------------------------

    def _set_sweeper(self, due: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._sweeper = self.dispatcher.call_at(due, self, self._sweep, due, daemon=True)

    def _sweep(self, due: float) -> None:
        self._sweeper = None
        now = max(self.dispatcher.now, due)
        deadlines = self._deadlines
        if deadlines is None:  # stopped since
            return
        for timeout in list(deadlines):
            queue = deadlines[timeout]
            while queue:
                deadline, task, effect = queue[0]
                if task.waiting is not effect:  # answered: nothing to time out
                    queue.popleft()
                    continue
                if deadline > now:
                    break
                queue.popleft()
                effect.disarm(self)
                self.resume(task, effect, None,
                            WaitTimeout(f"timed out waiting for {effect.describe()}"))
            if not queue and deadlines.get(timeout) is queue:
                del deadlines[timeout]
        heads = [queue[0][0] for queue in deadlines.values() if queue]
        if heads:
            earliest = min(heads)
            if self._sweeper is None or earliest < self._sweeper.due:
                self._set_sweeper(earliest)
