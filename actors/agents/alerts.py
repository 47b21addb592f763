"""Alerts: an agent tells whoever watches the session that something needs attention.

:func:`alert` publishes an ``agent.alert`` event on the session's event topic
(``session:<id>:events``, and ``session:<id>:events:agent.alert`` for those who
want only alerts). It is a plain function, not an effect: publishing never waits::

    alert(agent, "warning", "Approval timed out", "step drivers of plan kernel")

The payload is ``session_id``, ``agent_id``, ``severity``, ``title``, ``body``
and any extra ``details``. ``severity`` is one of :data:`SEVERITIES`; anything
else raises ``ValueError`` naming it, before anything is published. Like every
session event, an alert is also a trace record (kind ``event``).
"""

from __future__ import annotations

from typing import Any, Final

from barnraise.actors.base import Agent
from barnraise.sim.events import AgentAlert, body_of

__all__ = ["ALERT_EVENT", "SEVERITIES", "alert", "events_topic", "session_of"]

#: The event type every alert is published as.
ALERT_EVENT: Final = AgentAlert.kind
#: The severities an alert may have, mildest first.
SEVERITIES: Final = ("info", "warning", "critical")


def events_topic(session_id: str) -> str:
    """The topic a session's events are published on (what ``a2a_subscribe`` subscribes to)."""
    return f"session:{session_id}:events"


def session_of(agent: Agent, session_id: str | None = None) -> str:
    """``session_id`` if given, else the session ``agent`` joined; ValueError if neither."""
    sid = session_id or agent.session_id
    if not sid:
        raise ValueError(f"{agent.name} has joined no session: give session_id")
    return sid


def alert(agent: Agent, severity: str, title: str, body: str = "", *,
          session_id: str | None = None, **details: Any) -> dict[str, Any]:
    """Publish an ``agent.alert`` event from ``agent``; returns its payload.

    Raises ValueError for a severity other than info, warning or critical, or
    an empty title.
    """
    if severity not in SEVERITIES:
        raise ValueError(f"alert severity must be one of {', '.join(SEVERITIES)}, "
                         f"got {severity!r}")
    if not isinstance(title, str) or not title:
        raise ValueError(f"alert title must be a non-empty string, got {title!r}")
    sid = session_of(agent, session_id)
    event = AgentAlert(session_id=sid, agent_id=agent.name, severity=severity, title=title,
                       body=str(body), details=details)
    agent.emit(events_topic(sid), event)
    payload = body_of(event)
    del payload["event"]
    return payload
