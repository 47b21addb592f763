"""MCP: the tool table as MCP tools, over stdio (``barnraise mcp``) or streamable HTTP (``/mcp``).

Built on the official ``mcp`` SDK's low-level server: ``tools/list`` gives every
tool of :data:`barnraise.sim.tools.TOOLS` with its JSON input schema, ``tools/call`` calls
it through the hub (so as a Client would) and returns the result dict as
structured content, with the same dict as JSON text for clients that read
text only; a failure result is flagged ``isError``.

Beside the tools (docs/gateway.md, "What MCP shows besides the tools"): each session's
canvas, state and events as resources (:mod:`.mcp_resources`; a member reads its own
session's, the operator every one's), ``resources/subscribe`` with updates at most once
a second a subscription, a brief a role as prompts (:mod:`.mcp_prompts`), progress
notifications while ``a2a_barrier_enter`` or ``a2a_lock_acquire`` waits,
``logging/setLevel`` (a failed call is then a ``warning``), and completion of session
ids and tool names.

Who calls: an MCP client acts as one agent. Over stdio the process serves one
client, so that client is the agent. Over HTTP, ``Authorization: Bearer
TOKEN`` names the agent; without it, a stateful MCP session (its
``mcp-session-id``) is the agent once it has called ``session_join``. In
every case, until the client has joined (or created) a session only those two
tools can be called; their result carries the token.

Over stdio, :func:`serve_stdio` frames the lines itself and answers every one:
a line that is not JSON or not UTF-8 gets -32700, one that is not a JSON-RPC
message object (``[]``, ``null``, ``3``) or nests deeper than
:data:`~barnraise.gateway.jsonrpc.MAX_DEPTH` gets -32600, and a line over the
frame limit (``Limits.max_frame``) gets -32600 without being held in memory:
stdin is read in chunks and an over-long line is dropped up to its newline.
Each refusal is also one line on stderr.

A line that is empty or holds only JSON whitespace (space, tab, a CR before
the newline) is skipped, without an answer or a log line, by design: the MCP
stdio transport is newline-delimited JSON-RPC messages, and such a line holds
no message. An answer to it could only carry ``"id": null``, which matches no
request a client made, so a client (the SDK's among them) would have to treat
it as a stray; a peer that writes ``\n\n`` or ``\r\n`` between messages is
speaking the transport, not erring. Any other byte makes a line a message to
answer (a form feed alone is -32700). Line numbers in the log count every line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, Final

import anyio
import mcp_types as types
import pydantic
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from barnraise.gateway import jsonrpc, mcp_prompts
from barnraise.gateway.hub import AgentSlot, Hub, Refused
from barnraise.gateway.jsonrpc import RpcError
from barnraise.gateway.mcp_resources import KINDS, PREFIX, Feeds, Subscriptions, parse_uri
from barnraise.gateway.ws import bearer_token
from barnraise.sim.tools import TOOLS, fail

__all__ = ["McpSurface", "read_lines", "serve_stdio"]

#: Bytes read from stdin at a time.
CHUNK: Final = 1 << 16

_JOINING = frozenset({"session_create", "session_join"})
#: The tools that wait (a barrier, a lock): a progress notification each
#: :data:`PROGRESS_EVERY` wall seconds while they do, to a client that sent a progressToken.
WAITING: Final = frozenset({"a2a_barrier_enter", "a2a_lock_acquire"})
PROGRESS_EVERY: Final = 1.0
#: MCP's code for a resource that is not there (or not the caller's to read).
RESOURCE_NOT_FOUND: Final = -32002
#: The levels of ``logging/setLevel``, least severe first (RFC 5424's, as MCP has them).
LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert",
                 "emergency")
#: Completion values one answer holds at most (MCP's own bound).
MAX_COMPLETIONS: Final = 100


def _tools(disabled: Collection[str] = ()) -> list[types.Tool]:
    return [types.Tool(name=tool.name, description=tool.description,
                       input_schema=json.loads(json.dumps(tool.input_schema)))
            for tool in TOOLS.values() if tool.name not in disabled]


class _Who:
    """The caller of a request: the operator (reads every session), or an agent."""

    __slots__ = ("everything", "slot")

    def __init__(self, everything: bool, slot: AgentSlot | None) -> None:
        self.everything = everything
        self.slot = slot

    @property
    def session_id(self) -> str | None:
        return None if self.slot is None else self.slot.session_id


class McpSurface:
    """An MCP low-level server over a hub. ``single_agent``: stdio's one client.

    ``operator(peer, authorization)``: whether the request's peer address and
    ``Authorization`` header are the operator's, who reads every session's resources
    (over stdio the one client is: it started the world)."""

    def __init__(self, hub: Hub, *, version: str, single_agent: bool = False,
                 operator: Callable[[str | None, str | None], bool] | None = None) -> None:
        self.hub = hub
        self.single_agent = single_agent
        self.operator = operator or (lambda _peer, _authorization: single_agent)
        self._only: AgentSlot | None = None
        self._by_session: dict[str, AgentSlot] = {}
        self._tool_list = _tools(hub.disabled)  # a disabled tool is called, and refused
        self.feeds = Feeds(hub.simulation)
        self.subscriptions = Subscriptions(self.feeds)
        #: ``logging/setLevel``'s level by client (MCP session id; ``stdio``).
        self._log_levels: dict[str, int] = {}
        self.server: Server[Any] = Server(
            "barnraise", version=version,
            instructions="Tools of a barnraise build session. Call session_join first "
                         "(its result has your token); every result is a dict with "
                         "'success'. The prompts brief each role; the resources "
                         f"{PREFIX}ID/canvas.png, /state and /events show a session.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe, on_unsubscribe_resource=self._unsubscribe,
            on_list_prompts=self._list_prompts, on_get_prompt=self._get_prompt,
            on_completion=self._complete)
        # The logging capability is deprecated from protocol 2026-07-28 (SEP-2577), so the
        # SDK warns when it is passed to the constructor; it is served for the clients of
        # the handshake protocols, which this server speaks, through the SDK's own
        # registration (docs/gateway.md).
        self.server.add_request_handler("logging/setLevel", types.SetLevelRequestParams,
                                        self._set_level)

    def close(self) -> None:
        self.subscriptions.close()
        self.feeds.close()

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tool_list)

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            call = self._call(ctx, params.name, dict(params.arguments or {}))
            if params.name in WAITING:  # (a no-op for a client that sent no progressToken)
                result = await self._with_progress(ctx, params.name, call)
            else:
                result = await call
        except Exception as exc:  # a bug here must not end the MCP session
            self.hub.counters.add("internal_error")
            result = fail("no_reply", f"internal error in the gateway: {exc!r}")
        if not result.get("success", False):
            await self._log(ctx, "warning", {"tool": params.name,
                                             "error": result.get("error"),
                                             "message": result.get("message")})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))],
            structured_content=result, is_error=not result.get("success", False))

    async def _with_progress(self, ctx: ServerRequestContext[Any], name: str,
                             call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        """``call``'s result, with ``notifications/progress`` (seconds waited so far)
        at its start and each :data:`PROGRESS_EVERY` wall seconds until it is answered."""
        task = asyncio.ensure_future(call)
        started = anyio.current_time()
        try:
            while True:
                waited = anyio.current_time() - started
                await ctx.session.report_progress(round(waited, 3), None,
                                                  f"{name}: waiting ({waited:.0f} s)")
                done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY)
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()

    def _client_key(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The client a request comes from: its MCP session id (``stdio`` over stdio)."""
        if self.single_agent:
            return "stdio"
        headers = getattr(ctx.request, "headers", None)
        return headers.get("mcp-session-id") if headers is not None else None

    def _slot(self, ctx: ServerRequestContext[Any]) -> tuple[AgentSlot | None, str | None]:
        """The agent a request speaks for (None: none yet), or the refusal of its token."""
        headers = getattr(ctx.request, "headers", None)
        token = bearer_token(headers.get("authorization")) if headers is not None else None
        session_key = headers.get("mcp-session-id") if headers is not None else None
        if token is not None:
            try:
                return self.hub.slot_for_token(token), None
            except Refused as exc:
                self.hub.counters.add(exc.reason)
                return None, str(exc)
        if self.single_agent:
            return self._only, None
        slot = self._by_session.get(session_key) if session_key else None
        if session_key and slot is not None and self.hub.slots.get(slot.agent_id) is not slot:
            del self._by_session[session_key]  # it expired (hub.py, liveness)
            slot = None
        return slot, None

    def _who(self, ctx: ServerRequestContext[Any]) -> _Who:
        """Who asks to read: the operator, or the agent the request speaks for (if any)."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        authorization = headers.get("authorization") if headers is not None else None
        client = getattr(request, "client", None)
        peer = client.host if client is not None else None
        if self.operator(peer, authorization):
            return _Who(True, None)
        slot, _refused = self._slot(ctx)
        return _Who(False, slot)

    async def _call(self, ctx: ServerRequestContext[Any], name: str,
                    arguments: dict[str, Any]) -> dict[str, Any]:
        headers = getattr(ctx.request, "headers", None)
        session_key = headers.get("mcp-session-id") if headers is not None else None
        slot, refused = self._slot(ctx)
        if refused is not None:
            return fail("invalid_token", refused)
        if slot is None:
            if name not in _JOINING:
                self.hub.counters.add("unauthenticated")
                return fail("not_a_member", f"{name}: call session_join first (or send "
                            "Authorization: Bearer with the token it returned)")
            try:
                slot = self.hub.new_slot()
            except Refused as exc:
                self.hub.counters.add(exc.reason)
                return fail("session_full", str(exc))
            if self.single_agent:
                self._only = slot
            elif session_key:
                self._prune_sessions()
                self._by_session[session_key] = slot
        try:
            return await self.hub.call(slot, name, arguments)
        finally:
            if not self.single_agent and self.hub.forget(slot) and session_key:
                self._by_session.pop(session_key, None)  # a failed join leaves nothing


    def _prune_sessions(self) -> None:
        """Forget the MCP sessions whose agent the hub no longer holds (expired, or
        dropped after a failed join): their ids are seldom used again, so without this
        the map grew by one entry a session for as long as the server ran. Done when it
        holds twice as many entries as the hub has agents, so it stays within that
        bound at a cost of one pass per doubling."""
        slots = self.hub.slots
        if len(self._by_session) < 2 * len(slots) + 16:
            return
        self._by_session = {key: slot for key, slot in self._by_session.items()
                            if slots.get(slot.agent_id) is slot}


    # -- resources, prompts, completion, logging ------------------------------------------

    def _readable(self, who: _Who, sessions: list[str]) -> list[str]:
        return sessions if who.everything else [s for s in sessions if s == who.session_id]

    def _refuse_read(self, who: _Who, uri: str, session_id: str) -> None:
        if who.everything or (who.session_id is not None and who.session_id == session_id):
            return
        self.hub.counters.add("mcp_resource_refused")
        raise MCPError(RESOURCE_NOT_FOUND, f"{uri}: only the members of session "
                       f"{session_id!r} and the operator may read its resources"
                       + ("" if who.slot is not None else " (join it first, or send "
                          "Authorization: Bearer with your token)"))

    async def _list_resources(self, ctx: ServerRequestContext[Any],
                              params: types.PaginatedRequestParams | None
                              ) -> types.ListResourcesResult:
        who = self._who(ctx)
        sessions = self._readable(who, await anyio.to_thread.run_sync(self.feeds.sessions))
        start = _cursor(params.cursor if params is not None else None, len(sessions))
        page = sessions[start:start + SESSIONS_A_PAGE]
        resources = [types.Resource(name=f"{sid}/{kind}", uri=f"{PREFIX}{sid}/{kind}",
                                    mime_type=mime, description=_DESCRIBE[kind])
                     for sid in page for kind, mime in KINDS.items()]
        more = start + SESSIONS_A_PAGE < len(sessions)
        return types.ListResourcesResult(
            resources=resources, next_cursor=str(start + SESSIONS_A_PAGE) if more else None)

    async def _list_templates(self, ctx: ServerRequestContext[Any],
                              params: types.PaginatedRequestParams | None
                              ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=kind, uri_template=f"{PREFIX}{{id}}/{kind}",
                                   mime_type=mime, description=_DESCRIBE[kind])
            for kind, mime in KINDS.items()])

    async def _read_resource(self, ctx: ServerRequestContext[Any],
                             params: types.ReadResourceRequestParams
                             ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            session_id, kind = parse_uri(uri)
        except ValueError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc)) from None
        self._refuse_read(self._who(ctx), uri, session_id)
        try:
            data = await anyio.to_thread.run_sync(self.feeds.read, session_id, kind)
        except LookupError:
            raise MCPError(RESOURCE_NOT_FOUND, f"{uri}: no open session {session_id!r}") \
                from None
        content: types.TextResourceContents | types.BlobResourceContents
        if kind == "canvas.png":
            content = types.BlobResourceContents(uri=uri, mime_type=KINDS[kind],
                                                 blob=base64.b64encode(data).decode())
        else:
            content = types.TextResourceContents(uri=uri, mime_type=KINDS[kind],
                                                 text=data.decode())
        return types.ReadResourceResult(contents=[content])

    async def _subscribe(self, ctx: ServerRequestContext[Any],
                         params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        try:
            session_id, _kind = parse_uri(uri)
        except ValueError as exc:
            raise MCPError(RESOURCE_NOT_FOUND, str(exc)) from None
        who = self._who(ctx)
        self._refuse_read(who, uri, session_id)
        client = self._client_key(ctx)
        if client is None:
            raise MCPError(jsonrpc.INVALID_REQUEST, "resources/subscribe needs an MCP "
                           "session (the mcp-session-id header) to send updates on")
        slot, session = who.slot, ctx.session

        def still_allowed() -> bool:
            return slot is None or (self.hub.slots.get(slot.agent_id) is slot
                                    and slot.session_id == session_id)

        async def send(changed: str) -> None:
            await session.send_resource_updated(changed)

        try:
            await self.subscriptions.add(client, uri, send, still_allowed,
                                         owner=None if slot is None else slot.agent_id)
        except ValueError as exc:
            self.hub.counters.add("mcp_subscriptions_full")
            raise MCPError(jsonrpc.INVALID_REQUEST, f"resources/subscribe {uri}: {exc}") \
                from None
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any],
                           params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        client = self._client_key(ctx)
        if client is not None:
            self.subscriptions.remove(client, str(params.uri))
        return types.EmptyResult()

    async def _list_prompts(self, ctx: ServerRequestContext[Any],
                            params: types.PaginatedRequestParams | None
                            ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=mcp_prompts.list_prompts())

    async def _get_prompt(self, ctx: ServerRequestContext[Any],
                          params: types.GetPromptRequestParams) -> types.GetPromptResult:
        try:
            return mcp_prompts.get_prompt(params.name, dict(params.arguments or {}))
        except ValueError as exc:
            raise MCPError(jsonrpc.INVALID_PARAMS, str(exc)) from None

    async def _complete(self, ctx: ServerRequestContext[Any],
                        params: types.CompleteRequestParams) -> types.CompleteResult:
        """Session ids (a resource template's ``id``, a role prompt's ``session_id``:
        those the caller may read) and tool names (the ``tool`` prompt's ``name``)."""
        ref, argument = params.ref, params.argument
        choices: list[str] = []
        if isinstance(ref, types.PromptReference) and ref.name == "tool" \
                and argument.name == "name":
            choices = list(TOOLS)
        elif (isinstance(ref, types.ResourceTemplateReference) and argument.name == "id"
              and ref.uri.startswith(PREFIX)) or (
                isinstance(ref, types.PromptReference) and ref.name in mcp_prompts.BRIEFS
                and argument.name == "session_id"):
            choices = self._readable(self._who(ctx),
                                     await anyio.to_thread.run_sync(self.feeds.sessions))
        found = [c for c in choices if c.startswith(argument.value)]
        return types.CompleteResult(completion=types.Completion(
            values=found[:MAX_COMPLETIONS], total=len(found),
            has_more=len(found) > MAX_COMPLETIONS))

    async def _set_level(self, ctx: ServerRequestContext[Any],
                         params: types.SetLevelRequestParams) -> types.EmptyResult:
        client = self._client_key(ctx)
        if client is None:
            raise MCPError(jsonrpc.INVALID_REQUEST, "logging/setLevel needs an MCP session "
                           "(the mcp-session-id header) to keep the level for")
        if client not in self._log_levels and len(self._log_levels) >= MAX_LOG_CLIENTS:
            self._log_levels.pop(next(iter(self._log_levels)))  # the oldest setting goes
        self._log_levels[client] = LEVELS.index(params.level)
        return types.EmptyResult()

    async def _log(self, ctx: ServerRequestContext[Any], level: types.LoggingLevel,
                   data: Any) -> None:
        """A ``notifications/message`` on the request's stream, to a client that set a
        level at or below ``level`` (none before ``logging/setLevel``)."""
        client = self._client_key(ctx)
        wanted = self._log_levels.get(client) if client is not None else None
        if wanted is None or LEVELS.index(level) < wanted:
            return
        with contextlib.suppress(Exception):  # a client gone mid-call misses its log line
            await ctx.session.send_notification(
                types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams(
                    level=level, data=data, logger="barnraise")),
                related_request_id=ctx.request_id)


