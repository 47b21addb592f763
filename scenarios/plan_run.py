"""Approval-gated plan: a YAML plan runs along its dependencies; one step waits for approval.

The planner (an architect) loads ``scenarios/plans/<plan>.yaml`` (validated: an
unknown dependency, a missing role or a cycle is refused before anything runs)
and delegates each step to a member of its role once the step's dependencies
have completed; builders build their regions of a seeded kernel blueprint,
testers test them. The ``drivers`` step has an approval gate: the planner
publishes ``hitl.approval.requested`` and waits; the approver (another member)
answers after a seeded while with ``decision`` (approve, reject, skip, or
ignore, which lets the approval time out: the step then fails "Approval timed
out" and the planner raises a warning alert). Every step publishes
``plan.step.started`` / ``plan.step.completed`` / ``plan.step.failed`` on the
session's event topic, the plan ``plan.completed``; a progress watcher
(an observer) follows them, debounced to at most one update per
``progress_interval`` simulated seconds.

Parameters: plan, grid_size, builders, testers, tile_rate, decision, progress_interval.
Success: plan.completed published once with status completed, every step's
events in dependency order (a step starts only after its dependencies
completed), the approval step approved, progress updates at least
progress_interval apart, and no behaviour failed. The same under a fault plan: lost
step results are read from the task queue, the approver reads open requests and sends
its answer again while one stays open, and a planner restarted mid-plan picks its run
up from the session's recent events (``plans.runner``).

Resumed after a kill (``barnraise resume``, realtime): the planner picks its run up
from the plan events it had published and the approval answers that had reached
it (read from the stored log), and takes its delegated tasks back from the task
queue (``plans.run_plan``); the approver answers the requests left open, the
watcher rebuilds its view from the plan events it had seen. Its progress updates
are those sent since the resume (they are kept in no message), and so is the
check of their spacing.
"""

from __future__ import annotations

import pathlib
from typing import Any

from barnraise.actors.agents.plans import (
    PlanError,
    approver,
    load_plan,
    plan_runner,
    progress_watcher,
)
from barnraise.actors.agents.plans.approvals import (
    APPROVAL_REQUESTED,
    APPROVAL_RESOLVED,
    APPROVAL_RESPONSE,
)
from barnraise.actors.agents.plans.runner import PLAN_EVENTS
from barnraise.actors.world import Simulation
from barnraise.scenarios import COUNT, GRID, RATE, Bound, ParamError
from barnraise.scenarios._kit import (
    answered_before,
    count,
    current,
    delivered_before,
    host_session,
    kernel_blueprint,
    min_gap,
    rng_for,
    session_events,
    spawn,
)

NAME = "plan_run"
PLANS_DIR = pathlib.Path(__file__).with_name("plans")
PARAMS: dict[str, Any] = {
    "plan": "kernel_plan", "grid_size": 24, "builders": 2, "testers": 1, "tile_rate": 120.0,
    "decision": "approve", "progress_interval": 2.0,
}
#: What each parameter may be, checked before the run (``barnraise scenarios plan_run``).
BOUNDS = {"grid_size": GRID, "builders": COUNT, "testers": COUNT, "tile_rate": RATE,
          "decision": Bound(choices=("approve", "reject", "skip", "ignore")),
          "progress_interval": Bound(above=0, high=86_400)}
#: A realtime run resumes by running this script again on the restored world: the
#: planner, approver and watcher pick up from what the stored log says (see above).
RESUMABLE = True


