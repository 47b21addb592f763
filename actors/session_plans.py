"""``plan_start``: a member starts a plan's run in its session, as a tool (seed 004's /plan).

A room of :class:`barnraise.actors.coordinator.Coordinator`. The plan is given whole,
in the plan file's form (``name``, ``description``, ``steps``: see
:mod:`barnraise.actors.agents.plans.schema`), and validated against the session
(its grid) before anything happens: a bad one is refused ``invalid_argument`` with
``field`` naming the culprit (``plan.steps[1].depends_on[0]``), and so is a session
with no room for one more member (``session_full``); nothing is started then.

A valid plan is run by an agent of its own, started for it: the *runner*
``planner-<plan id>``, granted the architect's role (a plan delegates its steps),
which joins the session and runs the plan exactly as the Python
:func:`~barnraise.actors.agents.plans.plan_runner` behaviour does, publishing the
``plan.*`` and ``hitl.approval.*`` events on the session's topic and answering
approvals sent to it. The runner is a child of the world's supervisor, restarted
if it crashes. The tool answers at once, before any step starts: ``plan_id``,
``plan`` (its name), ``runner`` and ``steps`` (their ids); the run's progress is in
the events.

What callers can rely on: the runner's name and the plan id are functions of the
coordinator's seeded ids, so a deterministic run that starts a plan is replayed
the same. A runner started by this tool is not started again by a resumed run (a
scenario's own agents are, because the scenario spawns them again): a plan started
by a tool before a kill stops where it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from barnraise.actors.agents.participant import Participant
from barnraise.actors.agents.plans.runner import plan_runner
from barnraise.actors.agents.plans.schema import PlanError, parse_plan
from barnraise.actors.service import Call
from barnraise.actors.supervisor import ROOT, Supervisor
from barnraise.sim.tools import ToolError, ok

if TYPE_CHECKING:
    from barnraise.actors.coordinator import Coordinator

__all__ = ["SessionPlans"]


class SessionPlans:
    """The plans started by the tool (see the module doc)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def tool_plan_start(self, call: Call) -> dict[str, Any]:
        coordinator = self.coordinator
        info = call.session
        assert info is not None  # a member's tool: the service found its session
        try:
            plan = parse_plan(call.args["plan"], grid_size=info.grid_size)
        except PlanError as exc:
            raise ToolError("invalid_argument", f"plan.{exc.field}: {exc.problem}",
                            field=f"plan.{exc.field}") from None
        if len(coordinator.members[call.session_id]) >= info.max_agents:
            raise ToolError("session_full", f"the session has its {info.max_agents} members: "
                            "a plan's runner is one more")
        supervisor = coordinator.dispatcher.actors.get(ROOT)
        if not isinstance(supervisor, Supervisor):
            raise ToolError("internal_error", "this world has no supervisor to start a "
                            "plan's runner under")
        plan_id = coordinator.new_id("plan")
        runner = f"planner-{plan_id}"
        coordinator.grant(call.session_id, runner, "architect")
        supervisor.start_child(
            Participant, runner, session_id=call.session_id, agent_name=runner,
            role="architect", behaviour=plan_runner, crew=1, resumed=False,
            params={"plan": plan, "plan_id": plan_id, "started_by": call.caller})
        return ok(plan_id=plan_id, plan=plan.name, runner=runner, steps=list(plan.ids))
