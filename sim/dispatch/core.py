"""Routing, dead letters, subscriptions, timers and the delivery step: what both modes share.

:class:`Dispatcher` routes A2A messages (direct, ``broadcast``, ``topic:NAME``,
``type:ROLE``), keeps the trace and the dead-letter counts, and owns the one
delivery step (:meth:`Dispatcher.deliver`) that both schedulers call: the
deterministic one (``sim.dispatch.deterministic``) from its heap loop, the
realtime one from each actor's thread (``actors.base.A2AActor``). The two
modes differ only in how a routed message reaches that step.

Actors are anything that satisfies :class:`~sim.dispatch.values.Endpoint`;
this module never imports ``actors``.
"""

from __future__ import annotations

import functools
import itertools
import secrets
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypedDict, TypeVar

import msgspec
import numpy as np

from sim.clock import VirtualClock, WallClock
from sim.dispatch.faults import FaultInjector, Faults
from sim.dispatch.values import (
    DROPPED,
    DeadReason,
    Endpoint,
    RunReport,
    SendReport,
    Statistics,
    SubscriptionFilter,
    Timer,
    Waiter,
    region_of,
)
from sim.events import Event, body_of
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
    topic_name,
    verify,
)
from sim.tokens import random_id
from sim.trace import DELIVER, DROP, ERROR, FAULT, Trace

__all__ = ["ERRORS_TOPIC", "SYSTEM", "Dispatcher", "DispatcherOptions", "answers"]

SYSTEM: Final = "system"


def answers(message: Message, asked: str) -> bool:
    """Whether ``message``, carrying a request's correlation id, may answer it: it comes
    from ``asked``, the actor the request went to, or is the dispatcher's own
    ``error_report`` about it. Anything else is a forged reply (agents and Clients
    alike take this one rule)."""
    sender = message.from_agent
    return sender == asked or (sender == SYSTEM and message.message_type == "error_report")
"""The sender name of messages the runtime itself produces (error reports)."""

ERRORS_TOPIC: Final = "errors"

E = TypeVar("E", bound=Endpoint)

_NO_METADATA: Final = Metadata()
_obj_encoder: Final = msgspec.json.Encoder(order="sorted")
_encode_content: Final = _obj_encoder.encode


def _encode_obj(obj: Any) -> bytes:
    return _obj_encoder.encode(obj)


class _Subscription:
    __slots__ = ("endpoint", "filter", "id")

    def __init__(self, sid: str, endpoint: Endpoint, flt: SubscriptionFilter | None) -> None:
        self.id = sid
        self.endpoint = endpoint
        self.filter = flt


class _Lives:
    """The rarely touched facts about actors' lives, in one attribute of the dispatcher
    (see the note on its class attributes): who watches whom, the crashed incarnations
    a respawn replaced, and which session each agent is a member of."""

    __slots__ = ("retired", "session_of", "watchers")

    def __init__(self) -> None:
        self.watchers: dict[str, list[str]] = {}  # watched -> who gets its terminated notice
        self.retired: list[Endpoint] = []  # crashed incarnations replaced by respawn()
        self.session_of: dict[str, str] = {}  # agent -> its session, for its error topic


class DispatcherOptions(TypedDict, total=False):
    """The options both dispatchers take (keyword arguments of :class:`Dispatcher`)."""

    mailbox_capacity: int
    sign_messages: bool
    secret: bytes | None
    max_content_bytes: int
    trace: bool
    dead_letter_log: int
    faults: Faults | str | Mapping[str, Any] | None


