"""Approval gates of a plan run: the request, the answer, and a member that answers.

A step with ``approval`` pauses before it is delegated: the runner publishes
``hitl.approval.requested`` (``step_id``, ``question``, ``options``,
``timeout``, ``reply_to``) and waits for a ``hitl.approval.response`` message
from any member, agent or client, sent with ``a2a_send_message`` (see
:func:`approval_response` and :func:`respond`). approve: the step runs; reject:
it fails "Rejected"; skip: it completes without running (``skipped``), so its
dependents go on; no answer within the step's ``approval_timeout``: it fails
"Approval timed out" and the runner raises a warning alert. The first answer
counts; ``hitl.approval.resolved`` records it. :func:`approver` is a member that
answers requests.

These gates are the plan runner's, per step; the task queue's
``require_approval`` gates every build task of a session, after the work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from barnraise.actors.agents.participant import Participant
from barnraise.actors.base import Agent, WaitTimeout
from barnraise.sim.events import HitlApprovalRequested, HitlApprovalResolved

__all__ = [
    "APPROVAL_REQUESTED",
    "APPROVAL_RESOLVED",
    "APPROVAL_RESPONSE",
    "DECISIONS",
    "approval_response",
    "approver",
    "respond",
]

APPROVAL_REQUESTED: Final = HitlApprovalRequested.kind
APPROVAL_RESPONSE: Final = "hitl.approval.response"
APPROVAL_RESOLVED: Final = HitlApprovalResolved.kind
DECISIONS: Final = ("approve", "reject", "skip")


def approval_response(request: Mapping[str, Any], decision: str,
                      comment: str = "") -> dict[str, Any]:
    """The content answering ``request`` (a ``hitl.approval.requested`` payload).

    Send it to ``request["reply_to"]`` as a ``status_update`` with
    ``a2a_send_message``, from an agent (:func:`respond`) or a client::

        client.call("a2a_send_message", to_agent=request["reply_to"],
                    message_type="status_update",
                    content=approval_response(request, "approve"))
    """
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    return {"event": APPROVAL_RESPONSE, "plan_id": request["plan_id"],
            "step_id": request["step_id"], "decision": decision, "comment": comment}


async def respond(agent: Agent, request: Mapping[str, Any], decision: str,
                  comment: str = "") -> dict[str, Any]:
    """Answer an approval request from a simulated agent; the a2a_send_message result."""
    return await agent.call("a2a_send_message", to_agent=str(request["reply_to"]),
                            message_type="status_update",
                            content=approval_response(request, decision, comment))


async def approver(agent: Participant) -> None:
    """A member that answers approval requests after thinking a seeded while.

    Inputs: ``decision`` (approve | reject | skip | ignore; default approve),
    ``decisions`` (per step id, overriding it), ``think`` ([min, max] simulated
    seconds; default [0.5, 2]), ``requests_before`` (restarted after a crash: the
    requests left open). Outcome: ``requests``, ``answered`` ([step id, decision]
    pairs), ``ignored``.
    """
    params = agent.params
    default = str(params.get("decision", "approve"))
    per_step: Mapping[str, str] = params.get("decisions", {})
    low, high = (float(v) for v in params.get("think", (0.5, 2.0)))
    outcome = agent.outcome
    answered: list[list[str]] = []
    outcome.update(requests=0, answered=answered, ignored=0)
    await agent.call("a2a_subscribe", event_type=APPROVAL_REQUESTED)
    # Events are not replayed to late subscribers: catch up on requests published
    # before the subscription took effect (and not resolved yet) from recent events.
    recent = await agent.call("session_get_state", include=["events"])
    backlog = _open_requests(recent.get("state", {}).get("events", []))
    # Restarted after a crash: the requests still open then (a resumed run reads them from
    # its stored log; recent events are not kept across a restart).
    backlog += [dict(r) for r in params.get("requests_before", ())] if agent.resuming else []
    seen: set[tuple[str, str]] = set()
    # Under faults a request's notification or the answer may be lost: every 4 x retry
    # simulated seconds (a standing wait's poll, which keeps no run going) the approver
    # reads the requests still open from recent events, answers a new one and sends its
    # answer again to one it had answered (the runner counts the first answer only).
    faults = agent.dispatcher.faults
    poll = None if faults is None else 4 * faults.retry
    said: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
    while True:
        if backlog:
            request = backlog.pop(0)
        else:
            try:
                message = await agent.receive(
                    lambda m: m.content.get("event") == APPROVAL_REQUESTED, daemon=True,
                    timeout=poll, description="an approval request")
            except WaitTimeout:
                recent = await agent.call("session_get_state", include=["events"])
                for request in _open_requests(recent.get("state", {}).get("events", [])):
                    key = (str(request.get("plan_id")), str(request.get("step_id")))
                    if key in said:
                        asked, decision = said[key]
                        await respond(agent, asked, decision,
                                      comment=f"{decision} by {agent.name}")
                    elif key not in seen:
                        backlog.append(request)
                continue
            request = message.content
        key = (str(request.get("plan_id")), str(request.get("step_id")))
        if key in seen:
            continue  # seen in the catch-up and again as it was published
        seen.add(key)
        outcome["requests"] += 1
        decision = per_step.get(str(request.get("step_id")), default)
        if decision not in DECISIONS:
            outcome["ignored"] += 1
            continue
        await agent.sleep(low + (high - low) * float(agent.rng.random()))
        await respond(agent, request, decision, comment=f"{decision} by {agent.name}")
        answered.append([str(request["step_id"]), decision])
        if poll is not None:
            said[key] = (dict(request), decision)


def _open_requests(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Approval requests among ``events`` that no ``hitl.approval.resolved`` answers."""
    resolved = {(e.get("plan_id"), e.get("step_id")) for e in events
                if e.get("event") == APPROVAL_RESOLVED}
    return [dict(e) for e in events if e.get("event") == APPROVAL_REQUESTED
            and (e.get("plan_id"), e.get("step_id")) not in resolved]
