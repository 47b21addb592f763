"""MCP resources, subscriptions, prompts, progress, completion and logging, with the SDK's
own client over a real server on loopback (one server for the module)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
from collections.abc import Coroutine, Iterator
from typing import Any

import httpx2
import mcp_types as types
import pykka
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from PIL import Image

from barnraise.gateway.mcp_prompts import BRIEFS
from barnraise.gateway.mcp_resources import Feeds, Subscriptions, encode_png
from barnraise.gateway.server import GatewayServer
from barnraise.plots import TILE_COLOURS, TILE_NAMES
from barnraise.sim.tools import TOOLS
from tests.gateway_support import counters, served

# resources/subscribe and logging/setLevel are the handshake protocols' (the SDK's
# client marks them deprecated from 2026-07-28); these tests speak the handshake
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

OPERATOR = "operator-token-for-the-mcp-tests"
GRID = 40


@pytest.fixture(scope="module")
def server() -> Iterator[GatewayServer]:
    try:
        with served(operator=OPERATOR) as running:
            yield running
    finally:
        pykka.ActorRegistry.stop_all(timeout=5)  # conftest's guarantee, once a module


#: The module's one server keeps its actors across its tests (they stop with it, above;
#: conftest's _stop_every_actor would stop them after each test).
MODULE_SERVER = True


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 60))


async def tool(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def bearer(url: str, token: str, **options: Any) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return http, Client(streamable_http_client(url, http_client=http), mode="legacy",
                        **options)


def png_of(result: types.ReadResourceResult) -> Image.Image:
    [content] = result.contents
    assert isinstance(content, types.BlobResourceContents)
    assert content.mime_type == "image/png"
    data = base64.b64decode(content.blob)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(data))
    image.load()
    return image.convert("RGB")


def json_of(result: types.ReadResourceResult) -> Any:
    [content] = result.contents
    assert isinstance(content, types.TextResourceContents)
    assert content.mime_type == "application/json"
    return json.loads(content.text)


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_a_member_lists_reads_and_hears_of_changes_to_its_session(
        server: GatewayServer) -> None:
    url = server.url + "/mcp"
    updates: list[str] = []
    heard = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            heard.set()

    async def scenario() -> None:
        async with Client(url, mode="legacy", message_handler=on_message) as client:
            assert client.server_capabilities.resources is not None
            assert client.server_capabilities.resources.subscribe
            made = await tool(client, "session_create", session_name="Seen", grid_size=GRID)
            sid = made["session_id"]
            assert (await tool(client, "session_join", session_id=sid, agent_name="Seer",
                               role="builder"))["success"]
            base = f"barnraise://session/{sid}"
            listed = await client.list_resources()
            assert {r.uri for r in listed.resources} == {
                f"{base}/canvas.png", f"{base}/state", f"{base}/events"}
            templates = await client.list_resource_templates()
            assert {t.uri_template for t in templates.resource_templates} == {
                "barnraise://session/{id}/canvas.png", "barnraise://session/{id}/state",
                "barnraise://session/{id}/events"}

            empty = png_of(await client.read_resource(f"{base}/canvas.png"))
            assert empty.size == (GRID, GRID)
            assert empty.getcolors() == [(GRID * GRID, rgb(TILE_COLOURS[0]))]

            await tool(client, "region_claim", region={"x": 2, "y": 3, "width": 4,
                                                       "height": 5})
            await client.subscribe_resource(f"{base}/canvas.png")
            assert updates == []
            placed = await tool(client, "builder_place_tiles", tiles="code",
                                region={"x": 2, "y": 3, "width": 4, "height": 5})
            assert placed.get("tiles_placed") == 20, placed
            await asyncio.wait_for(heard.wait(), 10)
            assert set(updates) == {f"{base}/canvas.png"}  # only what was subscribed

            canvas = png_of(await client.read_resource(f"{base}/canvas.png"))
            code = rgb(TILE_COLOURS[TILE_NAMES.index("code")])
            assert canvas.getpixel((2, 3)) == code and canvas.getpixel((5, 7)) == code
            assert canvas.getpixel((6, 3)) == canvas.getpixel((2, 8)) == rgb(TILE_COLOURS[0])

            state = json_of(await client.read_resource(f"{base}/state"))
            assert state["session"]["session_id"] == sid
            assert state["progress"]["tiles_placed"] == 20
            assert [m["agent_id"] for m in state["members"]] == [made["agent_id"]]
            events = json_of(await client.read_resource(f"{base}/events"))["events"]
            assert {"agent_joined", "region_claimed"} <= {e["type"] for e in events}
            assert [e["t"] for e in events] == sorted(e["t"] for e in events)

            held = server.gateway.mcp.subscriptions.total()
            await client.unsubscribe_resource(f"{base}/canvas.png")
            assert server.gateway.mcp.subscriptions.total() == held - 1

            with pytest.raises(MCPError) as unknown:
                await client.read_resource("barnraise://session/nope/state")
            assert "only the members" in unknown.value.message
            with pytest.raises(MCPError) as bad:
                await client.read_resource(f"{base}/tiles.bmp")
            assert "unknown resource" in bad.value.message

    run(scenario())


def test_who_may_read_a_private_sessions_resources(server: GatewayServer) -> None:
    url = server.url + "/mcp"
    default = server.gateway.world.default_session

    async def scenario() -> None:
        async with Client(url, mode="legacy") as owner:
            made = await tool(owner, "session_create", session_name="Hidden", grid_size=GRID,
                              config={"private": True})
            assert made["success"], made
            secret = f"barnraise://session/{made['session_id']}"
            # its creator reads it before joining (its bound session), and after
            assert (await owner.read_resource(f"{secret}/state")).contents
            assert (await tool(owner, "session_join", session_id=made["session_id"],
                               agent_name="Owner", role="builder",
                               invite_token=made["invite_token"]))["success"]
            assert (await owner.read_resource(f"{secret}/events")).contents

            async with Client(url, mode="legacy") as other:
                # before joining: nothing listed, nothing read
                assert (await other.list_resources()).resources == []
                with pytest.raises(MCPError) as early:
                    await other.read_resource(f"{secret}/canvas.png")
                assert "join it first" in early.value.message
                joined = await tool(other, "session_join", session_id=default,
                                    agent_name="Other", role="builder")
                assert joined["success"]
                listed = {r.uri for r in (await other.list_resources()).resources}
                assert listed == {f"barnraise://session/{default}/{kind}"
                                  for kind in ("canvas.png", "state", "events")}
                for kind in ("canvas.png", "state", "events"):
                    with pytest.raises(MCPError) as refused:
                        await other.read_resource(f"{secret}/{kind}")
                    assert refused.value.code == -32002
                    assert made["session_id"] in refused.value.message
                with pytest.raises(MCPError):
                    await other.subscribe_resource(f"{secret}/state")
                found = await other.complete(
                    types.ResourceTemplateReference(type="ref/resource",
                                                    uri="barnraise://session/{id}/state"),
                    {"name": "id", "value": ""})
                assert found.completion.values == [default]

            # the member's token reads it from another connection too; a forged one not
            http, again = bearer(url, made["token"])
            async with http, again:
                assert png_of(await again.read_resource(f"{secret}/canvas.png")).size == (
                    GRID, GRID)
            http, forged = bearer(url, "forged-token")
            async with http, forged:
                with pytest.raises(MCPError):
                    await forged.read_resource(f"{secret}/state")
            # the operator reads every session
            http, operator = bearer(url, OPERATOR)
            async with http, operator:
                uris = {r.uri for r in (await operator.list_resources()).resources}
                assert f"{secret}/state" in uris
                assert f"barnraise://session/{default}/state" in uris
                state = json_of(await operator.read_resource(f"{secret}/state"))
                assert state["session"]["private"] is True
                for kind in ("events", "state"):
                    with pytest.raises(MCPError) as gone:
                        await operator.read_resource(f"barnraise://session/nope/{kind}")
                    assert "no open session 'nope'" in gone.value.message

    before = counters(server).get("mcp_resource_refused", 0)
    run(scenario())
    assert counters(server)["mcp_resource_refused"] - before == 6


def test_subscriptions_are_bounded_a_client_and_origin_rules_hold(
        server: GatewayServer) -> None:
    url = server.url + "/mcp"
    subscriptions = server.gateway.mcp.subscriptions
    default = server.gateway.world.default_session
    base = f"barnraise://session/{default}"

    async def scenario() -> None:
        held = subscriptions.total()
        async with Client(url, mode="legacy") as client:
            await tool(client, "session_join", session_id=default, agent_name="Many",
                       role="builder")
            await client.subscribe_resource(f"{base}/state")
            await client.subscribe_resource(f"{base}/state")  # the same one: no second
            await client.subscribe_resource(f"{base}/events")
            with pytest.raises(MCPError) as full:
                await client.subscribe_resource(f"{base}/canvas.png")
            assert "the most one may" in full.value.message
            assert subscriptions.total() == held + 2
            # leaving the session ends them: the next change finds it no longer allowed
            assert (await tool(client, "session_leave"))["success"]
            for _ in range(100):
                if subscriptions.total() == held:
                    break
                await asyncio.sleep(0.05)
            assert subscriptions.total() == held
            with pytest.raises(MCPError):
                await client.read_resource(f"{base}/state")

    subscriptions.max_per_client = 2
    try:
        run(scenario())
    finally:
        subscriptions.max_per_client = 32
    # /mcp keeps the edges' rules: a page of another origin is refused before MCP
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}}
    foreign = httpx2.post(url, json=body, headers={"Origin": "http://evil.example",
                                                   "Accept": "application/json, "
                                                   "text/event-stream"}, timeout=10)
    assert foreign.status_code == 403


def test_prompts_brief_each_role_with_tools_of_the_table_and_complete_names(
        server: GatewayServer) -> None:
    url = server.url + "/mcp"

    async def scenario() -> None:
        async with Client(url, mode="legacy") as client:
            listed = await client.list_prompts()
            assert [p.name for p in listed.prompts] == ["builder", "tester", "architect",
                                                        "tool"]
            for role in BRIEFS:
                got = await client.get_prompt(role, {"session_id": "abc"})
                [message] = got.messages
                assert isinstance(message.content, types.TextContent)
                text = message.content.text
                assert f"role={role!r}" in text and "session_id='abc'" in text
                named = set(re.findall(r"\b(?:session|region|builder|blueprint|build|task"
                                       r"|approval|a2a)_[a-z_]+\b(?!=)", text))
                assert named and named <= set(TOOLS), named - set(TOOLS)
                assert len(text) < 1200
            one = await client.get_prompt("tool", {"name": "region_claim"})
            assert "region_claim" in one.messages[0].content.text  # type: ignore[union-attr]
            with pytest.raises(MCPError) as bad:
                await client.get_prompt("tool", {"name": "fly"})
            assert "'fly'" in bad.value.message
            with pytest.raises(MCPError):
                await client.get_prompt("pilot", {})
            names = await client.complete(types.PromptReference(type="ref/prompt", name="tool"),
                                          {"name": "name", "value": "a2a_l"})
            assert names.completion.values == ["a2a_lock_acquire", "a2a_lock_renew",
                                               "a2a_lock_release"]

    run(scenario())


def test_a_waiting_tool_reports_progress_and_set_level_sends_failures(
        server: GatewayServer) -> None:
    url = server.url + "/mcp"
    default = server.gateway.world.default_session
    progress: list[tuple[float, str | None]] = []
    waiting = asyncio.Event()
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))
        waiting.set()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def scenario() -> None:
        async with Client(url, mode="legacy") as first, \
                Client(url, mode="legacy", logging_callback=on_log) as second:
            for client, name in ((first, "One"), (second, "Two")):
                assert (await tool(client, "session_join", session_id=default,
                                   agent_name=name, role="builder"))["success"]
            entering = asyncio.ensure_future(first.call_tool(
                "a2a_barrier_enter", {"barrier_id": "b", "expected_count": 2},
                progress_callback=on_progress))
            await asyncio.wait_for(waiting.wait(), 10)
            other = await tool(second, "a2a_barrier_enter", barrier_id="b",
                               expected_count=2)
            assert other["success"]
            entered = await asyncio.wait_for(entering, 20)
            assert entered.structured_content and entered.structured_content["success"]
            assert progress and "a2a_barrier_enter: waiting" in (progress[0][1] or "")
            assert [p for p, _ in progress] == sorted(p for p, _ in progress)

            # no log lines before logging/setLevel; after it, a failure is one
            await tool(second, "region_release", claim_id="none")
            assert logs == []
            await second.set_logging_level("warning")
            failed = await tool(second, "region_release", claim_id="none")
            assert not failed["success"]
            [line] = logs
            assert line.level == "warning" and line.data["tool"] == "region_release"
            assert line.data["error"] == failed["error"]

    run(scenario())


def test_updates_of_one_subscription_come_at_most_once_an_interval() -> None:
    """A burst of changes is one update at once and one when the interval is up."""

    class Trace:
        def listen(self, listener: Any) -> Any:
            self.listener = listener
            return lambda: None

    class Simulation:
        class dispatcher:  # the attribute path Feeds reads
            trace = Trace()

        @staticmethod
        def view(session_id: str, **_options: Any) -> Any:
            raise LookupError(session_id)  # no counters to look at: events only

    feeds = Feeds(Simulation())  # type: ignore[arg-type]
    subs = Subscriptions(feeds, interval=0.3)
    sent: list[float] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def send(uri: str) -> None:
            sent.append(loop.time())

        await subs.add("c", "barnraise://session/s1/state", send, lambda: True)
        for n in range(5):  # from a world thread, as the trace listener is called
            await asyncio.to_thread(Simulation.dispatcher.trace.listener, float(n), "x",
                                    "session:s1:events", "tiles_placed", {})
            await asyncio.sleep(0.01)
        await asyncio.to_thread(Simulation.dispatcher.trace.listener, 9.0, "x",
                                "session:s2:events", "tiles_placed", {})  # not watched
        deadline = loop.time() + 5
        while len(sent) < 2 and loop.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.4)  # nothing more is due: a third would be a bug

    run(scenario())
    assert len(sent) == 2 and sent[1] - sent[0] >= 0.3 - 1e-3
    assert subs.sent == 2 and subs.folded == 4


def test_the_recent_events_kept_are_bounded_in_sessions_too() -> None:
    """Each session keeps its last RECENT events, and only the MAX_SESSIONS sessions heard
    from latest keep any: a closed session's are forgotten once others have spoken."""
    from barnraise.gateway.mcp_resources import MAX_SESSIONS, RECENT

    class Trace:
        def listen(self, listener: Any) -> Any:
            self.listener = listener
            return lambda: None

    class Simulation:
        class dispatcher:
            trace = Trace()

        @staticmethod
        def sessions() -> list[str]:
            return []

    feeds = Feeds(Simulation())  # type: ignore[arg-type]
    heard = Simulation.dispatcher.trace.listener
    for n in range(RECENT + 5):
        heard(float(n), "x", "session:first:events", "tiles_placed", {"n": n})
    for i in range(MAX_SESSIONS - 1):
        heard(1.0, "x", f"session:s{i}:events", "agent_joined", {})
    heard(2.0, "x", "session:first:events", "tiles_placed", {"n": -1})  # latest again
    heard(3.0, "x", "session:new:events", "agent_joined", {})  # past the bound: s0 goes
    kept = json.loads(feeds.read("first", "events"))["events"]
    assert len(kept) == RECENT and kept[-1]["n"] == -1
    assert json.loads(feeds.read("new", "events"))["events"][0]["type"] == "agent_joined"
    with pytest.raises(LookupError):
        feeds.read("s0", "events")
    assert json.loads(feeds.read("s1", "events"))["events"]