def run(simu: Simulation, *, plan: str, grid_size: int, builders: int, testers: int,
        tile_rate: float, decision: str, progress_interval: float) -> dict[str, Any]:
    try:
        the_plan = load_plan(plan, directory=PLANS_DIR, grid_size=grid_size)
    except PlanError as exc:  # a missing, unreadable or ill-formed plan is a bad request
        raise ParamError(f"parameter {exc}") from None
    blueprint = kernel_blueprint(grid_size, rng_for(simu, "blueprint"))
    crew = 2 + builders + testers  # the watcher is an observer: not at the barrier
    _, sid = host_session(simu, session_name=f"Plan {the_plan.name}", grid_size=grid_size,
                          max_agents=crew + 1, blueprint=blueprint.tolist())
    for i in range(builders):
        spawn(simu, sid, f"builder-{i + 1}", "builder", crew=crew, blueprint=blueprint,
              tile_rate=tile_rate)
    for i in range(testers):
        spawn(simu, sid, f"tester-{i + 1}", "tester", crew=crew)
    before = _before_kill(simu, sid)
    watcher = spawn(simu, sid, "watcher-1", "observer", crew=crew, behaviour=progress_watcher,
                    interval=progress_interval, **before.get("watcher-1", {}))
    judge = spawn(simu, sid, "approver-1", "architect", crew=crew, behaviour=approver,
                  decision=decision, **before.get("approver-1", {}))
    planner = spawn(simu, sid, "planner-1", "architect", crew=crew, behaviour=plan_runner,
                    plan=the_plan, **before.get("planner-1", {}))
    simu.run()
    # after a crash under a fault plan, the agents' outcomes are their last incarnations'
    planner, judge, watcher = current(planner), current(judge), current(watcher)
    out = planner.outcome
    plan_id = out.get("plan_id")
    events = [e for e in session_events(simu, sid, prefix="plan.") if e.get("plan_id") == plan_id]
    gated = [s.id for s in the_plan.steps if s.approval]
    steps: dict[str, dict[str, Any]] = out.get("steps", {})
    updates = watcher.outcome.get("updates", [])
    gap = min_gap([t for t, _ in updates])
    return {
        "session_id": sid, "plan": the_plan.name, "plan_id": plan_id,
        "status": out.get("status"), "duration": out.get("duration"),
        "steps": {s: v["status"] for s, v in steps.items()},
        "approval_steps": gated,
        "decisions": {s: steps.get(s, {}).get("decision") for s in gated},
        "approved": bool(gated) and all(steps.get(s, {}).get("decision") == "approve"
                                        for s in gated),
        "approvals_answered": len(judge.outcome.get("answered", [])) + sum(
            1 for tool, args, _ in answered_before(simu, "approver-1")  # before a kill
            if tool == "a2a_send_message" and args["content"].get("event") == APPROVAL_RESPONSE),
        "plan_completed": count(events, "plan.completed"),
        "in_dependency_order": _in_dependency_order(the_plan, events),
        "step_events": [[e["event"], e.get("step_id")] for e in events],
        "hitl_requests": len(session_events(simu, sid, "hitl.approval.requested")),
        "alerts": [[e["severity"], e["title"]]
                   for e in session_events(simu, sid, "agent.alert")],
        "progress_updates": len(updates), "progress_min_gap": gap,
        "progress_interval": progress_interval,
        "progress_final": updates[-1][1] if updates else None,
    }


def _before_kill(simu: Simulation, sid: str) -> dict[str, dict[str, Any]]:
    """A resumed run: per agent, what it had published, heard or been asked before the kill,
    from the stored log (the planner's plan events and the approval answers that reached
    it and were not acted on yet; the requests left open; the plan events the watcher
    saw); {} in a run that was not resumed."""
    image = simu.restored
    if image is None:
        return {}
    published = [e for e in session_events(simu, sid) if e["seq"] < image.seq
                 and e["event"] in PLAN_EVENTS]
    resolved = {e["step_id"] for e in published if e["event"] == APPROVAL_RESOLVED}
    answers = [m for m in delivered_before(simu, "planner-1", "status_update")
               if m.content.get("event") == APPROVAL_RESPONSE
               and m.content.get("step_id") not in resolved]
    answered = {m.content.get("step_id") for m in answers}
    open_requests = [e for e in published if e["event"] == APPROVAL_REQUESTED
                     and e["step_id"] not in resolved and e["step_id"] not in answered]
    seen = [m.content for m in delivered_before(simu, "watcher-1", "status_update")
            if str(m.content.get("event", "")).startswith("plan.")]
    return {"planner-1": {"plan_events_before": published, "answers_before": answers},
            "approver-1": {"requests_before": open_requests},
            "watcher-1": {"seen_before": seen}}


def _in_dependency_order(plan: Any, events: list[dict[str, Any]]) -> bool:
    """Every started step started after each of its dependencies completed."""
    position: dict[tuple[str, str], int] = {}
    for i, e in enumerate(events):
        position.setdefault((e["event"], str(e.get("step_id"))), i)
    for step in plan.steps:
        started = position.get(("plan.step.started", step.id))
        if started is None:
            continue
        for dep in step.depends_on:
            done = position.get(("plan.step.completed", dep))
            if done is None or done > started:
                return False
    return True


def check(summary: dict[str, Any]) -> bool:
    m = summary["metrics"]
    gap = m["progress_min_gap"]
    return (m["plan_completed"] == 1 and m["status"] == "completed" and m["in_dependency_order"]
            and all(s == "completed" for s in m["steps"].values())
            and m["approved"] and m["progress_updates"] >= 1
            and (gap is None or gap >= m["progress_interval"] - 1e-6)
            and summary["behaviour_errors"] == 0)
