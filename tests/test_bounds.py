"""Finding 5 of issue 23: nothing one agent piles up is unbounded, and what a closed
connection held is given back.

Over the real gateway (127.0.0.1): pipelined calls past a bound are refused
``limit_exceeded`` naming the bound and change nothing in the world; subscriptions
past the bound are refused; after the socket closes the hub's own counts return
to where they were. In process: the world bounds subscriptions per agent, and an
identical subscription is the one already held (it used to deliver every event
once more).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from barnraise.actors.world import Simulation
from barnraise.gateway.hub import Hub, Limits
from barnraise.gateway.server import GatewayServer
from barnraise.sim.tools import WorldLimits
from tests.gateway_support import counters, served
from tests.helpers import session_crew


def run(scenario: Any, timeout: float = 60) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout))


async def until(check: Any, timeout: float = 20.0) -> None:
    """Wait (polling, bounded) until ``check()`` is true; fail naming it otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not true within {timeout} s: {check}")
        await asyncio.sleep(0.02)


async def join(server: GatewayServer, name: str) -> tuple[ClientConnection, dict[str, Any]]:
    ws = await connect(f"ws://127.0.0.1:{server.port}/a2a", compression=None)
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": "join", "method": "session_join",
                              "params": {"session_id": server.gateway.world.default_session,
                                         "agent_name": name, "role": "builder"}}))
    answer = json.loads(await asyncio.wait_for(ws.recv(), 20))
    assert answer["result"]["success"], answer
    return ws, answer["result"]


async def pipeline(ws: ClientConnection, calls: list[tuple[str, dict[str, Any]]],
                   first_id: int = 1) -> None:
    """Send every call without waiting for an answer (integer ids: no retry keys)."""
    for n, (method, params) in enumerate(calls, first_id):
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": method,
                                  "params": params}))


async def answers(ws: ClientConnection, count: int) -> dict[int, dict[str, Any]]:
    """The next ``count`` answers, by id (notifications skipped)."""
    found: dict[int, dict[str, Any]] = {}
    while len(found) < count:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
        if "id" in frame:
            found[frame["id"]] = frame
    return found


def barrier_waits(count: int, timeout: float = 3600.0,
                  first: int = 0) -> list[tuple[str, dict[str, Any]]]:
    # Each at a barrier of its own that nobody else enters: it waits out its timeout.
    return [("a2a_barrier_enter", {"barrier_id": f"b{n}", "expected_count": 2,
                                   "timeout": timeout}) for n in range(first, first + count)]


def barriers(server: GatewayServer) -> set[str]:
    world = server.gateway.world
    return {b.barrier_id for b in world.simulation.view(world.default_session).barriers}


def refused(frame: dict[str, Any]) -> str:
    result = frame["result"]
    assert result["success"] is False and result["error"] == "limit_exceeded", frame
    return str(result["limit"])


def test_limits_refuse_a_bad_bound_by_name() -> None:
    for field in ("calls", "calls_per_connection", "waits", "subscriptions", "outbox"):
        with pytest.raises(ValueError, match=rf"Limits\.{field} must be a positive int"):
            Limits(**{field: 0})
    with pytest.raises(ValueError, match=r"Limits\.max_ttl"):
        Limits(max_ttl=float("inf"))
    with pytest.raises(ValueError, match=r"WorldLimits\.max_subscriptions"):
        WorldLimits(max_subscriptions=0)


