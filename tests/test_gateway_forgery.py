"""Finding 1 of issue 23 over the real gateway: forged answers, and ids that leak.

The attacker's reproduction: a builder (Mallory) reads the ids the server hands out,
guesses the next correlation ids, and sends signed letters with them to another builder
(Bob) waiting in ``a2a_barrier_enter``. Bob's call must be answered by the coordination
service alone. (The finding's letters were ``coordination_response``, which no agent
outside may send any more, ``reserved_type``: tests/test_gateway_msgtypes.py; the
letters here are ``task_response``, which anyone may send, so the answer's own check is
what stops them.) The ids a remote agent is given
(subscriptions, its calls' correlation ids) are long random tokens: no counter.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from mcp import Client as McpClient

from barnraise.gateway.hub import AgentSlot
from barnraise.gateway.server import GatewayServer
from barnraise.sim.messages import Message, Metadata, encode
from tests.gateway_support import served
from tests.test_gateway_a2a import a2a_client, call, join
from tests.test_gateway_mcp import structured
from tests.test_gateway_ws import Peer, joined, run

#: What an id drawn from secrets.token_urlsafe(24) looks like, after its ``sub-``.
RANDOM_TOKEN = re.compile(r"[A-Za-z0-9_-]{32}")


@pytest.fixture
def server() -> Any:
    with served() as running:
        yield running


def _guesses(subscription_id: str, n: int) -> list[str]:
    """The attacker's next ids: the counter after the one a subscription id shows
    (``sub-m<prefix>-<n>``), or, when it shows none, the id with digits appended."""
    found = re.fullmatch(r"sub-(m[0-9a-f]+-)(\d+)", subscription_id)
    if found is None:
        return [f"{subscription_id[4:]}{i}" for i in range(1, n + 1)]
    prefix, last = found.group(1), int(found.group(2))
    return [f"{prefix}{last + i}" for i in range(1, n + 1)]


def _forged(join: dict[str, Any], to: str, correlation_id: str, n: int) -> dict[str, Any]:
    message = Message(f"forged-{n}", join["now"], join["agent_id"], to, "task_response",
                      8, {"success": True, "released": True, "FORGED_BY": join["agent_id"]},
                      Metadata(correlation_id=correlation_id),
                      expires_at=join["now"] + 1800.0)
    wire: dict[str, Any] = json.loads(encode(message, bytes.fromhex(join["signing_key"])))
    return wire


async def _answer(peer: Peer, request_id: str) -> dict[str, Any]:
    """The response to ``request_id``; notifications on the way are kept aside."""
    while True:
        frame = json.loads(await asyncio.wait_for(peer.ws.recv(), 20))
        if frame.get("id") == request_id:
            return dict(frame)
        peer.notes.append(frame)


async def _pending_call(slot: AgentSlot) -> str:
    """The correlation id of the one call ``slot``'s agent has under way."""
    for _ in range(2000):
        if slot.pending:
            return slot.pending[0][0]._correlation_id
        await asyncio.sleep(0.005)
    raise AssertionError(f"{slot.agent_id} never had a call under way")


