"""The two dispatchers: who runs actor handlers, when, and on which thread.

Both dispatchers route A2A messages the same way (direct, broadcast, topic,
type) and keep the same trace and dead-letter counts; they differ only in how
a routed message reaches its recipient's handler:

* :class:`DeterministicDispatcher` keeps one heap ordered by
  ``(time, -priority, seq)`` and calls handlers itself, one at a time, on the
  thread that calls :meth:`~DeterministicDispatcher.run`. Time is virtual and
  jumps to the next entry. Same seed, same trace digest.
* :class:`RealtimeDispatcher` starts every actor as a pykka ``ThreadingActor``
  and offers each message straight into the recipient's mailbox; one timer
  thread serves every timer and sleep. Time is wall time times ``time_scale``.

Actors are anything that satisfies :class:`Endpoint` (in practice,
``actors.base.A2AActor``); this module never imports ``actors``.

A run ends in one of the reasons of :class:`RunReport`. When nothing is left to
do but some behaviour still waits for something that no pending work can
produce, the reason is ``"deadlock"`` and the report names every waiter.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any, Final, Literal, Protocol

import msgspec
import numpy as np

from sim.clock import VirtualClock, WallClock
from sim.messages import (
    BROADCAST,
    DEFAULT_MAX_CONTENT_BYTES,
    TOPIC_PREFIX,
    TYPE_PREFIX,
    Message,
    MessageError,
    Metadata,
    Priority,
    Region,
    decode,
    encode_content,
    sign,
    verify,
)
from sim.trace import DROP, ERROR, Trace

__all__ = [
    "DELIVERED",
    "DROPPED",
    "OFFLINE",
    "DeterministicDispatcher",
    "Dispatcher",
    "Endpoint",
    "RealtimeDispatcher",
    "RunReport",
    "SendReport",
    "Statistics",
    "SubscriptionFilter",
    "Timer",
    "Waiter",
    "make_dispatcher",
    "seed_for",
]

DELIVERED: Final = "delivered"
OFFLINE: Final = "offline"
DROPPED: Final = "dropped"

SYSTEM: Final = "system"
"""The sender name of messages the runtime itself produces (error reports)."""

ERRORS_TOPIC: Final = "errors"

DeadReason = Literal[
    "mailbox_full", "expired", "unknown_recipient", "bad_signature", "invalid", "offline",
    "unhandled",
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
    """What a dispatcher needs from an actor. ``actors.base.A2AActor`` provides it."""

    name: str
    agent_type: str | None
    stopped: bool
    actor_inbox: Any
    capacity: int
    pending: int
    delivered: int

    def a2a_bind(self, dispatcher: Dispatcher, name: str) -> None: ...
    def a2a_receive(self, message: Message) -> None: ...
    def a2a_timer(self, timer: Timer) -> None: ...
    def waiters(self) -> list[Waiter]: ...
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
        self._dispatcher._cancel_timer(self)
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


def _region_of(value: Mapping[str, Any]) -> Region | None:
    """The Region of a payload's ``{x, y, width, height}``, or None if it is not one."""
    try:
        return Region(value["x"], value["y"], value["width"], value["height"])
    except (KeyError, TypeError, MessageError):
        return None


