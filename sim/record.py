"""The record of a run, the same live and stored: :class:`RunRecord` names what
``barnraise.run`` (``RunResult``) and ``barnraise.open_run``
(``barnraise.actors.stored.run.StoredRun``)
both answer, and the frames both build theirs with.

* ``.summary``: the run's summary (a stored run's is None until it finished);
* ``.events()``: the domain events as a DataFrame (:func:`barnraise.sim.analyses.events_frame`'s
  columns), one row per event, the same rows for the same run;
* ``.records()``: the raw trace records (:class:`barnraise.sim.trace.TraceRecord`), in order;
* ``.delegations()``: one row per task the run delegated (:func:`delegations_frame`);
* ``.timeseries(session_id=None)`` and ``.agent_timeseries(session_id=None)``: the
  recorder's samples (:class:`barnraise.sim.metrics.Sample`,
  :class:`barnraise.sim.metrics.AgentSample`;
  :data:`barnraise.sim.metrics.TIMESERIES_DTYPES`, :data:`barnraise.sim.metrics.AGENT_DTYPES`), live
  as the
  recorder took them, stored fed from the log through the same collector
  (``StoredRun.samples``): the same rows for the same deterministic run;
* ``.canvas(at=None, session_id=None)``: a session's canvas after every record at or
  before simulated time ``at`` (None: the end), folded from the log (a live run's from
  its trace, :func:`barnraise.actors.stored.rebuild.fold_records`; a stored one's from its snapshots
  and
  log); a live run answers the end from the canvas it kept (:func:`canvas_of` picks
  the session alike);
* a repr naming the scenario, seed, mode, success, virtual time and records (and the
  path, stored).

The delegations of a live run are folded from its trace by :func:`fold_delegations`;
a stored run keeps them in its store's ``delegations`` table, which the store's writer
fills with the same rule as it commits (``tests/test_record.py`` holds the two equal
for every shipped scenario).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import numpy as np

from barnraise.sim.events import (
    TaskAccepted,
    TaskCancelled,
    TaskCompleted,
    TaskCreated,
    TaskFailed,
    TaskResultRead,
    status_after,
)
from barnraise.sim.log import decode
from barnraise.sim.trace import DELIVER, EVENT, TraceRecord

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DELEGATION_COLUMNS", "DELEGATION_EVENTS", "RunRecord", "canvas_of",
           "delegations_frame", "fold_delegations", "record_repr"]

#: The columns of ``.delegations()``: ``result`` is the last task event's body as JSON
#: text (keys sorted), ``delivered_at`` when the result reached its delegator (NaN: not).
DELEGATION_COLUMNS: Final = ("task_id", "session_id", "delegator", "delegatee", "type",
                             "status", "result", "delivered_at")

#: The events the delegations follow: a task's creation, acceptance and end (its status
#: from barnraise.sim.events.status_after), and a restarted delegator reading a result from the
#: queue (barnraise.actors.agents.participant.results_read): a delivery. The store's writer keeps
#: its table by them too.
DELEGATION_EVENTS: Final = frozenset({
    TaskCreated.kind, TaskAccepted.kind, TaskCompleted.kind, TaskFailed.kind,
    TaskCancelled.kind, TaskResultRead.kind})


@runtime_checkable
class RunRecord(Protocol):
    """What a run's record answers, live (``RunResult``) or stored (``StoredRun``)."""

    @property
    def summary(self) -> Any: ...

    def events(self) -> pd.DataFrame: ...

    def records(self) -> Iterator[TraceRecord]: ...

    def delegations(self) -> pd.DataFrame: ...

    def timeseries(self, session_id: str | None = None) -> pd.DataFrame: ...

    def canvas(self, at: float | None = None, session_id: str | None = None
               ) -> np.ndarray[Any, Any] | None: ...

    def agent_timeseries(self, session_id: str | None = None) -> pd.DataFrame: ...