#: Sessions a page of ``resources/list`` covers (three resources each).
SESSIONS_A_PAGE: Final = 100
#: Clients whose ``logging/setLevel`` is kept (the oldest setting goes past it).
MAX_LOG_CLIENTS: Final = 4096
_DESCRIBE: Final = {
    "canvas.png": "The session's canvas: one pixel a cell, in the live view's colours",
    "state": "The session, its members, claims, task counts, progress, locks and barriers "
             "(JSON)",
    "events": "The session's last 100 domain events, oldest first (JSON)",
}


def _cursor(cursor: str | None, total: int) -> int:
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > total:
        raise MCPError(jsonrpc.INVALID_PARAMS, f"cursor {cursor!r}: not one this server gave")
    return int(cursor)


async def read_lines(read: Callable[[], Awaitable[bytes]],
                     limit: int) -> AsyncIterator[bytes | int]:
    """The lines of a byte stream read in chunks by ``read`` (``b""`` at its end),
    without their newline: each line of at most ``limit`` bytes as bytes, and for a
    longer one its length (an int), dropped as it is read. Memory: ``limit`` + a chunk."""
    held = bytearray()
    dropped = 0  # bytes of the over-long line being dropped (0: none)
    while chunk := await read():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if dropped:
                dropped += len(piece)
            elif len(held) + len(piece) > limit:
                dropped = len(held) + len(piece)
                held.clear()
            else:
                held += piece
            if end < 0:
                break
            if dropped:
                yield dropped
                dropped = 0
            else:
                yield bytes(held)
                held.clear()
            start = end + 1
    if dropped:
        yield dropped
    elif held:
        yield bytes(held)


