"""The WebSocket endpoint ``/a2a``: JSON-RPC 2.0 frames, one method per tool.

A request's ``method`` is a tool name and its ``params`` the tool's arguments;
the ``result`` is the tool's result dict, failures included (``success:
false``), exactly as ``Client.call`` returns it. Besides the tools:

``barnraise.auth``  ``{"token": T, "last_seq": N}``: act as the agent that owns
                    ``T`` (the first frame, or an ``Authorization: Bearer``
                    header on the upgrade). The answer has ``agent_id``,
                    ``session_id``, ``seq`` (the last number given), the
                    ``subscriptions`` the agent holds, ``now`` and ``time_scale``;
                    then every kept message after ``last_seq`` follows, in order.
``barnraise.ack``   ``{"seq": N}``: the client has everything up to ``N``.
``barnraise.send``  ``{"message": {...}}``: a barnraise Message in its canonical
                    JSON wire form, signed with the agent's ``signing_key``,
                    from this agent, with ``expires_at``; verified and routed.

The server sends notifications: ``barnraise.message`` (a message to the agent)
and ``barnraise.event`` (a domain event it subscribed to), each
``{"seq": N, "message": {...}}`` with the message signed with the agent's key.

A connection serves at most ``Limits.calls_per_connection`` requests at once
(tool calls on the fast path included); past it a tool call answers
``limit_exceeded`` with ``limit``, and any other method gets -32600 with
``{"reason": "limit_exceeded", "limit": ...}`` as its data. When it closes, its
calls without a retry key are forgotten (:meth:`Hub.abandon`) and its unsent
frames dropped.

A connection with no agent may call ``session_create`` or ``session_join``
(which make it one and return its token); anything else gets -32040. One
that has no agent ``auth_timeout`` wall seconds after it opened (10 by
default, ``Gateway(auth_timeout=S)``) is closed with 1008 (``auth_timeout``). Frames
over the size limit, a full send queue (the client does not read), a foreign
``Origin`` and every protocol fault are refused and counted; a handler that
fails answers -32603 and the connection goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Final

from starlette.websockets import WebSocket

from barnraise.gateway import jsonrpc
from barnraise.gateway.hub import AgentSlot, Hub, Refused
from barnraise.gateway.jsonrpc import RpcError
from barnraise.sim.messages import Message
from barnraise.sim.tools import TOOLS, ToolError
from barnraise.sim.validation import validate

__all__ = ["WebSocketSession", "bearer_token"]

#: Requests in one JSON-RPC batch (served together, answered in one array).
MAX_BATCH: Final = 100
#: Wall seconds a backlog replay waits for room in the send queue before giving up.
REPLAY_PATIENCE: Final = 10.0
#: Close codes (RFC 6455): policy violation, message too big, try again later.
POLICY, TOO_BIG, GOING_AWAY = 1008, 1009, 1001

_JOINING: Final = frozenset({"session_create", "session_join"})


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer T`` header, if that is what it is."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class WebSocketSession:
    """One WebSocket connection: reads frames, serves them, writes through a bounded queue."""

    def __init__(self, hub: Hub, websocket: WebSocket,
                 origin_allowed: Callable[[str | None, str | None], bool], *,
                 auth_timeout: float = 10.0) -> None:
        """``auth_timeout``: wall seconds the connection may stay open without an agent
        (``session_join``, ``session_create`` or ``barnraise.auth``); then it is
        closed with 1008, counted ``auth_timeout``. A join still being answered
        holds it open until it is answered."""
        self.hub = hub
        self.auth_timeout = auth_timeout
        self.ws = websocket
        self.origin_allowed = origin_allowed
        self.counters = hub.counters
        self.slot: AgentSlot | None = None
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(hub.limits.send_queue)
        self.tasks: set[asyncio.Task[None]] = set()
        #: Requests being served (the bound is ``Limits.calls_per_connection``), and the
        #: hub's futures of the calls without a retry key, forgotten when it closes.
        self.load = 0
        self._per_connection = hub.limits.calls_per_connection
        self.calls: set[asyncio.Future[dict[str, Any]]] = set()
        self._released = False
        self.closing: str | None = None  # why this connection is closing, once it is
        self._close_code = POLICY
        self._slow = False  # dropped for not reading: its queue is not flushed
        self._finishing = False
        self._replaying = False  # a backlog is being sent: live mail waits for it
        self._sent = 0  # the last message number queued on this connection
        self._reader: asyncio.Task[None] | None = None

    # -- the connection -----------------------------------------------------------------

    async def run(self) -> None:
        ws = self.ws
        if not self.origin_allowed(ws.headers.get("origin"), ws.headers.get("host")):
            self.counters.add("foreign_origin")
            await ws.close(code=POLICY)  # before accept: the upgrade gets HTTP 403
            return
        token = bearer_token(ws.headers.get("authorization"))
        if token is not None:
            try:
                self.slot = self.hub.slot_for_token(token)
            except Refused:
                self.counters.add("invalid_token")
                await ws.close(code=POLICY)
                return
        await ws.accept()
        self.counters.add("ws_connections")
        writer = asyncio.create_task(self._write())
        if self.slot is not None:  # authenticated by header: what it kept follows
            self.hub.attach(self.slot, self._deliver, self.close_soon)
            self._replay({"last_seq": 0})
        self._reader = asyncio.current_task()
        timer = None if self.slot is not None else \
            asyncio.get_running_loop().call_later(self.auth_timeout, self._auth_late)
        try:
            await self._read()
        except asyncio.CancelledError:
            pass  # close_soon() or the server's shutdown
        finally:
            if timer is not None:
                timer.cancel()
            self._finishing = True
            if self.slot is not None:
                self.hub.detach(self.slot, self.close_soon)
                self.hub.forget(self.slot)  # never joined: nothing to come back to
            for task in list(self.tasks):
                task.cancel()
            self._release()
            await self._finish(writer)

    def _release(self) -> None:
        """Give back what this connection held: its calls nobody can ask for again are
        forgotten by the hub, and its load leaves the hub's count."""
        if self.slot is not None:
            self.hub.abandon(self.slot, self.calls)
        self.calls.clear()
        self.hub.connection_load -= self.load
        self.load = 0
        self._released = True

    def _unload(self, n: int) -> None:
        if not self._released:
            self.load -= n
            self.hub.connection_load -= n

    async def _finish(self, writer: asyncio.Task[None]) -> None:
        # Answers already queued go out first (an error frame before its close),
        # boundedly; a slow consumer's queue is not waited for: it is why we close.
        if not self._slow:
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(writer), 1.0)
        writer.cancel()
        while not self.queue.empty():  # frames never sent are dropped with the connection
            self.queue.get_nowait()
        if self.closing is not None:
            with contextlib.suppress(Exception):
                await self.ws.close(code=self._close_code, reason=self.closing[:120])

    def _auth_late(self) -> None:
        # An agent is one whose join or create answered a token: a slot a failed join
        # left has none, and holds a place under Limits.agents until the close.
        slot = self.slot
        if (slot is not None and slot.token is not None) or self.closing is not None \
                or self._finishing:
            return
        if self.load:  # a join under way: look again once it may have been answered
            asyncio.get_running_loop().call_later(1.0, self._auth_late)
            return
        self.counters.add("auth_timeout")
        self.close_soon(f"no agent within {self.auth_timeout:g} s: send session_join, "
                        "session_create or barnraise.auth first")

    def close_soon(self, reason: str, code: int = POLICY) -> None:
        """Close this connection (from the loop), telling the client why."""
        if self.closing is None:
            self.closing, self._close_code = reason, code
            reader = self._reader
            # The reader itself just stops reading; anyone else interrupts its wait.
            if (reader is not None and not reader.done() and not self._finishing
                    and asyncio.current_task() is not reader):
                reader.cancel()

    async def _read(self) -> None:
        limit = self.hub.limits.max_frame
        receive = self.ws.receive
        while self.closing is None:
            event = await receive()
            kind = event["type"]
            if kind == "websocket.disconnect":
                if event.get("code") == TOO_BIG:  # refused by the protocol layer
                    self.counters.add("frame_too_large")
                return
            frame = event.get("text")
            if frame is None:
                frame = event.get("bytes") or b""
            if len(frame) > limit:
                self.counters.add("frame_too_large")
                self._send(jsonrpc.error(None, jsonrpc.INVALID_REQUEST,
                                         f"frame of {len(frame)} bytes is over the limit "
                                         f"of {limit}"))
                self.close_soon(f"frame over {limit} bytes", TOO_BIG)
                return
            self._serve(frame)

    async def _write(self) -> None:
        send = self.ws.send
        queue = self.queue
        while True:
            frame = await queue.get()
            if frame is None:
                return
            try:
                await send({"type": "websocket.send", "text": frame.decode()})
            except Exception:  # the peer went away mid-write
                self.close_soon("write failed", GOING_AWAY)
                return

    def _send(self, frame: bytes) -> None:
        if self.closing is not None:
            return
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            # A client that does not read must not grow the server's memory. Its
            # mail stays in the agent's outbox for a connection that reads.
            self.counters.add("slow_consumer")
            self._slow = True
            self.close_soon(f"slow consumer: {self.queue.maxsize} frames unsent")

    def _deliver(self, seq: int, message: Message) -> None:
        if self._replaying or seq <= self._sent:
            return  # the replay sends it, in order, or it went out already
        self._sent = seq
        self._send(self._frame(seq, message))

    def _frame(self, seq: int, message: Message) -> bytes:
        assert self.slot is not None
        method = b"barnraise.event" if message.to_agent.startswith("topic:") else \
            b"barnraise.message"
        return (b'{"jsonrpc":"2.0","method":"' + method + b'","params":{"seq":'
                + str(seq).encode() + b',"message":' + self.hub.wire(self.slot, message)
                + b"}}")

    # -- requests -----------------------------------------------------------------------

    def _serve(self, frame: bytes | str) -> None:
        try:
            request = jsonrpc.parse_batch(frame, MAX_BATCH)
        except RpcError as exc:
            self._fault(exc)
            return
        except Exception as exc:  # never let a frame take the connection down
            self._fault(RpcError(jsonrpc.INTERNAL_ERROR, f"internal error: {exc!r}"))
            return
        if isinstance(request, list):
            self._spawn(self._answer_batch(request), request[0] if request else None,
                        max(1, len(request)))
            return
        slot = self.slot
        tool = TOOLS.get(request.method)
        if tool is not None and slot is not None:
            # The common case, without a task: the call's future answers the frame. A tool
            # of a disabled skill is refused by the hub whatever its arguments.
            try:
                if request.method not in self.hub.disabled:
                    validate(tool, request.params)
            except ToolError as exc:
                self._fault(RpcError(jsonrpc.INVALID_PARAMS, str(exc), exc.result(),
                                     id=request.id))
                return
            if self.load >= self._per_connection:
                if not request.notification:
                    self._send(jsonrpc.success(request.id, self._over_limit()))
                return
            # _start, inline: every tool call passes here (docs/benchmarks.md, "The rest")
            call_id = request.id if isinstance(request.id, str) else None
            future = self.hub.start(slot, request.method, request.params, call_id)
            if future.done():
                self._reply(request, future)
            else:
                if call_id is None:
                    self.calls.add(future)  # this connection's alone: _answered discards it
                self.load += 1
                self.hub.connection_load += 1
                future.add_done_callback(functools.partial(self._answered, request))
            return
        self._spawn(self._answer(request), request)

    def _start(self, slot: AgentSlot,
               request: jsonrpc.Request) -> asyncio.Future[dict[str, Any]]:
        """The hub's call for ``request``; one without a retry key is this connection's
        alone (forgotten when it closes)."""
        call_id = request.id if isinstance(request.id, str) else None
        future = self.hub.start(slot, request.method, request.params, call_id)
        if call_id is None and not future.done():
            self.calls.add(future)  # the caller discards it once answered
        return future

    def _answered(self, request: jsonrpc.Request,
                  future: asyncio.Future[dict[str, Any]]) -> None:
        self.calls.discard(future)
        if not self._released:  # _unload(1), inline: on every tool call's way back
            self.load -= 1
            self.hub.connection_load -= 1
        self._reply(request, future)

    def _over_limit(self) -> dict[str, Any]:
        limit = self.hub.limits.calls_per_connection
        return self.hub.bounds.refusal("calls_per_connection", f"{limit} requests are being "
                                      "served on this connection; wait for their answers")

    def _spawn(self, work: Coroutine[Any, Any, None], request: Any, weight: int = 1) -> None:
        if self.load + weight > self._per_connection:
            work.close()
            refusal = self._over_limit()
            self._fault(RpcError(jsonrpc.INVALID_REQUEST, str(refusal["message"]),
                                 {"reason": "limit_exceeded", "limit": refusal["limit"]},
                                 id=getattr(request, "id", None), counted=True))
            return
        self.load += weight
        self.hub.connection_load += weight
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._spawned, weight))

    def _spawned(self, weight: int, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._unload(weight)

    async def _answer_batch(self, items: list[jsonrpc.Request | RpcError]) -> None:
        """Serve a batch's requests together; answer them in one array, in their order
        (notifications get none; a batch of notifications gets nothing at all)."""
        answers = await asyncio.gather(*(self._response(item) for item in items))
        frames = [frame for frame in answers if frame is not None]
        if frames:
            self._send(b"[" + b",".join(frames) + b"]")
        for item in items:
            if isinstance(item, jsonrpc.Request) and item.method == "barnraise.auth" and \
                    self.slot is not None:
                self._replay(item.params)

    async def _response(self, item: jsonrpc.Request | RpcError) -> bytes | None:
        """One request's answer frame (None for a notification), faults counted."""
        if isinstance(item, RpcError):
            self.counters.add(jsonrpc.COUNTER.get(item.code, "refused"))
            return jsonrpc.error(item.id, item.code, item.message, item.data)
        try:
            result = await self._dispatch(item)
        except RpcError as exc:
            if not exc.counted:
                self.counters.add(jsonrpc.COUNTER.get(exc.code, "refused"))
            return None if item.notification else jsonrpc.error(item.id, exc.code,
                                                                 exc.message, exc.data)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.counters.add("internal_error")
            return None if item.notification else jsonrpc.error(
                item.id, jsonrpc.INTERNAL_ERROR, f"internal error: {exc!r}")
        return None if item.notification else jsonrpc.success(item.id, result)

    def _reply(self, request: jsonrpc.Request, future: asyncio.Future[dict[str, Any]]) -> None:
        if request.notification or future.cancelled():
            return
        try:
            frame = jsonrpc.success(request.id, future.result())
        except Exception as exc:  # a result that will not encode: a bug, counted
            self._fault(RpcError(jsonrpc.INTERNAL_ERROR, f"internal error: {exc!r}",
                                 id=request.id))
            return
        self._send(frame)

    def _fault(self, exc: RpcError) -> None:
        if not exc.counted:
            self.counters.add(jsonrpc.COUNTER.get(exc.code, "refused"))
        self._send(jsonrpc.error(exc.id, exc.code, exc.message, exc.data))

    async def _answer(self, request: jsonrpc.Request) -> None:
        try:
            result = await self._dispatch(request)
        except RpcError as exc:
            exc.id = request.id
            if request.notification:
                if not exc.counted:
                    self.counters.add(jsonrpc.COUNTER.get(exc.code, "refused"))
            else:
                self._fault(exc)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fault(RpcError(jsonrpc.INTERNAL_ERROR, f"internal error: {exc!r}",
                                 id=request.id))
            return
        if not request.notification:
            self._send(jsonrpc.success(request.id, result))
            if request.method == "barnraise.auth":
                self._replay(request.params)

    async def _dispatch(self, request: jsonrpc.Request) -> Any:
        method, params = request.method, request.params
        tool = TOOLS.get(method)
        if tool is not None:
            try:
                if method not in self.hub.disabled:
                    validate(tool, params)
            except ToolError as exc:
                raise RpcError(jsonrpc.INVALID_PARAMS, str(exc), exc.result()) from None
            slot = self.slot
            if slot is None:
                if method not in _JOINING:
                    raise RpcError(jsonrpc.UNAUTHENTICATED, f"{method}: no agent yet; call "
                                   "session_join (or barnraise.auth with a token) first")
                try:
                    slot = self._become(self.hub.new_slot())
                except Refused as exc:
                    self.counters.add(exc.reason)
                    raise RpcError(jsonrpc.FORBIDDEN, str(exc), {"reason": exc.reason},
                                   counted=True) from None
            # Shielded: a retry of the same call may still want its answer.
            future = self._start(slot, request)
            try:
                return await asyncio.shield(future)
            finally:
                self.calls.discard(future)
        if method == "barnraise.auth":
            return self._auth(params)
        if method == "barnraise.ack":
            seq = params.get("seq")
            if type(seq) is not int:
                raise RpcError(jsonrpc.INVALID_PARAMS, "seq must be an integer")
            return {"kept": self.hub.ack(self._agent(), seq)}
        if method == "barnraise.send":
            return await self._send_signed(params)
        raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"no method {method!r}: a tool name "
                       "(see the agent card) or barnraise.auth / .ack / .send")

    def _agent(self) -> AgentSlot:
        if self.slot is None:
            raise RpcError(jsonrpc.UNAUTHENTICATED, "no agent yet: session_join or "
                           "barnraise.auth first")
        return self.slot

    def _become(self, slot: AgentSlot) -> AgentSlot:
        self.slot = slot
        self.hub.attach(slot, self._deliver, self.close_soon)
        return slot

    def _auth(self, params: dict[str, Any]) -> dict[str, Any]:
        last = params.get("last_seq", 0)
        if type(last) is not int:
            raise RpcError(jsonrpc.INVALID_PARAMS, "last_seq must be an integer")
        try:
            slot = self.hub.slot_for_token(params.get("token"))
        except Refused as exc:
            self.counters.add(exc.reason)
            raise RpcError(jsonrpc.UNAUTHENTICATED, str(exc), counted=True) from None
        if self.slot is not None and self.slot is not slot:
            self.counters.add("wrong_agent")
            raise RpcError(jsonrpc.FORBIDDEN, f"this connection is {self.slot.agent_id}; "
                           "it cannot become another agent", {"reason": "wrong_agent"},
                           counted=True)
        self._become(slot)
        self.hub.ack(slot, last)
        return {"agent_id": slot.agent_id, "session_id": slot.session_id, "seq": slot.seq,
                "subscriptions": list(self.hub.bounds.held_subscriptions(slot)),
                "now": self.hub.simulation.now, "time_scale": self.hub.time_scale}

    def _replay(self, params: dict[str, Any]) -> None:
        # After the auth answer: every kept message the client has not seen, in
        # order, at the pace the client reads (a backlog can be far larger than
        # the send queue); live deliveries wait for it (see _deliver).
        self._replaying = True
        task = asyncio.create_task(self._replay_from(int(params.get("last_seq", 0))))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)  # not a request: no load

    async def _replay_from(self, after: int) -> None:
        assert self.slot is not None
        sent = after
        try:
            while self.closing is None:
                backlog = self.hub.unacked(self.slot, sent)
                if not backlog:
                    break
                for seq, message in backlog:
                    try:
                        await asyncio.wait_for(self.queue.put(self._frame(seq, message)),
                                               REPLAY_PATIENCE)
                    except TimeoutError:
                        self.counters.add("slow_consumer")
                        self._slow = True
                        self.close_soon("slow consumer: the backlog is not being read")
                        return
                    sent = seq
        finally:
            self._replaying = False
            self._sent = max(self._sent, sent)

    async def _send_signed(self, params: dict[str, Any]) -> dict[str, Any]:
        slot = self._agent()
        wire = params.get("message")
        if isinstance(wire, dict):
            data = jsonrpc.dumps(wire)
        elif isinstance(wire, str):
            jsonrpc.check_depth(wire)  # JSON in a string: the frame's own check did not see it
            data = wire.encode()
        else:
            raise RpcError(jsonrpc.INVALID_PARAMS, "message must be a barnraise Message "
                           "in its JSON wire form (an object or a string)")
        try:
            return await self.hub.signed.send(slot, data)
        except Refused as exc:
            # Counted by the hub under its reason; the answer names it.
            raise RpcError(jsonrpc.FORBIDDEN, f"{exc.reason}: {exc}",
                           {"reason": exc.reason}, counted=True) from None
