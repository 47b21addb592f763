"""The hub: remote agents as in-process Clients, driven from one asyncio loop.

Every surface (WebSocket, A2A over HTTP, MCP) calls tools through the hub, and
the hub calls them through :class:`barnraise.actors.world.Client`, the same path as any
in-process participant: each remote agent is one Client (one mailbox actor),
the services validate the arguments, check membership and apply the policy.
The hub adds only what a network needs:

* **Identity.** A successful ``session_create`` or ``session_join`` by an agent
  without a token mints one (``secrets``) and a signing key; the result carries
  both. Later connections present the token and act as that agent, and only
  that agent: the Client is the caller, so nothing else can be claimed.
* **Mail that survives a connection.** What the world delivers to an agent
  (direct messages, the events it subscribed to) is numbered (``seq`` 1, 2,
  ...) and kept in the agent's outbox until the agent acknowledges it; a
  connection that resumes with the last ``seq`` it saw gets the rest, once.
  The outbox is bounded (``Limits.outbox``); overflow drops the oldest, counted.
* **Calls that survive a connection.** A call with a string id is a retry key:
  the same id with the same tool and arguments from the same agent gets the
  first answer (kept for the last ``Limits.results`` calls), never a second
  execution. The same id with another call is a new call (clients that number
  their requests per connection reuse ids).
* **Signed messages from outside** (``hub.signed``, :mod:`barnraise.gateway.signed`): verified with
  the agent's key, from that agent, not expired, not replayed; then handed to
  the dispatcher's ``receive_wire`` in the session's own signed wire form.
* **Bounds per agent** (:class:`Limits`): calls in flight, lock and barrier
  waits, subscriptions and kept mail. A call past one is not sent: it answers
  ``limit_exceeded`` with ``limit`` naming the bound, counted
  (``limit_exceeded`` and ``limit_exceeded:NAME``). Calls a closed connection
  gave up on are forgotten (:meth:`Hub.abandon`), yet count until the world
  answers them, so reconnecting does not reset a bound. :meth:`Hub.held` sums
  what the hub holds.
* **Liveness.** An agent not heard from for ``agent_ttl`` wall seconds (a call,
  a signed message, or an open WebSocket or SSE stream counts as heard from) is
  expired (:meth:`Hub.expire`): it leaves its session as a leave would (claims
  released, tasks in progress back to the queue, subscriptions ended, an
  ``agent_expired`` event), its token stops working, and its Client, with the
  thread that serves it, is released. Looked for every ``agent_ttl / 4`` (at most
  :data:`LOOK_EVERY`), so an agent goes within 1.25 ``agent_ttl`` of its last sign.
* **Counters** of every refusal, by reason (:class:`Counters`).

Threading: every method runs on the hub's loop thread, except the arrival
listener, which runs on whichever thread delivers to the agent's Client (its
Clients are inline ones: a service's answer is recorded on the service's own
thread, with no hop through a Client thread) and which only queues the agent
for the loop: one ``call_soon_threadsafe`` wakes the loop for every agent heard
from until it drains them (:meth:`Hub._drain`), not one per answer.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from barnraise.actors.world import Simulation
from barnraise.gateway.bounds import Bounds
from barnraise.gateway.metrics import ToolLatency
from barnraise.gateway.signed import SignedMail
from barnraise.gateway.slots import (
    BINDING,
    BOUNDED,
    WAITS,
    AgentSlot,
    Conversations,
    Counters,
    Limits,
    Refused,
    fingerprint_of,
)
from barnraise.sim.messages import Message, encode
from barnraise.sim.tools import TOOLS, fail

__all__ = ["WAITS", "AgentSlot", "Counters", "Hub", "Limits", "Refused"]

#: Wall seconds a call may take on top of any wait its own arguments ask for.
CALL_TIMEOUT: Final = 30.0
#: Wall seconds between two looks for calls that have waited too long: a call is
#: answered ``no_reply`` within this much after its wait has run out.
SWEEP: Final = 0.5
#: Wall seconds a remote agent may stay unheard from before it expires (``serve --agent-ttl``).
AGENT_TTL: Final = 60.0
#: The longest wall time between two looks for expired agents.
LOOK_EVERY: Final = 5.0


class Hub:
    """Remote agents on one Simulation, served from one asyncio loop (see the module doc)."""

    def __init__(self, simulation: Simulation, *, limits: Limits | None = None,
                 counters: Counters | None = None, name_prefix: str = "remote",
                 agents: bool = True, agent_ttl: float | None = AGENT_TTL,
                 disabled: Mapping[str, str] | None = None) -> None:
        """``agent_ttl``: wall seconds an agent may go unheard from before it expires
        (None: never, for a host whose one agent lives as long as it does).
        ``disabled``: tools this host refuses, each with the skill group it was taken
        off with (``serve --disable-skill``): a call of one answers ``permission_denied``
        naming the skill, on every surface, and never reaches the world."""
        if agent_ttl is not None and not 0 < agent_ttl < float("inf"):
            raise ValueError(f"agent_ttl must be a positive number of seconds, got {agent_ttl!r}")
        if agents and simulation.mode != "realtime":
            raise ValueError("a hub serves a realtime Simulation (the network runs on the "
                             f"wall clock), not a {simulation.mode} one")
        self.simulation = simulation
        #: False: a hub that takes no agents (a view of a deterministic run, whose one
        #: thread drives the world): every join is refused ``no_agents``.
        self.agents = agents
        self.limits = limits or Limits()
        self.counters = counters or Counters()
        self.disabled: Mapping[str, str] = dict(disabled or {})
        #: Wall seconds from each call's start to its answer, by tool (GET /metrics).
        self.latency = ToolLatency(TOOLS)
        self.time_scale = float(getattr(simulation.dispatcher.clock, "time_scale", 1.0))
        self._prefix = name_prefix
        self._numbers = 0
        self._slots: dict[str, AgentSlot] = {}
        self._by_token: dict[str, AgentSlot] = {}
        # Agents heard from, for the loop to serve (appended from any thread), and
        # whether a drain is already scheduled on the loop.
        self._woken: deque[AgentSlot] = deque()
        self._drain_scheduled = False
        # Agents with calls under way, and the one timer that looks at their waits.
        self._waiting: set[AgentSlot] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self.agent_ttl = agent_ttl
        self._reaper: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: Requests every open WebSocket connection is serving, summed (ws.py keeps it).
        self.connection_load = 0
        #: The rooms: the agents' bounds, and signed messages from outside.
        self.bounds = Bounds(self.limits, self.counters,
                             simulation.dispatcher.holds_subscription)
        self.signed = SignedMail(self)
        #: Every agent's A2A conversations, bounded together (``Limits.conversation_bytes``).
        self.conversations = Conversations()

    # -- lifecycle ----------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve from ``loop`` (call on that loop before anything else)."""
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the hub is not bound to a loop; call bind() first")
        return self._loop

    def close(self) -> None:
        """Detach every Client's listener and fail every waiting call (the world stays)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for slot in self._slots.values():
            slot.client.on_arrival(None)
            for _, future, *_ in slot.pending:
                if not future.done():
                    future.set_result(fail("no_reply", "the gateway is shutting down"))
            slot.pending.clear()
            if slot.closer is not None:
                slot.closer("the server is shutting down")

    # -- agents -------------------------------------------------------------------------

    def new_slot(self, name: str | None = None) -> AgentSlot:
        """A new remote agent with its own Client (not yet a member of anything)."""
        if not self.agents:
            raise Refused("no_agents", "this server shows a deterministic run, which one "
                          "thread drives; agents join realtime worlds (barnraise serve)")
        if len(self._slots) >= self.limits.agents:
            raise Refused("too_many_agents", f"this server holds at most {self.limits.agents} "
                          "remote agents")
        if name is None:
            self._numbers += 1
            name = f"{self._prefix}-{self._numbers}"
            while name in self.simulation.dispatcher.actors:
                self._numbers += 1
                name = f"{self._prefix}-{self._numbers}"
        slot = AgentSlot(self.simulation.client(name, inline=True, remote=True))
        self._slots[slot.agent_id] = slot
        slot.client.on_arrival(self._listener(slot))
        return slot

    def forget(self, slot: AgentSlot) -> bool:
        """Drop ``slot`` if it never became an agent: no token (its joins failed, or its
        connection went first) and no call under way. Its Client's actor stops.

        Each surface makes a slot for a caller that is not yet an agent; without
        this, every failed join over HTTP left a Client and its thread behind, and
        ``Limits.agents`` of them refused everyone after. True if dropped.
        """
        if slot.token is not None or self._slots.get(slot.agent_id) is not slot:
            return False
        if slot.pending:  # a join under way: dropped when it is answered (_wake)
            slot.unclaimed = True
            return False
        del self._slots[slot.agent_id]
        self.conversations.release(slot)
        slot.client.on_arrival(None)
        self.simulation.release(slot.client)
        self.counters.add("guests_released")
        return True

    def slot_for_token(self, token: str | None) -> AgentSlot:
        """The agent a token names; :class:`Refused` (``invalid_token``) if none."""
        slot = self._by_token.get(token) if isinstance(token, str) else None
        if slot is None:
            raise Refused("invalid_token", "unknown token: present the token that "
                          "session_join (or session_create) returned")
        return slot

    @property
    def slots(self) -> Mapping[str, AgentSlot]:
        return self._slots

    def attach(self, slot: AgentSlot, sink: Callable[[int, Message], None],
               closer: Callable[[str], None]) -> None:
        """Make a connection the agent's live one; an older one is closed."""
        # == and not `is`: a bound method (a connection's close_soon) is a new object
        # at every look-up, so `is` never matched and a closed connection stayed attached.
        if slot.closer is not None and slot.closer != closer:
            slot.closer("replaced by a newer connection of the same agent")
        slot.sink, slot.closer = sink, closer
        slot.heard = self.loop.time()

    def detach(self, slot: AgentSlot, closer: Callable[[str], None]) -> None:
        if slot.closer == closer:
            slot.sink = slot.closer = None
            slot.heard = self.loop.time()  # its time to live starts when it goes

    def stream_opened(self, slot: AgentSlot) -> None:
        """An SSE stream of ``slot``'s is open: while it is, the agent is heard from."""
        slot.streams += 1

    def stream_closed(self, slot: AgentSlot) -> None:
        slot.streams -= 1
        slot.heard = self.loop.time()

    # -- liveness -----------------------------------------------------------------------

    def _arm_reaper(self) -> None:
        if self.agent_ttl is not None and self._reaper is None and not self._closed:
            self._reaper = self.loop.call_later(min(LOOK_EVERY, self.agent_ttl / 4),
                                                self._reap)

    def _reap(self) -> None:
        """Expire every agent not heard from for ``agent_ttl``; one with a connection, a
        stream or a call under way is heard from now."""
        self._reaper = None
        assert self.agent_ttl is not None
        now = self.loop.time()
        cutoff = now - self.agent_ttl
        for slot in list(self._by_token.values()):
            if slot.closer is not None or slot.streams > 0 or any(
                    not entry[1].done() for entry in slot.pending):
                slot.heard = now
            elif slot.heard <= cutoff:
                self.expire(slot, "ttl")
        if self._by_token:
            self._arm_reaper()

    def expire(self, slot: AgentSlot, reason: str = "ttl") -> bool:
        """``slot``'s agent is gone: it leaves its session (:meth:`Simulation.expire`:
        claims released, tasks back to the queue, an ``agent_expired`` event), its token
        and its mail are forgotten, its calls answered ``no_reply``, its connection
        closed, and its Client's actor (its thread) stopped. False if it was gone."""
        if self._slots.get(slot.agent_id) is not slot:
            return False
        del self._slots[slot.agent_id]
        self.conversations.release(slot)
        if slot.token is not None:
            self._by_token.pop(slot.token, None)
        slot.client.on_arrival(None)
        for _, future, *_ in slot.pending:
            if not future.done():
                future.set_result(fail("no_reply", "the agent expired"))
        slot.pending.clear()
        self._waiting.discard(slot)
        if slot.closer is not None:
            slot.closer("the agent expired")
            slot.sink = slot.closer = None
        slot.outbox.clear()
        slot.results.clear()
        self.simulation.expire(slot.agent_id, reason)  # first: leaving still finds it
        self.simulation.release(slot.client)
        self.counters.add("agents_expired")
        return True

    def ack(self, slot: AgentSlot, seq: int) -> int:
        """Forget delivered messages up to ``seq``; the number still kept."""
        outbox = slot.outbox
        while outbox and outbox[0][0] <= seq:
            outbox.popleft()
        return len(outbox)

    def unacked(self, slot: AgentSlot, after: int = 0) -> list[tuple[int, Message]]:
        return [(seq, m) for seq, m in slot.outbox if seq > after]

    # -- calls --------------------------------------------------------------------------

    async def call(self, slot: AgentSlot, tool: str, args: Mapping[str, Any],
                   call_id: str | None = None) -> dict[str, Any]:
        """Call ``tool`` as ``slot``'s agent; the result dict (failures included).

        ``call_id`` (a string) makes the call a retry key: see the module doc.
        """
        # Shielded: a caller that goes away (its connection closed) must not cancel
        # an answer a retry of the same call may still be waiting for.
        return await asyncio.shield(self.start(slot, tool, args, call_id))

    def start(self, slot: AgentSlot, tool: str, args: Mapping[str, Any],
              call_id: str | None = None) -> asyncio.Future[dict[str, Any]]:
        """Start a call (or find the one it repeats); a future of its result dict.

        The future always gets a result: the answer, or ``no_reply`` once the
        call has taken longer than the wait allowed for it (:data:`CALL_TIMEOUT`
        plus any wait its arguments ask for; noticed within :data:`SWEEP`). For a
        caller on the loop that answers from a callback (no task per call: the
        WebSocket path).
        """
        loop = self.loop
        slot.heard = loop.time()
        if tool in self.disabled:
            return self._refuse_disabled(tool)
        fingerprint = b""
        if call_id is not None:
            fingerprint = fingerprint_of(tool, args)
            cached = slot.results.get(call_id)
            if cached is not None and cached[0] == fingerprint:
                self.counters.add("calls_answered_again")
                done: asyncio.Future[dict[str, Any]] = loop.create_future()
                done.set_result(cached[1])
                return done
            running = slot.inflight.get(call_id)
            if running is not None and running[0] == fingerprint:
                self.counters.add("calls_answered_again")
                return running[1]
        # The bounds' common case without a call: below the calls bound, a tool no other
        # bound counts (Bounds.over_limit says why and counts it).
        if len(slot.pending) + len(slot.orphans) >= self.limits.calls or tool in BOUNDED:
            refusal = self.bounds.over_limit(slot, tool, args)
            if refusal is not None:
                done = loop.create_future()
                done.set_result(refusal)
                return done  # not remembered: a retry once there is room runs
        future = self._submit(slot, tool, dict(args))
        if tool == "a2a_subscribe":
            asked = fingerprint or fingerprint_of(tool, args)
            future.add_done_callback(lambda f: self.bounds.subscribed(slot, asked, f))
        if call_id is not None:
            if future.done():
                self._remember(slot, call_id, fingerprint, future)
            else:
                slot.inflight[call_id] = (fingerprint, future)
                future.add_done_callback(
                    lambda f: self._remember(slot, call_id, fingerprint, f))
        return future

    def _refuse_disabled(self, tool: str) -> asyncio.Future[dict[str, Any]]:
        skill = self.disabled[tool]
        self.counters.add("skill_disabled")
        done: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        done.set_result(fail(
            "permission_denied", f"{tool}: the skill {skill!r} is disabled on this server "
            f"(barnraise serve --disable-skill {skill}); its tools are refused",
            tool=tool, reason="skill_disabled"))
        return done

    def _tool_wait(self, args: Mapping[str, Any]) -> float:
        # A barrier or a lock may wait as long as its own arguments say.
        longest = 0.0
        for key in ("timeout", "wait"):
            value = args.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                longest = max(longest, float(value))
        return self.simulation.dispatcher.clock.to_wall(longest)

    def _submit(self, slot: AgentSlot, tool: str,
                args: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        loop = self.loop
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        pending = slot.client.submit_any(tool, args)
        # Refused before it was sent, or already answered. An answer that is in the
        # mailbox already has woken the loop, which drains after this: not looked for.
        result = pending.known
        if result is not None:
            future.set_result(self._finish(slot, tool, result))
            self.latency.observe(tool, loop.time() - slot.heard)
        else:
            # No timer per call (one cost as much as the rest of the hub's part of it):
            # one sweep looks at every waiting agent's calls (see _sweep).
            wait = CALL_TIMEOUT + self._tool_wait(args)
            slot.pending.append((pending, future, tool, loop.time() + wait, wait))
            if tool in WAITS:
                slot.waits += 1
            elif tool == "a2a_subscribe":
                slot.subscribing += 1
            self._waiting.add(slot)
            if self._sweeper is None:
                self._sweeper = loop.call_later(SWEEP, self._sweep)
        return future

    def _sweep(self) -> None:
        """Answer ``no_reply`` to the calls whose wait has run out. Such a call stays in
        its agent's list, so that an answer that comes after all is still taken from
        the Client's mailbox (and dropped)."""
        self._sweeper = None
        now = self.loop.time()
        for slot in list(self._waiting):
            if not slot.pending:
                self._waiting.discard(slot)
                continue
            for _, future, tool, deadline, wait in slot.pending:
                if now >= deadline and not future.done():
                    future.set_result(fail("no_reply", f"no answer to {tool} within {wait:g} s"))
                    self.latency.observe(tool, wait)
        if self._waiting and not self._closed:
            self._sweeper = self.loop.call_later(SWEEP, self._sweep)

    def _remember(self, slot: AgentSlot, call_id: str, fingerprint: bytes,
                  future: asyncio.Future[dict[str, Any]]) -> None:
        running = slot.inflight.get(call_id)
        if running is not None and running[1] is future:
            del slot.inflight[call_id]
        if future.cancelled():
            return
        slot.results[call_id] = (fingerprint, future.result())
        slot.results.move_to_end(call_id)
        while len(slot.results) > self.limits.results:
            slot.results.popitem(last=False)

    def _finish(self, slot: AgentSlot, tool: str, result: dict[str, Any]) -> dict[str, Any]:
        """What the remote caller gets: the result, plus credentials when it just joined."""
        if not result.get("success"):
            if result.get("error") == "limit_exceeded":  # the world's own bound
                self.bounds.count(str(result.get("limit")))
            return result
        if tool in ("session_join", "session_create") and slot.token is None:
            slot.token = secrets.token_urlsafe(32)
            slot.key = secrets.token_bytes(32)
            self._by_token[slot.token] = slot
            self._arm_reaper()
            result = {**result, "agent_id": slot.agent_id, "token": slot.token,
                      "signing_key": slot.key.hex(), "now": self.simulation.now,
                      "time_scale": self.time_scale}
        elif tool == "a2a_subscribe":
            sid = result.get("subscription_id")
            # The world answers an identical subscription with the one already held.
            if all(held["subscription_id"] != sid for held in slot.subscriptions):
                slot.subscriptions.append({"subscription_id": sid, "topic": result.get("topic")})
        elif tool == "session_leave":
            slot.subscriptions.clear()  # leaving ended them (one session at a time)
            slot.subscribed_as.clear()
        return result

    # -- bounds -------------------------------------------------------------------------

    def abandon(self, slot: AgentSlot, futures: Collection[asyncio.Future[Any]]) -> int:
        """Forget the calls of ``slot`` whose futures are ``futures``: their caller (a
        closed connection) is gone and nobody can ask for their answers again (no retry
        key). Each future is cancelled; what the world still owes (a wait at a barrier)
        is kept as its pending call alone, counted against the agent's bounds until the
        answer comes and is dropped. Joins and leaves are not forgotten: their answers
        bind the Client. Returns the number forgotten.
        """
        if not futures or not slot.pending:
            return 0
        kept = []
        for entry in slot.pending:
            pending, future, tool = entry[0], entry[1], entry[2]
            if future not in futures or tool in BINDING:
                kept.append(entry)
                continue
            result = pending.poll()
            if result is None:
                slot.orphans.append((pending, tool))
            else:
                self.bounds.settled(slot, tool)
                self._finish(slot, tool, result)
            future.cancel()
        forgotten = len(slot.pending) - len(kept)
        slot.pending = kept
        if forgotten:
            self.counters.add("calls_abandoned", forgotten)
        return forgotten

    def _drop_orphans(self, slot: AgentSlot) -> None:
        """Take the answers that came to forgotten calls (see :meth:`abandon`)."""
        owed = []
        for pending, tool in slot.orphans:
            result = pending.poll()
            if result is None:
                owed.append((pending, tool))
                continue
            self.bounds.settled(slot, tool)
            self._finish(slot, tool, result)
            self.counters.add("orphan_answers_dropped")
        slot.orphans = owed

    def held(self) -> dict[str, int]:
        """What the hub holds for its agents now, summed over them: the measure that a
        closed connection's load is released (and what a flood can pile up)."""
        slots = list(self._slots.values())
        return {
            "agents": len(slots),
            "calls": sum(len(s.pending) for s in slots),
            "orphans": sum(len(s.orphans) for s in slots),
            "waits": sum(s.waits for s in slots),
            "subscriptions": sum(len(s.subscriptions) for s in slots),
            "outbox": sum(len(s.outbox) for s in slots),
            "results": sum(len(s.results) for s in slots),
            "conversations": len(self.conversations),
            "conversation_bytes": self.conversations.kept,
            "connection_load": self.connection_load,
        }

    # -- mail ---------------------------------------------------------------------------

    def _listener(self, slot: AgentSlot) -> Callable[[], None]:
        woken = self._woken

        def heard() -> None:
            # On the delivering thread (any service's): queue the agent for the loop,
            # once per burst, and wake the loop once for all the agents queued. The
            # loop clears each flag before it looks, so nothing is missed; two threads
            # racing past a flag only queue or schedule twice, which is harmless.
            if slot.wake_scheduled or self._closed:
                return
            slot.wake_scheduled = True
            woken.append(slot)
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed under us: the server is stopping
                self._drain_scheduled = False

        return heard

    def _drain(self) -> None:
        """On the loop: serve every agent heard from since the last drain."""
        self._drain_scheduled = False
        woken = self._woken
        while woken:
            self._wake(woken.popleft())

    def _wake(self, slot: AgentSlot) -> None:
        slot.wake_scheduled = False
        if slot.pending:
            waiting = []
            now = self.loop.time()
            for entry in slot.pending:
                pending, future, tool = entry[0], entry[1], entry[2]
                result = pending.poll()
                if result is None:
                    waiting.append(entry)
                    continue
                if tool in BOUNDED:
                    self.bounds.settled(slot, tool)
                if not future.done():
                    future.set_result(self._finish(slot, tool, result))
                    # started at its deadline less its wait (no start time kept per call)
                    self.latency.observe(tool, now - entry[3] + entry[4])
            slot.pending = waiting
            if slot.unclaimed and not waiting and self.forget(slot):
                return  # its join failed after its caller left: nothing is owed to anyone
        if slot.orphans:
            self._drop_orphans(slot)
        arrived = slot.client.messages()
        if not arrived:
            return
        if slot.observer is not None:
            for message in arrived:
                slot.observer(message)
            return
        limit = self.limits.outbox
        for message in arrived:
            slot.seq += 1
            slot.outbox.append((slot.seq, message))
            if len(slot.outbox) > limit:
                slot.outbox.popleft()
                self.counters.add("outbox_overflow")
            if slot.sink is not None:
                slot.sink(slot.seq, message)

    def wire(self, slot: AgentSlot, message: Message) -> bytes:
        """``message`` in canonical JSON wire form, signed with the agent's key."""
        return encode(message, slot.key or None)

    # -- signed messages from outside ----------------------------------------------------

