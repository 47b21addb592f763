"""WebSocket /a2a with raw `websockets` clients: every fault code, identity, mail, refusals."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Coroutine
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from barnraise.gateway.hub import Limits
from barnraise.gateway.server import GatewayServer
from barnraise.sim.messages import Message, decode, encode
from tests.gateway_support import counters, served

REGION = {"x": 0, "y": 0, "width": 6, "height": 6}


def run(scenario: Coroutine[Any, Any, None], timeout: float = 60) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout))


def ws_url(server: GatewayServer) -> str:
    return f"ws://127.0.0.1:{server.port}/a2a"


class Peer:
    """A raw JSON-RPC peer: requests by id, notifications kept apart."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = 0
        self.notes: list[dict[str, Any]] = []

    async def ask(self, method: str, params: Any = None, *, raw: str | None = None,
                  request_id: Any = None) -> dict[str, Any]:
        if raw is None:
            self.ids += 1
            request_id = f"q{self.ids}" if request_id is None else request_id
            body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                body["params"] = params
            raw = json.dumps(body)
        await self.ws.send(raw)
        while True:
            answer = json.loads(await asyncio.wait_for(self.ws.recv(), 20))
            if "method" in answer:
                self.notes.append(answer)
                continue
            if request_id is not None and answer.get("id") != request_id:
                continue  # the answer to an earlier frame sent without waiting
            return dict(answer)

    async def note(self) -> dict[str, Any]:
        if self.notes:
            return self.notes.pop(0)
        answer = json.loads(await asyncio.wait_for(self.ws.recv(), 20))
        assert "method" in answer, answer
        return dict(answer)


async def joined(server: GatewayServer, name: str, role: str = "builder",
                 **headers: str) -> tuple[Peer, dict[str, Any]]:
    ws = await connect(ws_url(server), additional_headers=headers or None, compression=None)
    peer = Peer(ws)
    join = {"session_id": server.gateway.world.default_session, "agent_name": name,
            "role": role}
    if role in server.gateway.world.role_tokens:  # the operator handed it the token
        join["role_token"] = server.gateway.world.role_tokens[role]
    answer = await peer.ask("session_join", join)
    result = answer["result"]
    assert result["success"], result
    return peer, result


@pytest.fixture
def server() -> Any:
    with served() as running:
        yield running