def test_pipelined_waits_past_the_bound_are_refused_and_leave_no_barrier() -> None:
    with served(limits=Limits(waits=20)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            ws, _ = await join(server, "Flood")
            await pipeline(ws, barrier_waits(60))
            got = await answers(ws, 40)  # the 20 taken wait; the rest answer at once
            assert sorted(got) == list(range(21, 61))
            assert {refused(frame) for frame in got.values()} == {"waits"}
            assert barriers(server) == {f"b{n}" for n in range(20)}
            assert hub.held()["waits"] == 20
            await ws.close()

        run(scenario())
        found = counters(server)
        assert found["limit_exceeded"] == 40 and found["limit_exceeded:waits"] == 40


def test_calls_past_the_agent_bound_and_the_connection_bound_are_refused() -> None:
    with served(limits=Limits(calls=30, waits=1000, calls_per_connection=1000)) as server:
        async def scenario() -> None:
            ws, _ = await join(server, "Many")
            await pipeline(ws, barrier_waits(40))
            got = await answers(ws, 10)
            assert sorted(got) == list(range(31, 41))
            assert {refused(frame) for frame in got.values()} == {"calls"}
            assert barriers(server) == {f"b{n}" for n in range(30)}
            await ws.close()

        run(scenario())
        assert counters(server)["limit_exceeded:calls"] == 10

    # The tool fast path counts against the connection too (it used to escape it).
    with served(limits=Limits(calls=1000, waits=1000, calls_per_connection=12)) as server:
        async def per_connection() -> None:
            ws, _ = await join(server, "Wide")
            await pipeline(ws, barrier_waits(15))
            got = await answers(ws, 3)
            assert {refused(frame) for frame in got.values()} == {"calls_per_connection"}
            assert server.gateway.hub.connection_load == 12
            # A method served by a task of its own is refused as a JSON-RPC error.
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": "ack", "method": "barnraise.ack",
                                      "params": {"seq": 0}}))
            error = (await answers(ws, 1))["ack"]["error"]
            assert error["data"] == {"reason": "limit_exceeded",
                                     "limit": "calls_per_connection"}
            assert len(barriers(server)) == 12
            await ws.close()

        run(per_connection())


def test_a_closed_connection_gives_back_what_it_held() -> None:
    # 20 simulated seconds of barrier timeout are 1 wall second at the tests' time scale.
    with served(limits=Limits(waits=8)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            ws, joined = await join(server, "Gone")
            slot = hub.slots[joined["agent_id"]]
            baseline = hub.held()
            outbox = len(slot.outbox)
            await pipeline(ws, barrier_waits(12, timeout=20.0))
            got = await answers(ws, 4)
            assert {refused(frame) for frame in got.values()} == {"waits"}
            assert hub.held()["calls"] == baseline["calls"] + 8
            await ws.close()
            # At once: the connection's calls forgotten, its load gone; what the world
            # still owes (the waits) counts against the agent until it is answered.
            await until(lambda: hub.held()["connection_load"] == 0)
            held = hub.held()
            assert held["calls"] == baseline["calls"] and held["orphans"] == 8
            assert held["waits"] == 8 and counters(server)["calls_abandoned"] == 8
            assert slot.sink is None and slot.closer is None  # the hub lets go of it
            # Reconnecting does not reset the bound.
            again = await connect(f"ws://127.0.0.1:{server.port}/a2a", compression=None)
            await again.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "barnraise.auth",
                                         "params": {"token": joined["token"]}}))
            await answers(again, 1)
            await pipeline(again, barrier_waits(1), first_id=2)
            assert refused((await answers(again, 1))[2]) == "waits"
            await again.close()
            # The world's answers come (the barriers time out) and are dropped, not mail.
            await until(lambda: hub.held() == baseline)
            assert len(slot.outbox) == outbox
            actor = slot.client._actor
            assert actor.replies == {} and actor.expected == {} and not actor.inbox
            assert counters(server)["orphan_answers_dropped"] == 8

        run(scenario())


def test_subscriptions_past_the_bound_are_refused_and_an_identical_one_is_the_same() -> None:
    with served(limits=Limits(subscriptions=5)) as server:
        hub = server.gateway.hub
        dispatcher = server.gateway.world.simulation.dispatcher

        async def scenario() -> None:
            ws, joined = await join(server, "Ears")
            events = [f"event_{n}" for n in range(8)]
            await pipeline(ws, [("a2a_subscribe", {"event_type": e}) for e in events])
            got = await answers(ws, 8)
            taken = [n for n in range(1, 9) if got[n]["result"]["success"]]
            assert len(taken) == 5
            assert {refused(got[n]) for n in range(1, 9) if n not in taken} == {"subscriptions"}
            slot = hub.slots[joined["agent_id"]]
            assert len(slot.subscriptions) == 5
            topics = {got[n]["result"]["topic"] for n in taken}
            assert len(topics) == 5 and all(
                dispatcher.subscribers(t) == [joined["agent_id"]] for t in topics)
            assert sum(joined["agent_id"] in dispatcher.subscribers(
                f"session:{slot.session_id}:events:{e}") for e in events) == 5
            await ws.close()

        run(scenario())

    with served() as server:
        async def identical() -> None:
            ws, joined = await join(server, "Twice")
            await pipeline(ws, [("a2a_subscribe", {"event_type": "agent_joined"})] * 2)
            await asyncio.sleep(0)
            got = await answers(ws, 2)
            first, second = got[1]["result"], got[2]["result"]
            assert first["success"] and first == second
            slot = server.gateway.hub.slots[joined["agent_id"]]
            assert len(slot.subscriptions) == 1
            await ws.close()

        run(identical())