class SendReport:
    """What happened to a send, per recipient: delivered, offline or dropped.

    "Delivered" means accepted into the recipient's mailbox; the handler runs later.
    """

    __slots__ = ("_one", "_statuses", "message_id")

    def __init__(
        self, message_id: str, statuses: dict[str, str] | None = None,
        one: tuple[str, str] | None = None,
    ) -> None:
        self.message_id = message_id
        # A direct send keeps its one (recipient, status) pair and builds the
        # dict only if asked: most callers never look.
        self._statuses = statuses
        self._one = one

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
    """

    reason: str
    now: float
    steps: int
    waiters: tuple[Waiter, ...] = field(default=())

    @property
    def deadlock(self) -> bool:
        return self.reason == "deadlock"

    def describe(self) -> str:
        head = f"run ended: {self.reason} at t={self.now:g} after {self.steps} steps"
        if not self.waiters:
            return head
        return head + "\n" + "\n".join(f"  - {w}" for w in self.waiters)


def seed_for(root_seed: int, name: str) -> np.random.SeedSequence:
    """The seed sequence of the actor called ``name``: stable across processes."""
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return np.random.SeedSequence(entropy=root_seed, spawn_key=(key,))


class _Subscription:
    __slots__ = ("endpoint", "filter", "id")

    def __init__(self, sid: str, endpoint: Endpoint, flt: SubscriptionFilter | None) -> None:
        self.id = sid
        self.endpoint = endpoint
        self.filter = flt


class Dispatcher:
    """Routing, dead letters, trace and subscriptions shared by both modes."""

    mode: str = "abstract"

    def __init__(
        self,
        seed: int = 0,
        *,
        mailbox_capacity: int = 1000,
        sign_messages: bool = False,
        secret: bytes | None = None,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        trace: bool = True,
        dead_letter_log: int = 10_000,
    ) -> None:
        if type(seed) is not int or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if mailbox_capacity < 1:
            raise ValueError(f"mailbox_capacity must be at least 1, got {mailbox_capacity}")
        self.seed = seed
        self.mailbox_capacity = mailbox_capacity
        self.sign_messages = sign_messages
        root = np.random.SeedSequence(seed)
        # The session secret: given, or drawn from the root seed so runs repeat.
        self.secret = secret if secret is not None else bytes(root.generate_state(8, np.uint32))
        self.max_content_bytes = max_content_bytes
        self.trace = Trace(enabled=trace)
        self.clock: VirtualClock | WallClock
        self._id_prefix = f"m{root.generate_state(1, np.uint32)[0]:08x}-"
        self._ids = itertools.count(1)
        self._endpoints: dict[str, Endpoint] = {}
        self._agents: dict[str, Endpoint] = {}  # non-service endpoints, spawn order
        self._by_type: dict[str, dict[str, Endpoint]] = {}
        self._topics: dict[str, tuple[_Subscription, ...]] = {}
        self._subs_by_id: dict[str, tuple[str, _Subscription]] = {}
        self._offline: set[str] = set()
        self._lock = threading.Lock()  # guards topology changes, never delivery
        self._dead: Counter[str] = Counter()
        self.dead_letters: deque[tuple[str, Message]] = deque(maxlen=dead_letter_log)
        self.behaviour_errors = 0

    # -- identity and time -------------------------------------------------------

    @property
    def now(self) -> float:
        raise NotImplementedError

    def next_id(self) -> str:
        """A fresh message or correlation id; seeded, so reproducible in deterministic mode."""
        return f"{self._id_prefix}{next(self._ids):x}"

    def actor(self, name: str) -> Endpoint:
        """The actor called ``name``. Read its state only while the run is idle."""
        try:
            return self._endpoints[name]
        except KeyError:
            raise KeyError(f"no actor called {name!r}") from None

    @property
    def actors(self) -> Mapping[str, Endpoint]:
        return self._endpoints

    def agents_of_type(self, agent_type: str) -> list[str]:
        return list(self._by_type.get(agent_type, ()))

    # -- lifecycle ----------------------------------------------------------------

    def spawn(self, cls: Callable[..., Any], name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Construct ``cls(*args, **kwargs)`` as the actor ``name`` and start it."""
        if not isinstance(name, str) or not name or name.startswith(("topic:", "type:")):
            raise ValueError(f"actor name must be a plain non-empty string, got {name!r}")
        if name in (BROADCAST, SYSTEM):
            raise ValueError(f"actor name {name!r} is reserved")
        if name in self._endpoints:
            raise ValueError(f"an actor called {name!r} already exists")
        actor: Endpoint = cls(*args, **kwargs)
        actor.a2a_bind(self, name)
        with self._lock:
            self._endpoints[name] = actor
            if actor.agent_type is not None:
                self._agents[name] = actor
                self._by_type.setdefault(actor.agent_type, {})[name] = actor
        self._start(actor)
        return actor

    def _start(self, actor: Endpoint) -> None:
        raise NotImplementedError

    @contextmanager
    def start_together(self) -> Iterator[None]:
        """Spawn a group of actors that start only once every one of them exists.

        In deterministic mode nothing runs until :meth:`run` or :meth:`step`, so
        this changes nothing. In realtime mode an actor starts the moment it is
        spawned, so a behaviour that talks to a peer spawned after it could find
        no such actor; inside this block starts are held and made, in spawn
        order, when the block ends. Mail sent to a held actor waits in its mailbox.
        """
        yield

    def stop_actor(self, name: str) -> None:
        """Stop one actor now; mail still queued for it, and any later, is dead ``offline``."""
        actor = self.actor(name)
        if actor.stopped:
            return
        actor.stopped = True
        with self._lock:
            self._offline.add(name)
            self._agents.pop(name, None)
            if actor.agent_type is not None:
                self._by_type.get(actor.agent_type, {}).pop(name, None)
        self._stop(actor)

    def _stop(self, actor: Endpoint) -> None:
        raise NotImplementedError

    def set_agent_type(self, name: str, agent_type: str | None) -> None:
        """Change the type an actor is routed by (``type:ROLE``, broadcasts)."""
        actor = self.actor(name)
        with self._lock:
            if actor.agent_type is not None:
                self._by_type.get(actor.agent_type, {}).pop(name, None)
            actor.agent_type = agent_type
            if agent_type is None:
                self._agents.pop(name, None)
            elif not actor.stopped:
                self._agents[name] = actor
                self._by_type.setdefault(agent_type, {})[name] = actor

    def set_online(self, name: str, online: bool) -> None:
        """Mark an agent reachable or not (the registry does, on heartbeat loss)."""
        if online:
            if not self._endpoints[name].stopped:
                self._offline.discard(name)
        else:
            self._offline.add(name)

    def is_online(self, name: str) -> bool:
        return name in self._endpoints and name not in self._offline

    # -- messages -------------------------------------------------------------------

    def message(
        self,
        sender: str,
        to: str,
        message_type: str,
        content: dict[str, Any] | None = None,
        *,
        priority: int = Priority.NORMAL,
        correlation_id: str | None = None,
        region: Region | None = None,
        capabilities: tuple[str, ...] = (),
        expires_in: float | None = None,
    ) -> Message:
        """Build a message stamped with a fresh id and the current time."""
        now = self.clock.now
        if region is None and correlation_id is None and not capabilities:
            metadata = _NO_METADATA
        else:
            metadata = Metadata(region, tuple(capabilities), correlation_id)
        # Positional: this is on every send's path and keywords cost more.
        return Message(
            f"{self._id_prefix}{next(self._ids):x}", now, sender, to, message_type, priority,
            {} if content is None else content, metadata, None,
            None if expires_in is None else now + expires_in,
        )

    def seal(self, message: Message) -> Message:
        """Sign ``message`` with the session secret when in-process signing is on."""
        return sign(message, self.secret) if self.sign_messages else message

    def send(self, message: Message) -> SendReport:
        """Route ``message`` to its recipients; never blocks.

        Raises :class:`MessageError` if the content is not JSON or too large
        (the caller's bug). Everything else that goes wrong is a dead letter.
        """
        try:
            encoded = _encode_content(message.content)
        except (TypeError, msgspec.EncodeError):
            encoded = encode_content(message.content)  # raises the MessageError
        if len(encoded) > self.max_content_bytes:
            encode_content(message.content, self.max_content_bytes)
        if self.sign_messages:
            try:
                verify(message, self.secret)
            except MessageError:
                self._dead_letter(message, "bad_signature", message.to_agent)
                return SendReport(message.message_id, {message.to_agent: DROPPED})
        to = message.to_agent
        endpoint = self._endpoints.get(to)
        if endpoint is not None:
            return SendReport(message.message_id, None, (to, self._route_one(endpoint, message,
                                                                            encoded)))
        if to == BROADCAST:
            return self._route_many(message, encoded, self._agents.values(), exclude_sender=True)
        if to.startswith(TOPIC_PREFIX):
            return self._publish(message, encoded, to[len(TOPIC_PREFIX):])
        if to.startswith(TYPE_PREFIX):
            members = self._by_type.get(to[len(TYPE_PREFIX):], {})
            return self._route_many(message, encoded, members.values(), exclude_sender=True)
        self._dead_letter(message, "unknown_recipient", to)
        return SendReport(message.message_id, {to: DROPPED})

    def receive_wire(self, data: bytes | str) -> SendReport | None:
        """Accept a message from outside the process: decode, verify, route.

        Such messages are always signed. An invalid or badly signed frame is a
        dead letter (``invalid`` / ``bad_signature``) and returns None.
        """
        try:
            message = decode(data, max_content_bytes=self.max_content_bytes)
        except MessageError as exc:
            self._dead["invalid"] += 1
            self.trace.append(self.now, DROP, SYSTEM, SYSTEM, "invalid",
                              _encode_obj({"reason": "invalid", "error": str(exc)}))
            return None
        try:
            verify(message, self.secret)
        except MessageError:
            self._dead_letter(message, "bad_signature", message.to_agent)
            return None
        if self.sign_messages:
            return self.send(message)
        return self.send(msgspec.structs.replace(message, signature=None))

    def _route_many(
        self, message: Message, encoded: bytes, members: Iterable[Endpoint], exclude_sender: bool
    ) -> SendReport:
        sender = message.from_agent
        targets = [e for e in members if not (exclude_sender and e.name == sender)]
        return self._route_batch(message, encoded, targets)

    def _publish(self, message: Message, encoded: bytes, topic: str) -> SendReport:
        subs = self._topics.get(topic, ())
        if any(s.filter is not None for s in subs):
            sender = self._endpoints.get(message.from_agent)
            sender_type = sender.agent_type if sender is not None else None
            if sender_type is None:
                # A service's event: its agent_type filter means the agent it is
                # about (agent_id; for task events the assignee, else the reporter).
                content = message.content
                for key in ("agent_id", "assigned_to", "by"):
                    subject = self._endpoints.get(str(content.get(key)))
                    if subject is not None and subject.agent_type is not None:
                        sender_type = subject.agent_type
                        break
            targets = [
                s.endpoint for s in subs
                if s.filter is None or s.filter.accepts(message, sender_type)
            ]
        else:
            targets = [s.endpoint for s in subs]
        return self._route_batch(message, encoded, targets)

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        raise NotImplementedError

    def _route_batch(self, message: Message, encoded: bytes, targets: list[Endpoint]) -> SendReport:
        statuses = {e.name: self._route_one(e, message, encoded) for e in targets}
        return SendReport(message.message_id, statuses)

    def _dead_letter(self, message: Message, reason: DeadReason, recipient: str) -> None:
        self._dead[reason] += 1
        self.dead_letters.append((reason, message))
        self.trace.append(
            self.now, DROP, message.from_agent, recipient, message.message_type,
            _encode_obj({"reason": reason, "message_id": message.message_id}),
        )
        if reason == "mailbox_full" and message.message_type != "error_report":
            sender = self._endpoints.get(message.from_agent)
            if sender is not None and not sender.stopped:
                report = self.message(
                    SYSTEM, sender.name, "error_report",
                    {"error_code": "mailbox_full", "recipient": recipient,
                     "message_id": message.message_id},
                    priority=Priority.HIGH,
                    correlation_id=message.metadata.correlation_id,
                )
                self._route_one(sender, report, encode_content(report.content))

    # -- topics ------------------------------------------------------------------

    def subscribe(
        self,
        endpoint: Endpoint,
        topic: str,
        flt: Mapping[str, Any] | SubscriptionFilter | None = None,
    ) -> str:
        """Subscribe ``endpoint`` to ``topic``; returns the subscription id."""
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        if topic.startswith(TOPIC_PREFIX):
            topic = topic[len(TOPIC_PREFIX):]
        parsed = SubscriptionFilter.parse(flt)
        sid = f"sub-{self.next_id()}"
        sub = _Subscription(sid, endpoint, parsed)
        with self._lock:
            # Copy on write: publishers read the tuple without taking the lock.
            self._topics[topic] = (*self._topics.get(topic, ()), sub)
            self._subs_by_id[sid] = (topic, sub)
        return sid

    def unsubscribe(self, subscription_id: str) -> bool:
        with self._lock:
            entry = self._subs_by_id.pop(subscription_id, None)
            if entry is None:
                return False
            topic, sub = entry
            remaining = tuple(s for s in self._topics.get(topic, ()) if s is not sub)
            if remaining:
                self._topics[topic] = remaining
            else:
                self._topics.pop(topic, None)
        return True

    def subscribers(self, topic: str) -> list[str]:
        return [s.endpoint.name for s in self._topics.get(topic, ())]

    # -- events and errors ----------------------------------------------------------

    def emit(
        self, source: str, topic: str, event_type: str, payload: dict[str, Any],
        *, priority: int = Priority.NORMAL,
    ) -> None:
        """Record a domain event and publish it on ``topic`` and ``topic:event_type``.

        An event about a place (a ``region`` in its payload) carries that region
        in its metadata too, so subscription filters on regions see it.
        """
        body = {"event": event_type, **payload}
        self.trace.event(self.now, source, topic, event_type, body)
        region: Region | None = None
        for name in (topic, f"{topic}:{event_type}"):
            if name in self._topics:
                if region is None and isinstance(payload.get("region"), dict):
                    region = _region_of(payload["region"])
                self.send(self.message(source, TOPIC_PREFIX + name, "status_update", body,
                                       priority=priority, region=region))

    def report_error(self, agent: str, where: str, exc: BaseException) -> None:
        """A handler or behaviour raised: trace it, count it, publish an error_report."""
        self.behaviour_errors += 1
        body = {"agent": agent, "where": where, "error": type(exc).__name__, "detail": str(exc)}
        self.trace.append(self.now, ERROR, agent, agent, "exception", _encode_obj(body))
        if ERRORS_TOPIC in self._topics:
            self.send(self.message(agent, TOPIC_PREFIX + ERRORS_TOPIC, "error_report", body,
                                   priority=Priority.CRITICAL))

    # -- timers -----------------------------------------------------------------

    def call_later(
        self, delay: float, target: Endpoint, callback: Callable[..., None], *args: Any,
        daemon: bool = False, priority: int = Priority.NORMAL,
    ) -> Timer:
        """Run ``callback(*args)`` in ``target``'s context after ``delay`` simulation seconds.

        A daemon timer does not keep a run alive: periodic upkeep (heartbeats)
        uses it so that "run until nothing is left" still ends.
        """
        if not delay >= 0:
            raise ValueError(f"delay must be >= 0, got {delay!r}")
        timer = Timer(self, target, callback, args, self.clock.now + delay, daemon, priority)
        self._schedule(timer)
        return timer

    def call_every(
        self, interval: float, target: Endpoint, callback: Callable[[], None],
        *, daemon: bool = True,
    ) -> Callable[[], None]:
        """Run ``callback`` every ``interval`` seconds until the returned function is called."""
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        current: list[Timer] = []

        def tick() -> None:
            current[0] = self.call_later(interval, target, tick, daemon=daemon)
            callback()

        current.append(self.call_later(interval, target, tick, daemon=daemon))
        return lambda: current[0].cancel()

    def _schedule(self, timer: Timer) -> None:
        raise NotImplementedError

    def _cancel_timer(self, timer: Timer) -> None:
        raise NotImplementedError

    # -- running --------------------------------------------------------------------

    def run(self, until: float | None = None, *, max_steps: int | None = None) -> RunReport:
        raise NotImplementedError

    def shutdown(self, timeout: float = 5.0) -> None:
        raise NotImplementedError

    def waiters(self) -> list[Waiter]:
        """Every suspended behaviour that keeps the run alive, in spawn order."""
        out: list[Waiter] = []
        for actor in list(self._endpoints.values()):
            if not actor.stopped:
                out.extend(actor.waiters())
        return out

    def statistics(self) -> Statistics:
        raise NotImplementedError

    @property
    def trace_digest(self) -> str:
        return self.trace.digest

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