def test_every_json_rpc_fault_gets_its_code_and_the_connection_goes_on(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        peer, _ = await joined(server, "Bob")
        cases: list[tuple[str, int]] = [
            ("{not json", -32700),
            ("[]", -32600),
            ("[" + ",".join(['{"jsonrpc": "2.0", "method": "x"}'] * 101) + "]", -32600),
            ('"a string"', -32600),
            ('{"jsonrpc": "1.0", "id": 1, "method": "region_query"}', -32600),
            ('{"jsonrpc": "2.0", "id": 1}', -32600),
            ('{"jsonrpc": "2.0", "id": true, "method": "region_query"}', -32600),
            ('{"jsonrpc": "2.0", "id": 1, "method": "region_paint", "params": {}}', -32601),
            ('{"jsonrpc": "2.0", "id": 1, "method": "region_query", "params": [1, 2]}', -32602),
            ('{"jsonrpc": "2.0", "id": 1, "method": "region_query", "params": {}}', -32602),
        ]
        for raw, code in cases:
            answer = await peer.ask("", raw=raw)
            assert answer["error"]["code"] == code, (raw, answer)
        # invalid params carry the failure an in-process call would have returned
        answer = await peer.ask("region_query", {"region": {"x": -1, "y": 0, "width": 1,
                                                            "height": 1}})
        assert answer["error"]["data"]["error"] == "invalid_argument"
        assert answer["error"]["data"]["field"] == "region.x"
        # a tool failure is a result, as in process
        answer = await peer.ask("task_accept", {"task_id": "task_none"})
        assert answer["result"]["success"] is False
        assert answer["result"]["error"] == "task_not_found"
        answer = await peer.ask("region_query", {"region": REGION})
        assert answer["result"]["success"] is True  # still serving
        await peer.ws.close()

    run(scenario())
    found = counters(server)
    assert found["parse_error"] == 1 and found["invalid_request"] == 6
    assert found["unknown_method"] == 1 and found["invalid_params"] == 3
    assert found.get("internal_error", 0) == 0


def test_a_batch_is_served_together_and_answered_in_one_array(server: GatewayServer) -> None:
    async def scenario() -> None:
        peer, _ = await joined(server, "Batcher")
        batch = [
            {"jsonrpc": "2.0", "id": "claim", "method": "region_claim",
             "params": {"region": REGION}},
            {"jsonrpc": "2.0", "method": "region_query", "params": {"region": REGION}},
            {"jsonrpc": "2.0", "id": 7, "method": "region_query",
             "params": {"region": REGION}},
            {"jsonrpc": "2.0", "id": 8, "method": "region_paint", "params": {}},
            1,
            {"jsonrpc": "2.0", "id": 9, "method": "region_query", "params": [1]},
        ]
        await peer.ws.send(json.dumps(batch))
        answer = json.loads(await asyncio.wait_for(peer.ws.recv(), 20))
        assert isinstance(answer, list)
        # one answer per request with an id or that is no request, in the batch's order;
        # the notification gets none
        assert [a.get("id") for a in answer] == ["claim", 7, 8, None, 9]
        assert answer[0]["result"]["success"] is True
        assert answer[1]["result"]["success"] is True
        assert [a.get("error", {}).get("code") for a in answer[2:]] == [-32601, -32600,
                                                                         -32602]
        # a batch of notifications gets no answer; the next request is answered alone
        await peer.ws.send(json.dumps([{"jsonrpc": "2.0", "method": "region_query",
                                        "params": {"region": REGION}}]))
        alone = await peer.ask("region_query", {"region": REGION})
        assert alone["result"]["success"] is True
        await peer.ws.close()

    run(scenario())


def test_random_frames_never_take_the_server_down(server: GatewayServer) -> None:
    rng = random.Random(7)
    words = ["jsonrpc", "2.0", "id", "method", "params", "region_query", "barnraise.ack",
             "barnraise.send", "barnraise.auth", "{", "}", "[", "]", ":", ",", '"', "null",
             "1", "-1e999", "true", "\\u0000", "seq", "message"]

    async def scenario() -> None:
        peer, _ = await joined(server, "Fuzz")
        for _ in range(300):
            if rng.random() < 0.5:
                raw = "".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
            else:
                body: Any = {"jsonrpc": rng.choice(["2.0", "2", None]),
                             "id": rng.choice([1, "x", None, [], {}]),
                             "method": rng.choice(["region_query", "barnraise.ack",
                                                   "barnraise.send", "barnraise.auth",
                                                   "task_delegate", 5]),
                             "params": rng.choice([{}, [], {"seq": "x"}, {"message": 3},
                                                   {"token": None}, {"region": [1]}])}
                raw = json.dumps(body)
            await peer.ws.send(raw)
        answer = await peer.ask("region_query", {"region": REGION})
        assert answer.get("result", {}).get("success") is True, answer
        await peer.ws.close()

    run(scenario())
    assert counters(server).get("internal_error", 0) == 0


def test_calls_before_joining_are_refused_and_join_gives_a_token(server: GatewayServer) -> None:
    async def scenario() -> None:
        async with connect(ws_url(server), compression=None) as ws:
            peer = Peer(ws)
            answer = await peer.ask("region_query", {"region": REGION})
            assert answer["error"]["code"] == -32040
            answer = await peer.ask("barnraise.auth", {"token": "forged"})
            assert answer["error"]["code"] == -32040
        peer, joined_as = await joined(server, "Ann")
        assert joined_as["token"] and len(bytes.fromhex(joined_as["signing_key"])) == 32
        answer = await peer.ask("region_claim", {"region": REGION})
        assert answer["result"]["agent_id"] == joined_as["agent_id"]
        await peer.ws.close()
        # the token opens a new connection as the same agent, as a header too
        async with connect(ws_url(server), compression=None, additional_headers={
                "Authorization": f"Bearer {joined_as['token']}"}) as ws:
            again = await Peer(ws).ask("region_query", {"region": REGION})
            assert "result" in again, again
            assert again["result"]["success"], again
            [claim] = again["result"]["claims"]
            assert claim["agent_id"] == joined_as["agent_id"]
        with pytest.raises(InvalidStatus) as refused:
            await connect(ws_url(server), additional_headers={"Authorization": "Bearer no"})
        assert refused.value.response.status_code == 403

    run(scenario())
    found = counters(server)
    assert found["unauthenticated"] == 1 and found["invalid_token"] == 2


def test_events_arrive_as_notifications_and_missed_mail_comes_back_once(
        server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann", "architect")
        bob, bob_join = await joined(server, "Bob")
        answer = await ann.ask("a2a_subscribe", {"event_type": "task_created"})
        assert answer["result"]["success"]
        await bob.ask("task_delegate", {"task_type": "build"})  # refused: a builder may not
        await ann.ask("task_delegate", {"task_type": "build", "description": "one"})
        note = await ann.note()
        assert note["method"] == "barnraise.event" and note["params"]["seq"] == 1
        event = decode(json.dumps(note["params"]["message"]),
                       bytes.fromhex(ann_join["signing_key"]))  # signed for Ann
        assert event.content["event"] == "task_created"
        assert event.content["delegated_by"] == ann_join["agent_id"]
        await ann.ws.close()

        # while Ann is away: three direct messages for her
        for n in range(3):
            sent = await bob.ask("a2a_send_message", {"to_agent": ann_join["agent_id"],
                                                      "content": {"n": n}})
            assert sent["result"]["status"] == "delivered"
        async with connect(ws_url(server), compression=None) as ws:
            back = Peer(ws)
            auth = await back.ask("barnraise.auth", {"token": ann_join["token"],
                                                     "last_seq": 1})
            assert auth["result"]["seq"] == 4
            assert auth["result"]["subscriptions"][0]["topic"].endswith(":task_created")
            notes = [await back.note() for _ in range(3)]
            assert [n["params"]["seq"] for n in notes] == [2, 3, 4]
            assert [n["params"]["message"]["content"]["n"] for n in notes] == [0, 1, 2]
            assert all(n["method"] == "barnraise.message" for n in notes)
            await back.ws.send(json.dumps({"jsonrpc": "2.0", "method": "barnraise.ack",
                                           "params": {"seq": 3}}))
        async with connect(ws_url(server), compression=None) as ws:
            again = Peer(ws)
            auth = await again.ask("barnraise.auth", {"token": ann_join["token"],
                                                      "last_seq": 3})
            last = await again.note()
            assert last["params"]["seq"] == 4  # the one not acknowledged, and only it
            quiet = await again.ask("region_query", {"region": REGION})
            assert "result" in quiet and again.notes == []
        await bob.ws.close()
        assert bob_join["agent_id"] != ann_join["agent_id"]

    run(scenario())


def test_a_retried_call_id_runs_once(server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, _ = await joined(server, "Ann", "architect")
        params = {"task_type": "build", "description": "only once"}
        first = await ann.ask("task_delegate", params, request_id="retry-key-1")
        second = await ann.ask("task_delegate", params, request_id="retry-key-1")
        assert first["result"] == second["result"]
        queue = await ann.ask("task_get_queue", {"filter": {"status": "all"}})
        assert [t["description"] for t in queue["result"]["tasks"]] == ["only once"]
        await ann.ws.close()

    run(scenario())
    assert counters(server)["calls_answered_again"] == 1


def _signed(join: dict[str, Any], to: str, *, now: float, key: bytes | None = None,
            sender: str | None = None, expires_at: float | None = 1e9,
            message_id: str = "m-1") -> dict[str, Any]:
    message = Message(message_id, now, sender or join["agent_id"], to, "status_update", 5,
                      {"hello": True}, expires_at=expires_at)
    wire: dict[str, Any] = json.loads(encode(message, key or bytes.fromhex(join["signing_key"])))
    return wire


def test_signed_messages_are_verified_and_each_refusal_counted(server: GatewayServer) -> None:
    async def scenario() -> None:
        ann, ann_join = await joined(server, "Ann", "architect")
        bob, bob_join = await joined(server, "Bob")
        to = ann_join["agent_id"]
        now = ann_join["now"]
        soon = now + 3600 * 0.5

        async def send(wire: dict[str, Any]) -> dict[str, Any]:
            return await bob.ask("barnraise.send", {"message": wire})

        good = await send(_signed(bob_join, to, now=now, expires_at=soon, message_id="ok-1"))
        assert good["result"]["statuses"] == {to: "delivered"}
        note = await ann.note()
        assert note["params"]["message"]["from_agent"] == bob_join["agent_id"]

        refusals = {
            "bad_signature": _signed(bob_join, to, now=now, expires_at=soon, key=b"k" * 32,
                                     message_id="bad-1"),
            "wrong_agent": _signed(bob_join, to, now=now, expires_at=soon, sender=to,
                                   message_id="wrong-1"),
            "expired": _signed(bob_join, to, now=now, expires_at=0.001, message_id="old-1"),
            "no_expiry": _signed(bob_join, to, now=now, expires_at=None, message_id="ne-1"),
            "replayed": _signed(bob_join, to, now=now, expires_at=soon, message_id="ok-1"),
            "not_a_member": _signed(bob_join, "coordinator", now=now, expires_at=soon,
                                    message_id="svc-1"),
        }
        for reason, wire in refusals.items():
            answer = await send(wire)
            assert answer["error"]["code"] == -32041, (reason, answer)
            assert answer["error"]["data"]["reason"] == reason
        tampered = _signed(bob_join, to, now=now, expires_at=soon, message_id="t-1")
        tampered["content"] = {"hello": False}
        assert (await send(tampered))["error"]["data"]["reason"] == "bad_signature"
        assert ann.notes == []  # nothing refused reached Ann
        await ann.ws.close()
        await bob.ws.close()

    run(scenario())
    found = counters(server)
    for reason in ("wrong_agent", "expired", "no_expiry", "replayed", "not_a_member"):
        assert found[reason] == 1, (reason, found)
    assert found["bad_signature"] == 2 and found["signed_messages_routed"] == 1


def test_oversized_frames_are_refused_and_counted() -> None:
    with served(limits=Limits(max_frame=4096)) as server:
        async def scenario() -> None:
            peer, _ = await joined(server, "Big")
            await peer.ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "region_query",
                                           "params": {"pad": "x" * 5000}}))
            answer = json.loads(await asyncio.wait_for(peer.ws.recv(), 20))
            assert answer["error"]["code"] == -32600 and "over the limit" in \
                answer["error"]["message"]
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(peer.ws.recv(), 20)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
            # past the protocol layer's own bound the frame never reaches the app
            peer2, _ = await joined(server, "Bigger")
            await peer2.ws.send("x" * (4 * 4096 + 10))
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(peer2.ws.recv(), 20)

        run(scenario())
        assert counters(server)["frame_too_large"] == 2


