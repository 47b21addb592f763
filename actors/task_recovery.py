"""The task queue's recovery: what becomes of tasks whose agent leaves or crashes, or
whose assignment letter is lost.

A room of :class:`barnraise.actors.taskqueue.TaskQueue` serving the internal operations
``_requeue_agent`` (the coordinator, when a member leaves) and ``_agent_crashed`` (the
top supervisor); under a fault plan it owns each session's redelivery timer, which
sends every pending task's assignment to its assignee again until it is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from barnraise.sim.events import TaskRequeued
from barnraise.sim.taskgraph import TaskStatus
from barnraise.sim.tools import ok

if TYPE_CHECKING:
    from barnraise.actors.taskqueue import TaskQueue, TaskSession

__all__ = ["Recovery"]


class Recovery:
    """Tasks back to pending (or to ``"any"``) when their agent is gone; lost letters
    sent again."""

    def __init__(self, queue: TaskQueue) -> None:
        self.queue = queue
        self._stop_redelivery: dict[str, Callable[[], None]] = {}  # session id -> stop

    def watch(self, state: TaskSession) -> None:
        """A new session: under a fault plan, redeliver its assignments every so often.

        Letters may be lost: every so often each ready task's assignment goes to its
        assignee again, until it is accepted (a daemon timer: it keeps no run going).
        A second copy of an assignment is harmless: accepting a task already started is
        refused and changes nothing."""
        queue = self.queue
        faults = queue.dispatcher.faults
        if faults is not None:
            self._stop_redelivery[state.info.session_id] = queue.dispatcher.call_every(
                4 * faults.retry, queue, lambda: self._redeliver(state))

    def close(self, session_id: str) -> None:
        """The session closed: no more redelivery."""
        stop = self._stop_redelivery.pop(session_id, None)
        if stop is not None:
            stop()

    def _redeliver(self, state: TaskSession) -> None:
        queue, session_id = self.queue, state.info.session_id
        for record in state.records.values():
            if (record.status == TaskStatus.PENDING and record.assigned_to != "any"
                    and record.approval_requested_at is None):
                queue.send(record.assigned_to, "task_assignment",
                          {"session_id": session_id, **record.to_dict()})

    def op_requeue_agent(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """A member left: its started tasks go back to pending, and all its open tasks to any.

        Its claims were released (or handed over) by the coordinator already,
        so the tasks only forget them. Tasks awaiting approval stay as they are:
        their work is done.
        """
        queue = self.queue
        state = queue.tasks_of(content["session_id"])
        agent_id = content["agent_id"]
        requeued: list[str] = []
        for record in state.records.values():
            if record.assigned_to != agent_id or record.approval_requested_at is not None:
                continue
            if record.status == TaskStatus.IN_PROGRESS:
                changed = queue.transition(state, record.task_id, "requeue")
                queue.announce_unblocked(state, changed, record.task_id, ready_only=False)
                record.accepted_at = None
                record.claim_id = None
            elif record.status not in (TaskStatus.PENDING, TaskStatus.BLOCKED):
                continue
            record.assigned_to = "any"
            requeued.append(record.task_id)
            queue.emit_event(TaskRequeued(
                session_id=state.info.session_id, task_id=record.task_id, by=agent_id,
                reason="agent_left", retries_used=record.retries_used))
        return ok(requeued=requeued)

    def op_agent_crashed(self, content: Mapping[str, Any]) -> None:
        """An agent crashed (its supervisor says): its tasks in progress go back to pending.

        They stay its own, with their claims released, so that its next
        incarnation (or, should it leave, anyone) starts them again; their
        assignments are sent again (under faults, see :meth:`watch`). A report
        from the crashed incarnation still on its way finds the task pending and
        is refused, so no task is completed twice. Tasks awaiting approval have
        done their work and are left alone. ``agent_ids`` names several at once (a
        resumed run: every agent of the stopped process), ``reason`` says why
        (``agent_crashed`` by default, ``resumed``).
        """
        queue = self.queue
        crashed = set(content.get("agent_ids") or ()) | (
            {content["agent_id"]} if "agent_id" in content else set())
        reason = str(content.get("reason", "agent_crashed"))
        for state in queue.by_session.values():
            for record in state.records.values():
                if (record.assigned_to not in crashed or record.status != TaskStatus.IN_PROGRESS
                        or record.approval_requested_at is not None):
                    continue
                changed = queue.transition(state, record.task_id, "requeue")
                queue.announce_unblocked(state, changed, record.task_id, ready_only=False)
                queue.release_claim(state, record)
                record.accepted_at = None
                record.claim_id = None
                queue.emit_event(TaskRequeued(
                    session_id=state.info.session_id, task_id=record.task_id,
                    by=record.assigned_to, reason=reason, retries_used=record.retries_used))