class Dispatcher:
    """Routing, dead letters, trace and subscriptions shared by both modes."""

    mode: str = "abstract"
    # Class-level defaults, set on an instance only when in use: past 30 instance
    # attributes CPython gives an object a dict of its own, and every attribute read on
    # the delivery path gets slower (measured: 4-5% of a request/reply round trip).
    #: The fault plan in force (None: no faults, and routing is the plain one).
    faults: Faults | None = None
    injector: FaultInjector | None = None
    #: Called with an actor's name when it crashes (the supervision layer sets
    #: it); True means it will be brought back. Without one, or on False, the
    #: crashed actor stays stopped and its watchers are told.
    crash_handler: Callable[[str], bool] | None = None
    #: Called with the caller's name before an agent's tool call is answered
    #: (``make_durable``): a store's commit, so that acknowledged means durable
    #: (None: nothing to do).
    durable: Callable[[str], None] | None = None

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
        faults: Faults | str | Mapping[str, Any] | None = None,
    ) -> None:
        if type(seed) is not int or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if mailbox_capacity < 1:
            raise ValueError(f"mailbox_capacity must be at least 1, got {mailbox_capacity}")
        self.seed = seed
        self.mailbox_capacity = mailbox_capacity
        self.sign_messages = sign_messages
        root = np.random.SeedSequence(seed)
        # The key that signs messages: given, or from the operating system. It was once
        # drawn from the seed, so anyone who knew the seed could sign as any agent; no
        # signature is in the trace, so the digest does not depend on it.
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self.max_content_bytes = max_content_bytes
        self.trace = Trace(enabled=trace)
        self.clock: VirtualClock | WallClock
        self._id_prefix = f"m{root.generate_state(1, np.uint32)[0]:08x}-"
        self._ids = itertools.count(1)
        self._endpoints: dict[str, Endpoint] = {}
        self._agents: dict[str, Endpoint] = {}  # non-service endpoints, spawn order
        self._by_type: dict[str, dict[str, Endpoint]] = {}
        self._topics: dict[str, tuple[_Subscription, ...]] = {}
        # topic -> (its subscriptions, their endpoints) when none has a filter (_publish)
        self._plain: dict[str, tuple[tuple[_Subscription, ...], tuple[Endpoint, ...]]] = {}
        self._subs_by_id: dict[str, tuple[str, _Subscription]] = {}
        self._offline: set[str] = set()
        self._lives = _Lives()
        self._lock = threading.Lock()  # guards topology changes, never delivery
        self._dead: Counter[str] = Counter()
        self.dead_letters: deque[tuple[str, Message]] = deque(maxlen=dead_letter_log)
        self.behaviour_errors = 0
        #: True while a realtime run is held (``RealtimeDispatcher.pause``): actors keep
        #: the letters they take instead of handling them. Never set in deterministic
        #: mode, whose loop a ``Gate`` holds instead.
        self.holding = False
        #: The fault plan in force (None: no faults, and routing is the plain one).
        plan = Faults.parse(faults)
        if plan is not None:
            self.faults = plan
            self.injector = FaultInjector(self, plan, self._route_one)
            if plan.messages:
                # Instance attributes shadow the methods: a dispatcher without a
                # plan keeps the plain ones and pays nothing for this.
                self._route_one = self.injector.route  # type: ignore[method-assign]
                self._route_batch = functools.partial(  # type: ignore[method-assign]
                    Dispatcher._route_batch, self)
                self.post = self.injector.post  # type: ignore[method-assign]

    # -- identity and time -------------------------------------------------------

    @property
    def now(self) -> float:
        raise NotImplementedError

    def next_id(self) -> str:
        """A fresh message or correlation id; seeded, so reproducible in deterministic mode."""
        # Decimal: an int formats to decimal a quarter faster than to hex.
        return f"{self._id_prefix}{next(self._ids)}"

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

    def spawn(self, cls: type[E], name: str, /, *args: Any, **kwargs: Any) -> E:
        """Construct ``cls(*args, **kwargs)`` as the actor ``name``, start it, return it."""
        self._check_name(name)  # before anything is made
        return self.add(name, cls(*args, **kwargs))

    def _check_name(self, name: object) -> None:
        if not isinstance(name, str) or not name or name.startswith(("topic:", "type:")):
            raise ValueError(f"actor name must be a plain non-empty string, got {name!r}")
        if name in (BROADCAST, SYSTEM):
            raise ValueError(f"actor name {name!r} is reserved")
        if name in self._endpoints:
            raise ValueError(f"an actor called {name!r} already exists")

    def add(self, name: str, actor: E) -> E:
        """Start ``actor``, made by the caller (a supervisor setting its incarnation
        first, say), as ``name``; return it. ValueError as :meth:`spawn`."""
        self._check_name(name)
        actor.a2a_bind(self, name)
        with self._lock:
            self._endpoints[name] = actor
            if actor.agent_type is not None:
                self._agents[name] = actor
                self._by_type.setdefault(actor.agent_type, {})[name] = actor
        self._start(actor)
        if self.injector is not None and actor.agent_type is not None:
            self.injector.arm_crash(actor)
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

    def stop_actor(self, name: str, reason: str = "stopped") -> None:
        """Stop one actor now, for good; mail still queued for it, and any later, is dead
        ``offline``. Whoever watches it (:meth:`watch`) gets its ``terminated`` notice."""
        actor = self.actor(name)
        if actor.stopped:
            return
        self._halt(actor)
        self.announce_terminated(name, reason)

    def _halt(self, actor: Endpoint) -> None:
        name = actor.name
        actor.stopped = True
        with self._lock:
            self._offline.add(name)
            self._agents.pop(name, None)
            if actor.agent_type is not None:
                self._by_type.get(actor.agent_type, {}).pop(name, None)
        self._stop(actor)

    # -- crashes, restarts and death watch -----------------------------------------------

    def crash(self, name: str, reason: str = "crash", *, supervised: bool = False) -> None:
        """Crash actor ``name``: it stops at once and loses its mailbox and its memory.

        Its subscriptions go with it (a new incarnation subscribes again); its
        ``on_stop`` sees ``crashed`` set and says no goodbyes. Then
        :attr:`crash_handler` (a supervisor) decides whether it comes back
        (:meth:`respawn`); with no handler, or one that returns False, it is
        stopped for good and its watchers are told. ``supervised``: the caller is
        the supervisor and decides itself (an all-for-one restart crashes the
        rest of a group this way); the handler is not asked.
        """
        actor = self.actor(name)
        if actor.stopped:
            return
        actor.crashed = True
        self.trace.append(self.now, FAULT, name, name, "crash",
                          _encode_obj({"agent": name, "reason": reason}))
        with self._lock:
            for sid, (topic, sub) in list(self._subs_by_id.items()):
                if sub.endpoint is actor:
                    self._subs_by_id.pop(sid)
                    remaining = tuple(x for x in self._topics.get(topic, ()) if x is not sub)
                    if remaining:
                        self._topics[topic] = remaining
                    else:
                        self._topics.pop(topic, None)
        self._halt(actor)
        if supervised:
            return
        handler = self.crash_handler
        if handler is None or not handler(name):
            self.announce_terminated(name, reason)

    def respawn(self, name: str, actor: Endpoint) -> None:
        """Put ``actor``, a fresh incarnation, in the place of the stopped actor ``name``.

        It gets the name, the routing and mail from now on; nothing of the old
        one's mailbox or memory. The supervision layer calls this.
        """
        old = self.actor(name)
        if not old.stopped:
            raise ValueError(f"{name!r} is running; only a stopped actor is replaced")
        actor.a2a_bind(self, name)
        with self._lock:
            self._lives.retired.append(old)
            self._endpoints[name] = actor
            self._offline.discard(name)
            if actor.agent_type is not None:
                self._agents[name] = actor
                self._by_type.setdefault(actor.agent_type, {})[name] = actor
        self._start(actor)
        if self.injector is not None and actor.agent_type is not None:
            self.injector.arm_crash(actor)

    def watch(self, watcher: str, watched: str) -> None:
        """Have ``watcher`` told when ``watched`` stops for good: a ``status_update`` whose
        content is ``{"event": "terminated", "agent_id": watched, "reason": ...}``.

        An actor already stopped for good is reported at once. A crash that its
        supervisor repairs is not an end: watchers hear only of the last one.
        """
        self.actor(watcher)
        target = self.actor(watched)
        with self._lock:
            self._lives.watchers.setdefault(watched, []).append(watcher)
        if target.stopped and not getattr(target, "crashed", False):
            self.announce_terminated(watched, "stopped")

    def unwatch(self, watcher: str, watched: str) -> None:
        with self._lock:
            names = self._lives.watchers.get(watched, [])
            if watcher in names:
                names.remove(watcher)

    def announce_terminated(self, name: str, reason: str) -> None:
        """Tell ``name``'s watchers it has stopped for good (once; they are then forgotten)."""
        with self._lock:
            watchers = self._lives.watchers.pop(name, [])
        for watcher in watchers:
            endpoint = self._endpoints.get(watcher)
            if endpoint is not None and not endpoint.stopped:
                message = self.message(SYSTEM, watcher, "status_update",
                                       {"event": "terminated", "agent_id": name,
                                        "reason": reason}, priority=Priority.HIGH)
                self._route_one(endpoint, message, _encode_content(message.content))

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

    def set_session(self, name: str, session_id: str | None) -> None:
        """Say which session ``name`` is a member of (None: of none), so that its
        behaviour errors also go to that session's own ``session:<id>:errors`` topic."""
        with self._lock:
            if session_id is None:
                self._lives.session_of.pop(name, None)
            else:
                self._lives.session_of[name] = session_id

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
        metadata: Metadata | None = None,
        message_id: str | None = None,
    ) -> Message:
        """Build a message stamped with a fresh id and the current time.

        ``metadata``, when given, is used as it is instead of being built from
        ``correlation_id``, ``region`` and ``capabilities`` (a reply reuses its
        request's); ``message_id`` is for a request whose id, taken from
        :meth:`next_id`, doubles as its correlation id.
        """
        now = self.clock.now
        if metadata is None:
            if region is None and correlation_id is None and not capabilities:
                metadata = _NO_METADATA
            else:
                metadata = Metadata(region, tuple(capabilities), correlation_id)
        # Positional: this is on every send's path and keywords cost more.
        return Message(
            message_id or f"{self._id_prefix}{next(self._ids)}", now, sender, to,
            message_type, priority,
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
        except (TypeError, ValueError, msgspec.EncodeError):
            encoded = encode_content(message.content)  # raises the MessageError
        if len(encoded) > self.max_content_bytes:
            encode_content(message.content, self.max_content_bytes)
        if self.sign_messages:
            try:
                verify(message, self.secret)
            except MessageError:
                self.dead_letter(message, "bad_signature", message.to_agent)
                return SendReport(message.message_id, {message.to_agent: DROPPED})
        to = message.to_agent
        endpoint = self._endpoints.get(to)
        if endpoint is not None:
            return SendReport(message.message_id, None, (to, self._route_one(endpoint, message,
                                                                            encoded)))
        return self._route(message, encoded)

    def post(
        self, sender: str, to: str, message_type: str, content: dict[str, Any] | None,
        priority: int, metadata: Metadata | None, region: Region | None = None,
    ) -> SendReport:
        """Build a message as :meth:`message` does and :meth:`send` it, sealed if need be.

        The one-call form actors use for requests and replies (positional, no
        expiry): it encodes the content once and routes a direct message
        without the general path's checks that a message it has just built
        cannot fail. ``metadata`` None makes a request: its metadata carries
        ``region`` and, as correlation id, the message's own id (the report's
        ``message_id``), a random token when the recipient is remote.
        """
        if content is None:
            content = {}
        try:
            encoded = _encode_content(content)
        except (TypeError, ValueError, msgspec.EncodeError):
            encoded = encode_content(content)  # raises the MessageError
        if len(encoded) > self.max_content_bytes:
            encode_content(content, self.max_content_bytes)
        endpoint = self._endpoints.get(to)
        if metadata is None:
            if endpoint is not None and endpoint.remote:
                # A request to an agent outside the process: its id crosses, as the
                # correlation id that agent answers with, so it tells nothing.
                message_id = random_id()
            else:
                message_id = f"{self._id_prefix}{next(self._ids)}"
            metadata = Metadata(region, (), message_id)
        else:
            message_id = f"{self._id_prefix}{next(self._ids)}"
        message = Message(message_id, self.clock.now, sender, to, message_type, priority,
                          content, metadata, None, None)
        if self.sign_messages:
            return self.send(sign(message, self.secret))
        if endpoint is not None:
            return SendReport(message.message_id, None, (to, self._route_one(endpoint, message,
                                                                            encoded)))
        return self._route(message, encoded)

    def _route(self, message: Message, encoded: bytes) -> SendReport:
        """Route a message that names no actor: a broadcast, a topic, a type, or nobody."""
        to = message.to_agent
        if to == BROADCAST:
            return self._route_many(message, encoded, self._agents.values(), exclude_sender=True)
        if to.startswith(TOPIC_PREFIX):
            return self._publish(message, encoded, to[len(TOPIC_PREFIX):])
        if to.startswith(TYPE_PREFIX):
            members = self._by_type.get(to[len(TYPE_PREFIX):], {})
            return self._route_many(message, encoded, members.values(), exclude_sender=True)
        self.dead_letter(message, "unknown_recipient", to)
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
            self.dead_letter(message, "bad_signature", message.to_agent)
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
        # The subscribers of a topic without filters, worked out once per set of them
        # (a topic's tuple is replaced, never changed, when anyone subscribes or leaves):
        # every domain event is published this way, most to the same few subscribers.
        plain = self._plain.get(topic)
        if plain is not None and plain[0] is subs:
            return self._route_batch(message, encoded, plain[1])
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
            self._plain[topic] = (subs, tuple(targets))
        return self._route_batch(message, encoded, targets)

    def _route_one(self, endpoint: Endpoint, message: Message, encoded: bytes) -> str:
        raise NotImplementedError

    def _route_batch(
        self, message: Message, encoded: bytes, targets: Sequence[Endpoint],
    ) -> SendReport:
        statuses = {e.name: self._route_one(e, message, encoded) for e in targets}
        return SendReport(message.message_id, statuses)

    # -- delivery -----------------------------------------------------------------

    def deliver(self, target: Endpoint, message: Message, encoded: bytes, now: float) -> None:
        """The one delivery step of both modes: hand ``message`` to ``target``'s handler.

        The deterministic loop calls it for every message it dequeues (in
        ``run``, ``step`` and ``run_until`` alike), and a realtime actor's
        thread for every message it takes from its mailbox. A message for a
        stopped actor is dead ``offline``; one whose ``expires_at`` has come by
        ``now`` is dead ``expired`` (expiry is decided here, at dequeue);
        otherwise the delivery is traced and counted and the actor's
        ``a2a_receive`` runs. An exception from it is reported, never raised.
        """
        name = target.name
        if target.stopped:
            self.dead_letter(message, "offline", name)
            return
        expires = message.expires_at
        if expires is not None and expires <= now:
            self.dead_letter(message, "expired", name)
            return
        trace = self.trace
        if trace.enabled:
            trace.add_record((now, DELIVER, message.from_agent, name, message.message_type,
                              encoded))
        target.delivered += 1
        try:
            target.a2a_receive(message)
        except Exception as exc:
            self.report_error(name, message.message_type, exc)

    def dead_letter(self, message: Message, reason: DeadReason, recipient: str) -> None:
        """Count, keep (bounded) and trace a message that reached nobody, and why.

        A ``mailbox_full`` drop also tells the sender with an ``error_report``
        (carrying the dropped message's correlation id, so a waiting request
        fails at once instead of timing out).
        """
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
        """Subscribe ``endpoint`` to ``topic``; returns the subscription id.

        A remote endpoint's id is a random token (it crosses the process and must
        tell its holder nothing of the dispatcher's counter); an in-process one's is
        drawn from the seeded ids, so a deterministic run's trace stays the same.
        """
        topic = topic_name(topic)
        parsed = SubscriptionFilter.parse(flt)
        sid = f"sub-{random_id()}" if endpoint.remote else f"sub-{self.next_id()}"
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

    def holds_subscription(self, subscription_id: str) -> bool:
        """True while ``subscription_id`` is in force (not unsubscribed, nor gone with
        a crash of its subscriber)."""
        return subscription_id in self._subs_by_id

    # -- events and errors ----------------------------------------------------------

    def emit(
        self, source: str, topic: str, event: Event, *, priority: int = Priority.NORMAL,
    ) -> None:
        """Record a domain event and publish it on ``topic`` and ``topic:<its name>``.

        The event's body (:func:`sim.events.body_of`) is built once and encoded once.
        An event about a place (a ``region`` in its payload) carries that region
        in its metadata too, so subscription filters on regions see it.
        """
        event_type = event.kind
        if not event_type:
            raise TypeError(f"{type(event).__qualname__} is no registered event type "
                            "(sim.events.register)")
        body = body_of(event)
        now = self.clock.now
        # One encoding for the trace's record and every publication of it (the same
        # canonical JSON either way); a body that is not JSON raises from the trace.
        try:
            encoded: bytes | None = _encode_content(body)
        except (TypeError, ValueError, msgspec.EncodeError):
            encoded = None
        self.trace.event(now, source, topic, event_type, body, encoded)
        topics = self._topics
        region: Region | None = None
        for name in (topic, f"{topic}:{event_type}"):
            if name in topics:
                if region is None and isinstance(body.get("region"), dict):
                    region = region_of(body["region"])
                if encoded is None or len(encoded) > self.max_content_bytes:
                    encode_content(body, self.max_content_bytes)  # raises the MessageError
                    assert encoded is not None
                # message(), inlined: every domain event comes this way.
                message = Message(
                    f"{self._id_prefix}{next(self._ids)}", self.clock.now, source,
                    TOPIC_PREFIX + name, "status_update", priority, body,
                    _NO_METADATA if region is None else Metadata(region, (), None), None, None)
                if self.sign_messages:  # the dispatcher's own mail is signed like any other
                    message = sign(message, self.secret)
                self._publish(message, encoded, name)

    def report_error(self, agent: str, where: str, exc: BaseException) -> None:
        """A handler or behaviour raised: trace it, count it, publish an error_report."""
        self.behaviour_errors += 1
        body = {"agent": agent, "where": where, "error": type(exc).__name__, "detail": str(exc)}
        self.trace.append(self.now, ERROR, agent, agent, "exception", _encode_obj(body))
        # The global topic is the host's (in-process code subscribes to it); a session's
        # members see only their own session's errors, never another's details.
        topics = [ERRORS_TOPIC]
        session_id = self._lives.session_of.get(agent)
        if session_id is not None:
            topics.append(f"session:{session_id}:errors")
        for topic in topics:
            if topic in self._topics:
                self.send(self.seal(self.message(agent, TOPIC_PREFIX + topic, "error_report",
                                                 body, priority=Priority.CRITICAL)))

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

    def call_at(
        self, due: float, target: Endpoint, callback: Callable[..., None], *args: Any,
        daemon: bool = False, priority: int = Priority.NORMAL,
    ) -> Timer:
        """As :meth:`call_later`, at simulation time ``due`` (now, if that has passed)."""
        timer = Timer(self, target, callback, args, max(due, self.clock.now), daemon, priority)
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

    def cancel_timer(self, timer: Timer) -> None:
        """Make sure ``timer`` does not fire (``Timer.cancel`` calls this)."""
        raise NotImplementedError

    def add_live_work(self, delta: int) -> None:
        """Count ``delta`` (+1 or -1) pieces of work that keep a run going.

        For waits that hold no entry of their own in the dispatcher: a
        request's timeout lives in its actor's deadline queue, so the actor
        counts the request here while it is unanswered. A run without ``until``
        does not end (and realtime idle is not reached) while any is counted.
        """
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

    def message_counts(self) -> tuple[int, int]:
        """(messages delivered, dead letters) so far: the two figures of
        :meth:`statistics` a frequent reader wants, without its walk over timers."""
        delivered = sum(a.delivered for a in [*self._endpoints.values(), *self._lives.retired])
        return delivered, sum(self._dead.values())

    def make_durable(self, caller: str) -> None:
        """About to answer ``caller``: commit what the run has recorded, when a store
        keeps it and its policy says so (see sim.store)."""
        durable = self.durable
        if durable is not None:
            durable(caller)

    @property
    def trace_digest(self) -> str:
        return self.trace.digest

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
