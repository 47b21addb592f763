"""The task queue's gates besides dependencies: deadlines and approvals.

Two rooms of :class:`barnraise.actors.taskqueue.TaskQueue`, each the one owner of its timers:

* :class:`Deadlines`: a task with a ``deadline`` (absolute simulation time) fails
  when it passes while the task is still pending or in progress, with message
  "deadline passed" and no retry; a task awaiting approval has done its work and is
  left alone.
* :class:`Approvals`: a build task reported completed in a session whose config
  has ``require_approval`` waits for an architect's ``approval_respond`` (this room
  serves that tool); after ``approval_timeout`` simulated seconds it fails.

The queue keeps the tasks, their records and counts; a room asks it to finish a task
(``finish_failed``, ``finish_completed``) and never changes a record's status itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from barnraise.actors.service import Call
from barnraise.sim.dispatch import Timer
from barnraise.sim.events import ApprovalRequested, ApprovalResolved, body_of
from barnraise.sim.taskgraph import TaskStatus
from barnraise.sim.tools import ToolError, ok

if TYPE_CHECKING:
    from barnraise.actors.taskqueue import TaskQueue, TaskRecord, TaskSession

__all__ = ["AWAITING_APPROVAL", "Approvals", "Deadlines"]

#: Status shown for a build task that waits for an architect's approval.
AWAITING_APPROVAL: Final = "awaiting_approval"
#: The statuses a deadline can fail.
_ACTIVE: Final = frozenset({TaskStatus.PENDING.value, TaskStatus.IN_PROGRESS.value})


class _Timers:
    """One timer per (session, task) at most, dropped when it fires or is cancelled."""

    def __init__(self, queue: TaskQueue) -> None:
        self.queue = queue
        self._timers: dict[str, dict[str, Timer]] = {}  # session id -> task id -> timer

    def _arm(self, session_id: str, task_id: str, delay: float, daemon: bool) -> None:
        queue = self.queue
        self._timers.setdefault(session_id, {})[task_id] = queue.dispatcher.call_later(
            delay, queue, self._fired, session_id, task_id, daemon=daemon)

    def _fired(self, session_id: str, task_id: str) -> None:
        self._timers.get(session_id, {}).pop(task_id, None)
        self.on_fire(session_id, task_id)

    def on_fire(self, session_id: str, task_id: str) -> None:
        raise NotImplementedError

    def cancel(self, session_id: str, task_id: str | None = None) -> None:
        """Cancel the task's timer, or with no ``task_id`` every timer of the session."""
        timers = self._timers.get(session_id)
        if not timers:
            return
        if task_id is None:
            for timer in timers.values():
                timer.cancel()
            timers.clear()
        elif task_id in timers:
            timers.pop(task_id).cancel()

    def close(self, session_id: str) -> None:
        """The session closed: its timers go."""
        self.cancel(session_id)
        self._timers.pop(session_id, None)

    def armed(self, session_id: str) -> frozenset[str]:
        """The tasks of the session whose timer is armed (for tests and views)."""
        return frozenset(self._timers.get(session_id, ()))


class Deadlines(_Timers):
    """The deadline timers of every session's tasks (daemons: they keep no run going)."""

    def arm(self, session_id: str, task_id: str, deadline: float) -> None:
        """Fail the task at ``deadline`` (at once if it has passed) unless it is done."""
        self._arm(session_id, task_id, max(0.0, deadline - self.queue.now), True)

    def on_fire(self, session_id: str, task_id: str) -> None:
        queue = self.queue
        state = queue.by_session.get(session_id)
        if state is None or task_id not in state.records:
            return
        record = state.records[task_id]
        if record.status not in _ACTIVE or record.approval_requested_at is not None:
            return  # done in time (or its work is done and waits for a verdict)
        held: list[str] = []
        if record.status == TaskStatus.PENDING:
            # The graph fails only started or blocked tasks: hold it, then fail it.
            held = queue.transition(state, task_id, "block")
        queue.finish_failed(state, record, "deadline passed", by="deadline", blocked=held)


class Approvals(_Timers):
    """The approval gates: who is asked, the verdict (``approval_respond``), the timeout.

    Its timers are not daemons: someone waits for the verdict, so the run must reach it.
    """

    def request(self, state: TaskSession, record: TaskRecord, by: str) -> dict[str, Any]:
        """Hold ``record``'s completed build task for a verdict and ask the architects:
        task_report's result, with status ``awaiting_approval``."""
        queue = self.queue
        task_id = record.task_id
        session_id = state.info.session_id
        timeout = self.timeout(state)
        record.approval_requested_at = queue.now
        state.awaiting.add(task_id)
        self._arm(session_id, task_id, timeout, False)
        request = ApprovalRequested(
            session_id=session_id, task_id=task_id, type=record.type,
            assigned_to=record.assigned_to, reported_by=by, region=record.region,
            result=record.result, artifacts=record.artifacts, timeout=timeout,
            options=["approve", "reject", "skip"])
        queue.emit_event(request)
        notified: list[str] = []
        for member in queue.members.get(session_id, {}).values():
            if member.role == "architect":
                notified += queue.notify(member.agent_id, "status_update", body_of(request))
        return ok(task_id=task_id, status=AWAITING_APPROVAL, notified_agents=notified,
                  unblocked_tasks=[], blocked_tasks=[], requeued=False)

    @staticmethod
    def timeout(state: TaskSession) -> float:
        """The session's approval timeout in simulated seconds (config, default 300)."""
        return float(state.info.config.get("approval_timeout", 300))

    def rearm(self, state: TaskSession, record: TaskRecord) -> None:
        """Arm a restored task's timeout at its original due time (at once if past)."""
        assert record.approval_requested_at is not None
        due = record.approval_requested_at + self.timeout(state)
        self._arm(state.info.session_id, record.task_id, max(0.0, due - self.queue.now), False)

    def tool_approval_respond(self, call: Call) -> dict[str, Any]:
        """Answer an approval: the task_report result of the outcome, plus ``decision``.

        approve: completed (dependents unblocked); reject: failed with message
        "Rejected" (dependents blocked); skip: completed with result
        ``{"skipped": True}``. invalid_transition unless the task awaits approval.
        """
        queue = self.queue
        args = call.args
        state = queue.tasks_of(call.session_id)
        record = queue.record_of(state, args["task_id"])
        if record.approval_requested_at is None:
            raise ToolError("invalid_transition", f"task {record.task_id} is not awaiting "
                            f"approval (it is {record.status})", task_id=record.task_id,
                            status=record.status)
        decision = args["decision"]
        queue.emit_event(ApprovalResolved(
            session_id=state.info.session_id, task_id=record.task_id, decision=decision,
            by=call.caller, comment=args["comment"]))
        if decision == "reject":
            result = queue.finish_failed(state, record, "Rejected", by=call.caller)
        else:
            if decision == "skip":
                record.result = {"skipped": True}
            result = queue.finish_completed(state, record, call.caller)
        return {**result, "decision": decision}

    def on_fire(self, session_id: str, task_id: str) -> None:
        queue = self.queue
        state = queue.by_session.get(session_id)
        if state is None or task_id not in state.awaiting:
            return
        record = state.records[task_id]
        queue.emit_event(ApprovalResolved(
            session_id=state.info.session_id, task_id=task_id, decision="timeout",
            by="timeout", comment=""))
        queue.finish_failed(state, record, "Approval timed out", by="timeout")