def test_a_slow_consumer_is_dropped_and_keeps_its_mail() -> None:
    with served(limits=Limits(send_queue=4)) as server:
        async def scenario() -> None:
            slow, slow_join = await joined(server, "Slow")
            fast, _ = await joined(server, "Fast")
            pad = "x" * 60_000
            sent = 0
            for n in range(400):  # ~24 MB: more than the socket buffers hold
                answer = await fast.ask("a2a_send_message", {
                    "to_agent": slow_join["agent_id"], "content": {"n": n, "pad": pad}})
                assert answer["result"]["success"], answer
                sent += 1
                if n % 50 == 49 and counters(server).get("slow_consumer"):
                    break
            assert counters(server)["slow_consumer"] == 1
            # the agent's mail waits for a connection that reads
            async with connect(ws_url(server), compression=None, max_size=None) as ws:
                back = Peer(ws)
                await back.ask("barnraise.auth", {"token": slow_join["token"],
                                                  "last_seq": 0})
                seen = [(await back.note())["params"]["message"]["content"]["n"]
                        for _ in range(sent)]
                assert seen == list(range(sent))
            await fast.ws.close()
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(slow.ws.recv(), 20)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            assert "slow consumer" in closed.value.rcvd.reason

        run(scenario(), timeout=120)


