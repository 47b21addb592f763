"""Remote agents that vanish expire (issue 23, finding 6): after ``agent_ttl`` wall seconds
unheard from, an agent whose TCP connection was aborted leaves its session (claims
released, its task in progress back to the queue, an ``agent_expired`` event), its
token stops working, its name may join again, and its Client's thread is released.
An agent with an open connection is heard from however idle it is."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect

from barnraise import cli
from barnraise.cli import main
from barnraise.gateway import hub as hub_module
from barnraise.gateway import jsonrpc
from barnraise.gateway.hub import Limits
from barnraise.gateway.server import GatewayServer
from tests.gateway_support import served
from tests.test_gateway_ws import Peer, joined, ws_url

TTL = 0.5  # wall seconds: short for the test (the CLI allows 1..86400)
REGION = {"x": 0, "y": 0, "width": 6, "height": 6}


def served_with_ttl(ttl: float | None, limits: Limits | None = None
                    ) -> contextlib.AbstractContextManager[GatewayServer]:
    """A gateway whose remote agents expire after ``ttl`` wall seconds (None: never)."""
    return served(agent_ttl=ttl, limits=limits)


def abort(peer: Peer) -> None:
    """Reset the connection (RST, no close handshake), as a vanished host leaves it."""
    transport = peer.ws.transport
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def client_threads() -> int:
    """Threads of remote agents' Clients (a realtime actor is a thread, named for its class)."""
    return sum(t.name.startswith("InlineClientActor-") for t in threading.enumerate())


async def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_an_aborted_builder_expires_and_its_task_goes_to_another() -> None:
    with served_with_ttl(TTL) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            arch, _ = await joined(server, "Arch", role="architect")
            sub = await arch.ask("a2a_subscribe", {"event_type": "agent_expired"})
            assert sub["result"]["success"], sub
            vanisher, me = await joined(server, "Vanisher")
            delegated = await arch.ask("task_delegate", {
                "target_agent_id": me["agent_id"], "task_type": "build", "region": REGION})
            task_id = delegated["result"]["task_id"]
            accepted = await vanisher.ask("task_accept", {"task_id": task_id})
            assert accepted["result"]["success"], accepted
            assert (await vanisher.ask("a2a_subscribe", {}))["result"]["success"]
            assert client_threads() == 2  # a thread per remote agent
            crowd = [(await joined(server, f"Crowd-{i}"))[0] for i in range(20)]
            assert client_threads() == 22
            for peer in (vanisher, *crowd):
                abort(peer)
            await until(lambda: hub.counters["agents_expired"] == 21)
            # every Client's thread is given back (the vanisher's too)
            await until(lambda: client_threads() == 1)
            expired = [await arch.note() for _ in range(21)]
            assert {n["method"] for n in expired} == {"barnraise.event"}
            bodies = {n["params"]["message"]["content"]["name"]: n["params"]["message"]["content"]
                      for n in expired}
            assert bodies["Vanisher"]["event"] == "agent_expired"
            assert bodies["Vanisher"]["reason"] == "ttl"
            assert bodies["Vanisher"]["requeued_tasks"] == [task_id]
            # the architect, idle on an open connection all along, is still a member
            state = await arch.ask("session_get_state", {"include": ["agents", "tasks"]})
            names = [a["name"] for a in state["result"]["state"]["agents"]]
            assert names == ["Arch"], names
            # another builder finishes the task
            finisher, _ = await joined(server, "Finisher")
            queue = await finisher.ask("task_get_queue", {"filter": {"status": "all"}})
            [record] = [t for t in queue["result"]["tasks"] if t["task_id"] == task_id]
            assert (record["status"], record["assigned_to"]) == ("pending", "any"), record
            taken = await finisher.ask("task_accept", {"task_id": task_id})
            assert taken["result"]["success"], taken
            done = await finisher.ask("task_report", {"task_id": task_id, "status": "completed"})
            assert done["result"]["success"], done
            # the vanished agent's token is void; its name joins again
            async with connect(ws_url(server), compression=None) as ws:
                answer = await Peer(ws).ask("barnraise.auth", {"token": me["token"]})
                assert answer["error"]["code"] == jsonrpc.UNAUTHENTICATED, answer
            again, result = await joined(server, "Vanisher")
            assert result["agent_id"] != me["agent_id"]
            for peer in (arch, finisher, again):
                await peer.ws.close()

        asyncio.run(asyncio.wait_for(scenario(), 60))
        assert hub.counters["agents_expired"] == 21


def test_without_a_ttl_an_agent_that_went_away_is_kept() -> None:
    with served_with_ttl(None) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            peer, _ = await joined(server, "Stays")
            abort(peer)
            await until(lambda: all(s.closer is None for s in hub.slots.values()))

        asyncio.run(asyncio.wait_for(scenario(), 30))
        assert [s.agent_id for s in hub.slots.values() if s.token] == ["remote-1"]
        assert hub.counters["agents_expired"] == 0


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("inf"), float("nan")])
def test_a_ttl_that_is_not_a_positive_number_is_refused(ttl: float) -> None:
    world: Any = None
    with pytest.raises(ValueError, match="agent_ttl"):
        hub_module.Hub(world, agent_ttl=ttl)


