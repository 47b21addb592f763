"""Named plans: steps delegated along their dependencies, with approval gates and progress.

One module per concern:

* :mod:`~barnraise.actors.agents.plans.schema`: the plan file (:class:`Plan`, :class:`Step`),
  its validation and loading (:func:`parse_plan`, :func:`load_plan`, :class:`PlanError`);
* :mod:`~barnraise.actors.agents.plans.approvals`: the per-step approval gates
  (:func:`approval_response`, :func:`respond`, the :func:`approver` member);
* :mod:`~barnraise.actors.agents.plans.runner`: running a plan (:func:`run_plan`, the
  :func:`plan_runner` behaviour) and its ``plan.*`` events;
* :mod:`~barnraise.actors.agents.plans.progress`: debounced progress (:class:`Debouncer`,
  the :func:`progress_watcher` member).

Each module's docstring holds its contract; the names below are the ones callers use.
"""

from barnraise.actors.agents.plans.approvals import approval_response, approver, respond
from barnraise.actors.agents.plans.progress import Debouncer, progress_watcher
from barnraise.actors.agents.plans.runner import PLAN_EVENTS, plan_runner, run_plan
from barnraise.actors.agents.plans.schema import Plan, PlanError, Step, load_plan, parse_plan

__all__ = [
    "PLAN_EVENTS",
    "Debouncer",
    "Plan",
    "PlanError",
    "Step",
    "approval_response",
    "approver",
    "load_plan",
    "parse_plan",
    "plan_runner",
    "progress_watcher",
    "respond",
    "run_plan",
]
