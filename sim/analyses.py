"""What a run's trace shows, as pandas DataFrames: its domain events (:func:`events_frame`),
its deliveries and drops (:func:`messages_frame`) and the attempts at its tasks
(:func:`task_intervals`). Analyses of a trace, live or stored (``RunResult`` and
``StoredRun`` give ``events()`` from :func:`events_frame`); the per-step samples a
recorder takes are :mod:`barnraise.sim.metrics`'.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from barnraise.sim.trace import EVENT as EVENT_RECORD
from barnraise.sim.trace import Trace, TraceRecord

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["events_frame", "messages_frame", "task_intervals"]



def events_frame(trace: Trace | Iterable[TraceRecord]) -> pd.DataFrame:
    """The domain events of a trace (or of its records, as a store gives them back: the
    records of other kinds are left out), one row each, in trace order.

    Columns: ``seq`` and ``t``; ``source`` (who emitted it), ``topic``, ``event``;
    ``session_id``, ``agent_id`` (the agent it is about: ``agent_id``, else
    ``assigned_to``, else ``by``, when the payload has one), ``task_id``; and
    ``payload``, the whole body as JSON text.
    """
    import pandas as pd

    records = trace.records("event") if isinstance(trace, Trace) else trace
    rows = []
    for record in records:
        if record.kind != EVENT_RECORD:
            continue
        body = record.content_obj()
        if not isinstance(body, dict):
            body = {"value": body}
        agent = body.get("agent_id") or body.get("assigned_to") or body.get("by")
        rows.append((record.seq, record.t, record.sender, record.recipient, record.type,
                     _text(body.get("session_id")),
                     None if agent in (None, "any") else _text(agent),
                     _text(body.get("task_id")), record.content.decode()))
    columns = ["seq", "t", "source", "topic", "event", "session_id", "agent_id", "task_id",
               "payload"]
    return pd.DataFrame(rows, columns=columns).astype(
        {"seq": "int64", "t": "float64", "source": "string", "topic": "string",
         "event": "string", "session_id": "string", "agent_id": "string",
         "task_id": "string", "payload": "string"})


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def messages_frame(trace: Trace, start: float = 0.0, end: float = math.inf) -> pd.DataFrame:
    """Deliveries and drops between ``start`` and ``end`` (simulation seconds), in order.

    Columns: ``seq``, ``t``, ``kind`` (``deliver`` or ``drop``), ``sender``,
    ``recipient``, ``type`` (the message type), ``session_id`` (the session a delivered
    letter names: its ``session_id``, or its tool call's ``args.session_id``; else None,
    and None for a drop, whose record keeps the reason and message id only),
    ``reason`` (a drop's; else None), ``bytes`` (the content's size as traced).
    """
    import pandas as pd

    rows = []
    for record in trace.records():
        if record.kind not in ("deliver", "drop") or not start <= record.t <= end:
            continue
        reason = None
        session = None
        if record.kind == "drop" or b'"session_id"' in record.content:
            body = record.content_obj()
            if record.kind == "drop":  # a drop's record names the reason, not the letter
                reason = body.get("reason") if isinstance(body, dict) else None
            else:
                session = _session_of(body)
        rows.append((record.seq, record.t, record.kind, record.sender, record.recipient,
                     record.type, session, reason, len(record.content)))
    columns = ["seq", "t", "kind", "sender", "recipient", "type", "session_id", "reason",
               "bytes"]
    return pd.DataFrame(rows, columns=columns).astype(
        {"seq": "int64", "t": "float64", "kind": "string", "sender": "string",
         "recipient": "string", "type": "string", "session_id": "string",
         "reason": "string", "bytes": "int64"})


def _session_of(body: Any) -> str | None:
    """The session a letter's content names (its own ``session_id`` or its call's)."""
    if not isinstance(body, dict):
        return None
    sid = body.get("session_id")
    if sid is None and isinstance(body.get("args"), dict):
        sid = body["args"].get("session_id")
    return sid if isinstance(sid, str) else None


def task_intervals(events: pd.DataFrame, tasks: Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """One row per attempt at a task: who worked on it, from when to when, and how it ended.

    ``events`` is :func:`events_frame`'s table. An attempt starts at
    ``task_accepted`` and ends at the task's next ``task_completed``,
    ``task_failed``, ``task_cancelled``, ``task_requeued`` or ``task_blocked``
    (``outcome`` names it; ``unfinished`` when the run ended first, ``end`` then
    being the last event's time). ``approval_start`` / ``approval_end``: the wait
    for a verdict inside the attempt (NaN when there was none). ``repair``: a
    build task over a region that a completed build task already covered (needs
    ``tasks``, the final task list with ``task_id``, ``type``, ``region``; else
    False). Columns: task_id, session_id (its ``task_created`` event's), type, agent_id,
    start, end, outcome, repair, approval_start, approval_end.
    """
    import pandas as pd

    info = {str(t["task_id"]): t for t in tasks}
    types: dict[str, str] = {}
    sessions: dict[str, str | None] = {}
    open_: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    last_t = float(events["t"].max()) if len(events) else 0.0
    enders = {"task_completed": "completed", "task_failed": "failed",
              "task_cancelled": "cancelled", "task_requeued": "requeued",
              "task_blocked": "blocked"}
    for event, t, task_id, agent_id, payload, session in zip(
            events["event"], events["t"], events["task_id"], events["agent_id"],
            events["payload"], events["session_id"], strict=True):
        if task_id is None or pd.isna(task_id):
            continue
        task_id = str(task_id)
        if event == "task_created":
            types[task_id] = str(json.loads(payload).get("type", ""))
            sessions[task_id] = None if pd.isna(session) else str(session)
        elif event == "task_accepted":
            open_[task_id] = {"task_id": task_id, "session_id": sessions.get(task_id),
                              "type": types.get(task_id, ""),
                              "agent_id": str(agent_id), "start": float(t), "end": math.nan,
                              "outcome": "unfinished", "approval_start": math.nan,
                              "approval_end": math.nan}
        elif event == "approval_requested" and task_id in open_:
            open_[task_id]["approval_start"] = float(t)
        elif event == "approval_resolved" and task_id in open_:
            open_[task_id]["approval_end"] = float(t)
        elif event in enders and task_id in open_:
            attempt = open_.pop(task_id)
            attempt["end"] = float(t)
            attempt["outcome"] = enders[event]
            rows.append(attempt)
    for attempt in open_.values():
        attempt["end"] = last_t
        rows.append(attempt)
    rows.sort(key=lambda r: (r["start"], r["task_id"]))
    built: list[tuple[int, int, int, int]] = []
    for row in rows:
        task = info.get(row["task_id"], {})
        region = task.get("region")
        row["repair"] = False
        if row["type"] == "build" and isinstance(region, Mapping):
            box = (int(region["x"]), int(region["y"]), int(region["width"]),
                   int(region["height"]))
            row["repair"] = any(_covers(b, box) for b in built)
            if row["outcome"] == "completed":
                built.append(box)
    columns = ["task_id", "session_id", "type", "agent_id", "start", "end", "outcome",
               "repair", "approval_start", "approval_end"]
    return pd.DataFrame(rows, columns=columns).astype(
        {"task_id": "string", "session_id": "string", "type": "string",
         "agent_id": "string", "start": "float64",
         "end": "float64", "outcome": "string", "repair": "bool",
         "approval_start": "float64", "approval_end": "float64"})


def _covers(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    x, y, w, h = outer
    a, b, c, d = inner
    return x <= a and y <= b and a + c <= x + w and b + d <= y + h