def test_a_canvas_read_again_unchanged_is_not_encoded_again() -> None:
    """Reads in a loop or at once cost one encoding per change of the canvas, not one per
    read: the kept PNG serves until a write or an event moves the session."""
    from concurrent.futures import ThreadPoolExecutor

    from barnraise.actors.world import Simulation as World
    from tests.helpers import box, session_crew

    with World(seed=5, mode="deterministic") as simu:
        crew = session_crew(simu, 16, mode="free")
        feeds = Feeds(simu)
        try:
            first = feeds.read(crew.sid, "canvas.png")
            with ThreadPoolExecutor(4) as pool:
                again = list(pool.map(lambda _: feeds.read(crew.sid, "canvas.png"),
                                      range(8)))
            assert feeds.encoded == 1 and all(data == first for data in again)
            assert crew.a.builder_place_tiles(region=box(0, 0, 2, 2), tiles="code")["success"]
            simu.run()
            moved = feeds.read(crew.sid, "canvas.png")
            assert feeds.encoded == 2 and moved != first
            image = Image.open(io.BytesIO(moved)).convert("RGB")
            assert image.getpixel((1, 1)) != image.getpixel((5, 5))
            with pytest.raises(LookupError):
                feeds.read("nope", "canvas.png")
        finally:
            feeds.close()


