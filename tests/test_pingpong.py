"""One small behaviour, two dispatchers, the same final state."""

from __future__ import annotations

from typing import Any

import pytest

from barnraise.actors.base import Agent
from barnraise.actors.registry import Registry
from barnraise.sim.messages import Message
from tests.conftest import MODES, new_dispatcher


class Player(Agent):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.hits: list[int] = []

    def handle_task_assignment(self, message: Message) -> None:
        self.hits.append(message.content["ball"])
        self.reply(message, "task_result", {"ball": message.content["ball"] + 1})


async def serve(agent: Agent) -> None:
    ball = 0
    for _ in range(5):
        reply = await agent.request("pong", "task_assignment", {"ball": ball}, timeout=30)
        ball = reply.content["ball"] + 1
        agent.hits.append(reply.content["ball"])  # type: ignore[attr-defined]
        await agent.sleep(0.5)


def final_state(mode: str) -> dict[str, Any]:
    d = new_dispatcher(mode, seed=42)
    try:
        registry = d.spawn(Registry, "registry")
        # pong first: in realtime mode ping's behaviour starts at once, on its own thread
        pong = d.spawn(Player, "pong", agent_type="player")
        ping = d.spawn(Player, "ping", agent_type="player", behaviours=(serve,))
        report = d.run()
        stats = d.statistics()
        return {
            "reason": report.reason,
            "ping": ping.hits, "pong": pong.hits,
            "registered": sorted(registry.records),
            "delivered": stats.delivered, "dead": dict(stats.dead_letters),
            "sim_time_at_least": report.now >= 2.5,
        }
    finally:
        d.shutdown()


@pytest.mark.parametrize("mode", MODES)
def test_ping_pong_final_state(mode: str) -> None:
    assert final_state(mode) == {
        "reason": "quiescent",
        "ping": [1, 3, 5, 7, 9], "pong": [0, 2, 4, 6, 8],
        "registered": ["ping", "pong"],
        "delivered": 12, "dead": {}, "sim_time_at_least": True,
    }


def test_both_dispatchers_agree() -> None:
    assert final_state("deterministic") == final_state("realtime")
