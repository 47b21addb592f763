"""Running a plan: each step delegated once its dependencies are done.

:func:`run_plan` (the :func:`plan_runner` behaviour, for an architect) starts
each step once its dependencies have completed, delegating it with
``task_delegate`` (a test or review step gets its region in the payload, a
build step as the task's region, which the assignee claims). A step with
``approval`` first waits at its gate (``barnraise.actors.agents.plans.approvals``).
Session events, on ``session:<id>:events``: ``plan.started``,
``plan.step.started``, ``plan.step.completed`` (``skipped`` true for a skipped
step), ``plan.step.failed`` (``reason``; ``blocked_by`` for a step whose
dependency failed, which never starts), ``plan.completed`` (``status``
completed or failed), and the gates' ``hitl.approval.requested`` and
``hitl.approval.resolved``. Every payload has ``plan`` (the name) and ``plan_id``.

Restarted after a crash, a runner given what it had published (``before``: its
plan events, oldest first, read from a stored log by a resumed run) and the
approval answers that had reached it (``answers``) picks the run up
(:meth:`_Run.resume`): the steps' states come from those events, the tasks it had
delegated from the task queue (``DelegationLedger.recover``), and nothing it had
published or delegated is done again.
"""

from __future__ import annotations

from typing import Any, Final

from barnraise.actors.agents.alerts import alert, events_topic
from barnraise.actors.agents.delegation import Delegation, DelegationError, DelegationLedger
from barnraise.actors.agents.participant import Participant, my_delegations
from barnraise.actors.agents.plans.approvals import (
    APPROVAL_REQUESTED,
    APPROVAL_RESOLVED,
    APPROVAL_RESPONSE,
    DECISIONS,
)
from barnraise.actors.agents.plans.schema import TIME_TOLERANCE, Plan, PlanError, Step, load_plan
from barnraise.actors.base import Agent, WaitTimeout
from barnraise.sim.events import (
    HitlApprovalRequested,
    HitlApprovalResolved,
    PlanCompleted,
    PlanEvent,
    PlanStarted,
    PlanStepCompleted,
    PlanStepFailed,
    PlanStepStarted,
)
from barnraise.sim.messages import Message

__all__ = [
    "PLAN_COMPLETED",
    "PLAN_EVENTS",
    "PLAN_STARTED",
    "STEP_COMPLETED",
    "STEP_FAILED",
    "STEP_STARTED",
    "plan_runner",
    "run_plan",
]

PLAN_STARTED: Final = PlanStarted.kind
STEP_STARTED: Final = PlanStepStarted.kind
STEP_COMPLETED: Final = PlanStepCompleted.kind
STEP_FAILED: Final = PlanStepFailed.kind
PLAN_COMPLETED: Final = PlanCompleted.kind
PLAN_EVENTS: Final = (PLAN_STARTED, STEP_STARTED, STEP_COMPLETED, STEP_FAILED, PLAN_COMPLETED,
                      APPROVAL_REQUESTED, APPROVAL_RESOLVED)
#: Step types whose region goes in the payload (the assignee reads it, claims nothing).
_READ_ONLY_TYPES: Final = frozenset({"test", "review"})
_DONE: Final = frozenset({"completed", "skipped"})