def canvas_of(world: Mapping[str, Mapping[str, Any]], session_id: str | None,
              summary: Mapping[str, Any] | None) -> np.ndarray[Any, Any] | None:
    """The canvas (``[y, x]`` tile codes, read-only) of ``session_id`` in a folded world
    (:meth:`barnraise.actors.stored.rebuild.World.state`'s shape, by session id); by default of the
    summary's
    session, else of the first. None when that session has no canvas (or is not open)."""
    if not world:
        return None
    sid = session_id
    if sid is None:
        sid = summary.get("session_id") if summary else None
        if sid not in world:
            sid = next(iter(world))
    part = world.get(str(sid))
    if part is None or part.get("canvas") is None:
        return None
    return np.frombuffer(part["canvas"], dtype=np.uint8).reshape(part["shape"])


def fold_delegations(records: Iterable[TraceRecord]) -> list[dict[str, Any]]:
    """The delegations of a log, folded from its records in order by the rule the store's
    writer keeps its ``delegations`` table with: a ``task_created`` event opens a row
    (the first for a task id wins), ``task_accepted`` sets its status and delegatee,
    another task end sets its status and result, and the first ``task_result`` letter
    delivered (or ``task_result_read`` event) sets ``delivered_at``. Rows in the order
    their tasks were created, as ``StoredLog.delegation_rows`` gives them."""
    rows: dict[Any, dict[str, Any]] = {}
    for r in records:
        if not ((r.kind == EVENT and r.type in DELEGATION_EVENTS)
                or (r.kind == DELIVER and r.type == "task_result")):
            continue
        body = decode(r.content)
        task = body.get("task_id")
        row = rows.get(task)
        if r.kind == DELIVER or r.type == TaskResultRead.kind:
            if row is not None and row["delivered_at"] is None:
                row["delivered_at"] = r.t
        elif r.type == TaskCreated.kind:
            if task not in rows:
                rows[task] = {"task_id": task, "session_id": body.get("session_id"),
                              "delegator": body.get("delegated_by"),
                              "delegatee": body.get("assigned_to"), "type": body.get("type"),
                              "status": status_after(body), "result": None,
                              "delivered_at": None}
        elif row is not None:
            row["status"] = status_after(body)
            if r.type == TaskAccepted.kind:
                row["delegatee"] = body.get("agent_id")
            else:
                row["result"] = body
    return list(rows.values())


def delegations_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """``rows`` (dicts with :data:`DELEGATION_COLUMNS`; ``result`` a dict or None) as a
    DataFrame: text columns as pandas strings, ``result`` as JSON text with its keys
    sorted, ``delivered_at`` as float (NaN: never delivered)."""
    import pandas as pd  # an optional extra's weight, loaded when a frame is asked for

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    table = [(text(r["task_id"]), text(r["session_id"]), text(r["delegator"]),
              text(r["delegatee"]), text(r["type"]), text(r["status"]),
              None if r["result"] is None else json.dumps(r["result"], sort_keys=True),
              float("nan") if r["delivered_at"] is None else float(r["delivered_at"]))
             for r in rows]
    frame = pd.DataFrame(table, columns=list(DELEGATION_COLUMNS))
    return frame.astype({name: "string" for name in DELEGATION_COLUMNS[:-1]}
                        | {"delivered_at": "float64"})


def record_repr(kind: str, summary: Mapping[str, Any] | None, records: int,
             path: str | None = None, status: str | None = None) -> str:
    """A record's repr: ``<kind scenario seed=.. mode=.. success=.. t=.. records=..>``,
    with the path (and status, when it is not finished) of a stored one."""
    parts = [kind]
    if summary is None:
        parts.append("(no summary)")
    else:
        parts.append(str(summary.get("scenario", "?")))
        for key in ("seed", "mode", "success"):
            parts.append(f"{key}={summary.get(key)}")
        vt = summary.get("virtual_time")
        parts.append(f"t={vt:g}" if isinstance(vt, (int, float)) else f"t={vt}")
    parts.append(f"records={records}")
    if status is not None and status != "finished":
        parts.append(f"status={status}")
    if path is not None:
        parts.append(f"path={path!r}")
    return "<" + " ".join(parts) + ">"
