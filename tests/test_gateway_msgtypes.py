"""Message types of one's own over the gateway, as an attacker would try them.

A remote agent's own types travel like any other letter (signed, or through the
``a2a_send_message`` and ``a2a_broadcast`` tools); a name off the rule is refused with the
rule; the runtime's reply types (``error_report``, ``registry_response``,
``coordination_response``) are refused from outside and through the tools, so nobody
passes for a service by its words; a letter of one's own type carrying another's
correlation id answers nothing; nobody outside is, or writes as, ``system``; and no
letter of any type reaches a service.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from barnraise.gateway.server import GatewayServer
from barnraise.sim.messages import TYPE_NAME_RULE, Message, Metadata, encode
from tests.gateway_support import counters, served
from tests.test_gateway_ws import joined, run

TYPE_NAME = re.compile(TYPE_NAME_RULE)


@pytest.fixture
def server() -> Any:
    with served() as running:
        yield running


def _letter(join: dict[str, Any], to: str, message_type: str, *, n: int,
            sender: str | None = None, correlation_id: str | None = None) -> dict[str, Any]:
    """A letter signed with ``join``'s key (its type may be one no Message would take:
    the wire form is edited after signing)."""
    valid = message_type if TYPE_NAME.fullmatch(message_type) else "status_update"
    message = Message(f"{join['agent_id']}-{message_type}-{n}", join["now"],
                      sender or join["agent_id"], to, valid, 5, {"n": n},
                      Metadata(correlation_id=correlation_id) if correlation_id else Metadata(),
                      expires_at=join["now"] + 600.0)
    wire: dict[str, Any] = json.loads(encode(message, bytes.fromhex(join["signing_key"])))
    wire["message_type"] = message_type
    return wire


def test_a_remote_agents_own_types_reach_members_signed_and_through_the_tools(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann")
        bob, bob_join = await joined(server, "Bob")
        to = ann_join["agent_id"]
        signed = await bob.ask("barnraise.send", {"message": _letter(bob_join, to, "ping",
                                                                     n=1)})
        assert signed["result"]["statuses"] == {to: "delivered"}, signed
        told = await bob.ask("a2a_send_message", {"to_agent": to, "message_type": "gossip",
                                                  "content": {"n": 2}})
        assert told["result"]["success"], told
        shared = await bob.ask("a2a_broadcast", {"message_type": "data_share",
                                                 "content": {"n": 3}})
        assert shared["result"]["delivered"] == [to], shared
        got = [(await ann.note())["params"]["message"] for _ in range(3)]
        assert [(m["message_type"], m["content"], m["from_agent"]) for m in got] == [
            ("ping", {"n": 1}, bob_join["agent_id"]),
            ("gossip", {"n": 2}, bob_join["agent_id"]),
            ("data_share", {"n": 3}, bob_join["agent_id"])]
        await ann.ws.close()
        await bob.ws.close()

    run(scenario())


def test_a_type_name_off_the_rule_is_refused_with_the_rule_everywhere(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann")
        bob, bob_join = await joined(server, "Bob")
        to = ann_join["agent_id"]
        for n, name in enumerate(["Ping", "_member_joined", "ping-pong", "x" * 65]):
            signed = await bob.ask("barnraise.send", {"message": _letter(bob_join, to, name,
                                                                         n=n)})
            assert signed["error"]["data"]["reason"] == "invalid_message", signed
            assert TYPE_NAME_RULE in signed["error"]["message"], signed
            for tool, args in (("a2a_send_message", {"to_agent": to}), ("a2a_broadcast", {})):
                told = (await bob.ask(tool, {**args, "message_type": name}))["result"]
                assert told["error"] == "invalid_argument", told
                assert told["field"] == "message_type" and TYPE_NAME_RULE in told["message"]
        assert ann.notes == []
        await ann.ws.close()
        await bob.ws.close()

    run(scenario())
    assert counters(server)["invalid_message"] == 4


def test_the_runtimes_reply_types_are_refused_from_outside_and_through_the_tools(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann")
        bob, bob_join = await joined(server, "Bob")
        to = ann_join["agent_id"]
        for n, name in enumerate(["error_report", "coordination_response",
                                  "registry_response"]):
            signed = await bob.ask("barnraise.send", {"message": _letter(
                bob_join, to, name, n=n, correlation_id=f"guess-{n}")})
            assert signed["error"]["data"]["reason"] == "reserved_type", signed
            assert repr(name) in signed["error"]["message"]
            told = (await bob.ask("a2a_send_message", {"to_agent": to,
                                                       "message_type": name}))["result"]
            assert told["error"] == "invalid_argument" and told["field"] == "message_type"
            assert "only the runtime and its services send" in told["message"]
        assert ann.notes == []
        await ann.ws.close()
        await bob.ws.close()

    run(scenario())
    assert counters(server)["reserved_type"] == 3


def test_a_letter_of_ones_own_type_with_anothers_correlation_id_answers_nothing(
        server: GatewayServer) -> None:
    """Mallory answers Bob's barrier call with a type of her own and its real id: the
    letter is delivered and dead ``forged_reply``; the barrier answers Bob."""
    dispatcher = server.gateway.hub.simulation.dispatcher

    async def scenario() -> None:
        bob, bob_join = await joined(server, "Bob")
        carl, _ = await joined(server, "Carl")
        mallory, mallory_join = await joined(server, "Mallory")
        await bob.ws.send(json.dumps({
            "jsonrpc": "2.0", "id": "bar-1", "method": "a2a_barrier_enter",
            "params": {"barrier_id": "b", "expected_count": 2, "timeout": 600}}))
        slot = server.gateway.hub.slots[bob_join["agent_id"]]
        for _ in range(2000):
            if slot.pending:
                break
            await asyncio.sleep(0.005)
        real_id = slot.pending[0][0]._correlation_id
        sent = await mallory.ask("barnraise.send", {"message": _letter(
            mallory_join, bob_join["agent_id"], "barrier_released", n=1,
            correlation_id=real_id)})
        assert sent["result"]["statuses"] == {bob_join["agent_id"]: "delivered"}, sent
        assert dispatcher.statistics().dead_letters.get("forged_reply") == 1
        assert not slot.pending[0][1].done()
        entered = await carl.ask("a2a_barrier_enter",
                                 {"barrier_id": "b", "expected_count": 2, "timeout": 600})
        assert entered["result"]["success"], entered
        while True:
            frame = json.loads(await asyncio.wait_for(bob.ws.recv(), 20))
            if frame.get("id") == "bar-1":
                break
        assert frame["result"]["success"] and "n" not in frame["result"], frame
        for peer in (bob, carl, mallory):
            await peer.ws.close()

    run(scenario())


def test_nobody_outside_is_or_writes_as_system_and_no_letter_reaches_a_service(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann")
        sly, sly_join = await joined(server, "system")
        assert sly_join["agent_id"] != "system"
        as_system = await sly.ask("barnraise.send", {"message": _letter(
            sly_join, ann_join["agent_id"], "ping", n=1, sender="system")})
        assert as_system["error"]["data"]["reason"] == "wrong_agent", as_system
        for n, service in enumerate(["registry", "regions", "tasks", "coordination"]):
            to_service = await sly.ask("barnraise.send", {"message": _letter(
                sly_join, service, "registry_query_x", n=n + 2)})
            assert to_service["error"]["data"]["reason"] == "not_a_member", to_service
            told = (await sly.ask("a2a_send_message", {"to_agent": service,
                                                       "message_type": "ping"}))["result"]
            assert not told["success"], told
        assert ann.notes == []
        await ann.ws.close()
        await sly.ws.close()

    run(scenario())
