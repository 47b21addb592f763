"""The agent card: A2A 1.0 by the SDK's own types, generated from the tool table."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
from a2a.client import A2ACardResolver
from a2a.types import AgentCard
from google.protobuf.json_format import ParseDict

from barnraise.gateway.card import CARD_PATHS, agent_card, tool_groups
from barnraise.sim.tools import TOOLS, Tool
from tests.gateway_support import get_json, served


def test_the_card_is_an_a2a_1_0_agent_card_by_the_sdk_types() -> None:
    card = agent_card("http://127.0.0.1:9", version="1.2.3")
    parsed = ParseDict(card, AgentCard())  # strict: an unknown field would raise
    assert parsed.name == "barnraise" and parsed.version == "1.2.3"
    assert parsed.capabilities.streaming
    [jsonrpc] = [i for i in parsed.supported_interfaces if i.protocol_binding == "JSONRPC"]
    assert jsonrpc.url == "http://127.0.0.1:9/a2a/jsonrpc" and jsonrpc.protocol_version == "1.0"
    bearer = parsed.security_schemes["bearer"].http_auth_security_scheme
    assert bearer.scheme == "Bearer"
    assert list(parsed.default_input_modes) == ["text/plain", "application/json"]


def test_every_tool_is_in_exactly_one_skill_and_tagged() -> None:
    card = agent_card("http://h:1", version="0")
    tagged = [name for skill in card["skills"] for name in skill["tags"] if name in TOOLS]
    assert sorted(tagged) == sorted(TOOLS)
    assert {s["id"] for s in card["skills"]} == set(tool_groups())
    for skill in card["skills"]:
        for name in skill["tags"]:
            if name in TOOLS:
                assert TOOLS[name].description in skill["description"]


def test_a_tool_added_to_the_table_appears_on_the_card() -> None:
    base = TOOLS["region_query"]
    extra = dataclasses.replace(base, name="region_paint", description="Paint a region.")
    novel = Tool("telescope_point", "regions", "Point the telescope.",
                 {"type": "object", "properties": {}, "required": []})
    table = {**TOOLS, extra.name: extra, novel.name: novel}
    card = agent_card("http://h:1", version="0", tools=table)
    skills = {s["id"]: s for s in card["skills"]}
    assert "region_paint" in skills["region"]["tags"]
    assert "Paint a region." in skills["region"]["description"]
    assert "telescope_point" in skills["telescope"]["tags"]  # a new group, a new skill
    assert "telescope" not in {s["id"] for s in agent_card("http://h:1", version="0")["skills"]}


def test_the_server_serves_the_card_at_both_names_and_the_sdk_resolves_it() -> None:
    with served() as server:
        first, second = (get_json(server.url + path) for path in CARD_PATHS)
        assert first == second
        assert first["supportedInterfaces"][0]["url"] == server.url + "/a2a/jsonrpc"

        async def resolve() -> AgentCard:
            async with httpx.AsyncClient(timeout=10) as http:
                return await A2ACardResolver(http, server.url).get_agent_card()

        card = asyncio.run(resolve())
        assert {skill.id for skill in card.skills} == set(tool_groups())
