"""The hub on its own loop: calls that get no answer in time, and answers that come after."""

from __future__ import annotations

import asyncio

import pytest

from barnraise.actors.world import Simulation
from barnraise.gateway import hub as hub_module
from barnraise.gateway.hub import Hub


def test_a_call_with_no_answer_in_time_gets_no_reply_and_a_late_answer_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "CALL_TIMEOUT", 0.2)
    monkeypatch.setattr(hub_module, "SWEEP", 0.05)
    with Simulation(seed=1, mode="realtime", time_scale=20.0) as simu:
        hub = Hub(simu)

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            hub.bind(loop)
            slot = hub.new_slot()
            made = await hub.call(slot, "session_create", {"session_name": "s", "grid_size": 20})
            assert made["success"], made
            joined = await hub.call(slot, "session_join", {"agent_name": "A"})
            assert joined["success"], joined
            simu.dispatcher.pause()  # the services keep their letters: no answer comes
            started = loop.time()
            answer = await asyncio.wait_for(hub.call(slot, "session_get_state", {}), 10)
            waited = loop.time() - started
            assert answer["error"] == "no_reply", answer
            assert 0.2 <= waited < 2.0, waited  # the wait, then at most a sweep or so
            assert len(slot.pending) == 1  # kept: its answer may still come
            simu.dispatcher.resume()
            for _ in range(500):  # the late answer arrives, is taken, and goes nowhere
                if not slot.pending:
                    break
                await asyncio.sleep(0.01)
            assert slot.pending == []
            assert slot.client._actor.replies == {}
            # The next call is answered as usual, and the sweep stops once none waits.
            state = await asyncio.wait_for(hub.call(slot, "session_get_state", {}), 10)
            assert state["success"], state
            for _ in range(100):
                if hub._sweeper is None:
                    break
                await asyncio.sleep(0.01)
            assert hub._sweeper is None and not hub._waiting

        try:
            asyncio.run(scenario())
        finally:
            hub.close()
