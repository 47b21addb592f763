"""What an operator runs a server with: GET /metrics, and skills taken off with --disable-skill."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Coroutine
from typing import Any

import httpx
import pytest
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from barnraise.cli import main
from barnraise.gateway.card import disabled_tools, tool_groups
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.metrics import BUCKETS, CONTENT_TYPE, OTHER, ToolLatency
from barnraise.gateway.server import Gateway, GatewayServer
from barnraise.sim.tools import TOOLS
from tests.gateway_support import counters, get_json, served

REGION = {"x": 0, "y": 0, "width": 4, "height": 4}
_ids = itertools.count(1)


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 60))


def rpc_call(http: httpx.Client, url: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """One tool call as an A2A SendMessage with a data part, posted to ``url``."""
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "SendMessage", "params": {
        "message": {"messageId": f"ops-{next(_ids)}", "role": "ROLE_USER",
                    "parts": [{"data": {"tool": tool, "arguments": arguments}}]}}}
    answer = http.post(url, json=body)
    assert answer.status_code == 200, answer.text
    message = answer.json()["result"]["message"]
    data = message["parts"][0]["data"]
    assert isinstance(data, dict)
    return data


def metrics(url: str, **headers: str) -> dict[str, Any]:
    """GET /metrics, parsed by prometheus_client's own parser: families by name."""
    answer = httpx.get(url + "/metrics", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == CONTENT_TYPE  # Prometheus's text format
    return {family.name: family for family in text_string_to_metric_families(answer.text)}


def samples(family: Any, name: str, **labels: str) -> list[float]:
    return [s.value for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


# -- /metrics -----------------------------------------------------------------------------

def test_metrics_shows_the_stats_counters_and_each_tools_latency() -> None:
    with served() as server, httpx.Client(timeout=20) as http:
        url = server.url + "/a2a/jsonrpc"
        session = server.gateway.world.default_session
        joined = rpc_call(http, url, "session_join", session_id=session, agent_name="Ada",
                          role="builder")
        assert joined["success"], joined
        http.headers["Authorization"] = f"Bearer {joined['token']}"
        for x in range(3):
            claim = rpc_call(http, url, "region_claim",
                             region={**REGION, "x": 4 * x}, purpose="metrics")
            assert claim["success"], claim
        refused = rpc_call(http, url, "region_claim", region={**REGION, "x": 9999})
        assert refused["error"] == "out_of_bounds"
        # a refusal the edge counts, so the counters have something besides traffic
        assert httpx.get(server.url + "/stats", headers={"Host": "evil.example"}).status_code \
            == 421

        stats = get_json(server.url + "/stats")
        found = metrics(server.url)
        events = found["barnraise_gateway_events"]
        assert events.type == "counter"
        assert stats["counters"]["foreign_host"] == 1
        for name, value in stats["counters"].items():
            assert samples(events, "barnraise_gateway_events_total", counter=name) == [value]
        assert samples(found["barnraise_gateway_agents"], "barnraise_gateway_agents") == [1]
        assert samples(found["barnraise_gateway_sessions"], "barnraise_gateway_sessions") \
            == [len(stats["sessions"])]  # a loopback peer is the operator: /stats in full

        latency = found["barnraise_tool_call_seconds"]
        assert latency.type == "histogram"
        # one series per tool of the table, and "other": a bounded label set
        assert {s.labels["tool"] for s in latency.samples} == {*TOOLS, OTHER}
        count = "barnraise_tool_call_seconds_count"
        assert samples(latency, count, tool="session_join") == [1]
        assert samples(latency, count, tool="region_claim") == [4]  # refusals included
        assert samples(latency, count, tool="build_test") == [0]
        assert samples(latency, count, tool=OTHER) == [0]
        inf = samples(latency, "barnraise_tool_call_seconds_bucket", tool="region_claim",
                      le="+Inf")
        assert inf == [4]
        [total] = samples(latency, "barnraise_tool_call_seconds_sum", tool="region_claim")
        assert 0 < total < 4 * 30


def test_metrics_follows_the_edge_rules_of_stats() -> None:
    with served(operator="op-secret") as server:
        # Counts only, as /stats shows anyone: no token is asked, and no session id shown
        text = httpx.get(server.url + "/metrics", timeout=10).text
        assert str(server.gateway.world.default_session) not in text
        assert "op-secret" not in text
        foreign_host = httpx.get(server.url + "/metrics", headers={"Host": "evil.example"})
        assert foreign_host.status_code == 421
        foreign_page = httpx.get(server.url + "/metrics",
                                 headers={"Origin": "http://evil.example"})
        assert foreign_page.status_code == 403
        posted = httpx.post(server.url + "/metrics", json={})
        assert posted.status_code == 405
        found = counters(server)
        assert found["foreign_host"] == 1 and found["foreign_origin"] == 1


def test_metrics_renders_at_most_once_a_second_however_often_scraped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone past the edge may scrape: a burst of scrapes is one render (the page of the
    first), and the world's sessions are asked once for it, off the loop."""
    import barnraise.gateway.server as server_module

    renders: list[int] = []
    real = server_module.exposition

    def counted(counts: Any, latency: Any) -> bytes:
        renders.append(1)
        return real(counts, latency)

    monkeypatch.setattr(server_module, "exposition", counted)
    with served() as server, httpx.Client(timeout=10) as http:
        server.gateway.METRICS_EVERY = 3600.0  # type: ignore[misc]  # one page for the test
        pages = {http.get(server.url + "/metrics").text for _ in range(20)}
        assert len(pages) == 1 and len(renders) == 1
        server.gateway.METRICS_EVERY = 0.0  # type: ignore[misc]
        http.get(server.url + "/metrics")
        assert len(renders) == 2


def test_tool_latency_buckets_and_the_other_label() -> None:
    latency = ToolLatency(["a", "b"])
    latency.observe("a", BUCKETS[0] / 2)
    latency.observe("a", BUCKETS[-1] * 2)  # past every bound: +Inf only
    latency.observe("not_a_tool", 0.5)
    assert (latency.count("a"), latency.count("b"), latency.count(OTHER)) == (2, 0, 1)
    family = latency.family()
    buckets = {(s.labels["tool"], s.labels["le"]): s.value for s in family.samples
               if s.name.endswith("_bucket")}
    assert buckets[("a", repr(BUCKETS[0]))] == 1
    assert buckets[("a", repr(BUCKETS[-1]))] == 1
    assert buckets[("a", "+Inf")] == 2
    assert buckets[(OTHER, "0.5")] == 1 and buckets[(OTHER, "0.25")] == 0
    assert not any(tool == "not_a_tool" for tool, _ in buckets)


# -- --disable-skill ----------------------------------------------------------------------

def test_disable_skill_takes_the_group_off_the_card_and_refuses_it_on_every_binding() -> None:
    region_tools = {tool.name for tool in tool_groups()["region"]}
    with served(gateway_options={"disabled_skills": ["region"]}) as server, \
            httpx.Client(timeout=20) as http:
        session = server.gateway.world.default_session
        card = get_json(server.url + "/.well-known/agent-card.json")
        skills = [skill["id"] for skill in card["skills"]]
        assert "region" not in skills
        assert {"session", "build", "task", "a2a", "alert", "plan"} <= set(skills)
        assert not region_tools & {tag for s in card["skills"] for tag in s["tags"]}

        def refused(result: dict[str, Any], tool: str) -> None:
            assert result["success"] is False, result
            assert result["error"] == "permission_denied"
            assert result["reason"] == "skill_disabled" and result["tool"] == tool
            assert "'region'" in result["message"] and "--disable-skill" in result["message"]

        # A2A JSON-RPC, at its canonical path and at the base URL
        for path in ("/a2a/jsonrpc", "/"):
            url = server.url + path
            joined = rpc_call(http, url, "session_join", session_id=session,
                              agent_name=f"Ada{len(path)}", role="builder")
            assert joined["success"], joined  # the session skill is still served
            headers = {"Authorization": f"Bearer {joined['token']}"}
            with httpx.Client(timeout=20, headers=headers) as agent:
                refused(rpc_call(agent, url, "region_claim", region=REGION), "region_claim")
                # help lists only the tools served
                help_body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": {"messageId": f"help-{len(path)}", "role": "ROLE_USER",
                                "parts": [{"text": "help"}]}}}
                # text starts a conversation: its Task's status carries the answer
                helped = agent.post(url, json=help_body).json()["result"]["task"]
                listed = helped["status"]["message"]["parts"][0]["data"]["tools"]
                assert "session_join" in listed and not region_tools & set(listed)

        # WebSocket /a2a
        async def websocket() -> None:
            async with connect(f"ws://127.0.0.1:{server.port}/a2a", compression=None) as ws:
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": "j", "method": "session_join",
                                          "params": {"session_id": session,
                                                     "agent_name": "Wes"}}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 20))["result"]["success"]
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": "c", "method": "region_renew",
                                          "params": {"claim_id": "nope"}}))
                answer = json.loads(await asyncio.wait_for(ws.recv(), 20))
                refused(answer["result"], "region_renew")
                # refused as disabled whatever the arguments (not -32602 for a bad one)
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": "d", "method": "region_claim",
                                          "params": {"region": "everywhere"}}))
                answer = json.loads(await asyncio.wait_for(ws.recv(), 20))
                refused(answer["result"], "region_claim")

        run(websocket())

        # MCP: tools/list leaves them out, tools/call refuses them
        async def mcp() -> None:
            async with Client(server.url + "/mcp", mode="legacy") as client:
                listed = {tool.name for tool in (await client.list_tools()).tools}
                assert listed == set(TOOLS) - region_tools
                joined = (await client.call_tool("session_join", {
                    "session_id": session, "agent_name": "Mia"})).structured_content
                assert joined is not None and joined["success"]
                called = await client.call_tool("region_query", {"region": REGION})
                assert called.is_error and called.structured_content is not None
                refused(called.structured_content, "region_query")

        run(mcp())

        # nothing reached the world: no claim was made
        assert counters(server)["skill_disabled"] == 5
        assert _claims(server, session) == []


