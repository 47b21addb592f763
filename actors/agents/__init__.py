"""Simulated session members and their behaviours.

A :class:`Participant` is an agent that joins a session, waits at the ``ready``
barrier until the whole crew has joined, then runs one behaviour: a plain
``async def behaviour(agent)`` that knows nothing of the dispatcher. The role
behaviours are :func:`architect`, :func:`builder`, :func:`tester` and
:func:`observer`; the design notes' patterns are here too: writer/critic and
best-of-N (``critic``), async delegation (``delegation``), approval-gated plans
(``plans``) and alerts (``alerts``). Scenario authors may pass their own.
"""

from barnraise.actors.agents.alerts import SEVERITIES, alert
from barnraise.actors.agents.architect import architect, plan_blocks
from barnraise.actors.agents.builder import builder
from barnraise.actors.agents.critic import best_of_n, critic, refine, score_layout, writer
from barnraise.actors.agents.delegation import Delegation, DelegationError, DelegationLedger
from barnraise.actors.agents.observer import observer
from barnraise.actors.agents.participant import Participant, accept_next
from barnraise.actors.agents.plans import (
    Debouncer,
    Plan,
    PlanError,
    Step,
    approver,
    load_plan,
    parse_plan,
    plan_runner,
    run_plan,
)
from barnraise.actors.agents.tester import tester

__all__ = [
    "SEVERITIES",
    "Debouncer",
    "Delegation",
    "DelegationError",
    "DelegationLedger",
    "Participant",
    "Plan",
    "PlanError",
    "Step",
    "accept_next",
    "alert",
    "approver",
    "architect",
    "best_of_n",
    "builder",
    "critic",
    "load_plan",
    "observer",
    "parse_plan",
    "plan_blocks",
    "plan_runner",
    "refine",
    "run_plan",
    "score_layout",
    "tester",
    "writer",
]