class _Run:
    """The state of one plan run, on the runner's actor."""

    def __init__(self, agent: Agent, plan: Plan, plan_id: str, outcome: dict[str, Any]) -> None:
        self.agent = agent
        self.plan = plan
        self.plan_id = plan_id
        self.outcome = outcome
        self.ledger = DelegationLedger(agent, collect=False, events=False)
        self.status: dict[str, str] = {s.id: "waiting" for s in plan.steps}
        self.steps: dict[str, dict[str, Any]] = {
            s.id: {"status": "waiting", "agent": None, "task_id": None, "started_at": None,
                   "finished_at": None, "message": "", "decision": None}
            for s in plan.steps}
        self.deadlines: dict[str, float] = {}
        self.running: dict[str, str] = {}  # delegation id -> step id
        self.targets: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.load: dict[str, int] = {}
        self.events: list[list[Any]] = []
        self.approvals: list[dict[str, Any]] = []
        self.alerts = 0
        outcome.update(plan=plan.name, plan_id=plan_id, status="running", steps=self.steps,
                       events=self.events, approvals=self.approvals, alerts=0)

    # events

    def emit(self, event: type[PlanEvent], **fields: Any) -> None:
        """Publish ``event`` of this run (its other fields: ``fields``) to the session, and
        note it in the outcome's ``events``."""
        sid = self.agent.session_id
        if sid is not None:
            self.agent.emit(events_topic(sid), event(
                session_id=sid, plan=self.plan.name, plan_id=self.plan_id, **fields))
        self.events.append([self.agent.now, event.kind, fields.get("step_id")])

    def alert(self, severity: str, title: str, body: str, **details: Any) -> None:
        if self.agent.session_id is not None:
            alert(self.agent, severity, title, body, plan_id=self.plan_id, **details)
            self.alerts += 1
            self.outcome["alerts"] = self.alerts

    def set(self, step_id: str, status: str, **info: Any) -> None:
        self.status[step_id] = status
        self.steps[step_id].update(status=status, **info)

    # assignment

    async def pick(self, step: Step) -> str | None:
        if step.agent is not None:
            return step.agent
        role = str(step.role)
        if role not in self.members:
            found = await self.agent.call("a2a_discover", agent_type=role)
            self.members[role] = sorted(a["agent_id"] for a in found.get("agents", [])
                                        if a["agent_id"] != self.agent.name)
        candidates = self.members[role]
        if not candidates:
            return None
        return min(candidates, key=lambda a: (self.load.get(a, 0), candidates.index(a)))

    # transitions

    def fail(self, step_id: str, reason: str, **info: Any) -> None:
        self.set(step_id, "failed", message=reason, finished_at=self.agent.now)
        self.emit(PlanStepFailed, step_id=step_id, reason=reason, **info)

    async def start(self, step: Step) -> None:
        """The step's dependencies are done: announce it, then gate or delegate it."""
        target = await self.pick(step)
        if target is None:
            self.fail(step.id, f"no {step.role} in the session to do it")
            return
        self.targets[step.id] = target
        self.load[target] = self.load.get(target, 0) + 1
        self.set(step.id, "started", agent=target, started_at=self.agent.now)
        self.emit(PlanStepStarted, step_id=step.id, agent=target, task_type=step.task_type,
                  approval=step.approval)
        if not step.approval:
            await self.delegate(step)
            return
        self.set(step.id, "awaiting_approval")
        self.deadlines[step.id] = self.agent.now + step.approval_timeout
        self.emit(HitlApprovalRequested, step_id=step.id, agent=target, task_type=step.task_type,
                  region=step.region, reply_to=self.agent.name, options=list(DECISIONS),
                  timeout=step.approval_timeout,
                  question=f"Run step {step.id} ({step.task_type} by {target}) of plan "
                           f"{self.plan.name}?")

    async def delegate(self, step: Step) -> None:
        payload = {**step.payload, "plan": self.plan.name, "plan_id": self.plan_id,
                   "step": step.id}
        region = None
        if step.region is not None:
            payload["region"] = dict(step.region)
            if step.task_type not in _READ_ONLY_TYPES:
                region = step.region
        try:
            delegation_id = await self.ledger.delegate(
                self.targets[step.id], step.task_type, payload=payload, region=region,
                priority=step.priority,
                description=step.description or f"plan {self.plan.name}: {step.id}")
        except DelegationError as exc:
            self.fail(step.id, str(exc))
            return
        self.running[delegation_id] = step.id
        self.set(step.id, "running", task_id=self.ledger.records[delegation_id].task_id)

    async def advance(self) -> None:
        """Start every step whose dependencies are done; fail those a failure blocks."""
        progressed = True
        while progressed:
            progressed = False
            for step in self.plan.steps:
                if self.status[step.id] != "waiting":
                    continue
                states = [self.status[d] for d in step.depends_on]
                failed = [d for d, s in zip(step.depends_on, states, strict=True)
                          if s == "failed"]
                if failed:
                    self.fail(step.id, f"dependency {failed[0]} failed", blocked_by=failed[0])
                    progressed = True
                elif all(s in _DONE for s in states):
                    await self.start(step)
                    progressed = True

    def settle(self, message: Message) -> None:
        record = self.ledger.settle(message)
        if record is None or record.delegation_id not in self.running:
            return  # a duplicate, or the step already failed (its task was blocked)
        self.finish(record)

    def finish(self, record: Delegation) -> None:
        """A running step's delegation settled: the step completes or fails."""
        self.ledger.take([record.delegation_id])
        step_id = self.running.pop(record.delegation_id)
        self.load[self.targets[step_id]] -= 1
        if record.status == "completed":
            self.set(step_id, "completed", finished_at=self.agent.now)
            self.emit(PlanStepCompleted, step_id=step_id, agent=record.delegate,
                      task_id=record.task_id, skipped=False, result=record.result)
        else:
            self.fail(step_id, record.message or "task failed", task_id=record.task_id)

    def is_blocked(self, message: Message) -> bool:
        """A ``task_update`` saying one of the running steps' tasks is blocked."""
        content = message.content
        return (message.message_type == "task_update"
                and content.get("event") == "task_blocked"
                and self.ledger.wants_task(str(content.get("task_id")))
                and message.from_agent == self.ledger.queue)

    def block(self, message: Message) -> None:
        task_id = str(message.content.get("task_id"))
        for delegation_id, step_id in list(self.running.items()):
            if self.ledger.records[delegation_id].task_id == task_id:
                del self.running[delegation_id]
                self.load[self.targets[step_id]] -= 1
                self.fail(step_id, f"blocked: {message.content.get('message') or 'task blocked'}",
                          task_id=task_id)

    async def resume(self, before: list[dict[str, Any]], answers: list[Message]) -> bool:
        """Pick up a run its restarted runner had begun: the steps' states from the events
        it had published (``before``), its delegations from the task queue; a step whose
        task finished meanwhile settles now, a started step with no task is delegated,
        an approval answer that had reached it (``answers``) counts. False when the
        plan had completed already."""
        for e in before:
            event, step_id = e["event"], e.get("step_id")
            self.events.append([e["t"], event, step_id])
            if event == PLAN_COMPLETED:
                return False
            if step_id is None:
                continue
            if event == STEP_STARTED:
                self.targets[step_id] = str(e["agent"])
                self.load[e["agent"]] = self.load.get(e["agent"], 0) + 1
                self.set(step_id, "started", agent=e["agent"], started_at=e["t"])
            elif event == APPROVAL_REQUESTED:
                self.set(step_id, "awaiting_approval")
                self.deadlines[step_id] = float(e["t"]) + float(e["timeout"])
            elif event == APPROVAL_RESOLVED:
                self.deadlines.pop(step_id, None)
                self.steps[step_id]["decision"] = e["decision"]
                self.approvals.append({"step_id": step_id, "decision": e["decision"],
                                       "by": e["by"], "t": e["t"]})
                if e["decision"] == "approve":
                    self.set(step_id, "started")
            elif event in (STEP_COMPLETED, STEP_FAILED):
                if self.status[step_id] != "waiting":
                    self.load[self.targets[step_id]] -= 1
                if event == STEP_FAILED:
                    self.set(step_id, "failed", message=e.get("reason", ""), finished_at=e["t"])
                else:
                    self.set(step_id, "skipped" if e.get("skipped") else "completed",
                             finished_at=e["t"])
        by_task = {t["task_id"]: t.get("payload", {}) for t in await my_delegations(self.agent)}
        for record in await self.ledger.recover():
            payload = by_task.get(record.task_id, {})
            step_id = str(payload.get("step"))
            if payload.get("plan_id") != self.plan_id or self.status.get(step_id) != "started":
                continue
            self.running[record.delegation_id] = step_id
            self.set(step_id, "running", task_id=record.task_id)
            if record.settled:  # finished while the runner was down
                self.finish(record)
        for step in self.plan.steps:  # started, but its task was never made
            if self.status[step.id] == "started":
                await self.delegate(step)
        for message in answers:
            if self.is_response(message):
                await self.answer(message)
        return True

    def is_response(self, message: Message) -> bool:
        content = message.content
        return (message.message_type == "status_update"
                and content.get("event") == APPROVAL_RESPONSE
                and content.get("plan_id") == self.plan_id)

    async def answer(self, message: Message) -> None:
        content = message.content
        step_id = str(content.get("step_id"))
        decision = content.get("decision")
        if step_id not in self.deadlines or decision not in DECISIONS:
            self.outcome["ignored_responses"] = self.outcome.get("ignored_responses", 0) + 1
            return  # late, repeated, or not a decision
        del self.deadlines[step_id]
        self.resolve(step_id, str(decision), message.from_agent, str(content.get("comment", "")))
        step = self.plan.step(step_id)
        if decision == "approve":
            self.set(step_id, "started")
            await self.delegate(step)
        elif decision == "reject":
            self.load[self.targets[step_id]] -= 1
            self.fail(step_id, "Rejected")
        else:
            self.load[self.targets[step_id]] -= 1
            self.set(step_id, "skipped", finished_at=self.agent.now)
            self.emit(PlanStepCompleted, step_id=step_id, agent=self.targets[step_id],
                      task_id=None, skipped=True, result={"skipped": True})

    def resolve(self, step_id: str, decision: str, by: str, comment: str = "") -> None:
        self.steps[step_id]["decision"] = decision
        self.approvals.append({"step_id": step_id, "decision": decision, "by": by,
                               "t": self.agent.now})
        self.emit(HitlApprovalResolved, step_id=step_id, decision=decision, by=by,
                  comment=comment)

    def time_out(self) -> None:
        now = self.agent.now
        for step_id, due in sorted(self.deadlines.items(), key=lambda kv: (kv[1], kv[0])):
            if due > now + TIME_TOLERANCE:
                continue
            del self.deadlines[step_id]
            self.load[self.targets[step_id]] -= 1
            self.resolve(step_id, "timeout", "timeout")
            self.fail(step_id, "Approval timed out")
            timeout = self.plan.step(step_id).approval_timeout
            self.alert("warning", "Approval timed out",
                       f"plan {self.plan.name}: step {step_id} got no answer in {timeout:g}s; "
                       "it failed", step_id=step_id)


