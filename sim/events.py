"""The domain events of a run: one typed struct each, the registry of them, and the one
rule for the status an event leaves a task (or a member) in.

A domain event is what a service or an agent tells the world happened: a region
claimed, a task completed, a member gone. Each type is a frozen
:class:`msgspec.Struct` tagged with its name in the ``event`` field, so its JSON is
the body every subscriber, the trace and the store have always seen::

    {"event": "task_accepted", "session_id": "s-1", "task_id": "t-3", ...}

What callers can rely on:

* **Emitted typed.** Every emitter builds the struct (``Dispatcher.emit(source,
  topic, event)``); :func:`body_of` turns it into the body once, and the dispatcher
  encodes that body once for the trace and every publication of it. A field left
  :data:`msgspec.UNSET` is absent from the body, so an event whose payload has a
  key only sometimes (a claim handed over names ``transferred_from``) keeps the
  bytes it had as a dict. Bodies are encoded with sorted keys, so a run's trace
  digest does not depend on the order fields are declared in; the order is today's
  key order all the same, for readers of the body as a dict.
* **One registry.** :data:`EVENTS` maps each event name to its struct: every one of
  this module, and any other a caller adds with :func:`register` (two structs for
  one name are refused). :func:`decode` reads a stored or published body into its
  struct.
* **One status rule.** :func:`status_after` is the status an event leaves a task
  in (task events) or a member in (member events), given the status before it.
  It is the queue's own state machine (``actors/taskqueue.py``, ``sim/taskgraph.py``)
  as its events show it: the store's delegations, the resume fold, the world
  rebuilt from a log, the metrics and the A2A binding all ask it, so no consumer
  keeps a map of its own.

Task statuses are the task graph's (``pending``, ``in_progress``, ``completed``,
``failed``, ``blocked``, ``cancelled``) plus ``awaiting_approval``, the status a
task in progress shows while its report waits for an architect (see
``actors/taskqueue.py``)::

    task_created         -> the status it names (pending, or blocked on a broken dependency)
    task_accepted        -> in_progress
    approval_requested   -> awaiting_approval
    approval_resolved    awaiting_approval, in_progress -> in_progress (a verdict; failed
                         or completed next)
    task_completed       -> completed
    task_failed          -> failed
    task_cancelled       -> cancelled
    task_blocked         -> blocked
    task_unblocked       blocked -> pending; any other status stays
    task_requeued        in_progress, awaiting_approval, failed -> pending;
                         a pending or blocked task keeps its status (a member left:
                         its open tasks go to anyone, as they were)

With no status known before it (``current`` None, as for a watcher that keeps none), an
event with a condition above leaves the status it moves to (a requeue: pending).

Member statuses: ``agent_joined`` and ``agent_online`` leave a member ``active``,
``agent_offline`` leaves it ``offline``, ``agent_left`` and ``agent_expired`` leave
it ``gone``. Every other event leaves the status as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "EVENTS",
    "MEMBER_EVENTS",
    "MEMBER_STATUSES",
    "TASK_EVENTS",
    "TASK_STATUSES",
    "AgentAlert",
    "AgentExpired",
    "AgentJoined",
    "AgentLeft",
    "AgentOffline",
    "AgentOnline",
    "ApprovalRequested",
    "ApprovalResolved",
    "BarrierReleased",
    "CheckpointCreated",
    "ChildCrashed",
    "ChildRestarted",
    "ConflictDetected",
    "DelegationCompleted",
    "DelegationFailed",
    "Event",
    "HitlApprovalRequested",
    "HitlApprovalResolved",
    "LockExpired",
    "LockGranted",
    "LockReleased",
    "PlanCompleted",
    "PlanStarted",
    "PlanStepCompleted",
    "PlanStepFailed",
    "PlanStepStarted",
    "RegionClaimed",
    "RegionReleased",
    "RegionRenewed",
    "Rollback",
    "SessionEvent",
    "SupervisorEscalated",
    "SupervisorGaveUp",
    "TaskAccepted",
    "TaskBlocked",
    "TaskCancelled",
    "TaskCompleted",
    "TaskCreated",
    "TaskDependenciesAdded",
    "TaskFailed",
    "TaskRequeued",
    "TaskResultRead",
    "TaskUnblocked",
    "UnknownEvent",
    "body_of",
    "decode",
    "register",
    "status_after",
]

TASK_STATUSES: Final = ("pending", "in_progress", "awaiting_approval", "completed", "failed",
                        "blocked", "cancelled")
MEMBER_STATUSES: Final = ("active", "offline", "gone")

#: Every event type by its name (the ``event`` field of its body); see :func:`register`.
EVENTS: dict[str, type[Event]] = {}
E = TypeVar("E", bound="Event")


class UnknownEvent(ValueError):
    """A body names no registered event type (or is not an event's body)."""


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """A domain event; subclasses name themselves with ``tag=`` and register."""

    #: The event's name (its tag), on the class: ``TaskCompleted.kind``.
    kind: ClassVar[str] = ""  # set by register()
    #: True for an event that carries caller-chosen keys beside its fields
    #: (an alert's ``details``): :func:`body_of` lays them out beside the fields.
    open: ClassVar[bool] = False



class SessionEvent(Event, frozen=True, kw_only=True):
    """An event of one session, published on ``session:<id>:events``."""

    session_id: str


class TaskEvent(SessionEvent, frozen=True, kw_only=True):
    """An event about one task of the session's queue."""

    task_id: str


# -- members (the coordinator; agent_online and agent_offline from the registry too) ---------

class AgentJoined(SessionEvent, frozen=True, kw_only=True, tag="agent_joined"):
    """A member joined the session (the coordinator)."""

    agent_id: str
    name: str
    role: str


class AgentLeft(SessionEvent, frozen=True, kw_only=True, tag="agent_left"):
    """A member left, or its join was taken back (the coordinator)."""

    agent_id: str
    name: str
    #: ``left`` (it asked) or ``join_failed`` (its join was taken back)
    reason: str


class AgentExpired(SessionEvent, frozen=True, kw_only=True, tag="agent_expired"):
    """A member removed without asking (offline, terminated, its lease out)."""

    agent_id: str
    name: str
    reason: str
    released_regions: list[Any]
    requeued_tasks: list[str]


class AgentOnline(Event, frozen=True, kw_only=True, tag="agent_online"):
    """The registry heard a heartbeat from an agent it had marked offline."""

    agent_id: str


class AgentOffline(Event, frozen=True, kw_only=True, tag="agent_offline"):
    """An agent missed its heartbeats: from the registry (no session), then from the
    coordinator once for each session it is a member of (with ``session_id``, ``name``)."""

    session_id: str | UnsetType = UNSET
    agent_id: str
    name: str | UnsetType = UNSET
    last_heartbeat: float | None


class CheckpointCreated(SessionEvent, frozen=True, kw_only=True, tag="checkpoint_created"):
    """A checkpoint was taken, by a call or automatically (the coordinator)."""

    checkpoint_id: str
    name: str


class Rollback(SessionEvent, frozen=True, kw_only=True, tag="rollback"):
    """The session went back to a checkpoint; ``lost_items``: what it undid (the coordinator)."""

    checkpoint_id: str
    lost_items: dict[str, Any]
    by: str


# -- regions --------------------------------------------------------------------------------

class ConflictDetected(SessionEvent, frozen=True, kw_only=True, tag="conflict_detected"):
    """A claim was refused: ``agents`` hold claims over ``overlapping_region`` (regions)."""

    agent_id: str
    agents: list[str]
    region: dict[str, Any]
    overlapping_region: dict[str, Any]


class RegionClaimed(SessionEvent, frozen=True, kw_only=True, tag="region_claimed"):
    """A claim was granted (regions); ``expires_at`` None: no lease."""

    agent_id: str
    claim_id: str
    region: dict[str, Any]
    exclusive: bool
    expires_at: float | None
    #: the member that handed the claim over (a leave with a hand-off)
    transferred_from: str | UnsetType = UNSET


class RegionRenewed(SessionEvent, frozen=True, kw_only=True, tag="region_renewed"):
    """A claim's lease got a new term (regions): its holder asked (``region_renew``), or
    the term ran out with the holder still live. It now ends at ``expires_at``."""

    agent_id: str
    claim_id: str
    expires_at: float
    #: the term in seconds: the next renewal extends by this much
    lease: float


class RegionReleased(SessionEvent, frozen=True, kw_only=True, tag="region_released"):
    """A claim ended: ``reason`` released, expired, left, transferred... (regions)."""

    agent_id: str
    claim_id: str
    region: dict[str, Any]
    reason: str
    transferred_to: str | UnsetType = UNSET


# -- coordination ---------------------------------------------------------------------------

class LockGranted(SessionEvent, frozen=True, kw_only=True, tag="lock_granted"):
    """A lock went to ``holder``, after ``waited`` seconds (coordination)."""

    lock_id: str
    holder: str
    expires_at: float | None
    waited: float


class LockReleased(SessionEvent, frozen=True, kw_only=True, tag="lock_released"):
    """A lock's holder let it go; ``next_holder`` gets it next (coordination)."""

    lock_id: str
    holder: str | None
    next_holder: str | None
    #: ``released`` (by its holder) or ``member_left``
    reason: str


class LockExpired(SessionEvent, frozen=True, kw_only=True, tag="lock_expired"):
    """A lock's lease ran out; ``next_holder`` gets it next (coordination)."""

    lock_id: str
    holder: str | None
    next_holder: str | None


class BarrierReleased(SessionEvent, frozen=True, kw_only=True, tag="barrier_released"):
    """A barrier's ``generation`` let its ``arrived`` members through (coordination)."""

    barrier_id: str
    generation: int
    arrived: list[str]


# -- tasks ----------------------------------------------------------------------------------

class TaskDependenciesAdded(TaskEvent, frozen=True, kw_only=True,
                            tag="task_dependencies_added"):
    """A task not yet started gained dependencies (the task queue)."""

    added: list[str]
    status: str


class TaskCreated(TaskEvent, frozen=True, kw_only=True, tag="task_created"):
    """A task was delegated (the task queue)."""

    type: str
    assigned_to: str
    delegated_by: str
    priority: Any  # a name (low ... critical) or any int, as the delegator gave it
    #: pending, or blocked when a dependency is broken already
    status: str


class TaskAccepted(TaskEvent, frozen=True, kw_only=True, tag="task_accepted"):
    """A task was accepted: in progress, with the claim its region took (the task queue)."""

    agent_id: str
    claim_id: str | None


class TaskBlocked(TaskEvent, frozen=True, kw_only=True, tag="task_blocked"):
    """Held by a report (``by``, ``reason``) or by a broken dependency (``because``)."""

    by: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    because: str | UnsetType = UNSET


class TaskCancelled(TaskEvent, frozen=True, kw_only=True, tag="task_cancelled"):
    """A task was cancelled by a report (the task queue)."""

    by: str
    reason: str


class TaskCompleted(TaskEvent, frozen=True, kw_only=True, tag="task_completed"):
    """A task was completed; ``unblocked_tasks`` are ready now (the task queue)."""

    type: str
    by: str
    assigned_to: str
    unblocked_tasks: list[str]


class TaskFailed(TaskEvent, frozen=True, kw_only=True, tag="task_failed"):
    """A task failed for good; ``blocked_tasks`` depend on it (the task queue)."""

    type: str
    by: str
    message: str
    blocked_tasks: list[str]


class TaskRequeued(TaskEvent, frozen=True, kw_only=True, tag="task_requeued"):
    """A task went back to the queue: a retry, its member left or crashed, a resume."""

    by: str
    #: ``retry``, ``agent_left``, ``agent_crashed`` or ``resumed``
    reason: str
    retries_used: int
    #: a retry's retries left
    retries_left: int | UnsetType = UNSET


class TaskUnblocked(TaskEvent, frozen=True, kw_only=True, tag="task_unblocked"):
    """A task's last broken dependency mended (``ready``: it may start) (the task queue)."""

    after: str
    ready: bool


class ApprovalRequested(TaskEvent, frozen=True, kw_only=True, tag="approval_requested"):
    """A report waits for an architect's verdict (the task queue)."""

    type: str
    assigned_to: str
    reported_by: str
    region: dict[str, Any] | None
    result: dict[str, Any]
    artifacts: list[dict[str, Any]]
    timeout: float
    options: list[str]


class ApprovalResolved(TaskEvent, frozen=True, kw_only=True, tag="approval_resolved"):
    """An approval was answered, or timed out (the task queue)."""

    #: approve, reject, skip or timeout
    decision: str
    by: str
    comment: str


class TaskResultRead(Event, frozen=True, kw_only=True, tag="task_result_read"):
    """A restarted delegator read a finished task from the queue (a delivery of its
    result; see ``barnraise.actors.agents.participant.results_read``). Traced, not published."""

    session_id: str | None
    task_id: str
    delegated_by: str
    status: str


# -- the supervisor -------------------------------------------------------------------------

class ChildCrashed(Event, frozen=True, kw_only=True, tag="child_crashed"):
    """A supervised actor crashed (its supervisor)."""

    supervisor: str
    child: str


class ChildRestarted(Event, frozen=True, kw_only=True, tag="child_restarted"):
    """A crashed actor was started again, as its ``incarnation`` (its supervisor)."""

    supervisor: str
    child: str
    incarnation: int


class SupervisorEscalated(Event, frozen=True, kw_only=True, tag="supervisor_escalated"):
    """A supervisor's restarts ran over its limit: its ``parent`` decides."""

    supervisor: str
    parent: str | None


class SupervisorGaveUp(Event, frozen=True, kw_only=True, tag="supervisor_gave_up"):
    """A supervisor stopped its group for good."""

    supervisor: str
    children: list[str]


# -- agents: delegations, alerts, plans -----------------------------------------------------

class DelegationCompleted(SessionEvent, frozen=True, kw_only=True,
                          tag="delegation.completed"):
    """A delegation an agent made was completed (its ledger)."""

    delegation_id: str
    task_id: str | None
    delegator: str
    delegate: str
    task_type: str
    status: str
    reported_by: str | None
    result: dict[str, Any]


class DelegationFailed(SessionEvent, frozen=True, kw_only=True, tag="delegation.failed"):
    """A delegation an agent made failed; ``error`` says why (its ledger)."""

    delegation_id: str
    task_id: str | None
    delegator: str
    delegate: str
    task_type: str
    status: str
    reported_by: str | None
    error: str


class AgentAlert(SessionEvent, frozen=True, kw_only=True, tag="agent.alert"):
    """An agent's alert; ``details`` are its caller's own keys, laid out beside the fields
    in the body (``plan_id``, ``step_id``, ``delegation_id``...)."""

    open: ClassVar[bool] = True
    agent_id: str
    severity: str
    title: str
    body: str
    details: dict[str, Any] = {}


class PlanEvent(SessionEvent, frozen=True, kw_only=True):
    """An event of one run of a plan (``actors/agents/plans``)."""

    plan: str
    plan_id: str


class PlanStarted(PlanEvent, frozen=True, kw_only=True, tag="plan.started"):
    """A plan run began (its runner)."""

    steps: list[str]
    runner: str


class PlanStepStarted(PlanEvent, frozen=True, kw_only=True, tag="plan.step.started"):
    """A step's dependencies are done: it is delegated, or waits at its gate."""

    step_id: str
    agent: str
    task_type: str
    approval: bool


class PlanStepCompleted(PlanEvent, frozen=True, kw_only=True, tag="plan.step.completed"):
    """A step was done (``skipped`` at its gate, or its task completed)."""

    step_id: str
    agent: str
    task_id: str | None
    skipped: bool
    result: dict[str, Any]


class PlanStepFailed(PlanEvent, frozen=True, kw_only=True, tag="plan.step.failed"):
    """A step failed (its task, its gate, or a failed dependency)."""

    step_id: str
    reason: str
    task_id: str | UnsetType | None = UNSET
    #: the failed dependency of a step that never started
    blocked_by: str | UnsetType = UNSET


class PlanCompleted(PlanEvent, frozen=True, kw_only=True, tag="plan.completed"):
    """A plan run ended, ``completed`` or ``failed``."""

    status: str
    completed: list[str]
    skipped: list[str]
    failed: list[str]


class HitlApprovalRequested(PlanEvent, frozen=True, kw_only=True,
                            tag="hitl.approval.requested"):
    """A step's gate asks for a verdict (a plan's approval gate)."""

    step_id: str
    agent: str
    task_type: str
    region: Any
    reply_to: str
    options: list[str]
    timeout: float
    question: str


class HitlApprovalResolved(PlanEvent, frozen=True, kw_only=True,
                           tag="hitl.approval.resolved"):
    """A step's gate got its verdict, or timed out."""

    step_id: str
    decision: str
    by: str
    comment: str


# -- bodies ---------------------------------------------------------------------------------

def register(cls: type[E]) -> type[E]:
    """Add an event type to :data:`EVENTS` (the types of this module are in it already);
    returns ``cls``, so it serves as a class decorator for an event of one's own.

    Raises TypeError for a class that is no tagged :class:`Event`, or for a name that
    another type has."""
    tag = cls.__struct_config__.tag if isinstance(cls, type) and issubclass(cls, Event) \
        else None
    if not isinstance(tag, str) or tag == cls.__name__:
        raise TypeError(f"{cls!r} is not an Event subclass with a tag= name")
    other = EVENTS.get(tag)
    if other is not None and other is not cls:
        raise TypeError(f"event {tag!r} is registered already, as {other.__qualname__}")
    cls.kind = tag
    EVENTS[tag] = cls
    return cls


def _tagged(cls: type[Event]) -> list[type[Event]]:
    """The event types under ``cls``: a base with no ``tag=`` of its own (SessionEvent...)
    is tagged with its class name by msgspec, and is no event."""
    found = []
    for sub in cls.__subclasses__():
        if sub.__struct_config__.tag != sub.__name__:
            found.append(sub)
        found += _tagged(sub)
    return found


for _cls in _tagged(Event):
    register(_cls)

_to_builtins: Final = msgspec.to_builtins


def body_of(event: Event) -> dict[str, Any]:
    """The body of ``event`` as the world sees it: ``{"event": name, field: value, ...}``, a
    fresh dict (nested values copied) with unset fields left out."""
    body: dict[str, Any] = _to_builtins(event)
    if event.open:
        details = body.pop("details", None)
        if details:
            # the fields win over a detail of the same name, as they always did
            body = {"event": body["event"], **details, **body}
    return body


_decode_dict: Final = msgspec.json.Decoder(dict[str, Any]).decode


def decode(data: bytes | str | Mapping[str, Any]) -> Event:
    """The event a body holds (its JSON, or the body as a dict), as its struct. A
    detail of an open event (an alert's) comes back in ``details``.

    Raises :class:`UnknownEvent` for a body of no registered type, and
    :class:`msgspec.ValidationError` for a body whose fields do not fit its type."""
    body = dict(data) if isinstance(data, Mapping) else _decode_dict(data)
    name = body.get("event")
    cls = EVENTS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise UnknownEvent(f"no event type {name!r} is registered "
                           f"(known: {', '.join(sorted(EVENTS))})")
    if cls.open:
        fields = set(cls.__struct_fields__)
        details = {k: v for k, v in body.items() if k not in fields and k != "event"}
        body = {k: v for k, v in body.items() if k in fields or k == "event"}
        body["details"] = details
    return msgspec.convert(body, cls, strict=False)


# -- the status an event leaves ---------------------------------------------------------------

_FIXED: Final = {
    "task_accepted": "in_progress", "approval_requested": "awaiting_approval",
    "task_completed": "completed", "task_failed": "failed", "task_cancelled": "cancelled",
    "task_blocked": "blocked",
    "agent_joined": "active", "agent_online": "active", "agent_offline": "offline",
    "agent_left": "gone", "agent_expired": "gone",
}
#: event -> (the statuses it moves, the status it moves them to); others stay. With
#: no status known (None), the status it moves to.
_FROM: Final = {
    "task_unblocked": (frozenset({"blocked", None}), "pending"),
    "task_requeued": (frozenset({"in_progress", "awaiting_approval", "failed", None}),
                      "pending"),
    "approval_resolved": (frozenset({"awaiting_approval", "in_progress", None}),
                          "in_progress"),
}


#: The events that move a task's status (every one names its task in ``task_id``).
TASK_EVENTS: Final = frozenset({"task_created", *_FIXED, *_FROM} - {
    "agent_joined", "agent_online", "agent_offline", "agent_left", "agent_expired"})
#: The events that move a member's status.
MEMBER_EVENTS: Final = frozenset({
    "agent_joined", "agent_online", "agent_offline", "agent_left", "agent_expired"})


def status_after(event: Event | Mapping[str, Any], current: str | None = None) -> str | None:
    """The status ``event`` leaves its task (a task event) or its member (a member event)
    in, ``current`` being the status before it (None: not known); ``current`` itself for
    an event that moves no status. ``event``: a typed event or its body as a dict (a
    stored or published one), so readers of a log need not build structs to ask.

    See the module docstring for the table."""
    name: Any
    if isinstance(event, TaskCreated):
        return event.status
    if isinstance(event, Event):
        name = event.kind
    else:
        name = event.get("event")
        if name == "task_created":
            return str(event.get("status", "pending"))
    fixed = _FIXED.get(name)
    if fixed is not None:
        return fixed
    moves = _FROM.get(name)
    if moves is not None and current in moves[0]:
        return moves[1]
    return current
