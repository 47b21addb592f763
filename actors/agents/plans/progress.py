"""Plan progress, debounced: at most one update per interval, the last never lost.

Progress subscribers that want at most one update per interval use a
:class:`Debouncer`; :func:`progress_watcher` is such a subscriber (default
interval 2 simulated seconds; a held update is sent when the interval ends,
so the last state is never lost).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from barnraise.actors.agents.participant import Participant
from barnraise.actors.agents.plans.runner import (
    PLAN_COMPLETED,
    PLAN_STARTED,
    STEP_COMPLETED,
    STEP_FAILED,
    STEP_STARTED,
)
from barnraise.actors.agents.plans.schema import TIME_TOLERANCE
from barnraise.actors.base import WaitTimeout

__all__ = ["Debouncer", "progress_watcher"]

T = TypeVar("T")


class Debouncer(Generic[T]):
    """At most one update per ``interval``; the ones in between are coalesced.

    :meth:`offer` returns the update to send now, or None when it is held
    (sent less than ``interval`` ago). The latest held update is due at
    :meth:`due`; :meth:`flush` returns it once that time has come. Updates
    sent are therefore at least ``interval`` apart, and the last one is never
    lost, only late.
    """

    def __init__(self, interval: float = 2.0) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self.interval = float(interval)
        self.last_sent: float | None = None
        self._held: T | None = None
        self._holding = False
        self.coalesced = 0

    def offer(self, now: float, update: T) -> T | None:
        if self.last_sent is None or now - self.last_sent >= self.interval - TIME_TOLERANCE:
            self.last_sent = now
            if self._holding:
                self.coalesced += 1
            self._held, self._holding = None, False
            return update
        if self._holding:
            self.coalesced += 1
        self._held, self._holding = update, True
        return None

    def due(self) -> float | None:
        """When the held update may go (None if nothing is held)."""
        if not self._holding or self.last_sent is None:
            return None
        return self.last_sent + self.interval

    def flush(self, now: float) -> T | None:
        """The held update if its time has come (it counts as sent), else None."""
        due = self.due()
        if due is None or now < due - TIME_TOLERANCE:
            return None
        update = self._held
        self.last_sent = now
        self._held, self._holding = None, False
        return update


async def progress_watcher(agent: Participant) -> None:
    """Follow every plan in the session; record progress, debounced.

    Inputs: ``interval`` (simulated seconds between updates, default 2), ``seen_before``
    (restarted after a crash: the plan events it had seen). Outcome: ``events`` (plan
    events seen), ``updates`` ([t, snapshot]: plan, plan_id, done, failed, total,
    status, last event), ``coalesced``.
    """
    debounce: Debouncer[dict[str, Any]] = Debouncer(float(agent.params.get("interval", 2.0)))
    updates: list[list[Any]] = []
    agent.outcome.update(events=0, updates=updates, coalesced=0)
    plans: dict[str, dict[str, Any]] = {}
    await agent.call("a2a_subscribe")
    # Restarted after a crash: the plan events it had seen (a resumed run reads them from
    # its stored log) make its view again; the updates it had sent are not sent again.
    for content in agent.params.get("seen_before", ()) if agent.resuming else ():
        agent.outcome["events"] += 1
        _see(plans, content)
    while True:
        due = debounce.due()
        timeout = None if due is None else max(0.0, due - agent.now)
        try:
            message = await agent.receive(
                lambda m: str(m.content.get("event", "")).startswith("plan."),
                timeout=timeout, daemon=timeout is None, description="plan progress")
        except WaitTimeout:
            # One reading of the clock for the decision and the record of it: in realtime
            # mode the clock moves between two readings, and an update recorded later
            # than it was decided would make the next one look less than interval apart.
            now = agent.now
            held = debounce.flush(now)
            if held is not None:
                updates.append([now, held])
            continue
        agent.outcome["events"] += 1
        snapshot = _see(plans, message.content)
        now = agent.now
        sent = debounce.offer(now, snapshot)
        if sent is not None:
            updates.append([now, sent])
        agent.outcome["coalesced"] = debounce.coalesced


def _see(plans: dict[str, dict[str, Any]], content: dict[str, Any]) -> dict[str, Any]:
    """Fold one plan event into ``plans`` (by plan id); the plan's progress snapshot."""
    view = plans.setdefault(str(content.get("plan_id")), {
        "plan": content.get("plan"), "plan_id": content.get("plan_id"), "steps": {},
        "total": 0, "status": "running"})
    event = str(content["event"])
    if event == PLAN_STARTED:
        view["total"] = len(content.get("steps", []))
    elif event == STEP_COMPLETED:
        view["steps"][content["step_id"]] = "skipped" if content.get("skipped") else "done"
    elif event == STEP_FAILED:
        view["steps"][content["step_id"]] = "failed"
    elif event == STEP_STARTED:
        view["steps"].setdefault(content["step_id"], "running")
    elif event == PLAN_COMPLETED:
        view["status"] = content.get("status")
    states = list(view["steps"].values())
    return {"plan": view["plan"], "plan_id": view["plan_id"],
            "done": sum(1 for s in states if s in ("done", "skipped")),
            "failed": states.count("failed"), "total": view["total"],
            "status": view["status"], "last_event": event}
