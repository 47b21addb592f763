"""Routing: the hot path both modes share, from a message's making to its delivery step.

:class:`Router` builds messages (:meth:`~Router.message`, :meth:`~Router.post`),
routes them (direct, ``broadcast``, ``topic:NAME``, ``type:ROLE``), keeps the
subscriptions a topic is published to, publishes domain events
(:meth:`~Router.emit`), counts and traces dead letters, and owns the one delivery
step (:meth:`~Router.deliver`) that both schedulers call: the deterministic one
(``barnraise.sim.dispatch.deterministic``) from its heap loop, the realtime one from each
actor's thread. How a routed message reaches that step (``_route_one``) is each
mode's own.

The dispatcher's other concerns are rooms of their own: actors' lives
(:mod:`barnraise.sim.dispatch.lifecycle`) and timers (:mod:`barnraise.sim.dispatch.timers`);
:class:`barnraise.sim.dispatch.core.Dispatcher` puts them together and makes the state they
share. They are base classes of it rather than objects it holds because every
message reads that state (the endpoint tables, the topics, the clock): one more
attribute hop per read is a measurable share of a round trip (see the note on
``Dispatcher``'s class attributes; ``benchmarks/ab.py``).

Actors are anything that satisfies :class:`~barnraise.sim.dispatch.values.Endpoint`; this
module never imports ``actors``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from barnraise.sim.clock import VirtualClock, WallClock
from barnraise.sim.dispatch.faults import FaultInjector, Faults
from barnraise.sim.dispatch.values import (
    DROPPED,
    DeadReason,
    Endpoint,
    SendReport,
    SubscriptionFilter,
    region_of,
)
from barnraise.sim.events import Event, body_of
from barnraise.sim.failures import Failure
from barnraise.sim.messages import (
    BROADCAST,
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
from barnraise.sim.tokens import random_id
from barnraise.sim.trace import DELIVER, DROP, ERROR, Trace

if TYPE_CHECKING:
    from barnraise.sim.dispatch.lifecycle import Lives

__all__ = ["ERRORS_LOGGER", "ERRORS_TOPIC", "KEPT_FAILURES", "MAX_DEAD_DETAILS",
           "OTHER_DEAD_DETAILS", "SYSTEM", "Router", "answers"]

SYSTEM: Final = "system"
"""The sender name of messages the runtime itself produces (error reports)."""


def answers(message: Message, asked: str) -> bool:
    """Whether ``message``, carrying a request's correlation id, may answer it: it comes
    from ``asked``, the actor the request went to, or is the dispatcher's own
    ``error_report`` about it. Anything else is a forged reply (agents and Clients
    alike take this one rule)."""
    sender = message.from_agent
    return sender == asked or (sender == SYSTEM and message.message_type == "error_report")


ERRORS_TOPIC: Final = "errors"

#: The logger every reported exception goes to, at ERROR, with its traceback as Python
#: prints it. Unconfigured, Python's last-resort handler prints it on stderr as it happens;
#: the CLI gives it a handler of its own; a library user configures it like any logger.
ERRORS_LOGGER: Final = logging.getLogger("barnraise.errors")
#: How many reported exceptions a dispatcher keeps whole (``Router.failures``); every one
#: is counted (``behaviour_errors``) and traced however many there are.
KEPT_FAILURES: Final = 100
#: How many different dead-letter details (:meth:`Router.dead_letter`) are counted
#: one by one; the rest are counted together under :data:`OTHER_DEAD_DETAILS`, so a
#: stream of letters to ever new names cannot grow the table without end.
MAX_DEAD_DETAILS: Final = 100
OTHER_DEAD_DETAILS: Final = "(other reasons)"

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


class Router:
    """Messages, routing, topics, delivery and dead letters; the state is made by
    :class:`barnraise.sim.dispatch.core.Dispatcher` (these annotations name it)."""

    mode: str = "abstract"
    # Class-level defaults, set on an instance only when in use (see Dispatcher).
    #: The fault plan in force (None: no faults, and routing is the plain one).
    faults: Faults | None = None
    injector: FaultInjector | None = None
    #: Called with each reported exception (its :class:`Failure` and the exception, its
    #: traceback live) on the thread that caught it, once it is counted, traced, logged and
    #: published: where ``barnraise run --pdb`` starts the debugger. An exception from the
    #: hook propagates.
    on_error: Callable[[Failure, BaseException], None] | None = None

    seed: int
    mailbox_capacity: int
    sign_messages: bool
    secret: bytes
    max_content_bytes: int
    trace: Trace
    clock: VirtualClock | WallClock
    behaviour_errors: int
    #: The first :data:`KEPT_FAILURES` reported exceptions, whole, in order.
    failures: list[Failure]
    #: True while a realtime run is held (``RealtimeDispatcher.pause``).
    holding: bool
    dead_letters: deque[tuple[str, Message]]
    #: A dead letter's reason in words -> how many (see :meth:`dead_letter`).
    dead_details: Counter[str]
    _id_prefix: str
    _ids: itertools.count[int]
    _endpoints: dict[str, Endpoint]
    _agents: dict[str, Endpoint]  # non-service endpoints, spawn order
    _by_type: dict[str, dict[str, Endpoint]]
    _topics: dict[str, tuple[_Subscription, ...]]
    # topic -> (its subscriptions, their endpoints) when none has a filter (_publish)
    _plain: dict[str, tuple[tuple[_Subscription, ...], tuple[Endpoint, ...]]]
    _subs_by_id: dict[str, tuple[str, _Subscription]]
    _offline: set[str]
    _lives: Lives
    _lock: threading.Lock  # guards topology changes, never delivery
    _dead: Counter[str]

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

    # -- messages ----------------------------------------------------------------------------

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

    # -- delivery ----------------------------------------------------------------------------

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
            self.report_error(name, message.message_type, exc, handler=True)

    def dead_letter(self, message: Message, reason: DeadReason, recipient: str,
                    detail: str | None = None) -> None:
        """Count, keep (bounded) and trace a message that reached nobody, and why.

        ``detail``, when given, is the why in words for the run's author (``no handler
        for 'ping' on builder-3``): it goes into the trace record and is counted in
        :attr:`dead_details`. A ``mailbox_full`` drop also tells the sender with an
        ``error_report`` (carrying the dropped message's correlation id, so a waiting
        request fails at once instead of timing out), and so does a ``no_handler`` drop
        of a request (one with a correlation id), with the detail.
        """
        self._dead[reason] += 1
        self.dead_letters.append((reason, message))
        record: dict[str, str] = {"reason": reason, "message_id": message.message_id}
        if detail is not None:
            record["detail"] = detail
            details = self.dead_details
            if detail in details or len(details) < MAX_DEAD_DETAILS:
                details[detail] += 1
            else:
                details[OTHER_DEAD_DETAILS] += 1
        self.trace.append(self.now, DROP, message.from_agent, recipient,
                          message.message_type, _encode_obj(record))
        if (reason == "mailbox_full" or (
                reason == "no_handler" and message.metadata.correlation_id is not None)) \
                and message.message_type != "error_report":
            sender = self._endpoints.get(message.from_agent)
            if sender is not None and not sender.stopped:
                told: dict[str, str] = {"error_code": reason, "recipient": recipient,
                                        "message_id": message.message_id}
                if detail is not None:
                    told["detail"] = detail
                report = self.message(
                    SYSTEM, sender.name, "error_report", told,
                    priority=Priority.HIGH,
                    correlation_id=message.metadata.correlation_id,
                )
                self._route_one(sender, report, encode_content(report.content))

    # -- topics ------------------------------------------------------------------------------

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

    def drop_subscriptions(self, endpoint: Endpoint) -> None:
        """End every subscription ``endpoint`` holds (a crash takes them with it)."""
        with self._lock:
            for sid, (topic, sub) in list(self._subs_by_id.items()):
                if sub.endpoint is endpoint:
                    self._subs_by_id.pop(sid)
                    remaining = tuple(x for x in self._topics.get(topic, ()) if x is not sub)
                    if remaining:
                        self._topics[topic] = remaining
                    else:
                        self._topics.pop(topic, None)

    # -- events and errors -------------------------------------------------------------------

    def emit(
        self, source: str, topic: str, event: Event, *, priority: int = Priority.NORMAL,
    ) -> None:
        """Record a domain event and publish it on ``topic`` and ``topic:<its name>``.

        The event's body (:func:`barnraise.sim.events.body_of`) is built once and encoded once.
        An event about a place (a ``region`` in its payload) carries that region
        in its metadata too, so subscription filters on regions see it.
        """
        event_type = event.kind
        if not event_type:
            raise TypeError(f"{type(event).__qualname__} is no registered event type "
                            "(barnraise.sim.events.register)")
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

    def report_error(self, agent: str, where: str, exc: BaseException, *,
                     handler: bool = False) -> Failure:
        """A handler or behaviour raised: count it, trace it with its traceback, keep it,
        log it, publish an error_report (without the traceback), then tell
        :attr:`on_error`.

        ``where`` names what raised (a behaviour's name, ``timer``, a message type);
        ``handler``: raised by a delivery, whose ``handle_<type>`` frame names it. The
        traceback's outermost frame, the caller's own, is left out (see
        :meth:`barnraise.sim.failures.Failure.of`)."""
        self.behaviour_errors += 1
        failure = Failure.of(agent, where, exc, handler=handler)
        self.trace.append(self.now, ERROR, agent, agent, "exception",
                          _encode_obj(failure.record()))
        if len(self.failures) < KEPT_FAILURES:
            self.failures.append(failure)
        ERRORS_LOGGER.error("%s\n%s", failure.headline(), failure.full.rstrip("\n"))
        body = failure.letter()
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
        hook = self.on_error
        if hook is not None:
            hook(failure, exc)
        return failure