_NO_METADATA: Final = Metadata()
_obj_encoder: Final = msgspec.json.Encoder(order="sorted")
_encode_content: Final = _obj_encoder.encode


def _encode_obj(obj: Any) -> bytes:
    return _obj_encoder.encode(obj)


class DeterministicDispatcher(Dispatcher):
    """One thread, virtual time, entries ordered by ``(time, -priority, seq)``.

    The order is kept by a heap of ``(time, -priority)`` keys, each with a FIFO
    bucket: entries with the same key leave in arrival (``seq``) order, which
    is exactly the order one big heap would give, at O(1) per entry instead of
    O(log n) tuple comparisons. ``latency`` (simulation seconds, default 0) is
    added to every delivery.
    """

    mode = "deterministic"

    def __init__(self, seed: int = 0, *, latency: float = 0.0, **options: Any) -> None:
        super().__init__(seed, **options)
        if not latency >= 0:
            raise ValueError(f"latency must be >= 0, got {latency!r}")
        self.clock: VirtualClock = VirtualClock()
        self.latency = latency
        self._keys: list[tuple[float, int]] = []
        # Bucket entries: (target, item, encoded). For a message, target is the
        # recipient's *name* (or a tuple of names for one fan-out): a tuple of
        # strings, an untracked message and bytes is untracked by the cyclic GC
        # after one pass, where an endpoint object would keep every queued entry
        # in every full collection (a quarter of the time at 200,000 queued).
        # For a timer, target is the endpoint and item the Timer.
        self._buckets: dict[tuple[float, int], deque[tuple[Any, Any, Any]]] = {}
        self._live = 0  # entries that keep a run going: messages and non-daemon timers
        self._delivered = 0
        self._steps = 0

    @property
    def now(self) -> float:
        return self.clock.now

    def _push(self, t: float, negprio: int, entry: tuple[Any, Any, Any]) -> None:
        key = (t, negprio)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
            heappush(self._keys, key)
        bucket.append(entry)

    def _start(self, actor: Endpoint) -> None:
        actor.on_start()

    def _stop(self, actor: Endpoint) -> None:
        try:
            actor.on_stop()
        except Exception as exc:  # an on_stop bug must not stop the world
            self.report_error(actor.name, "on_stop", exc)

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        offline = self._offline
        if offline and endpoint.name in offline:
            self._dead_letter(message, "offline", endpoint.name)
            return OFFLINE
        if endpoint.pending >= endpoint.capacity:
            self._dead_letter(message, "mailbox_full", endpoint.name)
            return DROPPED
        endpoint.pending += 1
        self._live += 1
        # _push, inlined: this is every direct send's path.
        key = (self.clock.now + self.latency, -message.priority)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = deque()
            heappush(self._keys, key)
        bucket.append((endpoint.name, message, encoded))
        return DELIVERED

    def _route_batch(self, message: Message, encoded: bytes, targets: list[Endpoint]) -> SendReport:
        # One entry for the whole fan-out; _deliver_batch keeps it equivalent to
        # one entry per recipient with consecutive seqs.
        statuses: dict[str, str] = {}
        accepted: list[str] = []
        offline = self._offline
        for endpoint in targets:
            name = endpoint.name
            if name in offline:
                self._dead_letter(message, "offline", name)
                statuses[name] = OFFLINE
            elif endpoint.pending >= endpoint.capacity:
                self._dead_letter(message, "mailbox_full", name)
                statuses[name] = DROPPED
            else:
                endpoint.pending += 1
                accepted.append(name)
                statuses[name] = DELIVERED
        if accepted:
            self._live += len(accepted)
            self._push(self.clock.now + self.latency, -message.priority,
                       (tuple(accepted), message, encoded))
        return SendReport(message.message_id, statuses)

    def _schedule(self, timer: Timer) -> None:
        if not timer.daemon:
            self._live += 1
        self._push(timer.due, -timer.priority, (timer.target, timer, None))

    def _cancel_timer(self, timer: Timer) -> None:
        if not timer.cancelled:
            timer.cancelled = True
            if not timer.fired and not timer.daemon:
                self._live -= 1

    def step(self) -> bool:
        """Process the next entry (a delivery, a fan-out or a timer). False if none."""
        if not self._keys:
            return False
        self.run(max_steps=1, _any=True)
        return True

    def run_until(self, done: Callable[[], bool], deadline: float | None = None) -> bool:
        """Process entries until ``done()`` holds; False if it cannot any more.

        Without a deadline it cannot once nothing live is left (only daemon
        upkeep remains). With one, everything due by the deadline runs, daemon
        upkeep included, and the clock then stands at the deadline.
        """
        keys = self._keys
        while not done():
            if deadline is None:
                if not keys or self._live <= 0:
                    return False
            elif not keys or keys[0][0] > deadline:
                self.clock.now = max(self.clock.now, deadline)
                return done()
            self.run(max_steps=1, _any=True)
        return True

    def run(
        self, until: float | None = None, *, max_steps: int | None = None, _any: bool = False,
    ) -> RunReport:
        """Process entries in order.

        Without ``until``: until nothing but daemon timers is left (``quiescent``,
        or ``deadlock`` if behaviours still wait). With ``until``: until the clock
        would pass it; the clock then stands at ``until``.
        """
        if until is not None and until < self.clock.now:
            raise ValueError(f"until={until} is before now={self.clock.now}")
        keys = self._keys
        buckets = self._buckets
        clock = self.clock
        endpoints = self._endpoints
        trace = self.trace
        records = trace._records
        trace_seq = trace._seq
        limit = max_steps if max_steps is not None else -1
        steps = 0
        # The hot loop: one iteration per delivery. Single-recipient delivery is
        # inlined; fan-outs and timers go to helpers.
        while keys:
            key = keys[0]
            t = key[0]
            if until is None:
                if self._live <= 0 and not _any:
                    break
            elif t > until:
                break
            if steps == limit:
                self._steps += steps
                return RunReport("max_steps", clock.now, steps)
            bucket = buckets[key]
            target, item, encoded = bucket.popleft()
            if not bucket:
                heappop(keys)
                del buckets[key]
            steps += 1
            if type(item) is not Message:
                self._fire(t, target, item)
                continue
            clock.now = t
            if type(target) is tuple:
                self._deliver_batch(key, target, item, encoded)
                continue
            target = endpoints[target]
            self._live -= 1
            target.pending -= 1
            if target.stopped:
                self._dead_letter(item, "offline", target.name)
                continue
            expires = item.expires_at
            if expires is not None and expires <= t:
                self._dead_letter(item, "expired", target.name)
                continue
            self._delivered += 1
            if trace.enabled:
                records.append((next(trace_seq), t, "deliver", item.from_agent, target.name,
                                item.message_type, encoded))
            target.delivered += 1
            try:
                target.a2a_receive(item)
            except Exception as exc:
                self.report_error(target.name, item.message_type, exc)
        self._steps += steps
        if _any:
            return RunReport("max_steps", clock.now, steps)
        if until is not None:
            clock.now = max(clock.now, until)
        # With `until`, daemon upkeep (heartbeats, lease checks) may still wake a
        # waiter later, so only an empty queue is a verdict; without it, a run
        # ends as soon as only daemon timers remain.
        waiting = tuple(self.waiters()) if until is None or not keys else ()
        if waiting:
            self.trace.event(clock.now, SYSTEM, SYSTEM, "deadlock",
                             {"waiters": [str(w) for w in waiting]})
            return RunReport("deadlock", clock.now, steps, waiting)
        return RunReport("quiescent" if until is None else "until", clock.now, steps)

    def _fire(self, t: float, target: Any, timer: Timer) -> None:
        if timer.cancelled:
            return
        self.clock.now = t
        timer.fired = True
        if not timer.daemon:
            self._live -= 1
        if target.stopped:
            return
        try:
            target.a2a_timer(timer)
        except Exception as exc:
            self.report_error(target.name, "timer", exc)

    def _deliver_one(self, t: float, target: Any, message: Message, encoded: Any) -> None:
        # The same steps as the delivery inlined in run() and in the realtime loop
        # (actors.base.A2AActor._actor_loop_running): the hot paths do not pay a
        # call for them. A change to one is a change to all three.
        self._live -= 1
        target.pending -= 1
        if target.stopped:
            self._dead_letter(message, "offline", target.name)
            return
        expires = message.expires_at
        if expires is not None and expires <= t:
            self._dead_letter(message, "expired", target.name)
            return
        self._delivered += 1
        self.trace.append(t, "deliver", message.from_agent, target.name, message.message_type,
                          encoded)
        target.delivered += 1
        try:
            target.a2a_receive(message)
        except Exception as exc:
            self.report_error(target.name, message.message_type, exc)

    def _deliver_batch(
        self, key: tuple[float, int], targets: tuple[Any, ...], message: Message, encoded: Any,
    ) -> None:
        keys = self._keys
        deliver = self._deliver_one
        endpoints = self._endpoints
        t = key[0]
        for i, name in enumerate(targets):
            if i and keys and keys[0] < key:
                # A handler just sent something more urgent for this instant: it
                # goes first, as it would with one entry per recipient. The rest
                # of the fan-out goes back to the front of its bucket.
                bucket = self._buckets.get(key)
                if bucket is None:
                    bucket = self._buckets[key] = deque()
                    heappush(keys, key)
                bucket.appendleft((targets[i:], message, encoded))
                return
            deliver(t, endpoints[name], message, encoded)

    def statistics(self) -> Statistics:
        pending_timers = sum(
            1 for bucket in self._buckets.values() for entry in bucket
            if type(entry[1]) is Timer and not entry[1].cancelled
        )
        return Statistics(
            mode=self.mode, now=self.clock.now, actors=len(self._endpoints),
            delivered=self._delivered,
            queued=sum(a.pending for a in self._endpoints.values()),
            dead_letters=dict(self._dead),
            behaviour_errors=self.behaviour_errors, pending_timers=pending_timers,
            trace_records=len(self.trace),
        )

    def shutdown(self, timeout: float = 5.0) -> None:
        for name in list(self._endpoints):
            self.stop_actor(name)