def test_subscriptions_are_bounded_per_agent_over_its_sessions_and_in_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A token can open many MCP sessions: one agent's subscriptions are bounded over all
    of them, and all clients' together; an unsubscribe gives the place back."""
    import barnraise.gateway.mcp_resources as resources

    class Quiet:
        on_change = None
        watched: frozenset[str] = frozenset()

        @staticmethod
        def version(session_id: str) -> tuple[int, ...]:
            return (0,)

    monkeypatch.setattr(resources, "MAX_PER_OWNER", 5)
    monkeypatch.setattr(resources, "MAX_TOTAL", 8)
    subs = Subscriptions(Quiet(), max_per_client=2)  # type: ignore[arg-type]

    async def send(uri: str) -> None:
        pass

    async def scenario() -> None:
        for n in range(5):  # agent-1 from three MCP sessions, two each at most
            await subs.add(f"c{n // 2}", f"barnraise://session/s{n}/state", send,
                           lambda: True, owner="agent-1")
        with pytest.raises(ValueError, match="this agent holds 5 subscriptions"):
            await subs.add("c9", "barnraise://session/s9/state", send, lambda: True,
                           owner="agent-1")
        assert subs.remove("c0", "barnraise://session/s0/state")
        await subs.add("c9", "barnraise://session/s9/state", send, lambda: True,
                       owner="agent-1")
        for n in range(3):
            await subs.add(f"d{n}", f"barnraise://session/t{n}/state", send, lambda: True,
                           owner=f"agent-{n + 2}")
        with pytest.raises(ValueError, match="the server holds 8 subscriptions"):
            await subs.add("e", "barnraise://session/u/state", send, lambda: True,
                           owner="agent-9")
        assert subs.total() == 8
        subs.close()

    run(scenario())


def test_the_png_of_a_canvas_is_one_pixel_a_cell() -> None:
    import numpy as np
    tiles = np.zeros((3, 5), dtype=np.uint8)
    tiles[1, 4] = 3
    tiles[2, 0] = 200  # not a tile code: drawn in the last colour
    image = Image.open(io.BytesIO(encode_png(tiles))).convert("RGB")
    assert image.size == (5, 3)
    assert image.getpixel((4, 1)) == rgb(TILE_COLOURS[3])
    assert image.getpixel((0, 2)) == rgb(TILE_COLOURS[-1])
    assert image.getpixel((0, 0)) == rgb(TILE_COLOURS[0])
