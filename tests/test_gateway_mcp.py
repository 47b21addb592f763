"""MCP with the official SDK's own client: over stdio (a `barnraise mcp` subprocess) and HTTP."""

from __future__ import annotations

import asyncio
import base64
import struct
import sys
from collections.abc import Coroutine
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from barnraise.sim.tools import TOOLS
from tests.gateway_support import counters, served


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 90))


async def structured(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    data = result.structured_content
    assert isinstance(data, dict), result
    assert result.is_error == (not data["success"])
    return data


def test_stdio_lists_every_tool_with_its_schema_and_calls_them_as_one_agent() -> None:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "barnraise.cli", "mcp", "--time-scale", "20"])

    async def scenario() -> None:
        async with Client(server) as client:
            listed = await client.list_tools()
            by_name = {tool.name: tool for tool in listed.tools}
            assert set(by_name) == set(TOOLS)
            for name, tool in TOOLS.items():
                assert by_name[name].input_schema == tool.input_schema
                assert by_name[name].description == tool.description

            early = await structured(client, "region_query",
                                     region={"x": 0, "y": 0, "width": 2, "height": 2})
            assert early["error"] == "not_a_member"
            made = await structured(client, "session_create", session_name="Over stdio",
                                    grid_size=50)
            assert made["success"] and made["token"]
            # the one client started the world: it reads every session's resources
            canvas = f"barnraise://session/{made['session_id']}/canvas.png"
            assert canvas in {r.uri for r in (await client.list_resources()).resources}
            [content] = (await client.read_resource(canvas)).contents
            assert isinstance(content, types.BlobResourceContents)
            png = base64.b64decode(content.blob)
            assert png[:8] == b"\x89PNG\r\n\x1a\n"
            assert struct.unpack(">II", png[16:24]) == (50, 50)  # IHDR: width, height
            joined = await structured(client, "session_join", session_id=made["session_id"],
                                      agent_name="Claude", role="architect")
            assert joined["agent_id"] == made["agent_id"]  # the one client is one agent
            claim = await structured(client, "region_claim",
                                     region={"x": 0, "y": 0, "width": 5, "height": 5})
            assert claim["success"] and claim["agent_id"] == joined["agent_id"]
            placed = await structured(client, "builder_place_tiles",
                                      region={"x": 0, "y": 0, "width": 5, "height": 5},
                                      tiles="code")
            assert placed["tiles_placed"] == 25
            refused = await structured(client, "region_claim", region={"x": 48, "y": 48,
                                                                       "width": 5, "height": 5})
            assert refused["error"] == "out_of_bounds"

    run(scenario())


def test_http_at_mcp_with_a_session_and_with_the_bearer_token() -> None:
    with served() as server:
        url = server.url + "/mcp"
        session = server.gateway.world.default_session

        async def scenario() -> None:
            async with Client(url, mode="legacy") as first:
                joined = await structured(first, "session_join", session_id=session,
                                          agent_name="Claude", role="builder")
                assert joined["success"]
                # the MCP session is the agent from now on
                claim = await structured(first, "region_claim",
                                         region={"x": 0, "y": 0, "width": 4, "height": 4})
                assert claim["agent_id"] == joined["agent_id"]
                listed = await first.list_tools()
                assert len(listed.tools) == len(TOOLS)
            headers = {"Authorization": f"Bearer {joined['token']}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    Client(streamable_http_client(url, http_client=http)) as again:
                query = await structured(again, "region_query",
                                         region={"x": 0, "y": 0, "width": 4, "height": 4})
                [held] = query["claims"]
                assert held["agent_id"] == joined["agent_id"]
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer forged"},
                                          timeout=30) as http, \
                    Client(streamable_http_client(url, http_client=http)) as forged:
                refused = await structured(forged, "region_query",
                                           region={"x": 0, "y": 0, "width": 4, "height": 4})
                assert refused["error"] == "invalid_token"
            async with Client(url) as stranger:
                refused = await structured(stranger, "region_query",
                                           region={"x": 0, "y": 0, "width": 4, "height": 4})
                assert refused["error"] == "not_a_member"

        run(scenario())
        found = counters(server)
        assert found["invalid_token"] == 1 and found["unauthenticated"] == 1


def test_the_mcp_sessions_of_agents_gone_are_forgotten() -> None:
    """The map from MCP session id to agent drops the sessions whose agent the hub no
    longer holds once it outgrows the hub's agents: with agents expiring, it used to
    grow by one entry a session for as long as the server ran."""
    with served() as server:
        surface, hub = server.gateway.mcp, server.gateway.hub

        async def slots() -> tuple[Any, Any]:
            return hub.new_slot(), hub.new_slot()

        live, gone = asyncio.run_coroutine_threadsafe(slots(), hub.loop).result(10)
        assert asyncio.run_coroutine_threadsafe(_forget(hub, gone), hub.loop).result(10)
        surface._by_session = {f"old-{n}": gone for n in range(100)}
        surface._by_session["mine"] = live
        surface._prune_sessions()
        assert surface._by_session == {"mine": live}


async def _forget(hub: Any, slot: Any) -> bool:
    return bool(hub.forget(slot))
