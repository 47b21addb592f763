"""The observer: subscribes to the session's events and keeps a read-only record.

Outcome: ``events`` (how many) and ``record`` (``[t, event type]`` pairs, in order).
"""

from __future__ import annotations

from actors.agents.participant import Participant, wait_for
from sim.messages import Message

__all__ = ["observer"]


def _session_event(m: Message) -> bool:
    return m.from_agent != "registry" and "event" in m.content


async def observer(agent: Participant) -> None:
    record: list[list[object]] = []
    agent.outcome.update(events=0, record=record)
    await agent.call("a2a_subscribe")
    while True:
        message = await wait_for(_session_event, "the next session event", daemon=True)
        record.append([message.timestamp, message.content["event"]])
        agent.outcome["events"] = len(record)