async def run_plan(agent: Agent, plan: Plan, *, plan_id: str | None = None,
                   outcome: dict[str, Any] | None = None,
                   before: list[dict[str, Any]] | None = None,
                   answers: list[Message] | None = None) -> dict[str, Any]:
    """Run ``plan`` from ``agent`` (who may delegate: an architect); its outcome.

    Outcome: ``plan``, ``plan_id``, ``status`` (completed | failed), ``steps``
    (per step: status, agent, task_id, started_at, finished_at, message,
    decision), ``events`` ([t, event, step id], in publication order),
    ``approvals``, ``alerts``, ``duration``. ``outcome`` is updated as the run goes.
    ``before`` (with ``answers``): the events a restarted runner had published for
    this plan (its ``plan.started`` first), to pick the run up from (see the module
    doc); its ``plan_id`` is the one they carry.
    """
    if before:
        plan_id = str(before[0]["plan_id"])
    if plan_id is None:
        plan_id = f"{plan.name}-{agent.name}-{agent.next_serial('plan-run')}"
    run = _Run(agent, plan, plan_id, outcome if outcome is not None else {})
    started = agent.now
    if before:
        started = float(before[0]["t"])
        if not await run.resume(before, list(answers or ())):
            run.outcome.update(status=before[-1].get("status"),
                               duration=round(float(before[-1]["t"]) - started, 6))
            return run.outcome
    else:
        run.emit(PlanStarted, steps=plan.ids, runner=agent.name)
    await run.advance()
    # Under faults a step's result letter may be lost: with none come for 4 x retry
    # simulated seconds, the results of the running steps' tasks are read from the task
    # queue (DelegationLedger.read_back). With no plan the wait is the plain one.
    faults = agent.dispatcher.faults
    poll = None if faults is None else 4 * faults.retry
    while run.running or run.deadlines:
        timeout = poll
        if run.deadlines:
            due = max(0.0, min(run.deadlines.values()) - agent.now)
            timeout = due if poll is None else min(due, poll)
        try:
            message = await agent.receive(
                lambda m: run.ledger.wants(m) or run.is_response(m) or run.is_blocked(m),
                timeout=timeout, description=f"a step result or an approval for plan {plan_id}")
        except WaitTimeout:
            run.time_out()
            if poll is not None and run.running:
                for record in await run.ledger.read_back():
                    if record.delegation_id in run.running:
                        run.finish(record)
        else:
            if run.ledger.wants(message):
                run.settle(message)
            elif run.is_blocked(message):
                run.block(message)
            else:
                await run.answer(message)
        await run.advance()
    failed = [s for s, status in run.status.items() if status not in _DONE]
    status = "failed" if failed else "completed"
    run.outcome.update(status=status, duration=round(agent.now - started, 6))
    run.emit(PlanCompleted, status=status,
             completed=[s for s, v in run.status.items() if v == "completed"],
             skipped=[s for s, v in run.status.items() if v == "skipped"], failed=failed)
    if failed:
        run.alert("warning", f"Plan {plan.name} failed",
                  f"steps not done: {', '.join(failed)}", failed=failed)
    return run.outcome