class _TimerThread:
    """The realtime dispatcher's one thread for every timer and sleep."""

    def __init__(self, dispatcher: RealtimeDispatcher) -> None:
        self._dispatcher = dispatcher
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self.live = 0  # non-daemon timers scheduled and not yet fired or cancelled
        self._thread = threading.Thread(target=self._loop, name="barnraise-timers", daemon=True)
        self._thread.start()

    def schedule(self, timer: Timer, wall_delay: float) -> None:
        with self._cond:
            if not timer.daemon:
                self.live += 1
            heappush(self._heap, (time.monotonic() + wall_delay, next(self._seq), timer))
            self._cond.notify()

    def cancel(self, timer: Timer) -> None:
        with self._cond:
            if not timer.cancelled:
                timer.cancelled = True
                if not timer.fired and not timer.daemon:
                    self.live -= 1

    def fired(self, timer: Timer) -> None:
        with self._cond:
            timer.fired = True
            if not timer.cancelled and not timer.daemon:
                self.live -= 1

    def pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, t in self._heap if not t.cancelled)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else 1.0
                    self._cond.wait(timeout=max(0.0, min(wait, 1.0)))
                if self._closed:
                    return
                _, _, timer = heappop(self._heap)
            if not timer.cancelled:
                self._dispatcher._fire(timer)

    def close(self, timeout: float) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)