def test_a_foreign_origin_is_refused_and_a_local_page_is_not(server: GatewayServer) -> None:
    async def scenario() -> None:
        with pytest.raises(InvalidStatus) as refused:
            await connect(ws_url(server), origin="http://evil.example")  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403
        own = f"http://127.0.0.1:{server.port}"
        async with connect(ws_url(server), origin=own) as ws:  # type: ignore[arg-type]
            answer = await Peer(ws).ask("region_query", {"region": REGION})
            assert answer["error"]["code"] == -32040  # connected; not yet an agent

    run(scenario())
    assert counters(server)["foreign_origin"] == 1


def test_connections_that_never_join_leave_no_agent_behind() -> None:
    with served(limits=Limits(agents=2)) as server:
        session = server.gateway.world.default_session
        hub = server.gateway.hub

        async def scenario() -> None:
            for attempt in range(4):  # twice the limit, each on its own connection
                async with connect(ws_url(server), compression=None) as ws:
                    answer = await Peer(ws).ask("session_join", {
                        "session_id": session, "agent_name": f"C{attempt}",
                        "role": "architect"})
                    assert answer["result"]["error"] == "permission_denied", answer
            for _ in range(200):  # the server notices each close on its own loop
                if not hub.slots:
                    break
                await asyncio.sleep(0.01)
            peer, result = await joined(server, "Welcome")
            assert result["success"]
            await peer.ws.close()

        run(scenario())
        assert counters(server)["guests_released"] == 4
        assert [slot.session_id for slot in hub.slots.values()] == [session]


