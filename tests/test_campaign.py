"""A standing campaign of bad input (issues 11 and 23).

In process: every tool, driven with values drawn from its own schema, valid and not, one
call at a time and in random sequences. After every step: every result is a dict with
``success`` and a known error code, nothing raises out of ``Client.call``, no handler or
behaviour error, exclusive claims never overlap, no tile outside its writer's claims, no
task completed twice, the progress counters agree with the canvas.

Over the network: the same tools over the gateway's WebSocket, and a state machine
(``Surfaces``) over every surface of one served world and one ``barnraise mcp``
subprocess (both started once for the module and stopped at its end): tool calls over
the WebSocket and the A2A JSON-RPC HTTP binding by three members; cross-site, rebinding,
over-deep, non-UTF-8 and oversize HTTP requests; signed ``task_response``
letters aimed at another member's barrier call with guessed and real correlation ids;
barrier waits pipelined and subscriptions asked past the hub's ``Limits``; connections
cut with calls under way; ``view.control`` without the operator's token, with a wrong
one and with it (speeds in and out of the clock's bound); MCP stdio lines that are not
requests, and valid calls. After every step: no answer carries a forger's content, a
refused request left the world's members, claims, tasks, canvas and clock scale as they
were, the clock is finite and in its bound, the hub holds no more than its ``Limits``,
no ``internal_error`` was counted, and ``/healthz`` answers.

The default profile keeps it short for CI; ``--hypothesis-profile=long`` runs it deep.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)
from websockets.sync.client import connect as ws_connect

from barnraise.actors.world import Client, Simulation
from barnraise.gateway.hub import Limits
from barnraise.sim.clock import MAX_TIME_SCALE, MIN_TIME_SCALE
from tests.campaign import (
    EVENT_TYPES,
    GRID,
    Member,
    check_result,
    check_world,
    covered_by_claims,
    forged_letter,
    region_values,
    tiles_for,
    tool_call,
    unforged,
    until,
    world_state,
)
from tests.helpers import Crew, session_crew


def scaled(examples: int, **options: Any) -> settings:
    """``examples`` under the default profile, twenty times as many under
    ``--hypothesis-profile=long`` (tests/conftest.py registers it)."""
    factor = settings.default.max_examples / 100
    return settings(deadline=None, max_examples=max(1, int(examples * factor)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture],
                    **options)



class World:
    """A small session and its crew, a member of another session, and one who left."""

    def __init__(self, seed: int = 5) -> None:
        self.simu = Simulation(seed=seed)
        self.crew: Crew = session_crew(self.simu, grid=GRID)
        self.sid = self.crew.sid
        self.other = session_crew(self.simu, grid=GRID, name="Other")
        self.gone = self.simu.client("gone")
        assert self.gone.session_join(session_id=self.sid, agent_name="Gone")["success"]
        assert self.gone.session_leave()["success"]
        self.claim = self.crew.a.region_claim(region={"x": 0, "y": 0, "width": 6,
                                                      "height": 6})["claim_id"]
        self.task = self.crew.arch.task_delegate(task_type="build")["task_id"]
        self.callers = [self.crew.arch, self.crew.a, self.crew.b, self.crew.tester,
                        self.crew.observer, self.other.a, self.gone]
        self.ids = st.sampled_from([self.sid, self.other.sid, self.claim, self.task,
                                    "a", "b", "arch", "A", "Arch", "other-a", "session_x",
                                    "task_none", "claim_none"])

    def call(self, caller: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        region = args.get("region")
        inside = None
        if tool == "builder_place_tiles" and isinstance(region, dict):
            try:
                inside = covered_by_claims(self.simu, self.sid, caller.agent_id, region)
            except (ValueError, TypeError):
                inside = None
        result = caller.call_any(tool, args)  # must never raise
        check_result(tool, result)
        if result["success"] and tool == "builder_place_tiles" and \
                caller.session_id == self.sid:
            assert inside, f"{caller.agent_id} wrote {region} outside its claims"
        return result

    def close(self) -> None:
        self.simu.close()


@scaled(60)
@given(data=st.data())
def test_every_tool_with_valid_and_invalid_arguments(data: st.DataObject) -> None:
    world = World()
    try:
        for _ in range(3):
            caller = data.draw(st.sampled_from(world.callers))
            tool, args, _ = data.draw(tool_call(world.ids))
            world.call(caller, tool, args)
            check_world(world.simu, world.sid)
    finally:
        world.close()


class Sequences(RuleBasedStateMachine):
    """Random sequences of calls, in and out of order, by members, outsiders and leavers."""

    claims = Bundle("claims")
    tasks = Bundle("tasks")
    checkpoints = Bundle("checkpoints")

    @initialize()
    def start(self) -> None:
        self.world = World(seed=9)

    def teardown(self) -> None:
        self.world.close()

    def _caller(self, index: int) -> Client:
        return self.world.callers[index % len(self.world.callers)]

    @rule(target=claims, who=st.integers(0, 6), region=region_values(True),
          exclusive=st.booleans())
    def claim(self, who: int, region: dict[str, int], exclusive: bool) -> Any:
        got = self.world.call(self._caller(who), "region_claim",
                              {"region": region, "exclusive": exclusive, "timeout": 30})
        return got.get("claim_id", "claim_none")

    @rule(who=st.integers(0, 6), claim_id=consumes(claims))
    def release(self, who: int, claim_id: str) -> None:
        self.world.call(self._caller(who), "region_release", {"claim_id": claim_id})

    @rule(data=st.data(), who=st.integers(0, 6), region=region_values(True))
    def place(self, data: st.DataObject, who: int, region: dict[str, int]) -> None:
        tiles = data.draw(tiles_for(region, data.draw(st.booleans())))
        self.world.call(self._caller(who), "builder_place_tiles",
                        {"region": region, "tiles": tiles})

    @rule(target=tasks, who=st.integers(0, 6), deps=st.lists(st.sampled_from(["task_none"]),
                                                              max_size=1))
    def delegate(self, who: int, deps: list[str]) -> Any:
        got = self.world.call(self._caller(who), "task_delegate",
                              {"task_type": "build", "dependencies": deps})
        return multiple(got["task_id"]) if got["success"] else multiple()

    @rule(who=st.integers(0, 6), task_id=tasks)
    def accept(self, who: int, task_id: str) -> None:
        self.world.call(self._caller(who), "task_accept", {"task_id": task_id})

    @rule(who=st.integers(0, 6), task_id=tasks,
          status=st.sampled_from(["in_progress", "completed", "failed", "nonsense"]))
    def report(self, who: int, task_id: str, status: str) -> None:
        self.world.call(self._caller(who), "task_report", {"task_id": task_id,
                                                           "status": status})

    @rule(target=checkpoints, who=st.integers(0, 6))
    def checkpoint(self, who: int) -> Any:
        got = self.world.call(self._caller(who), "build_checkpoint", {})
        return multiple(got["checkpoint_id"]) if got["success"] else multiple()

    @rule(who=st.integers(0, 6), checkpoint_id=checkpoints)
    def rollback(self, who: int, checkpoint_id: str) -> None:
        self.world.call(self._caller(who), "build_rollback", {"checkpoint_id": checkpoint_id})

    @rule(who=st.integers(0, 6), lock=st.sampled_from(["l1", "l2"]), release=st.booleans())
    def lock(self, who: int, lock: str, release: bool) -> None:
        tool = "a2a_lock_release" if release else "a2a_lock_acquire"
        self.world.call(self._caller(who), tool, {"lock_id": lock})

    @rule(who=st.integers(0, 6), data=st.data())
    def anything(self, who: int, data: st.DataObject) -> None:
        tool, args, _ = data.draw(tool_call(self.world.ids))
        self.world.call(self._caller(who), tool, args)

    @invariant()
    def world_holds(self) -> None:
        if hasattr(self, "world"):
            check_world(self.world.simu, self.world.sid)


Sequences.TestCase.settings = scaled(15, stateful_step_count=20)
test_random_sequences_of_calls = Sequences.TestCase


# -- the same over the network --------------------------------------------------------------


_NAMES = itertools.count(1)  # each example joins the served session as a new agent


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


@pytest.fixture(scope="module")
def server() -> Any:
    pytest.importorskip("websockets")
    from tests.gateway_support import served

    with served() as running:
        yield running


@scaled(25)
@given(data=st.data())
def test_every_tool_over_the_websocket(server: Any, data: st.DataObject) -> None:
    from websockets.asyncio.client import connect

    from tests.gateway_support import counters

    ids = st.sampled_from([str(server.gateway.world.default_session), "task_none", "x"])
    calls = [data.draw(tool_call(ids)) for _ in range(4)]
    port = server.port

    async def scenario() -> None:
        async with connect(f"ws://127.0.0.1:{port}/a2a", compression=None) as ws:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "session_join",
                                      "params": {"session_id": server.gateway.world
                                                 .default_session, "agent_name":
                                                 f"fuzz-{next(_NAMES)}"}}))
            joined = json.loads(await asyncio.wait_for(ws.recv(), 20))
            assert joined["result"]["success"], joined
            for number, (tool, args, _) in enumerate(calls, 1):
                frame = {"jsonrpc": "2.0", "id": number, "method": tool, "params": args}
                raw = json.dumps(frame) if _jsonable(frame) else json.dumps(frame, default=repr)
                await ws.send(raw)
                while True:
                    answer = json.loads(await asyncio.wait_for(ws.recv(), 20))
                    # a frame that is not JSON (NaN is no JSON number) has no id to echo
                    if answer.get("id") == number or (
                            answer.get("id") is None and "error" in answer):
                        break
                if "result" in answer:
                    check_result(tool, answer["result"])
                else:
                    assert answer["error"]["code"] in (-32700, -32600, -32601, -32602,
                                                       -32040, -32041), answer
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": "last", "method":
                                      "session_get_state", "params": {}}))
            while True:
                last = json.loads(await asyncio.wait_for(ws.recv(), 20))
                if last.get("id") == "last":
                    break
            check_result("session_get_state", last["result"])  # still serving

    asyncio.run(asyncio.wait_for(scenario(), 60))
    found = counters(server)
    assert found.get("internal_error", 0) == 0, found
    assert server.gateway.world.simulation.dispatcher.behaviour_errors == 0


# -- every surface of one served world -------------------------------------------------------

#: Tools the surfaces' machine calls with drawn arguments: none of them waits, so a step's
#: effects are all in before the next step (the waits have rules of their own).
QUICK_TOOLS = ("session_get_state", "region_claim", "region_release", "region_query",
               "builder_place_tile", "builder_place_tiles", "task_get_queue", "a2a_discover",
               "a2a_send_message", "a2a_broadcast", "build_checkpoint", "blueprint_set")
#: Arguments that would leave something waiting or due past the step: set to "now".
_NOW = {"timeout": 0}
_LATER = ("deadline", "wait", "lease")
#: The bounds of the served world, small so that a few steps pass them.
SURFACE_LIMITS = Limits(waits=3, subscriptions=3, calls_per_connection=16, calls=32)
OPERATOR = "operator-token-for-the-campaign-0123"
RPC = "/a2a/jsonrpc"
EVIL = "https://evil.example"


def _quick(args: dict[str, Any]) -> dict[str, Any]:
    args = {k: v for k, v in args.items() if k not in _LATER}
    return {**args, **_NOW} if "timeout" in args or "region" in args else args


def _send_message(tool: str, args: dict[str, Any]) -> bytes:
    """A2A ``SendMessage`` carrying one tool call, as the JSON-RPC binding takes it."""
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": secrets.token_hex(8), "role": "ROLE_USER", "parts": [{
            "data": {"tool": tool, "arguments": args}}]}}}, default=repr).encode()


@pytest.fixture(scope="module")
def surfaces() -> Any:
    """One served world (page and view socket included, an operator token set) and one
    ``barnraise mcp`` subprocess, for the whole module; both stopped at its end."""
    pytest.importorskip("websockets")
    from tests.campaign import McpStdio
    from tests.gateway_support import served

    with served(limits=SURFACE_LIMITS, operator=OPERATOR, view=True) as running:
        mcp = McpStdio()
        try:
            yield running, mcp
        finally:
            mcp.close()


class Surfaces(RuleBasedStateMachine):
    """Members of one served session on the WebSocket, the JSON-RPC binding over HTTP,
    the view socket and MCP stdio, driven with valid calls and with the flaws of issue 23
    (cross-site and rebinding requests, over-deep, non-UTF-8 and oversize frames, forged
    answers, waits and subscriptions past their bounds, connections cut mid-calls,
    anonymous and unbounded controls). Invariants after every step: no answer carries a
    forger's content, a refused step left the world as it was, the clock is finite and in
    its bound, the hub holds no more than its Limits, nothing was an internal error, and
    the server answers ``/healthz``."""

    server: Any
    mcp: Any

    @initialize()
    def start(self) -> None:
        gateway = self.server.gateway
        self.gateway = gateway
        self.hub = gateway.hub
        self.simu = gateway.world.simulation
        self.sid = str(gateway.world.default_session)
        self.http = httpx.Client(base_url=self.server.url, timeout=30)
        token = gateway.world.role_tokens.get("builder")
        self.members = [Member(self.server.url, self.sid, f"m{next(_NAMES)}", token)
                        for _ in range(3)]
        view_url = self.server.url.replace("http://", "ws://") + "/view/ws"
        self.view = ws_connect(view_url, open_timeout=10, max_size=None, legacy=True,
                               close_timeout=2)
        self.subscribed: dict[str, set[str]] = {m.agent_id: set() for m in self.members}
        self.view_ids = itertools.count(1)

    def teardown(self) -> None:
        for member in getattr(self, "members", ()):
            try:  # the session stays small across examples (reads of it stay sendable)
                left = member.ask("session_leave", {})
                assert left["result"]["success"], left
            finally:
                member.close()
        if hasattr(self, "view"):
            self.view.close()
            self.http.close()

    def _member(self, index: int) -> Member:
        return self.members[index % len(self.members)]

    def _slot(self, member: Member) -> Any:
        return self.hub.slots[member.agent_id]

    def _refused(self, step: Callable[[], None]) -> None:
        """``step`` is refused: the world's state is the same after it."""
        before = world_state(self.simu)
        step()
        assert world_state(self.simu) == before

    # -- the WebSocket ----------------------------------------------------------------------

    @rule(who=st.integers(0, 2), data=st.data())
    def ws_call(self, who: int, data: st.DataObject) -> None:
        tool, args, _ = data.draw(tool_call(st.sampled_from([self.sid, "task_none", "x"]),
                                            QUICK_TOOLS))
        answer = self._member(who).ask(tool, _quick(args))
        unforged(tool, answer)
        if "result" in answer:
            check_result(tool, answer["result"])
        else:
            assert answer["error"]["code"] in (-32700, -32600, -32602), answer  # NaN: not JSON

    @rule(victim=st.integers(0, 2), forger=st.integers(1, 2), releaser=st.integers(1, 2),
          guesses=st.integers(1, 4))
    def forge_an_answer(self, victim: int, forger: int, releaser: int, guesses: int) -> None:
        """A member waits at a barrier; another sends signed answers to it with guessed
        correlation ids and the real one; the barrier answers the waiter, not the forger."""
        bob, mallory = self._member(victim), self._member(victim + forger)
        carl = self._member(victim + releaser) if releaser != forger else \
            self._member(victim + 3 - forger)
        slot = self._slot(bob)
        known = {held[0]._correlation_id for held in list(slot.pending)}
        barrier = f"b-{secrets.token_hex(6)}"
        waiting = bob.send("a2a_barrier_enter", {"barrier_id": barrier, "expected_count": 2,
                                                 "timeout": 600})
        found: list[tuple[str, Any]] = []

        def under_way() -> bool:
            found[:] = [(held[0]._correlation_id, held[1]) for held in list(slot.pending)
                        if held[0]._correlation_id not in known]
            return bool(found)

        assert until(under_way), "the barrier call never went out"
        [(real, future)] = found
        sub = mallory.ask("a2a_subscribe", {"event_type": "region_claimed"})["result"]
        if sub["success"]:
            self.subscribed[mallory.agent_id].add("region_claimed")
        seen = str(sub.get("subscription_id", "sub-x"))
        ids = [seen[4:] + str(n) for n in range(guesses)] + [secrets.token_urlsafe(24), real]
        for n, cid in enumerate(ids):
            sent = mallory.ask("barnraise.send", {
                "message": forged_letter(mallory.joined, bob.agent_id, cid, n)})
            unforged("barnraise.send", sent.get("result", {}).get("statuses"))
        assert not future.done(), "a forged letter answered another member's call"
        entering = carl.send("a2a_barrier_enter", {"barrier_id": barrier,
                                                   "expected_count": 2, "timeout": 60})
        released = bob.answer(waiting)
        unforged("a2a_barrier_enter", released)
        assert released["result"]["success"], released
        entered = carl.answer(entering)
        assert entered["result"]["success"], entered

    @rule(who=st.integers(0, 2), extra=st.integers(1, 3))
    def pipelined_waits(self, who: int, extra: int) -> None:
        """More barrier waits than the bound, sent at once: those past it are refused
        ``limit_exceeded`` naming ``waits``; the rest time out; none is left held."""
        member = self._member(who)
        slot = self._slot(member)
        assert until(lambda: slot.waits == 0)
        n = SURFACE_LIMITS.waits + extra
        rids = [member.send("a2a_barrier_enter", {"barrier_id": f"p-{secrets.token_hex(6)}",
                                                  "expected_count": 2, "timeout": 1})
                for _ in range(n)]
        answers = [member.answer(rid)["result"] for rid in rids]
        refused = [a for a in answers if a.get("error") == "limit_exceeded"]
        assert len(refused) == extra, answers
        assert all(a["limit"] == "waits" for a in refused), refused
        for answer in answers:
            check_result("a2a_barrier_enter", answer)
        assert until(lambda: slot.waits == 0)

    @rule(who=st.integers(0, 2), events=st.lists(st.sampled_from(EVENT_TYPES), min_size=1,
                                                  max_size=6, unique=True))
    def subscribe_past_the_bound(self, who: int, events: list[str]) -> None:
        member = self._member(who)
        slot = self._slot(member)
        held = self.subscribed[member.agent_id]
        assert len(self.hub.bounds.held_subscriptions(slot)) == len(held)
        for event in events:
            answer = member.ask("a2a_subscribe", {"event_type": event})["result"]
            check_result("a2a_subscribe", answer)
            # A repeat is the one held, at the bound as below it; at the bound anything
            # else is refused.
            if len(held) >= SURFACE_LIMITS.subscriptions and event not in held:
                assert answer["error"] == "limit_exceeded", answer
                assert answer["limit"] == "subscriptions", answer
            else:
                assert answer["success"], answer
                held.add(event)
        assert len(self.hub.bounds.held_subscriptions(slot)) <= SURFACE_LIMITS.subscriptions

    @rule(who=st.integers(0, 2), calls=st.integers(1, 6))
    def close_mid_calls(self, who: int, calls: int) -> None:
        """Calls sent, then the connection cut before their answers: the agent comes back
        with its token, and what the closed connection held is given back."""
        member = self._member(who)
        slot = self._slot(member)
        for n in range(calls):
            if n % 2:
                member.send("a2a_barrier_enter", {"barrier_id": f"c-{secrets.token_hex(6)}",
                                                  "expected_count": 2, "timeout": 1})
            else:
                member.send("session_get_state", {"include": ["members"]})
        member.reconnect()
        assert until(lambda: not slot.pending and not slot.orphans and slot.waits == 0)
        answer = member.ask("a2a_discover", {})
        check_result("a2a_discover", answer["result"])
        assert answer["result"]["success"], answer

    # -- the JSON-RPC binding over HTTP -----------------------------------------------------

    @rule(who=st.integers(0, 2), data=st.data())
    def http_call(self, who: int, data: st.DataObject) -> None:
        tool, args, _ = data.draw(tool_call(st.sampled_from([self.sid, "x"]), QUICK_TOOLS))
        answer = self.http.post(RPC, content=_send_message(tool, _quick(args)), headers={
            "content-type": "application/json",
            "authorization": f"Bearer {self._member(who).token}"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        unforged(tool, body)
        if "result" in body:
            check_result(tool, body["result"]["message"]["parts"][0]["data"])
        else:
            assert body["error"]["code"] in (-32700, -32600, -32602), body  # NaN: not JSON

    @rule(who=st.integers(0, 2), flaw=st.sampled_from(
        ["text/plain", "form", "origin", "host", "loopback_port", "deep", "utf8", "oversize"]))
    def http_flawed(self, who: int, flaw: str) -> None:
        """A request a page or a broken client sends: refused, and nothing happens."""
        headers = {"content-type": "application/json",
                   "authorization": f"Bearer {self._member(who).token}"}
        body = _send_message("session_create", {"session_name": "from a page"})
        status, code = 200, None
        if flaw == "text/plain":
            headers["content-type"], status = "text/plain", 415
        elif flaw == "form":
            headers["content-type"], status = "application/x-www-form-urlencoded", 415
        elif flaw == "origin":
            headers["origin"], status = EVIL, 403
        elif flaw == "host":
            headers["host"], status = f"evil.example:{self.server.port}", 421
        elif flaw == "loopback_port":
            headers["host"], status = "127.0.0.1:1", 421
        elif flaw == "deep":
            body, code = b"[" * 100_000 + b"]" * 100_000, -32600
        elif flaw == "utf8":
            body, code = body.replace(b"from a page", b"from \xff\xfe"), -32700
        else:  # over the bound on a body: 413, as on /mcp, with a JSON-RPC error
            body, code = _send_message("session_create", {
                "session_name": "x", "config": {"pad": "x" * SURFACE_LIMITS.max_frame}}), -32600
            status = 413

        def step() -> None:
            answer = self.http.post(RPC, content=body, headers=headers)
            assert answer.status_code == status, (flaw, answer.status_code, answer.text)
            if code is not None:
                assert answer.json()["error"]["code"] == code, answer.text

        self._refused(step)

    # -- the view socket --------------------------------------------------------------------

    def _view_ask(self, params: Any) -> dict[str, Any]:
        """One ``view.control`` and its answer (frames on the way skipped); ``params`` as
        JSON text is sent as it is (numbers JSON cannot carry, like ``1e999``)."""
        rid = next(self.view_ids)
        text = params if isinstance(params, str) else json.dumps(params)
        self.view.send(f'{{"jsonrpc": "2.0", "id": {rid}, "method": "view.control", '
                       f'"params": {text}}}')
        deadline = time.monotonic() + 20
        while True:
            message = json.loads(self.view.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == rid or (message.get("id") is None and "error" in message):
                return dict(message)  # a frame that is not JSON has no id to echo

    @rule(action=st.sampled_from(["pause", "speed", "start", "step"]),
          value=st.sampled_from(["1e308", "1e999", "-1e999", "0", "1e-320", "5", "null",
                                 '"fast"']),
          token=st.sampled_from([None, "", "guess", OPERATOR[:-1], 12]))
    def view_control_without_the_token(self, action: str, value: str, token: Any) -> None:
        """Anonymous or wrongly signed controls, with values that would break the clock."""
        extra = "" if token is None else f', "token": {json.dumps(token)}'
        params = f'{{"action": "{action}", "value": {value}{extra}}}'

        def step() -> None:
            answer = self._view_ask(params)
            if "error" in answer:  # 1e999 is no JSON number: refused before the token
                assert answer["error"]["code"] == -32700 and "e999" in value, answer
            else:
                assert answer["result"]["error"] == "forbidden", answer

        self._refused(step)

    @rule(value=st.one_of(st.floats(2.0, 200.0), st.sampled_from(
        [1e308, 1e7, 1e-4, -1.0, 0.0])), pause=st.booleans())
    def view_control_by_the_operator(self, value: float, pause: bool) -> None:
        """The operator drives the clock, within its one bound; out of it, refused."""
        clock = self.simu.dispatcher.clock
        if not MIN_TIME_SCALE <= value <= MAX_TIME_SCALE:
            self._refused(lambda: self._out_of_bound(value))
            return
        answer = self._view_ask({"action": "speed", "value": value, "token": OPERATOR})
        assert answer["result"]["success"], answer
        assert clock.time_scale == value
        if pause:
            paused = self._view_ask({"action": "pause", "token": OPERATOR})
            assert paused["result"]["success"], paused
            going = self._view_ask({"action": "start", "token": OPERATOR})
            assert going["result"]["success"], going
        back = self._view_ask({"action": "speed", "value": 20.0, "token": OPERATOR})
        assert back["result"]["success"] and clock.time_scale == 20.0, back

    def _out_of_bound(self, value: float) -> None:
        answer = self._view_ask({"action": "speed", "value": value, "token": OPERATOR})
        assert answer["result"]["error"] == "invalid_value", answer

    # -- MCP over stdio ---------------------------------------------------------------------

    @rule(line=st.sampled_from([b"not json", b"[]", b"null", b"3", b"{}",
                                b"[" * 100_000 + b"]" * 100_000,
                                b'{"jsonrpc": "2.0", "id": 1, "params": {"x": "\xff"}}',
                                b'{"jsonrpc": "2.0", "id": 7, "method": 5}']))
    def mcp_bad_line(self, line: bytes) -> None:
        self.mcp.write(line)
        answer = self.mcp.answer()
        assert answer["error"]["code"] in (-32700, -32600), answer

    @rule(data=st.data())
    def mcp_call(self, data: st.DataObject) -> None:
        tool, args, _ = data.draw(tool_call(st.sampled_from(["x", "task_none"]), QUICK_TOOLS))
        rid = f"c{next(self.view_ids)}"
        request = json.loads(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                         "params": {"name": tool, "arguments": _quick(args)}},
                                        default=repr))
        if not _jsonable(request):  # NaN or infinity: the line is not JSON
            self.mcp.write(json.dumps(request).encode())
            answer = self.mcp.answer()
            assert answer["error"]["code"] == -32700 and answer["id"] is None, answer
            return
        answer = self.mcp.ask(request)
        if answer.get("id") is None:  # a lone surrogate escaped (\\ud800): refused unread
            assert answer["error"]["code"] == -32700 and "surrogate" in \
                answer["error"]["message"], answer
            return
        assert answer.get("id") == rid, answer
        if "error" in answer:
            assert answer["error"]["code"] in (-32600, -32602), answer
            return
        structured = answer["result"].get("structuredContent")
        if structured is not None:
            check_result(tool, structured)

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def edges_hold(self) -> None:
        if not hasattr(self, "hub"):
            return
        clock = self.simu.dispatcher.clock
        assert MIN_TIME_SCALE <= clock.time_scale <= MAX_TIME_SCALE
        assert math.isfinite(self.simu.now)
        limits = self.hub.limits
        slots = list(self.hub.slots.values())
        assert len(slots) <= limits.agents
        for slot in slots:
            assert len(slot.pending) <= limits.calls, slot
            assert slot.waits <= limits.waits, slot
            assert len(slot.subscriptions) <= limits.subscriptions, slot
            assert len(slot.outbox) <= limits.outbox and len(slot.results) <= limits.results
        assert self.hub.counters.snapshot().get("internal_error", 0) == 0
        assert self.simu.dispatcher.behaviour_errors == 0
        assert self.http.get("/healthz").json() == {"ok": True}
        assert self.mcp.process.poll() is None, "barnraise mcp exited"


# a long profile runs more examples (scaled) and longer ones (its step count)
Surfaces.TestCase.settings = scaled(4, stateful_step_count=max(
    12, settings.default.stateful_step_count if settings.default.max_examples > 100 else 12),
    report_multiple_bugs=False)


def test_every_surface_of_a_served_world(surfaces: Any) -> None:
    server, mcp = surfaces
    Surfaces.server, Surfaces.mcp = server, mcp
    run_state_machine_as_test(Surfaces, settings=Surfaces.TestCase.settings)
    dead = server.gateway.world.simulation.dispatcher.statistics().dead_letters
    assert set(dead) <= {"forged_reply", "unhandled", "expired"}, dead