class RealtimeDispatcher(Dispatcher):
    """Every actor on its own pykka thread; wall time scaled by ``time_scale``.

    ``idle_timeout`` (wall seconds) is how long the system must stay idle
    before :meth:`run` without ``until`` calls it quiescent (or deadlocked).
    """

    mode = "realtime"

    def __init__(
        self, seed: int = 0, *, time_scale: float = 1.0, idle_timeout: float = 0.1,
        **options: Any,
    ) -> None:
        super().__init__(seed, **options)
        self.clock: WallClock = WallClock(time_scale)
        self.idle_timeout = idle_timeout
        self._timers = _TimerThread(self)
        self._closed = False
        # Counts every letter offered that idle detection waits for (see in_flight).
        self._offered = itertools.count()
        self._offered_lock = threading.Lock()
        self._offered_reads = 0
        # Starts held by start_together(): only the opening thread's spawns are
        # held; the lock keeps a stop or spawn elsewhere from racing the release.
        self._held: list[Endpoint] | None = None
        self._held_by: int | None = None
        self._held_lock = threading.Lock()

    @property
    def now(self) -> float:
        return self.clock.now

    def _start(self, actor: Endpoint) -> None:
        with self._held_lock:
            if self._held is not None and self._held_by == threading.get_ident():
                self._held.append(actor)
                return
        import pykka  # the realtime mode is the only place that starts threads

        pykka.ActorRegistry.register(actor.actor_ref)  # type: ignore[attr-defined]
        actor._start_actor_loop()  # type: ignore[attr-defined]

    @contextmanager
    def start_together(self) -> Iterator[None]:
        with self._held_lock:
            if self._held is not None:
                if self._held_by != threading.get_ident():
                    raise RuntimeError("start_together() is already open on another thread")
                nested = True  # the outer block starts them all
            else:
                nested = False
                self._held, self._held_by = [], threading.get_ident()
        if nested:
            yield
            return
        try:
            yield
        finally:
            with self._held_lock:
                held, self._held, self._held_by = self._held or [], None, None
            for actor in held:
                if not actor.stopped:
                    self._start(actor)
                else:  # stopped while held: it never runs, so it is stopped now
                    actor.actor_stopped.set()  # type: ignore[attr-defined]

    def _stop(self, actor: Endpoint) -> None:
        with self._held_lock:
            if self._held is not None and actor in self._held:  # never started: no thread
                self._held.remove(actor)
                actor.actor_stopped.set()  # type: ignore[attr-defined]
                return
        actor.actor_ref.stop(block=False)  # type: ignore[attr-defined]

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        name = endpoint.name
        if name in self._offline:
            self._dead_letter(message, "offline", name)
            return OFFLINE
        if not endpoint.actor_inbox.offer((message, encoded), message.priority):
            self._dead_letter(message, "mailbox_full", name)
            return DROPPED
        next(self._offered)
        return DELIVERED

    def _schedule(self, timer: Timer) -> None:
        self._timers.schedule(timer, self.clock.to_wall(timer.due - self.clock.now))

    def _cancel_timer(self, timer: Timer) -> None:
        self._timers.cancel(timer)

    def _fire(self, timer: Timer) -> None:
        target = timer.target
        if not target.stopped:
            target.actor_inbox.offer(timer, timer.priority, bounded=False)
            if not timer.daemon:
                next(self._offered)
        # Count the timer done only after its letter is in a mailbox, so the
        # idle check never sees a moment with neither.
        self._timers.fired(timer)

    def in_flight(self) -> int:
        """Letters offered and not yet handled, plus live timers: 0 means truly idle.

        Daemon timers (and their letters) are left out, as in deterministic mode.
        The reads go handled -> timers -> offered, so every race makes the
        figure larger, never smaller: a handled letter was offered before it
        was handled, a timer letter is offered before its timer stops being
        live, and a handler's sends and timers happen before it counts as
        handled. Zero is therefore never a false idle.
        """
        handled = 0
        for actor in list(self._endpoints.values()):
            handled += actor.handled  # type: ignore[attr-defined]
        live = self._timers.live
        with self._offered_lock:
            offered = next(self._offered) - self._offered_reads
            self._offered_reads += 1
        return offered - handled + live

    def wait_idle(self, timeout: float = 30.0, *, settle: float | None = None) -> bool:
        """Block until nothing is in flight, and has stayed so for ``settle`` wall seconds.

        ``settle`` defaults to ``idle_timeout``. False if ``timeout`` passes first.
        """
        settle = self.idle_timeout if settle is None else settle
        deadline = time.monotonic() + timeout
        idle_since: float | None = None
        while True:
            wall = time.monotonic()
            if self.in_flight() > 0:
                idle_since = None
            elif idle_since is None:
                idle_since = wall
            if idle_since is not None and wall - idle_since >= settle:
                return True
            if wall >= deadline:
                return False
            time.sleep(0.002)

    def run(self, until: float | None = None, *, max_steps: int | None = None) -> RunReport:
        """Wait until simulation time ``until``, or without it until idle.

        Idle means no letter in flight and no live timer for ``idle_timeout``
        wall seconds; then the reason is ``quiescent`` or ``deadlock``.
        """
        poll = 0.005
        if until is not None:
            while self.clock.now < until:
                time.sleep(min(poll, max(0.0, self.clock.to_wall(until - self.clock.now))))
            return RunReport("until", self.clock.now, 0)
        if max_steps is not None:
            raise ValueError("max_steps applies to the deterministic dispatcher only")
        while not self.wait_idle(timeout=3600.0):
            pass
        waiting = tuple(self.waiters())
        if waiting:
            self.trace.event(self.clock.now, SYSTEM, SYSTEM, "deadlock",
                             {"waiters": [str(w) for w in waiting]})
            return RunReport("deadlock", self.clock.now, 0, waiting)
        return RunReport("quiescent", self.clock.now, 0)

    def statistics(self) -> Statistics:
        actors = list(self._endpoints.values())
        return Statistics(
            mode=self.mode, now=self.clock.now, actors=len(actors),
            delivered=sum(a.delivered for a in actors),
            queued=sum(len(a.actor_inbox) for a in actors), dead_letters=dict(self._dead),
            behaviour_errors=self.behaviour_errors, pending_timers=self._timers.pending(),
            trace_records=len(self.trace),
        )

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every actor (after its queued mail) and the timer thread; bounded wait."""
        if self._closed:
            return
        self._closed = True
        for name in list(self._endpoints):
            self.stop_actor(name)
        deadline = time.monotonic() + timeout
        for actor in list(self._endpoints.values()):
            actor.actor_stopped.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
        self._timers.close(max(0.0, deadline - time.monotonic()))


def make_dispatcher(mode: str = "deterministic", seed: int = 0, **options: Any) -> Dispatcher:
    """``mode`` is ``"deterministic"`` or ``"realtime"``; options go to that class."""
    if mode == "deterministic":
        return DeterministicDispatcher(seed, **options)
    if mode == "realtime":
        return RealtimeDispatcher(seed, **options)
    raise ValueError(f"mode must be 'deterministic' or 'realtime', got {mode!r}")
