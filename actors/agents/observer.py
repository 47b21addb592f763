"""The observer: subscribes to the session's events and keeps a read-only record.

Outcome: ``events`` (how many) and ``record`` (``[t, event type]`` pairs, in order).
"""

from __future__ import annotations

from barnraise.actors.agents.participant import Participant
from barnraise.sim.messages import Message

__all__ = ["observer"]


def _session_event(m: Message) -> bool:
    return m.from_agent != "registry" and "event" in m.content


async def observer(agent: Participant) -> None:
    record: list[list[object]] = []
    agent.outcome.update(events=0, record=record)

    def take(message: Message) -> bool:
        if not _session_event(message):
            return False
        record.append([message.timestamp, message.content["event"]])
        agent.outcome["events"] = len(record)
        return True

    # The record is kept by the agent's tap (Participant.tap), not by a behaviour that
    # waits for each event: a wait made, matched and resumed per event was most of
    # what an observer cost. What came before the tap, the tap takes first, so the
    # record is in the order the events arrived, as a loop over receive() had it.
    while (kept := agent.take_stashed(_session_event)) is not None:
        take(kept)
    agent.tap = take
    await agent.call("a2a_subscribe")