def _claims(server: GatewayServer, session: str | None) -> list[Any]:
    with httpx.Client(timeout=20) as http:
        url = server.url + "/a2a/jsonrpc"
        joined = rpc_call(http, url, "session_join", session_id=session, agent_name="Obs",
                          role="observer")
        http.headers["Authorization"] = f"Bearer {joined['token']}"
        state = rpc_call(http, url, "session_get_state", include=["regions"])
    assert state["success"], state
    return list(state["state"]["regions"])


def test_an_unknown_skill_is_refused_naming_the_known_ones(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"--disable-skill 'regions': no such skill; the "
                       r"card's skills are session, region, build, task, a2a"):
        disabled_tools(["build", "regions"])
    assert disabled_tools(["task"]) == {tool.name: "task" for tool in tool_groups()["task"]}
    hosted = HostedWorld(time_scale=20.0)
    try:
        with pytest.raises(ValueError, match="no such skill"):
            Gateway(hosted, disabled_skills=["nope"])
    finally:
        hosted.close()

    import barnraise.gateway.serve as serve

    monkeypatch.setattr(serve, "serve_network", lambda **_: pytest.fail("started"))
    assert main(["serve", "--port", "0", "--disable-skill", "nope"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("barnraise: error: --disable-skill 'nope': no such skill; the "
                          "card's skills are session, ")
    assert err.count("\n") == 1
