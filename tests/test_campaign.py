"""A standing campaign of bad input (issue 11): every tool, driven with values drawn from
its own schema, valid and not, one call at a time and in random sequences, in process and
over the gateway's WebSocket. After every step: every result is a dict with ``success``
and a known error code, nothing raises out of ``Client.call``, no handler or behaviour
error, exclusive claims never overlap, no tile outside its writer's claims, no task
completed twice, the progress counters agree with the canvas.

The default profile keeps it short for CI; ``--hypothesis-profile=long`` runs it deep.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

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
)

from actors.world import Client, Simulation
from tests.campaign import (
    GRID,
    check_result,
    check_world,
    covered_by_claims,
    region_values,
    tiles_for,
    tool_call,
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
        result = caller.call(tool, **args)  # must never raise
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
