"""The task queue's checkpoints: copies of a session's tasks, rollback and resume.

A room of :class:`barnraise.actors.taskqueue.TaskQueue` (internal operations ``_checkpoint`` and
``_rollback``, sent by the coordinator), the one owner of the copies it keeps: per
session, checkpoint id -> the graph, records and next_seq encoded as JSON. Loading one
(a rollback, or a stored realtime run resumed) makes it the session's tasks and arms
their deadlines and approval timeouts at their original due times; one already past
fires at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

import msgspec

from barnraise.sim.taskgraph import TaskGraph, TaskStatus, parse_priority
from barnraise.sim.tools import ToolError, ok

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage
    from barnraise.actors.taskqueue import TaskQueue, TaskSession

__all__ = ["TaskCheckpoints", "snapshot_of"]

_encode: Final = msgspec.json.Encoder().encode
_decode: Final = msgspec.json.Decoder().decode
_ACTIVE: Final = frozenset({TaskStatus.PENDING.value, TaskStatus.IN_PROGRESS.value})


def snapshot_of(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Folded task records (:class:`barnraise.actors.stored.image.SessionImage`'s, with ``held``) in
    the form
    a checkpoint of the session state keeps: graph, records, next_seq."""
    records = [{k: v for k, v in t.items() if k != "held"} for t in tasks.values()]
    graph = {"version": 1, "next_seq": len(records), "tasks": [
        {"task_id": t["task_id"],
         # awaiting approval is in progress in the graph (see barnraise.actors.taskqueue's doc)
         "status": t["status"], "priority": parse_priority(t["priority"]),
         "created_seq": t["seq"], "dependencies": list(t["dependencies"]),
         "held": t["held"], "data": {}} for t in tasks.values()]}
    return {"graph": graph, "records": records, "next_seq": len(records)}


def _recount(state: TaskSession) -> None:
    """Make the session's counts (pending per priority, completed per agent, awaiting
    approval) those of its records."""
    state.pending_by_priority = {}
    state.completed_by = {}
    state.awaiting = set()
    for record in state.records.values():
        if record.status == TaskStatus.PENDING:
            prio = parse_priority(record.priority)
            state.pending_by_priority[prio] = state.pending_by_priority.get(prio, 0) + 1
        elif record.status == TaskStatus.COMPLETED:
            who = record.assigned_to
            state.completed_by[who] = state.completed_by.get(who, 0) + 1
        if record.approval_requested_at is not None:
            state.awaiting.add(record.task_id)


class TaskCheckpoints:
    """The copies of every session's tasks, by checkpoint id."""

    def __init__(self, queue: TaskQueue) -> None:
        self.queue = queue
        self._kept: dict[str, dict[str, bytes]] = {}  # session id -> checkpoint id -> copy

    def kept(self, session_id: str) -> Mapping[str, bytes]:
        """The session's checkpoints of its tasks (encoded), by checkpoint id."""
        return self._kept.get(session_id, {})

    def close(self, session_id: str) -> None:
        """The session closed: its copies go."""
        self._kept.pop(session_id, None)

    def op_checkpoint(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Keep a copy of the graph and the records under ``checkpoint_id``."""
        state = self.queue.tasks_of(content["session_id"])
        snapshot = _encode({"graph": state.graph.to_dict(), "next_seq": state.next_seq,
                            "records": [asdict(r) for r in state.records.values()]})
        self._kept.setdefault(state.info.session_id, {})[content["checkpoint_id"]] = snapshot
        return ok(tasks=len(state.records), size_bytes=len(snapshot))

    def op_rollback(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Restore a checkpoint: graph, records, deadlines and pending approvals.

        Deadlines and approval timeouts keep their original due times; one
        already past fires at once.
        """
        state = self.queue.tasks_of(content["session_id"])
        checkpoint_id = content["checkpoint_id"]
        snapshot = self.kept(state.info.session_id).get(checkpoint_id)
        if snapshot is None:
            raise ToolError("checkpoint_not_found", f"no task checkpoint {checkpoint_id!r} "
                            f"in {state.info.session_id}")
        self.load(state, _decode(snapshot))
        return ok(restored_tasks=len(state.records))

    def restore(self, state: TaskSession, image: SessionImage) -> None:
        """Every task of ``image`` with its record, place in the graph and timers; the
        checkpoints of the session state it had."""
        self.load(state, snapshot_of(image.tasks))
        self._kept[state.info.session_id] = {
            cid: _encode(snapshot_of(tasks)) for cid, tasks in image.task_checkpoints.items()}

    def load(self, state: TaskSession, data: Mapping[str, Any]) -> None:
        """Make ``data`` (a checkpoint's graph, records and next_seq) the session's tasks,
        and arm their deadlines and approval timeouts at their original due times (one
        already past fires at once)."""
        queue = self.queue
        session_id = state.info.session_id
        queue.deadlines.cancel(session_id)
        queue.approvals.cancel(session_id)
        state.graph = TaskGraph.from_dict(data["graph"])
        state.records = {r["task_id"]: queue.record_type(**r) for r in data["records"]}
        state.next_seq = data["next_seq"]
        _recount(state)
        for record in state.records.values():
            if record.approval_requested_at is not None:
                queue.approvals.rearm(state, record)
            elif record.deadline is not None and record.status in _ACTIVE:
                queue.deadlines.arm(session_id, record.task_id, record.deadline)