@pytest.mark.parametrize("ttl", ["0", "0.5", "86401", "nan", "inf", "-5"])
def test_serve_refuses_an_agent_ttl_out_of_bounds(
    ttl: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import barnraise.gateway.serve as serve

    monkeypatch.setattr(serve, "serve_network", lambda **_: pytest.fail("started"))
    assert main(["serve", "--port", "0", "--agent-ttl", ttl]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("barnraise: error: --agent-ttl must be 1..86400 wall seconds, got ")
    assert err.count("\n") == 1


@pytest.mark.parametrize(("given", "expected"), [
    ((), hub_module.AGENT_TTL), (("--agent-ttl", "1"), 1.0),
    (("--agent-ttl", "86400"), 86_400.0)])
def test_serve_hands_the_agent_ttl_to_the_gateway(
    given: tuple[str, ...], expected: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import barnraise.gateway.serve as serve

    seen: dict[str, Any] = {}
    monkeypatch.setattr(serve, "serve_network", lambda **kw: seen.update(kw) or 0)
    assert main(["serve", "--port", "0", *given]) == 0
    assert seen["agent_ttl"] == expected
    assert cli.AGENT_TTL == hub_module.AGENT_TTL


def test_an_open_sse_stream_keeps_its_agent_and_its_end_starts_the_clock() -> None:
    from a2a.types import SendMessageRequest

    from tests.test_gateway_a2a import a2a_client, join, user_message

    with served_with_ttl(TTL) as server:
        hub = server.gateway.hub
        session = server.gateway.world.default_session
        assert session is not None

        def here(token: str) -> bool:
            slot = hub._by_token.get(token)
            return slot is not None and hub.slots.get(slot.agent_id) is slot

        async def scenario() -> None:
            arch = await join(server.url, session, "Arch", "architect",
                              role_token=server.gateway.world.role_tokens["architect"])
            idle = await join(server.url, session, "Idle", "builder")
            async with a2a_client(server.url, arch, streaming=True) as client:
                stream = client.send_message(SendMessageRequest(message=user_message(
                    {"tool": "task_delegate", "arguments": {"task_type": "test"}})))
                first = await anext(stream)
                assert first.HasField("task")
                # over HTTP alone an agent is heard from only when it calls: the idle
                # one goes, and one that joins after that goes too, while the one with
                # a stream open stays (by then silent for more than its TTL)
                await until(lambda: not here(idle))
                later = await join(server.url, session, "Later", "builder")
                await until(lambda: not here(later))
                assert here(arch)
                await stream.aclose()
            await until(lambda: not here(arch))

        asyncio.run(asyncio.wait_for(scenario(), 60))
        assert hub.counters["agents_expired"] == 3


def test_an_expired_mcp_session_is_no_agent_and_may_join_again() -> None:
    from mcp import Client

    from tests.test_gateway_mcp import structured

    with served_with_ttl(TTL) as server:
        hub = server.gateway.hub
        session = server.gateway.world.default_session
        region = {"x": 0, "y": 0, "width": 4, "height": 4}

        async def scenario() -> None:
            async with Client(server.url + "/mcp", mode="legacy") as mcp:
                joined = await structured(mcp, "session_join", session_id=session,
                                          agent_name="Claude", role="builder")
                assert joined["success"]
                assert (await structured(mcp, "region_claim", region=region))["success"]
                await until(lambda: joined["agent_id"] not in hub.slots)
                # the MCP session's agent is gone: it is a newcomer, not a dead Client
                refused = await structured(mcp, "region_query", region=region)
                assert refused["error"] == "not_a_member", refused
                again = await structured(mcp, "session_join", session_id=session,
                                         agent_name="Claude", role="builder")
                assert again["success"] and again["agent_id"] != joined["agent_id"]
                # its claim went with it
                assert (await structured(mcp, "region_claim", region=region))["success"]

        asyncio.run(asyncio.wait_for(scenario(), 90))


def test_agents_that_filled_the_server_and_vanished_make_room() -> None:
    with served_with_ttl(TTL, Limits(agents=2)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            squatters = [(await joined(server, f"Squatter-{i}"))[0] for i in range(2)]
            async with connect(ws_url(server), compression=None) as ws:
                full = await Peer(ws).ask("session_join", {
                    "session_id": server.gateway.world.default_session,
                    "agent_name": "Newcomer", "role": "builder"})
                assert full["error"]["data"]["reason"] == "too_many_agents", full
            for peer in squatters:
                abort(peer)
            await until(lambda: not hub.slots)
            newcomer, _ = await joined(server, "Newcomer")
            await newcomer.ws.close()

        asyncio.run(asyncio.wait_for(scenario(), 60))
        assert hub.counters["agents_expired"] == 2