def test_an_identical_subscription_at_the_bound_answers_the_one_held() -> None:
    """Below the bound an identical a2a_subscribe answered the id already held; at the
    bound the hub refused it (limit_exceeded) before the world could say so."""
    with served(limits=Limits(subscriptions=3)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            ws, joined = await join(server, "Full")
            asks = [("a2a_subscribe", {"event_type": f"event_{n}"}) for n in range(3)]
            await pipeline(ws, asks)
            held = await answers(ws, 3)
            assert all(held[n]["result"]["success"] for n in (1, 2, 3)), held
            filtered = ("a2a_subscribe", {"event_type": "event_1", "filter": {"a": 1}})
            again = [asks[0], asks[2], asks[0], ("a2a_subscribe", {"event_type": "event_9"}),
                     filtered]
            await pipeline(ws, again, first_id=4)
            got = await answers(ws, 5)
            for n, first in ((4, 1), (5, 3), (6, 1)):
                assert got[n]["result"] == held[first]["result"], (got[n], held[first])
            assert refused(got[7]) == "subscriptions"  # a new one: still refused
            assert refused(got[8]) == "subscriptions"  # another filter is another one
            slot = hub.slots[joined["agent_id"]]
            assert [s["subscription_id"] for s in slot.subscriptions] == [
                held[n]["result"]["subscription_id"] for n in (1, 2, 3)]
            await ws.close()

        run(scenario())
        assert counters(server)["limit_exceeded:subscriptions"] == 2


def test_spellings_of_one_subscription_are_remembered_once_and_small() -> None:
    """The world answers several spellings of one subscription with one id; the hub
    keeps one 16-byte key for it, not one fingerprint a spelling (an agent spelling a
    60 KB topic many ways held megabytes)."""
    with served(limits=Limits(subscriptions=3)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            ws, joined = await join(server, "Speller")
            try:
                sid = server.gateway.world.default_session
                spellings = [{"event_type": "event_0"}, {"topic": "events:event_0"},
                             {"topic": f"session:{sid}:events:event_0"},
                             {"topic": "events:event_0", "event_type": ""}]
                ids = set()
                for n, args in enumerate(spellings, 1):
                    # one at a time: pipelined, asks not yet answered count to the bound
                    await pipeline(ws, [("a2a_subscribe", args)], first_id=n)
                    got = await answers(ws, 1)
                    assert got[n]["result"]["success"], got
                    ids.add(got[n]["result"]["subscription_id"])
                assert len(ids) == 1, ids
                slot = hub.slots[joined["agent_id"]]
                await until(lambda: len(slot.subscribed_as) == 1)
                assert [len(key) for key in slot.subscribed_as] == [16]
                assert list(slot.subscribed_as.values()) == list(ids)
            finally:
                await ws.close()

        run(scenario())


def test_kept_mail_is_bounded_and_the_overflow_counted() -> None:
    with served(limits=Limits(outbox=5)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            quiet, quiet_join = await join(server, "Quiet")  # never acknowledges
            loud, _ = await join(server, "Loud")
            await pipeline(loud, [("a2a_send_message", {"to_agent": quiet_join["agent_id"],
                                                        "content": {"n": n}})
                                  for n in range(8)])
            assert all(f["result"]["success"] for f in (await answers(loud, 8)).values())
            slot = hub.slots[quiet_join["agent_id"]]
            await until(lambda: slot.seq == 8)
            assert [seq for seq, _ in slot.outbox] == [4, 5, 6, 7, 8]
            await quiet.close()
            await loud.close()

        run(scenario())
        assert counters(server)["outbox_overflow"] == 3


def test_the_per_agent_bound_holds_on_every_surface() -> None:
    # The bound is the hub's, not a connection's: a call over any surface goes through
    # Hub.start (MCP and A2A over HTTP included).
    with Simulation(seed=1, mode="realtime", time_scale=20.0) as simu:
        hub = Hub(simu, limits=Limits(waits=2))

        async def scenario() -> None:
            hub.bind(asyncio.get_running_loop())
            slot = hub.new_slot()
            made = await hub.call(slot, "session_create", {"session_name": "s",
                                                           "grid_size": 20})
            assert made["success"], made
            assert (await hub.call(slot, "session_join", {"agent_name": "A"}))["success"]
            waits = [hub.start(slot, "a2a_barrier_enter", {"barrier_id": f"b{n}",
                                                           "expected_count": 2})
                     for n in range(2)]
            third = await hub.call(slot, "a2a_lock_acquire", {"lock_id": "L", "wait": 5})
            assert third["error"] == "limit_exceeded" and third["limit"] == "waits"
            assert not any(w.done() for w in waits)
            assert hub.abandon(slot, set(waits)) == 2 and slot.orphans

        try:
            asyncio.run(asyncio.wait_for(scenario(), 30))
        finally:
            hub.close()


# -- in process ---------------------------------------------------------------------------


def test_the_world_bounds_subscriptions_and_an_identical_one_delivers_once() -> None:
    with Simulation(seed=1, limits=WorldLimits(max_subscriptions=3)) as simu:
        crew = session_crew(simu)
        watcher = crew.observer
        first = watcher.a2a_subscribe(event_type="region_claimed")
        again = watcher.a2a_subscribe(event_type="region_claimed")
        assert first["success"] and again == first  # the same subscription
        reordered = watcher.a2a_subscribe(event_type="task_created",
                                          filter={"agent_type": "builder", "region": None})
        same = watcher.a2a_subscribe(event_type="task_created",
                                     filter={"region": None, "agent_type": "builder"})
        assert reordered["success"] and same == reordered
        assert watcher.a2a_subscribe(event_type="task_completed")["success"]
        over = watcher.a2a_subscribe(event_type="agent_left")
        assert over["error"] == "limit_exceeded" and over["limit"] == "max_subscriptions"
        topic = f"session:{crew.sid}:events:agent_left"
        assert watcher.agent_id not in simu.dispatcher.subscribers(topic)  # changed nothing
        # Others are bounded on their own.
        assert crew.tester.a2a_subscribe(event_type="agent_left")["success"]
        watcher.messages()
        assert crew.a.region_claim(region={"x": 0, "y": 0, "width": 4, "height": 4})["success"]
        simu.advance(1)
        claimed = [m for m in watcher.messages()
                   if m.content.get("event") == "region_claimed"]
        assert len(claimed) == 1  # twice before: one delivery per subscription
        # A subscription that is gone (unsubscribed) no longer counts.
        assert simu.dispatcher.unsubscribe(first["subscription_id"])
        assert watcher.a2a_subscribe(event_type="agent_left")["success"]


def test_the_flood_benchmark_measures_a_bounded_flood() -> None:
    from benchmarks import gateway_bench

    figures = gateway_bench.bench_flood(calls=300)
    assert figures["client"]["refused_by"] == {"waits": 300 - 64}
    assert figures["flooded"]["held"]["waits"] == 64
    closed = figures["closed"]["held"]
    assert closed["calls"] == 0 and closed["connection_load"] == 0 and closed["orphans"] == 64
    assert figures["before"]["rss_mb"] > 0


def test_a2a_over_http_answers_the_bound_in_its_data_part() -> None:
    import httpx

    def send(tool: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
            "messageId": f"bound-{n}", "role": "ROLE_USER",
            "parts": [{"data": {"tool": tool, "arguments": arguments}}]}}}

    def data(answer: httpx.Response) -> dict[str, Any]:
        body = answer.json()
        return dict(body["result"]["message"]["parts"][0]["data"])

    with served(limits=Limits(waits=1)) as server:
        hub = server.gateway.hub
        url = server.url + "/a2a/jsonrpc"

        async def scenario() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                joined = data(await http.post(url, json=send("session_join", {
                    "session_id": server.gateway.world.default_session,
                    "agent_name": "Http", "role": "builder"}, 1)))
                assert joined["success"], joined
                auth = {"Authorization": f"Bearer {joined['token']}"}
                # 40 simulated seconds: 2 wall seconds at the tests' time scale
                first = asyncio.create_task(http.post(url, headers=auth, json=send(
                    "a2a_barrier_enter", {"barrier_id": "b", "expected_count": 2,
                                          "timeout": 40}, 2)))
                await until(lambda: hub.held()["waits"] == 1)
                second = data(await http.post(url, headers=auth, json=send(
                    "a2a_lock_acquire", {"lock_id": "L", "wait": 5}, 3)))
                assert second["error"] == "limit_exceeded" and second["limit"] == "waits"
                assert server.gateway.world.simulation.view(
                    server.gateway.world.default_session).locks == ()  # changed nothing
                waited = data(await first)
                assert waited["success"] and waited["released"] is False
            assert hub.held()["waits"] == 0

        run(scenario())
        assert counters(server)["limit_exceeded:waits"] == 1


def test_a_batch_counts_as_its_requests_and_is_forgotten_at_close() -> None:
    with served(limits=Limits(calls_per_connection=4)) as server:
        hub = server.gateway.hub

        async def scenario() -> None:
            ws, _ = await join(server, "Batch")
            baseline = hub.held()
            batch = [{"jsonrpc": "2.0", "id": n, "method": method, "params": params}
                     for n, (method, params) in enumerate(barrier_waits(3), 1)]
            await ws.send(json.dumps(batch))
            await until(lambda: hub.held()["waits"] == 3)
            assert hub.connection_load == 3
            await pipeline(ws, barrier_waits(2, first=3), first_id=10)  # room for one more
            assert refused((await answers(ws, 1))[11]) == "calls_per_connection"
            await ws.close()
            await until(lambda: hub.held()["connection_load"] == 0)
            held = hub.held()
            assert held["calls"] == baseline["calls"] and held["orphans"] == 4

        run(scenario())


def test_a_subscription_the_world_no_longer_holds_leaves_the_agents_count() -> None:
    with served(limits=Limits(subscriptions=2)) as server:
        hub = server.gateway.hub
        dispatcher = server.gateway.world.simulation.dispatcher

        async def scenario() -> None:
            ws, joined = await join(server, "Ends")
            await pipeline(ws, [("a2a_subscribe", {"event_type": e}) for e in ("x", "y", "z")])
            got = await answers(ws, 3)
            assert refused(got[3]) == "subscriptions"
            # One ends in the world (as when its agent leaves): room for another.
            assert dispatcher.unsubscribe(got[1]["result"]["subscription_id"])
            await pipeline(ws, [("barnraise.auth", {"token": joined["token"]})], first_id=9)
            listed = (await answers(ws, 1))[9]["result"]["subscriptions"]
            assert [s["subscription_id"] for s in listed] == \
                [got[2]["result"]["subscription_id"]]  # what a reconnecting client checks
            await pipeline(ws, [("a2a_subscribe", {"event_type": "z"})], first_id=4)
            assert (await answers(ws, 1))[4]["result"]["success"]
            slot = hub.slots[joined["agent_id"]]
            assert [s["topic"].rsplit(":", 1)[1] for s in slot.subscriptions] == ["y", "z"]
            await ws.close()

        run(scenario())


def test_the_host_sets_the_worlds_bound() -> None:
    from barnraise.gateway.hosting import HostedWorld
    from barnraise.gateway.server import Gateway

    hosted = HostedWorld(time_scale=20.0, limits=WorldLimits(max_subscriptions=1))
    try:
        server = GatewayServer(Gateway(hosted, limits=Limits(subscriptions=50)), "127.0.0.1", 0)
        server.start()
        try:
            async def scenario() -> None:
                ws, _ = await join(server, "Host")
                await pipeline(ws, [("a2a_subscribe", {"event_type": e}) for e in ("x", "y")])
                got = await answers(ws, 2)
                assert got[1]["result"]["success"]
                assert refused(got[2]) == "max_subscriptions"  # the world's own refusal
                await ws.close()

            run(scenario())
            found = counters(server)
            assert found["limit_exceeded:max_subscriptions"] == 1
            assert found["limit_exceeded"] == 1
        finally:
            server.stop()
    finally:
        hosted.close()
    with pytest.raises(ValueError, match="limits"):
        HostedWorld(simulation=hosted.simulation, limits=WorldLimits())