#: What may surround a JSON text (RFC 8259), and all a skipped stdio line may hold.
JSON_WHITESPACE: Final = b" \t\r\n"


def _admit(line: bytes) -> types.JSONRPCMessage:
    """The MCP message a line holds; :class:`RpcError` (-32700, -32600) if none."""
    body = jsonrpc.loads(line)
    if not isinstance(body, dict):
        raise RpcError(jsonrpc.INVALID_REQUEST, "a message is a JSON-RPC object, got "
                       f"{'null' if body is None else type(body).__name__}")
    raw_id = body.get("id")
    request_id = raw_id if type(raw_id) in (str, int) else None
    try:
        return types.jsonrpc_message_adapter.validate_python(body, by_name=False)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "the message"
        raise RpcError(jsonrpc.INVALID_REQUEST, f"not a JSON-RPC 2.0 message: {where}: "
                       f"{first['msg']}", id=request_id) from None


async def serve_stdio(surface: McpSurface, stdin_fd: int, stdout_fd: int, *, limit: int,
                      log: Callable[[str], None]) -> None:
    """Serve ``surface`` over two file descriptors, one JSON-RPC message a line,
    until stdin ends; refusals as the module doc says, each logged with ``log``."""
    to_server_send, to_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_client, to_client_receive = anyio.create_memory_object_stream[SessionMessage | bytes](16)
    refusals = to_client.clone()

    async def read() -> bytes:
        return await anyio.to_thread.run_sync(os.read, stdin_fd, CHUNK, abandon_on_cancel=True)

    async def reader() -> None:
        number = 0
        async with to_server_send, refusals:
            async for line in read_lines(read, limit):
                number += 1
                try:
                    if isinstance(line, int):
                        raise RpcError(jsonrpc.INVALID_REQUEST, f"a line of {line} bytes is "
                                       f"over the frame limit of {limit} (Limits.max_frame)")
                    if not line.strip(JSON_WHITESPACE):
                        continue  # no message: nothing to answer (see the module doc)
                    message = _admit(line)
                except RpcError as exc:
                    surface.hub.counters.add(jsonrpc.COUNTER[exc.code])
                    log(f"barnraise mcp: line {number} refused ({exc.code}): {exc.message}")
                    await refusals.send(jsonrpc.error(exc.id, exc.code, exc.message))
                    continue
                await to_server_send.send(SessionMessage(message))

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(stdout_fd, view):]

    async def writer() -> None:
        async with to_client_receive:
            async for item in to_client_receive:
                if isinstance(item, SessionMessage):
                    item = item.message.model_dump_json(by_alias=True,
                                                        exclude_unset=True).encode()
                await anyio.to_thread.run_sync(write, item + b"\n")

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        async with to_client:
            await surface.server.run(to_server, to_client,
                                     surface.server.create_initialization_options())
        # stdin has ended: the writer ends once what is queued for the client is out.