def test_a_connection_that_leaves_with_its_failing_join_under_way_leaves_no_agent() -> None:
    """A join sent and its connection closed before the answer: the slot cannot be
    dropped at the close (its join is under way), so it is dropped once the join is
    answered without a token. Such slots used to stay for good and, at Limits.agents,
    refused every join."""
    with served(limits=Limits(agents=2)) as server:
        session = server.gateway.world.default_session
        hub = server.gateway.hub

        async def scenario() -> None:
            for attempt in range(20):
                async with connect(ws_url(server), compression=None) as ws:
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1,
                                              "method": "session_join", "params": {
                                                  "session_id": session, "role": "architect",
                                                  "agent_name": f"Gone{attempt}"}}))
            for _ in range(500):  # the close and the answer reach the loop on their own
                if not hub.slots:
                    break
                await asyncio.sleep(0.01)
            assert not hub.slots, list(hub.slots)
            peer, result = await joined(server, "Welcome")
            assert result["success"], result
            await peer.ws.close()

        run(scenario())


def test_a_frozen_heap_serves_as_before_and_is_given_back_on_stop() -> None:
    import gc

    assert gc.get_freeze_count() == 0
    with served(freeze_heap=True) as server:
        # Everything that existed when it started is out of the collector's walk.
        assert gc.get_freeze_count() > 10_000
        hub = server.gateway.hub

        async def scenario() -> None:
            peer, result = await joined(server, "Frozen")
            assert result["token"]
            region = {"x": 0, "y": 0, "width": 4, "height": 4}
            answer = await peer.ask("region_query", {"region": region})
            assert answer["result"]["success"], answer
            await peer.ws.close()

        run(scenario())
        # The agent it served is kept for its return, as without the freeze.
        assert [slot.token is not None for slot in hub.slots.values()] == [True]
    assert gc.get_freeze_count() == 0  # stop() unfroze it
