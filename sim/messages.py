"""A2A messages: the one value type every actor sends and receives.

A :class:`Message` is a frozen ``msgspec.Struct``. The same value travels inside
the process and, encoded as canonical JSON, across process boundaries. The
schema follows the A2A design notes: ``message_id, timestamp, from_agent,
to_agent, message_type, priority, content, metadata{region, capabilities,
correlation_id}, signature, expires_at``.

Types: ``message_type`` is any name following :data:`TYPE_NAME_RULE`
(``[a-z][a-z0-9_]{0,63}``). :data:`MESSAGE_TYPES` is the built-in vocabulary: the
runtime's eleven (:data:`RUNTIME_TYPES`) and the four agents' types of the design notes'
final A2A tools (:data:`AGENT_TYPES`); any other valid name is a type of one's own,
which :func:`message_type` may give a schema its content is checked against whenever a
message of that type is made (sent, or decoded from the wire). :data:`SYSTEM_TYPES`
are the runtime's reply types, which no member sends by a tool or from outside.

Topics: :func:`topic_name` is what a topic a caller names is called, and
:func:`session_topic` which of its own session's topics a member's name means.

Everything that can go wrong with a message's shape raises :class:`MessageError`
(a ``ValueError``) whose ``field`` names the offending field and whose text says
what is wrong. Nothing else is raised for bad input.

Canonical form: compact JSON with sorted keys and every field present (a
default is written out, so ``priority`` 5 and ``Priority.NORMAL`` give the same
bytes), with ``signature`` set to null. Signatures are hex HMAC-SHA256 over it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final

import msgspec

__all__ = [
    "AGENT_TYPES",
    "BROADCAST",
    "DEFAULT_MAX_CONTENT_BYTES",
    "MESSAGE_TYPES",
    "RUNTIME_TYPES",
    "SYSTEM_TYPES",
    "TYPE_NAME_RULE",
    "Message",
    "MessageError",
    "Metadata",
    "Priority",
    "Region",
    "Schema",
    "canonical_bytes",
    "check_type_name",
    "decode",
    "encode",
    "encode_content",
    "message_type",
    "schema_of",
    "session_topic",
    "sign",
    "topic_name",
    "verify",
]

BROADCAST: Final = "broadcast"
TOPIC_PREFIX: Final = "topic:"
TYPE_PREFIX: Final = "type:"



def topic_name(raw: str) -> str:
    """The canonical name of a topic: ``raw`` without its one ``topic:`` prefix.

    ``"topic:news"`` and ``"news"`` both name the topic ``news``. Every place
    that takes a topic from a caller (subscribing, publishing, checking which
    session a topic belongs to) goes through this one function, so they cannot
    disagree about what a name means. A name that is empty, or still starts
    with ``topic:`` or ``type:`` after the one prefix is taken off, is a
    ValueError: ``topic:topic:x`` names no topic rather than the topic ``x``.
    """
    if type(raw) is not str:
        raise ValueError(f"topic must be a string, got {raw!r}")
    name = raw.removeprefix(TOPIC_PREFIX)
    if not name or name.startswith((TOPIC_PREFIX, TYPE_PREFIX)):
        raise ValueError(f"{raw!r} is not a topic name (a name, optionally after one "
                         f"'{TOPIC_PREFIX}')")
    return name



def session_topic(session_id: str, topic: str | None = None,
                  event_type: str | None = None) -> str:
    """The topic ``a2a_subscribe(topic=..., event_type=...)`` means for a member of
    ``session_id``: every topic a member can reach is one of its own session's.

    No ``topic`` is the session's events (``session:<id>:events``); a topic of
    the session (``session:<id>`` or below it) is itself; any other session's
    topic is a PermissionError; any other name is the session's own topic of
    that name (``errors`` is ``session:<id>:errors``, where the session's
    agents' behaviour errors are published), so no name leads out of the
    session. ``event_type`` narrows to ``<topic>:<event_type>``. A name that is
    not a topic (:func:`barnraise.sim.messages.topic_name`) is a ValueError.
    """
    own = f"session:{session_id}"
    name = f"{own}:events" if topic is None else topic_name(topic)
    if name != own and not name.startswith(own + ":"):
        if name.startswith("session:"):
            raise PermissionError(f"topic {name!r} belongs to another session")
        name = f"{own}:{name}"
    if event_type:
        name = f"{name}:{event_type}"
    return name


#: Content larger than this (encoded) is refused unless a caller sets its own limit.
DEFAULT_MAX_CONTENT_BYTES: Final = 64 * 1024

#: The design notes' eleven types: what the services and the runtime speak (an agent
#: speaks them too, to a service or as a service would). One of these that no handler
#: and no receive takes is kept unread, as it always was: services answer more than a
#: behaviour asks for, and an unread answer is no mistake.
RUNTIME_TYPES: Final = frozenset(
    {
        "task_assignment",
        "task_update",
        "task_result",
        "status_update",
        "coordination_request",
        "coordination_response",
        "heartbeat",
        "error_report",
        "registry_query",
        "registry_response",
        "subscription",
    }
)

#: The four types of the design notes' final A2A tools, for agents to speak to each
#: other. Like a type of one's own, one of these that nothing takes is a dead letter.
AGENT_TYPES: Final = frozenset({"task_request", "task_response", "notification", "data_share"})

#: The built-in vocabulary. Any other name that follows :data:`TYPE_NAME_RULE` is a
#: type of one's own.
MESSAGE_TYPES: Final = RUNTIME_TYPES | AGENT_TYPES

#: The types only the runtime and its services send: the answers a request is resumed
#: with (an ``error_report`` from the dispatcher itself fails any request it names).
#: A member may not send them through the A2A tools, nor an agent outside the process
#: in a signed message (docs/gateway.md): no one can pass for a service by its words.
SYSTEM_TYPES: Final = frozenset({"error_report", "registry_response", "coordination_response"})

#: What a message type's name must look like: a lower-case letter, then up to 63
#: lower-case letters, digits or underscores. So no name is a dunder, an internal
#: op (they start with ``_``) or anything a handler's method name cannot carry.
TYPE_NAME_RULE: Final = "[a-z][a-z0-9_]{0,63}"
_TYPE_NAME: Final = re.compile(TYPE_NAME_RULE)

#: A schema: a ``msgspec.Struct`` type the content must convert to, or a callable that
#: raises ``ValueError`` / ``TypeError`` (or ``MessageError``) for content it refuses.
Schema = type[msgspec.Struct] | Callable[[dict[str, Any]], object]

#: type name -> its schema, for the types registered with one (:func:`message_type`).
_SCHEMAS: dict[str, Schema] = {}
#: The names a message may carry without more checking: the built-in vocabulary and
#: the names of one's own seen valid (with no schema). Bounded, so that a stream of
#: fresh names from outside cannot grow it without end; past the bound a new name is
#: checked against the rule each time (a regular expression match, about 0.2 us).
_PLAIN_TYPES: set[str] = set(MESSAGE_TYPES)
_PLAIN_TYPES_MAX: Final = 4096


def check_type_name(name: object) -> str:
    """``name`` if it is a valid message type name, else :class:`MessageError`
    (field ``message_type``) saying which rule it breaks."""
    if type(name) is not str or not _TYPE_NAME.fullmatch(name):
        raise MessageError("message_type", f"{name!r} is not a message type name: a type "
                           f"is named by {TYPE_NAME_RULE} (a lower-case letter, then up to "
                           "63 lower-case letters, digits or underscores)")
    return name


def message_type(name: str, *, schema: Schema | None = None) -> str:
    """Declare the message type ``name``, optionally with a ``schema`` its content must
    pass; returns ``name``. Declaring is not needed to send a type of one's own (any
    name following :data:`TYPE_NAME_RULE` is delivered); a schema is what it adds: from
    then on a message of this type whose content fails it is refused when it is made
    (at send time, and when it arrives on the wire) with a :class:`MessageError` whose
    ``field`` is ``content`` or ``content.<the field>``.

    ``schema`` is a ``msgspec.Struct`` subclass (the content must convert to it:
    required fields present, types right, and unknown fields refused if the Struct
    says ``forbid_unknown_fields=True``) or a callable given the content, which raises
    to refuse it (``ValueError`` or ``TypeError`` by convention; any exception refuses).
    The built-in types take no schema (the services check their own), and a name holds
    one schema: declaring it again with another is a ValueError, with the same (or
    none) is a no-op. The same declaration
    made again by a module loaded again (a scenario file a sweep or a notebook loads
    once per run: a new class of the same module and name) replaces the old.
    """
    check_type_name(name)
    if schema is None:
        return name
    if name in MESSAGE_TYPES:
        raise ValueError(f"message type {name!r} is built in; it takes no schema")
    if not (isinstance(schema, type) and issubclass(schema, msgspec.Struct)) \
            and not callable(schema):
        raise TypeError(f"schema for {name!r} must be a msgspec.Struct type or a callable, "
                        f"got {schema!r}")
    held = _SCHEMAS.get(name)
    if held is not None and held is not schema and not _same_declaration(held, schema):
        raise ValueError(f"message type {name!r} already has the schema {held!r}")
    _SCHEMAS[name] = schema
    _PLAIN_TYPES.discard(name)
    return name


def _same_declaration(held: Schema, given: Schema) -> bool:
    """Whether ``given`` is ``held`` made again: the same module's object of the same
    qualified name (a module executed twice makes a new class or function each time)."""
    module = getattr(held, "__module__", None)
    qualname = getattr(held, "__qualname__", None)
    return module is not None and qualname is not None \
        and module == getattr(given, "__module__", None) \
        and qualname == getattr(given, "__qualname__", None)


def schema_of(name: str) -> Schema | None:
    """The schema declared for ``name`` (:func:`message_type`), or None."""
    return _SCHEMAS.get(name)


def _check_content(name: str, schema: Schema, content: dict[str, Any]) -> None:
    if isinstance(schema, type):  # a Struct type (message_type takes no other type)
        try:
            msgspec.convert(content, schema)
        except msgspec.ValidationError as exc:
            path = _field_of(str(exc))
            field = "content" if path == "message" else f"content.{path}"
            raise MessageError(field, f"does not fit the schema of {name!r} "
                               f"({schema.__name__}): {exc}") from None
        return
    validate: Callable[[dict[str, Any]], object] = schema
    try:
        validate(content)
    except MessageError:
        raise
    except (ValueError, TypeError) as exc:
        raise MessageError("content", f"does not fit the schema of {name!r}: {exc}") from None
    except Exception as exc:  # a check that fails some other way (content["n"]: KeyError)
        raise MessageError("content", f"does not fit the schema of {name!r}: its check "
                           f"raised {type(exc).__name__}: {exc}") from None


class Priority(IntEnum):
    """Named priorities of the design notes; any integer 1..10 is accepted."""

    LOW = 1
    NORMAL = 5
    HIGH = 8
    CRITICAL = 10


class MessageError(ValueError):
    """A message (or its wire form) is invalid. ``field`` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid message: {field}: {problem}")
        self.field = field
        self.problem = problem