async def plan_runner(agent: Participant) -> None:
    """Run ``params["plan"]`` (a Plan, a mapping, a path or a name in ``params["plans_dir"]``),
    as ``params["plan_id"]`` when given (the ``plan_start`` tool names its runs).

    The outcome is :func:`run_plan`'s; a plan that does not validate ends the
    behaviour with ``status`` "invalid" and ``error``. Restarted after a crash, it picks
    the run up from ``params["plan_events_before"]`` and ``params["answers_before"]``
    (see :func:`run_plan`), when given.
    """
    params = agent.params
    try:
        plan = load_plan(params["plan"], directory=params.get("plans_dir"),
                         grid_size=params.get("grid_size"))
    except PlanError as exc:
        agent.outcome.update(status="invalid", error=str(exc), field=exc.field)
        return
    # a resumed run: the events it had published for the plan, the answers it had had
    before = params.get("plan_events_before") if agent.resuming else None
    if agent.resuming and before is None:
        before = await _published_live(agent)
    await run_plan(agent, plan, plan_id=params.get("plan_id"), outcome=agent.outcome,
                   before=before, answers=params.get("answers_before"))


async def _published_live(agent: Agent) -> list[dict[str, Any]] | None:
    """A runner its supervisor restarted in a live run (a crash under a fault plan): the
    events its last plan run had published, from the session's recent events (the last
    ``coordinator.RECENT_EVENTS``); None when its ``plan.started`` is no longer among
    them, and the plan then starts afresh."""
    recent = await agent.call("session_get_state", include=["events"])
    events = [e for e in recent.get("state", {}).get("events", [])
              if e.get("event") in PLAN_EVENTS]
    started = [e for e in events if e["event"] == PLAN_STARTED and e.get("runner") == agent.name]
    if not started:
        return None
    plan_id = started[-1]["plan_id"]
    return [e for e in events if e.get("plan_id") == plan_id]
