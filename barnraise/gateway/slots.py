"""The hub's values: its bounds (:class:`Limits`), counters, refusals and the state it
keeps per remote agent (:class:`AgentSlot`), shared by the hub
(:mod:`barnraise.gateway.hub`) and its rooms (:mod:`barnraise.gateway.bounds`,
:mod:`barnraise.gateway.signed`)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from barnraise.actors.world import Client, PendingCall
from barnraise.sim.messages import Message

__all__ = ["BINDING", "BOUNDED", "WAITS", "AgentSlot", "Conversations", "Counters", "Limits",
           "Refused", "digest_of", "fingerprint_of"]


@dataclass(frozen=True)
class Limits:
    """The bounds that keep a server's memory and work finite."""

    #: Bytes in one WebSocket frame or HTTP request body.
    max_frame: int = 1 << 20
    #: Frames waiting to be written to one connection; past it, the connection is dropped.
    send_queue: int = 1024
    #: Messages kept per agent until acknowledged.
    outbox: int = 10_000
    #: Answers kept per agent for retried calls (string ids).
    results: int = 1024
    #: Remote agents (Clients) one hub will hold.
    agents: int = 10_000
    #: Latest expiry, in simulated seconds from now, a signed message may carry.
    max_ttl: float = 3600.0
    #: Calls one agent has in flight, over every connection and surface together
    #: (a call its connection gave up on counts until the world answers it).
    calls: int = 1024
    #: Requests one WebSocket connection is serving at once (tool calls included).
    calls_per_connection: int = 256
    #: Lock and barrier waits (``a2a_lock_acquire``, ``a2a_barrier_enter``) of one agent.
    waits: int = 64
    #: Event subscriptions one remote agent holds (the world bounds them too:
    #: ``WorldLimits.max_subscriptions``).
    subscriptions: int = 100
    #: Bytes of JSON the A2A conversations of all agents together may keep; past it,
    #: the oldest conversation of any agent is dropped (:class:`Conversations`).
    conversation_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for name in ("max_frame", "send_queue", "outbox", "results", "agents", "calls",
                     "calls_per_connection", "waits", "subscriptions",
                     "conversation_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
        ttl = self.max_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or \
                not 0 < ttl < float("inf"):
            raise ValueError(f"Limits.max_ttl must be a positive finite number, got {ttl!r}")


#: Tools whose call may wait on other agents: bounded by ``Limits.waits``.
WAITS: Final = frozenset({"a2a_lock_acquire", "a2a_barrier_enter"})
#: Tools a bound of their own counts while under way
#: (:meth:`barnraise.gateway.bounds.Bounds.settled`).
BOUNDED: Final = WAITS | {"a2a_subscribe"}
#: Tools whose answer changes which session the Client is bound to: never forgotten.
BINDING: Final = frozenset({"session_join", "session_create", "session_leave"})


_encoder: Final = msgspec.json.Encoder(order="sorted")


def digest_of(fingerprint: bytes) -> bytes:
    """A fingerprint's 16-byte digest: what is kept of one (a fingerprint holds the
    arguments whole, up to the frame limit)."""
    return hashlib.blake2b(fingerprint, digest_size=16).digest()


def fingerprint_of(tool: str, args: Mapping[str, Any]) -> bytes:
    """What makes two calls the same call: the tool and its arguments, canonically."""
    try:
        return tool.encode() + b"\0" + _encoder.encode(args)
    except (TypeError, ValueError, msgspec.EncodeError):
        return tool.encode() + b"\0" + repr(sorted(args.items())).encode()


class Counters:
    """Thread-safe counts by name: refusals, drops, and a few totals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


class Refused(Exception):
    """A request the hub will not serve; ``reason`` is the counter it was counted under."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AgentSlot:
    """One remote agent: its Client, credentials, numbered outbox and call memory."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.agent_id = client.agent_id
        self.token: str | None = None
        self.key = b""
        self.seq = 0  # the last number given to a delivered message
        self.outbox: deque[tuple[int, Message]] = deque()
        # retry key -> (the call's fingerprint, its answer or the future of it)
        self.results: OrderedDict[str, tuple[bytes, dict[str, Any]]] = OrderedDict()
        self.inflight: dict[str, tuple[bytes, asyncio.Future[dict[str, Any]]]] = {}
        #: Calls under way: (the call, its future, the tool, the loop time by which it
        #: is answered ``no_reply``, the wait that makes that time).
        self.pending: list[tuple[PendingCall, asyncio.Future[dict[str, Any]], str, float,
                                 float]] = []
        #: The attached connection's writer, and how to close that connection.
        self.sink: Callable[[int, Message], None] | None = None
        self.closer: Callable[[str], None] | None = None
        #: Instead of an outbox: a hub-internal observer (the A2A task watch).
        self.observer: Callable[[Message], None] | None = None
        self.subscriptions: list[dict[str, Any]] = []
        #: Which subscription each ``a2a_subscribe`` asked for (its arguments'
        #: fingerprint's digest; one key a subscription) was answered with: at the
        #: bound, asking for one of them again is let through, for the world to answer
        #: the one held.
        self.subscribed_as: dict[bytes, str] = {}
        #: Bounds (see :meth:`Hub.start`): lock and barrier waits under way,
        #: subscriptions asked for and not yet answered, and the calls a closed
        #: connection gave up on that the world has not answered yet (each with its
        #: tool; their answers are taken as they come and dropped).
        self.waits = 0
        self.subscribing = 0
        self.orphans: list[tuple[PendingCall, str]] = []
        self.wake_scheduled = False
        #: Its surface let go of it before it became an agent, with a join still under
        #: way: dropped (:meth:`Hub.forget`) once that join is answered without a token.
        self.unclaimed = False
        self.members: tuple[float, frozenset[str]] | None = None
        #: The loop time it was last heard from, and its SSE streams open now.
        self.heard = 0.0
        self.streams = 0
        #: Its A2A conversations (task id -> ``a2a_binding.Chat``), oldest first,
        #: at most ``a2a_binding.MAX_CHATS``: they go when the agent does.
        self.chats: OrderedDict[str, Any] = OrderedDict()

    @property
    def session_id(self) -> str | None:
        return self.client.session_id

    def __repr__(self) -> str:
        return f"<AgentSlot {self.agent_id} session={self.session_id} seq={self.seq}>"


class Conversations:
    """Every agent's A2A conversations (``a2a_binding.Chat``) in one order, oldest
    first, and the bytes of JSON they keep, summed: what ``Limits.conversation_bytes``
    bounds across all agents. Each one also lives in its agent's ``AgentSlot.chats``;
    the binding opens and drops them, the hub lets an agent's go when it does."""

    def __init__(self) -> None:
        self._order: OrderedDict[tuple[str, str], tuple[AgentSlot, Any]] = OrderedDict()
        self.kept = 0  # bytes

    def __len__(self) -> int:
        return len(self._order)

    def open(self, slot: AgentSlot, chat: Any) -> None:
        slot.chats[chat.id] = chat
        self._order[(slot.agent_id, chat.id)] = (slot, chat)
        self.kept += chat.kept

    def grew(self, by: int) -> None:
        self.kept += by

    def drop(self, slot: AgentSlot, chat: Any) -> None:
        """Forget ``chat``: its agent's copy, its bytes; a stream on it is ended."""
        slot.chats.pop(chat.id, None)
        if self._order.pop((slot.agent_id, chat.id), None) is not None:
            self.kept -= chat.kept
        for queue in chat.listeners:
            queue.put_nowait(None)

    def oldest(self, besides: Any) -> tuple[AgentSlot, Any]:
        """The oldest conversation but ``besides`` (there must be another)."""
        return next(entry for entry in self._order.values() if entry[1] is not besides)

    def release(self, slot: AgentSlot) -> None:
        """``slot``'s agent is gone: its conversations go with it."""
        for chat in list(slot.chats.values()):
            self.drop(slot, chat)