def test_a_member_cannot_answer_another_members_barrier(server: GatewayServer) -> None:
    dispatcher = server.gateway.hub.simulation.dispatcher

    async def scenario() -> None:
        bob, bob_join = await joined(server, "Bob")
        carl, _ = await joined(server, "Carl")
        mallory, mallory_join = await joined(server, "Mallory")
        sub = (await mallory.ask("a2a_subscribe", {"event_type": "region_claimed"}))["result"]
        await bob.ws.send(json.dumps({
            "jsonrpc": "2.0", "id": "bar-1", "method": "a2a_barrier_enter",
            "params": {"barrier_id": "b", "expected_count": 2, "timeout": 600}}))
        bob_slot = server.gateway.hub.slots[bob_join["agent_id"]]
        real_id = await _pending_call(bob_slot)
        # Seven guesses from what the server showed Mallory, as the attacker made them,
        # and then the real id itself (read from the server: the strongest forger).
        ids = [*_guesses(sub["subscription_id"], 7), real_id]
        for n, cid in enumerate(ids):
            sent = await mallory.ask("barnraise.send", {
                "message": _forged(mallory_join, bob_join["agent_id"], cid, n)})
            assert sent["result"]["statuses"] == {bob_join["agent_id"]: "delivered"}, sent
        # The letter with the real id reached Bob's mailbox and answered nothing.
        assert dispatcher.statistics().dead_letters.get("forged_reply") == 1
        assert not bob_slot.pending[0][1].done()
        entered = await carl.ask("a2a_barrier_enter",
                                 {"barrier_id": "b", "expected_count": 2, "timeout": 600})
        assert entered["result"]["success"], entered
        answer = await _answer(bob, "bar-1")
        result = answer["result"]
        assert result["success"] and "FORGED_BY" not in result, result
        for peer in (bob, carl, mallory):
            await peer.ws.close()

    run(scenario())
    assert dispatcher.statistics().dead_letters.get("forged_reply") == 1


def test_ids_given_to_remote_agents_are_random_tokens(server: GatewayServer) -> None:
    dispatcher = server.gateway.hub.simulation.dispatcher
    counter_prefix = dispatcher.next_id().rsplit("-", 1)[0]  # "m<8 hex>": the counter's

    async def scenario() -> None:
        bob, bob_join = await joined(server, "Bob")
        ids = []
        for event in ("region_claimed", "region_released"):
            answer = await bob.ask("a2a_subscribe", {"event_type": event})
            ids.append(answer["result"]["subscription_id"])
        first, second = ids
        assert first != second
        for sid in ids:
            assert sid.startswith("sub-") and RANDOM_TOKEN.fullmatch(sid[4:]), sid
            assert counter_prefix not in sid
        # No incrementing suffix: the two ids share no tail of digits, nor a long prefix.
        tail = re.compile(r"(\d+)$")
        a, b = tail.search(first), tail.search(second)
        assert not (a and b and int(b.group(1)) == int(a.group(1)) + 1)
        assert len(_common_prefix(first[4:], second[4:])) < 8
        # The dispatcher knows them by these tokens (they are the real ids, not aliases).
        assert dispatcher.unsubscribe(second) and not dispatcher.unsubscribe(second)
        # A call's correlation id, which the server keeps for the answer, is random too.
        await bob.ws.send(json.dumps({
            "jsonrpc": "2.0", "id": "bar-1", "method": "a2a_barrier_enter",
            "params": {"barrier_id": "solo", "expected_count": 2, "timeout": 20}}))
        cid = await _pending_call(server.gateway.hub.slots[bob_join["agent_id"]])
        assert RANDOM_TOKEN.fullmatch(cid) and counter_prefix not in cid, cid
        await _answer(bob, "bar-1")
        await bob.ws.close()

    run(scenario())


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_subscription_ids_over_a2a_and_mcp_are_random_tokens(server: GatewayServer) -> None:
    """The A2A JSON-RPC binding and MCP hand out the same hub's ids: tokens there too."""
    session = server.gateway.world.default_session
    assert session is not None

    async def scenario() -> list[str]:
        token = await join(server.url, session, "Ann", "builder")
        async with a2a_client(server.url, token) as client:
            over_a2a = [await call(client, "a2a_subscribe", event_type=event)
                        for event in ("region_claimed", "region_released")]
        async with McpClient(server.url + "/mcp", mode="legacy") as mcp:
            assert (await structured(mcp, "session_join", session_id=session,
                                     agent_name="Claude", role="builder"))["success"]
            over_mcp = [await structured(mcp, "a2a_subscribe", event_type=event)
                        for event in ("region_claimed", "region_released")]
        return [r["subscription_id"] for r in (*over_a2a, *over_mcp)]

    ids = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert len(set(ids)) == 4
    for sid in ids:
        assert sid.startswith("sub-") and RANDOM_TOKEN.fullmatch(sid[4:]), sid
