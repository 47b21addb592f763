"""MCP: the tool table as MCP tools, over stdio (``barnraise mcp``) or streamable HTTP (``/mcp``).

Built on the official ``mcp`` SDK's low-level server: ``tools/list`` gives every
tool of :data:`barnraise.sim.tools.TOOLS` with its JSON input schema, ``tools/call`` calls
it through the hub (so as a Client would) and returns the result dict as
structured content, with the same dict as JSON text for clients that read
text only; a failure result is flagged ``isError``.

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

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, Final

import anyio
import mcp_types as types
import pydantic
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.message import SessionMessage

from barnraise.gateway import jsonrpc
from barnraise.gateway.hub import AgentSlot, Hub, Refused
from barnraise.gateway.jsonrpc import RpcError
from barnraise.gateway.ws import bearer_token
from barnraise.sim.tools import TOOLS, fail

__all__ = ["McpSurface", "read_lines", "serve_stdio"]

#: Bytes read from stdin at a time.
CHUNK: Final = 1 << 16

_JOINING = frozenset({"session_create", "session_join"})


def _tools(disabled: Collection[str] = ()) -> list[types.Tool]:
    return [types.Tool(name=tool.name, description=tool.description,
                       input_schema=json.loads(json.dumps(tool.input_schema)))
            for tool in TOOLS.values() if tool.name not in disabled]


class McpSurface:
    """An MCP low-level server over a hub. ``single_agent``: stdio's one client."""

    def __init__(self, hub: Hub, *, version: str, single_agent: bool = False) -> None:
        self.hub = hub
        self.single_agent = single_agent
        self._only: AgentSlot | None = None
        self._by_session: dict[str, AgentSlot] = {}
        self._tool_list = _tools(hub.disabled)  # a disabled tool is called, and refused
        self.server: Server[Any] = Server(
            "barnraise", version=version,
            instructions="Tools of a barnraise build session. Call session_join first "
                         "(its result has your token); every result is a dict with "
                         "'success'.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool)

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tool_list)

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await self._call(ctx, params.name, dict(params.arguments or {}))
        except Exception as exc:  # a bug here must not end the MCP session
            self.hub.counters.add("internal_error")
            result = fail("no_reply", f"internal error in the gateway: {exc!r}")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))],
            structured_content=result, is_error=not result.get("success", False))

    async def _call(self, ctx: ServerRequestContext[Any], name: str,
                    arguments: dict[str, Any]) -> dict[str, Any]:
        headers = getattr(ctx.request, "headers", None)
        token = bearer_token(headers.get("authorization")) if headers is not None else None
        session_key = headers.get("mcp-session-id") if headers is not None else None
        slot: AgentSlot | None
        if token is not None:
            try:
                slot = self.hub.slot_for_token(token)
            except Refused as exc:
                self.hub.counters.add(exc.reason)
                return fail("invalid_token", str(exc))
        elif self.single_agent:
            slot = self._only
        else:
            slot = self._by_session.get(session_key) if session_key else None
            if session_key and slot is not None and self.hub.slots.get(slot.agent_id) is not slot:
                del self._by_session[session_key]  # it expired (hub.py, liveness)
                slot = None
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
