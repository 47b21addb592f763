"""MCP: the tool table as MCP tools, over stdio (``barnraise mcp``) or streamable HTTP (``/mcp``).

Built on the official ``mcp`` SDK's low-level server: ``tools/list`` gives every
tool of :data:`sim.tools.TOOLS` with its JSON input schema, ``tools/call`` calls
it through the hub (so as a Client would) and returns the result dict as
structured content, with the same dict as JSON text for clients that read
text only; a failure result is flagged ``isError``.

Who calls: an MCP client acts as one agent. Over stdio the process serves one
client, so that client is the agent. Over HTTP, ``Authorization: Bearer
TOKEN`` names the agent; without it, a stateful MCP session (its
``mcp-session-id``) is the agent once it has called ``session_join``. In
every case, until the client has joined (or created) a session only those two
tools can be called; their result carries the token.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server

from barnraise.gateway.hub import AgentSlot, Hub, Refused
from barnraise.gateway.ws import bearer_token
from sim.tools import TOOLS, fail

__all__ = ["McpSurface"]

_JOINING = frozenset({"session_create", "session_join"})


def _tools() -> list[types.Tool]:
    return [types.Tool(name=tool.name, description=tool.description,
                       input_schema=json.loads(json.dumps(tool.input_schema)))
            for tool in TOOLS.values()]


class McpSurface:
    """An MCP low-level server over a hub. ``single_agent``: stdio's one client."""

    def __init__(self, hub: Hub, *, version: str, single_agent: bool = False) -> None:
        self.hub = hub
        self.single_agent = single_agent
        self._only: AgentSlot | None = None
        self._by_session: dict[str, AgentSlot] = {}
        self._tool_list = _tools()
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
                self._by_session[session_key] = slot
        try:
            return await self.hub.call(slot, name, arguments)
        finally:
            if not self.single_agent and self.hub.forget(slot) and session_key:
                self._by_session.pop(session_key, None)  # a failed join leaves nothing
