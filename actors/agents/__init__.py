"""Simulated session members and their behaviours.

A :class:`Participant` is an agent that joins a session, waits at the ``ready``
barrier until the whole crew has joined, then runs one behaviour: a plain
``async def behaviour(agent)`` that knows nothing of the dispatcher. The role
behaviours are :func:`architect`, :func:`builder`, :func:`tester` and
:func:`observer`; the design notes' patterns are here too: writer/critic and
best-of-N (``critic``), async delegation (``delegation``), approval-gated plans
(``plans``) and alerts (``alerts``). Scenario authors may pass their own.
"""

from actors.agents.alerts import SEVERITIES, alert
from actors.agents.architect import architect, plan_blocks
from actors.agents.builder import builder
from actors.agents.critic import best_of_n, critic, refine, score_layout, writer
from actors.agents.delegation import Delegation, DelegationError, DelegationLedger
from actors.agents.observer import observer
from actors.agents.participant import Participant, accept_next
from actors.agents.plans import (
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
from actors.agents.tester import tester

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