class Region(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A rectangle on the canvas: top-left ``(x, y)``, then its size."""

    x: int
    y: int
    width: int
    height: int

    def __post_init__(self) -> None:
        for name in ("x", "y", "width", "height"):
            value = getattr(self, name)
            if type(value) is not int:
                raise MessageError(f"metadata.region.{name}", f"expected an int, got {value!r}")
        if self.width < 1 or self.height < 1:
            raise MessageError("metadata.region", "width and height must be at least 1")


class Metadata(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """Routing and correlation data that is not the payload."""

    region: Region | None = None
    capabilities: tuple[str, ...] = ()
    correlation_id: str | None = None

    def __post_init__(self) -> None:
        # Decoding checks these types already; this is for metadata made in-process.
        # The common case (a request's correlation id, nothing else) is three tests.
        caps, cid = self.capabilities, self.correlation_id
        if (caps == () and type(cid) is str and cid and self.region is None):
            return
        if type(caps) is not tuple or not all(type(c) is str for c in caps):
            raise MessageError("metadata.capabilities",
                               f"expected a tuple of strings, got {self.capabilities!r}")
        if self.correlation_id is not None and (
                type(self.correlation_id) is not str or not self.correlation_id):
            raise MessageError("metadata.correlation_id",
                               f"expected a non-empty string or null, got {self.correlation_id!r}")
        if self.region is not None and type(self.region) is not Region:
            raise MessageError("metadata.region", f"expected a Region, got {self.region!r}")


_NO_METADATA: Final = Metadata()
_BARE_PREFIXES: Final = ("topic:", "type:")
_PRIORITY_TYPES: Final = (int, Priority)
_NUMBER_TYPES: Final = (float, int)


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One A2A message.

    ``to_agent`` is an agent id, ``"broadcast"``, ``"topic:NAME"`` or
    ``"type:ROLE"``. ``timestamp`` and ``expires_at`` are simulation seconds.
    Construction checks every field and raises :class:`MessageError`.
    """

    message_id: str
    timestamp: float
    from_agent: str
    to_agent: str
    message_type: str
    priority: int = 5
    content: dict[str, Any] = msgspec.field(default_factory=dict)
    metadata: Metadata = _NO_METADATA
    signature: str | None = None
    expires_at: float | None = None

    def __post_init__(self) -> None:
        # This runs for every message on the hot path: the common case is a
        # handful of exact-type tests; only a failure pays for finding out why.
        if (
            type(self.message_id) is str and self.message_id
            and type(self.from_agent) is str and self.from_agent
            and type(self.to_agent) is str and self.to_agent
            and self.to_agent not in _BARE_PREFIXES
            and self.message_type in _PLAIN_TYPES
            and type(self.priority) in _PRIORITY_TYPES and 1 <= self.priority <= 10
            and type(self.timestamp) in _NUMBER_TYPES
            and type(self.content) is dict
            and type(self.metadata) is Metadata
            and (self.expires_at is None or type(self.expires_at) in _NUMBER_TYPES)
            and (self.signature is None or type(self.signature) is str)
        ):
            return
        self._explain()

    def _explain(self) -> None:
        for name in ("message_id", "from_agent", "to_agent"):
            value = getattr(self, name)
            if type(value) is not str or not value:
                raise MessageError(name, f"expected a non-empty string, got {value!r}")
        if self.to_agent in _BARE_PREFIXES:
            raise MessageError("to_agent", f"{self.to_agent!r} needs a name after the colon")
        name = self.message_type
        if name not in _PLAIN_TYPES:
            check_type_name(name)
        if type(self.priority) not in _PRIORITY_TYPES:
            raise MessageError("priority", f"expected an int 1..10, got {self.priority!r}")
        if not 1 <= self.priority <= 10:
            raise MessageError("priority", f"must be between 1 and 10, got {self.priority}")
        if type(self.timestamp) not in _NUMBER_TYPES:
            raise MessageError("timestamp", f"expected a number, got {self.timestamp!r}")
        if type(self.content) is not dict:
            raise MessageError(
                "content", f"expected a JSON object, got {type(self.content).__name__}"
            )
        if type(self.metadata) is not Metadata:
            raise MessageError(
                "metadata", f"expected Metadata, got {type(self.metadata).__name__}"
            )
        if self.expires_at is not None and type(self.expires_at) not in _NUMBER_TYPES:
            raise MessageError("expires_at", f"expected a number or null, got {self.expires_at!r}")
        if self.signature is not None and type(self.signature) is not str:
            raise MessageError("signature",
                               f"expected a hex string or null, got {self.signature!r}")
        # Every field is right: the type is one of one's own, off the fast path's set.
        schema = _SCHEMAS.get(name)
        if schema is not None:
            _check_content(name, schema, self.content)
        elif len(_PLAIN_TYPES) < _PLAIN_TYPES_MAX:
            _PLAIN_TYPES.add(name)

    @property
    def correlation_id(self) -> str | None:
        return self.metadata.correlation_id


_encoder: Final = msgspec.json.Encoder(order="sorted")
_decoder: Final = msgspec.json.Decoder(Message)


def encode_content(content: dict[str, Any], max_bytes: int = DEFAULT_MAX_CONTENT_BYTES) -> bytes:
    """Canonical JSON of a content object; checks that it is JSON and not too large."""
    try:
        data = _encoder.encode(content)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise MessageError("content", f"not JSON-encodable: {exc}") from None
    if len(data) > max_bytes:
        raise MessageError("content", f"{len(data)} bytes encoded, over the limit of {max_bytes}")
    return data


def canonical_bytes(message: Message) -> bytes:
    """The bytes a signature covers: the canonical form with ``signature`` null."""
    if message.signature is not None:
        message = msgspec.structs.replace(message, signature=None)
    try:
        return _encoder.encode(message)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise MessageError("content", f"not JSON-encodable: {exc}") from None


def sign(message: Message, secret: bytes) -> Message:
    """Return ``message`` with ``signature`` set to HMAC-SHA256 of its canonical form."""
    digest = hmac.new(secret, canonical_bytes(message), hashlib.sha256).hexdigest()
    return msgspec.structs.replace(message, signature=digest)


def verify(message: Message, secret: bytes) -> None:
    """Raise :class:`MessageError` (field ``signature``) unless the signature matches."""
    if message.signature is None:
        raise MessageError("signature", "missing; this message must be signed")
    expected = hmac.new(secret, canonical_bytes(message), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, message.signature):
        raise MessageError("signature", "does not match the message (tampered or wrong secret)")


def encode(message: Message, secret: bytes | None = None) -> bytes:
    """Wire form: canonical JSON including the signature (signed first if ``secret``)."""
    if secret is not None:
        message = sign(message, secret)
    try:
        return _encoder.encode(message)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise MessageError("content", f"not JSON-encodable: {exc}") from None


def decode(
    data: bytes | str,
    secret: bytes | None = None,
    *,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> Message:
    """Parse and validate a wire message; with ``secret``, also verify its signature."""
    if isinstance(data, str):
        data = data.encode()
    try:
        message = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        if isinstance(exc.__cause__, MessageError):  # raised by a __post_init__ check
            raise exc.__cause__ from None
        raise MessageError(_field_of(str(exc)), str(exc)) from None
    except msgspec.DecodeError as exc:
        raise MessageError("message", f"not valid JSON: {exc}") from None
    # Re-encoding the content gives the size the canonical form would have.
    encode_content(message.content, max_content_bytes)
    if secret is not None:
        verify(message, secret)
    return message


def _field_of(error: str) -> str:
    """The dotted path of the field a msgspec validation error is about."""
    path = ""
    marker = " - at `$."
    if marker in error:
        path = re.sub(r"\[\d+\]", "", error.rsplit(marker, 1)[1].rstrip("`"))
    named = re.search(r"(?:unknown|missing required) field `([^`]+)`", error)
    if named:
        return f"{path}.{named.group(1)}" if path else named.group(1)
    return path or "message"
