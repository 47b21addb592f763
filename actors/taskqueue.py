"""The task queue: each session's task graph, its tasks, deadlines and approval gates.

One :class:`~barnraise.sim.taskgraph.TaskGraph` per session holds the dependencies and the
statuses (see its docstring for the state machine); next to it a
:class:`TaskRecord` per task holds everything else (type, region, assignee,
times, retries, result). The graph is acyclic at all times and every tool
either changes both or neither.

Tools (arguments arrive validated, with defaults, see :data:`barnraise.sim.tools.TOOLS`):

``task_delegate``     create a task for a member or for ``"any"``
``task_add_dependencies``  make a task not yet started wait for more tasks
``task_accept``       start a ready task (claims its region through ``regions``)
``task_report``       completed / failed (retried while retries remain) /
                      blocked / cancelled
``task_get_queue``    tasks by priority, then age, with a summary
``approval_respond``  approve, reject or skip a build task awaiting approval

Internal operations, for the other services (``_agent_crashed`` for the top
supervisor): ``_state``, ``_requeue_agent``, ``_agent_crashed``,
``_checkpoint``, ``_rollback``, ``_session_closed`` (see each ``op_`` method).

The queue keeps the graph, the records and their counts; its rooms (each the one owner
of its own state, serving some of the tools and operations) are the deadlines and the
approval gates (:mod:`barnraise.actors.task_gates`: ``approval_respond``), the checkpoints
(:mod:`barnraise.actors.task_checkpoints`: ``_checkpoint``, ``_rollback``, a resume) and
recovery (:mod:`barnraise.actors.task_recovery`: ``_requeue_agent``, ``_agent_crashed``,
redelivery under faults).

What callers can rely on:

* Task ids are ``task_<hex>``, unique within the simulation run and drawn from
  the actor's seeded generator, so a deterministic run repeats them.
* A task assigned to ``"any"`` becomes its acceptor's on :meth:`task_accept`;
  it goes back to ``"any"`` only when its assignee leaves the session.
* A build task reported completed in a session whose config has
  ``require_approval`` shows status ``"awaiting_approval"``: in the graph it is
  still in progress (nothing depending on it is ready) until an architect
  answers, or ``approval_timeout`` simulated seconds pass and it fails.
* Events go to ``session:<id>:events`` (and ``...:<event>``): ``task_created``,
  ``task_accepted``, ``task_completed``, ``task_unblocked``, ``task_failed``,
  ``task_blocked``, ``task_requeued``, ``task_cancelled``, ``approval_requested``,
  ``approval_resolved``, ``task_dependencies_added``. Each payload has ``session_id``
  and ``task_id``.
* A deadline (absolute simulation time) fails a task still pending or in
  progress when it passes, with message "deadline passed" and no retry; a
  task awaiting approval has done its work and is left alone.
* Results never exceed a message's content limit: long lists are cut, and
  the result says so (``truncated``, ``total``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from barnraise.actors.base import DeliveryError, WaitTimeout
from barnraise.actors.regions import CLAIM_FOR
from barnraise.actors.service import (
    DEFERRED,
    REPLY_MARGIN,
    Call,
    Deferred,
    SessionInfo,
    SessionService,
    fit_prefix,
)
from barnraise.actors.task_checkpoints import TaskCheckpoints
from barnraise.actors.task_gates import AWAITING_APPROVAL, Approvals, Deadlines
from barnraise.actors.task_recovery import Recovery
from barnraise.sim.events import (
    TaskAccepted,
    TaskBlocked,
    TaskCancelled,
    TaskCompleted,
    TaskCreated,
    TaskDependenciesAdded,
    TaskFailed,
    TaskRequeued,
    TaskUnblocked,
)
from barnraise.sim.geometry import Rect
from barnraise.sim.messages import Priority
from barnraise.sim.taskgraph import (
    DependencyCycle,
    InvalidTransition,
    TaskGraph,
    TaskGraphError,
    TaskStatus,
    UnknownDependency,
    parse_priority,
)
from barnraise.sim.tools import ToolError, ok
from barnraise.sim.views import TasksPart, TaskView, json_copy

if TYPE_CHECKING:
    from barnraise.actors.stored.image import SessionImage

__all__ = ["TaskQueue", "TaskRecord"]

#: The window of ``completed_today`` in task_get_queue's summary.
DAY: Final = 86_400.0
#: At most this many pending tasks in ``_state`` (it is embedded in join results).
STATE_PENDING_LIMIT: Final = 50
#: Task ids' random parts drawn at a time (see TaskQueue._new_task_id).
_ID_BLOCK: Final = 64

_ALL: Final = frozenset(s.value for s in TaskStatus)
#: TaskView's fields in the order :meth:`TaskQueue.view_of` passes them (by position).
_VIEW_FIELDS: Final = (
    "task_id", "type", "description", "status", "priority", "assigned_to", "delegated_by",
    "region", "dependencies", "dependents", "ready", "created_at", "accepted_at",
    "completed_at", "deadline", "max_retries", "retries_used", "result", "artifacts",
    "message", "claim_id", "approval_requested_at", "payload")
if TaskView.__struct_fields__ != _VIEW_FIELDS:  # pragma: no cover - a guard for editors
    raise ImportError(
        "barnraise.sim.views.TaskView's fields moved: update TaskQueue.view_of, which "
        "builds it by position, and _VIEW_FIELDS"
    )


@dataclass(slots=True)
class TaskRecord:
    """One task's data beside the graph. ``status`` mirrors the graph's status."""

    task_id: str
    type: str
    description: str
    region: dict[str, int] | None
    priority: str
    assigned_to: str  # "any" or an agent id
    delegated_by: str
    created_at: float
    seq: int  # creation order in the session: "age" in every ordering
    dependencies: list[str] = field(default_factory=list)
    status: str = TaskStatus.PENDING.value
    accepted_at: float | None = None
    completed_at: float | None = None
    deadline: float | None = None
    max_retries: int = 0
    retries_used: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    claim_id: str | None = None
    approval_requested_at: float | None = None  # set while awaiting approval
    payload: dict[str, Any] = field(default_factory=dict)  # inputs for the assignee

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key: priority high to low, then oldest first."""
        return (-parse_priority(self.priority), self.seq)

    @property
    def shown_status(self) -> str:
        return AWAITING_APPROVAL if self.approval_requested_at is not None else self.status

    def to_dict(self) -> dict[str, Any]:
        """The public record (JSON-able; a copy)."""
        return {
            "task_id": self.task_id, "type": self.type, "description": self.description,
            "region": dict(self.region) if self.region is not None else None,
            "priority": self.priority, "assigned_to": self.assigned_to,
            "delegated_by": self.delegated_by, "status": self.shown_status,
            "dependencies": list(self.dependencies), "created_at": self.created_at,
            "accepted_at": self.accepted_at, "completed_at": self.completed_at,
            "deadline": self.deadline, "max_retries": self.max_retries,
            "retries_used": self.retries_used, "result": dict(self.result),
            "artifacts": [dict(a) for a in self.artifacts], "message": self.message,
            "claim_id": self.claim_id, "payload": dict(self.payload),
        }

    def summary(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "type": self.type, "priority": self.priority,
                "assigned_to": self.assigned_to, "description": self.description,
                "region": self.region}


def _rect_of(region: Mapping[str, int] | None) -> Rect | None:
    # The region was validated on the way in; the constructor's fast path is a
    # fifth of Rect.parse's cost.
    if region is None:
        return None
    return Rect(region["x"], region["y"], region["width"], region["height"])


@dataclass(slots=True)
class TaskSession:
    info: SessionInfo
    graph: TaskGraph = field(default_factory=TaskGraph)
    records: dict[str, TaskRecord] = field(default_factory=dict)
    # Pending tasks per int priority: a new task's queue position in O(1).
    pending_by_priority: dict[int, int] = field(default_factory=dict)
    completed_by: dict[str, int] = field(default_factory=dict)
    awaiting: set[str] = field(default_factory=set)
    next_seq: int = 0


class TaskQueue(SessionService):
    """The ``tasks`` service. See the module docstring for the contract."""

    service_name = "tasks"
    # Results of ids, statuses and numbers only (task_accept's answered at once has no
    # claim in it): answered without a copy (SessionService.fresh_results). Not
    # task_report: its lists of tasks are also in its event and the delegator's message.
    fresh_results = frozenset({"task_delegate", "task_accept"})
    #: The records' type (the checkpoints room makes records of what it loads).
    record_type: ClassVar[type[TaskRecord]] = TaskRecord

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.by_session: dict[str, TaskSession] = {}
        self._serial = 0
        self._id_draws: list[int] = []  # the task ids' next draws, last first
        self._id_stream: object = None  # the generator they came from
        # The rooms, one per concern, each the owner of its own state; the first two
        # serve some of this service's tool and operations (SessionService.rooms).
        self.approvals = Approvals(self)
        self.checkpoints = TaskCheckpoints(self)
        self.deadlines = Deadlines(self)
        self.recovery = Recovery(self)
        self.rooms = (self.approvals, self.checkpoints, self.recovery)

    # -- inspection ------------------------------------------------------------------

    def graph_of(self, session_id: str) -> TaskGraph:
        """The session's task graph. Read it only while the run is idle (tests, tools)."""
        return self.by_session[session_id].graph

    def records_of(self, session_id: str) -> Mapping[str, TaskRecord]:
        """The session's task records by id; same caveat as :meth:`graph_of`."""
        return self.by_session[session_id].records

    def view_of(self, session_id: str) -> TasksPart:
        """This service's part of a :class:`~barnraise.sim.views.WorldView`: every task, oldest
        first.

        LookupError for an unknown session. Call it in this actor's own context:
        ``barnraise.actors.world.Simulation.view`` does.
        """
        state = self.by_session.get(session_id)
        if state is None:
            raise LookupError(f"no session {session_id!r} in the task queue")
        links = state.graph.links()
        views = []
        for r in state.records.values():
            dependents, ready = links[r.task_id]
            # By position (_VIEW_FIELDS): with 23 fields, msgspec matching keywords
            # costs six times the whole construction by position.
            views.append(TaskView(
                r.task_id, r.type, r.description, r.shown_status, r.priority,
                r.assigned_to, r.delegated_by, _rect_of(r.region), tuple(r.dependencies),
                dependents, ready, r.created_at, r.accepted_at, r.completed_at, r.deadline,
                r.max_retries, r.retries_used,
                # Most results, artifacts and payloads are empty: a new {} is 4x cheaper
                # than a copy.
                json_copy(r.result) if r.result else {},
                tuple(json_copy(r.artifacts)) if r.artifacts else (), r.message,
                r.claim_id, r.approval_requested_at,
                json_copy(r.payload) if r.payload else {}))
        return TasksPart(tuple(views))

    # -- sessions --------------------------------------------------------------------

    def on_session(self, info: SessionInfo) -> None:
        state = self.by_session[info.session_id] = TaskSession(info)
        self.recovery.watch(state)

    def op_session_closed(self, content: Mapping[str, Any]) -> None:
        session_id = content["session_id"]
        self.by_session.pop(session_id, None)
        self.deadlines.close(session_id)
        self.approvals.close(session_id)
        self.checkpoints.close(session_id)
        self.recovery.close(session_id)
        self.sessions.pop(session_id, None)
        self.members.pop(session_id, None)

    # -- bookkeeping ------------------------------------------------------------------

    def tasks_of(self, session_id: str) -> TaskSession:
        state = self.by_session.get(session_id)
        if state is None:
            raise ToolError("session_not_found", f"no session {session_id!r}")
        return state

    def record_of(self, state: TaskSession, task_id: str) -> TaskRecord:
        record = state.records.get(task_id)
        if record is None:
            raise ToolError("task_not_found", f"no task {task_id!r} in "
                            f"{state.info.session_id}", task_id=task_id)
        return record

    def _new_task_id(self) -> str:
        self._serial += 1
        draws = self._id_draws
        if not draws or self._id_stream is not self._rng:
            # Drawn a block at a time: one numpy call per id was 7 us of a task's
            # creation in a run (1.5 us when hot). The ids are the same as one draw
            # each: a block of integers(0, 2**32) takes the stream's 32-bit halves in
            # the same order. This stream serves only task ids; a new one (a resumed
            # run's, see SessionService.resume_ids) drops the rest of the block.
            rng = self.rng
            draws = self._id_draws = rng.integers(0, 2**32, size=_ID_BLOCK).tolist()[::-1]
            self._id_stream = rng
        return f"task_{draws.pop():08x}{self._serial:x}"

    def _sync(self, state: TaskSession, task_ids: Iterable[str]) -> None:
        """Copy the graph's status of ``task_ids`` into their records, keeping the counts.

        Every graph operation returns the tasks whose status it changed besides
        the one it was called on, so passing those keeps every mirror exact.
        """
        graph, records, pending = state.graph, state.records, state.pending_by_priority
        for task_id in task_ids:
            record = records[task_id]
            new = graph.status(task_id).value
            if new == record.status:
                continue
            prio = parse_priority(record.priority)
            if record.status == TaskStatus.PENDING:
                pending[prio] -= 1
            if new == TaskStatus.PENDING:
                pending[prio] = pending.get(prio, 0) + 1
            record.status = new

    def transition(self, state: TaskSession, task_id: str, action: str) -> list[str]:
        """Run one graph transition; map its refusal to ``invalid_transition``."""
        try:
            # start() returns nothing; every other transition the tasks it flipped.
            changed: list[str] = getattr(state.graph, action)(task_id) or []
        except InvalidTransition as exc:
            raise ToolError("invalid_transition", str(exc), task_id=task_id,
                            status=state.records[task_id].shown_status) from None
        except TaskGraphError as exc:  # pragma: no cover - the graph's own guard
            raise ToolError("invalid_transition", str(exc), task_id=task_id) from None
        self._sync(state, [task_id, *changed])
        return changed

    def notify(self, to: str, message_type: str, content: dict[str, Any]) -> list[str]:
        """Send a direct message; the recipient's id if it was delivered, else nothing."""
        report = self.send(to, message_type, content)
        return [to] if report.ok else []

    def release_claim(self, state: TaskSession, record: TaskRecord) -> None:
        # Fire and forget, at the priority of ask(): it reaches regions before
        # any claim this actor asks for later, so a successor task can claim
        # the same region at once.
        if record.claim_id is not None:
            self.send("regions", "coordination_request", {
                "op": "_release", "session_id": state.info.session_id,
                "claim_id": record.claim_id}, priority=Priority.HIGH)
            record.claim_id = None

    # -- task_delegate ---------------------------------------------------------------

    def tool_task_delegate(self, call: Call) -> dict[str, Any]:
        """Create a task: task_id, assigned_to, status, position_in_queue.

        ``target_agent_id`` is ``"any"`` or a member (id or name) the policy lets
        accept tasks. ``status`` is pending, or blocked when a dependency is
        already failed, cancelled or blocked; ``position_in_queue`` is the
        1-based rank among pending tasks by priority then age (None when
        blocked). Errors, none of which changes anything: invalid_argument
        (``field`` target_agent_id or deadline), out_of_bounds (``field``
        region), unknown_dependency (``dependency``), dependency_cycle
        (``cycle``). Dependencies must exist already, so the only cycle this
        call can ask for is a task depending on itself; task_add_dependencies
        can ask for any.
        """
        args = call.args
        state = self.tasks_of(call.session_id)
        info = state.info
        target = args["target_agent_id"]
        if target != "any":
            resolved = self.member_id(info.session_id, target, "target_agent_id")
            member = self.members[info.session_id][resolved]
            # A task only its target may accept must go to someone allowed to accept.
            if not self.policy.decide("task_accept", role=member.role,
                                      agent_id=member.agent_id):
                raise ToolError("invalid_argument", f"target_agent_id: a {member.role} may "
                                "not accept tasks", field="target_agent_id")
            target = resolved
        region = args.get("region")
        if region is not None and (region["x"] + region["width"] > info.grid_size
                                   or region["y"] + region["height"] > info.grid_size):
            raise ToolError("out_of_bounds", f"region {region} does not fit the "
                            f"{info.grid_size}x{info.grid_size} grid", field="region")
        deadline = args.get("deadline")
        if deadline is not None and deadline < self.now:
            raise ToolError("invalid_argument", f"deadline: {deadline:g} has passed "
                            f"(now {self.now:g})", field="deadline")
        task_id = self._new_task_id()
        record = TaskRecord(
            task_id=task_id, type=args["task_type"], description=args["description"],
            region=dict(region) if region is not None else None, priority=args["priority"],
            assigned_to=target, delegated_by=call.caller, created_at=self.now,
            seq=state.next_seq, dependencies=list(dict.fromkeys(args["dependencies"])),
            deadline=deadline, max_retries=args["max_retries"], payload=args["payload"],
        )
        return self._create(state, record)

    def tool_task_add_dependencies(self, call: Call) -> dict[str, Any]:
        """Make a pending or blocked task also depend on ``dependencies``.

        Result: task_id, dependencies (all of them now), status, blocked (tasks
        that became blocked because a new dependency had failed). All or
        nothing: task_not_found, unknown_dependency (``dependency``),
        dependency_cycle (``cycle``: the tasks in order, each depending on the
        next, first and last equal), invalid_transition (the task has started).
        This is how a plan can be re-shaped after delegation, and so the one way
        a caller can ask for a cycle: delegate a, b depending on a, then make a
        depend on b.
        """
        state = self.tasks_of(call.session_id)
        task_id = call.args["task_id"]
        record = self.record_of(state, task_id)
        graph = state.graph
        wanted = [d for d in dict.fromkeys(call.args["dependencies"])
                  if d not in record.dependencies]
        # Every new edge points into task_id, so none can open a path that
        # another one closes: checking each alone checks them all.
        for dependency in wanted:
            try:
                cycle = graph.cycle_through(task_id, dependency)
                if cycle is not None:
                    raise DependencyCycle(cycle)
            except (DependencyCycle, UnknownDependency) as exc:
                raise self._dependency_error(state, exc) from None
        if wanted and record.status not in (TaskStatus.PENDING, TaskStatus.BLOCKED):
            raise ToolError("invalid_transition", f"task {task_id} is {record.shown_status}: "
                            "only a task not yet started can gain dependencies",
                            task_id=task_id, status=record.shown_status)
        blocked: list[str] = []
        for dependency in wanted:
            blocked += graph.add_dependency(task_id, dependency)
            record.dependencies.append(dependency)
        self._sync(state, [task_id, *blocked])
        if wanted:
            self.emit_event(TaskDependenciesAdded(
                session_id=state.info.session_id, task_id=task_id, added=wanted,
                status=record.status))
            self.announce_blocked(state, blocked, task_id)
        return ok(task_id=task_id, dependencies=list(record.dependencies),
                  status=record.shown_status, blocked=[b for b in blocked if b != task_id])

    @staticmethod
    def _dependency_error(state: TaskSession,
                          exc: DependencyCycle | UnknownDependency) -> ToolError:
        """The tool failure for a refused dependency: the cycle named, or the unknown task."""
        if isinstance(exc, DependencyCycle):
            return ToolError("dependency_cycle", str(exc), field="dependencies",
                             cycle=exc.cycle)
        return ToolError("unknown_dependency", f"dependencies: no task {exc.dependency!r} "
                         f"in {state.info.session_id}", field="dependencies",
                         dependency=exc.dependency)

    def _create(self, state: TaskSession, record: TaskRecord) -> dict[str, Any]:
        """Add ``record``'s task to the graph and announce it; all or nothing."""
        task_id = record.task_id
        prio = parse_priority(record.priority)
        try:
            status = state.graph.add_task(task_id, priority=prio, created_seq=record.seq,
                                          dependencies=record.dependencies)
        except (DependencyCycle, UnknownDependency) as exc:
            raise self._dependency_error(state, exc) from None
        state.next_seq += 1
        state.records[task_id] = record
        if status is TaskStatus.PENDING:
            state.pending_by_priority[prio] = state.pending_by_priority.get(prio, 0) + 1
        record.status = status.value
        position = None
        if status is TaskStatus.PENDING:
            # The newest task is the youngest of its priority: it ranks behind
            # every pending task of its priority or higher.
            position = sum(n for p, n in state.pending_by_priority.items() if p >= prio)
        if record.deadline is not None:
            self.deadlines.arm(state.info.session_id, task_id, record.deadline)
        if record.assigned_to != "any":
            self.send(record.assigned_to, "task_assignment",
                      {"session_id": state.info.session_id, **record.to_dict()})
        self.emit_event(TaskCreated(
            session_id=state.info.session_id, task_id=task_id, type=record.type,
            assigned_to=record.assigned_to, delegated_by=record.delegated_by,
            priority=record.priority, status=record.status))
        return ok(task_id=task_id, assigned_to=record.assigned_to, status=record.status,
                  position_in_queue=position)

    # -- task_accept ------------------------------------------------------------------

    def tool_task_accept(self, call: Call) -> dict[str, Any] | Deferred:
        """Start a task: task_id, status "in_progress", assigned_to, claimed_region, claim.

        The task must be assigned to the caller or to ``"any"`` (else not_owner)
        and ready (else invalid_transition with ``waiting_on``). A task with a
        region is first claimed for the caller through ``regions``
        (``_claim_for``); a refused claim is answered as regions answered it
        (e.g. region_conflict, plus ``task_id``) and the task stays pending.
        """
        state = self.tasks_of(call.session_id)
        record = self._check_acceptable(state, call.args["task_id"], call.caller)
        if record.region is not None and record.claim_id is None:
            # Only a task with a region to claim must wait for another service;
            # the rest are answered at once, without a behaviour's extra turn.
            self.start_behaviour(self._accept_with_claim, call, name="task_accept")
            return DEFERRED
        return self._start(state, record, call.caller, None)

    async def _accept_with_claim(self, _actor: TaskQueue, call: Call) -> None:
        try:
            result = await self._claim_and_start(call)
        except ToolError as exc:
            result = exc.result()
        self._answer(call.message, result)

    async def _claim_and_start(self, call: Call) -> dict[str, Any]:
        session_id, task_id = call.session_id, call.args["task_id"]
        state = self.tasks_of(session_id)
        record = self._check_acceptable(state, task_id, call.caller)
        assert record.region is not None
        try:
            claim = await self.ask("regions", CLAIM_FOR, session_id=session_id,
                                   agent_id=call.caller, region=record.region,
                                   purpose=f"task {task_id}")
        except (WaitTimeout, DeliveryError) as exc:
            raise ToolError("no_reply", f"regions did not answer the claim for task "
                            f"{task_id}: {exc}", task_id=task_id) from None
        if not claim.get("success"):
            return {**claim, "task_id": task_id, "status": record.shown_status}
        # The world moved while we waited: check again before starting.
        try:
            if self.by_session.get(session_id) is not state:
                raise ToolError("session_not_found", f"session {session_id!r} closed")
            record = self._check_acceptable(state, task_id, call.caller)
        except ToolError:
            self.send("regions", "coordination_request", {
                "op": "_release", "session_id": session_id,
                "claim_id": claim.get("claim_id")}, priority=Priority.HIGH)
            raise
        record.claim_id = claim.get("claim_id")
        return self._start(state, record, call.caller, claim)

    def _start(self, state: TaskSession, record: TaskRecord, caller: str,
               claim: dict[str, Any] | None) -> dict[str, Any]:
        task_id = record.task_id
        if record.status == TaskStatus.BLOCKED:
            unblocked = self.transition(state, task_id, "unblock")
            self.announce_unblocked(state, unblocked, task_id, ready_only=False)
        self.transition(state, task_id, "start")
        if record.assigned_to == "any":
            record.assigned_to = caller
        record.accepted_at = self.now
        self.emit_event(TaskAccepted(session_id=state.info.session_id, task_id=task_id,
                                     agent_id=caller, claim_id=record.claim_id))
        return ok(task_id=task_id, status=record.status, assigned_to=record.assigned_to,
                  claimed_region=record.claim_id, claim=claim)

    def _check_acceptable(self, state: TaskSession, task_id: str, caller: str) -> TaskRecord:
        """The record if ``caller`` may start the task now, else the ToolError why not.

        Ready means pending with every dependency completed. A task its
        assignee reported blocked (a hold, not a broken dependency) may be
        accepted again once its dependencies are complete: that resumes it.
        """
        record = self.record_of(state, task_id)
        if record.assigned_to not in ("any", caller):
            raise ToolError("not_owner", f"task {task_id} is assigned to "
                            f"{record.assigned_to}", task_id=task_id,
                            assigned_to=record.assigned_to)
        graph = state.graph
        if record.status == TaskStatus.PENDING and graph.is_ready(task_id):
            return record
        view = graph.get(task_id)
        waiting = [d for d in view.dependencies if graph.status(d) is not TaskStatus.COMPLETED]
        if view.held and not waiting:
            return record
        reason = (f"waiting on {', '.join(waiting)}" if waiting
                  else f"it is {record.shown_status}")
        raise ToolError("invalid_transition", f"task {task_id} is not ready: {reason}",
                        task_id=task_id, status=record.shown_status, waiting_on=waiting)

    # -- task_report ------------------------------------------------------------------

    def tool_task_report(self, call: Call) -> dict[str, Any]:
        """Report on a task: task_id, status, notified_agents, unblocked_tasks,
        blocked_tasks, requeued.

        Only the assignee or an architect may (not_owner). completed: the
        tasks now ready are ``unblocked_tasks``, the delegator gets a
        ``task_result`` (a build task in a session requiring approval goes to
        awaiting_approval instead). failed: requeued (same assignee, one retry
        used) while retries remain, else failed, its dependents blocked
        (``blocked_tasks``) and the delegator told. blocked: held, its
        dependents blocked; accepting it again resumes it. cancelled: final,
        dependents blocked. A refused report (invalid_transition) changes
        nothing. Final states release the claim made on acceptance.
        """
        args = call.args
        state = self.tasks_of(call.session_id)
        task_id = args["task_id"]
        record = self.record_of(state, task_id)
        assert call.member is not None
        if call.caller != record.assigned_to and call.member.role != "architect":
            raise ToolError("not_owner", f"only task {task_id}'s assignee "
                            f"({record.assigned_to}) or an architect may report on it",
                            task_id=task_id, assigned_to=record.assigned_to)
        status = args["status"]
        if record.approval_requested_at is not None and status != "cancelled":
            raise ToolError("invalid_transition", f"task {task_id} is awaiting approval; "
                            "an architect answers with approval_respond", task_id=task_id,
                            status=AWAITING_APPROVAL)
        before = (record.result, record.artifacts, record.message)
        record.result = dict(args["result"])
        record.artifacts = [dict(a) for a in args["artifacts"]]
        record.message = args["message"]
        try:
            return self._report(state, record, status, call.caller)
        except ToolError:
            # A refused report changes nothing, not even the reported data.
            record.result, record.artifacts, record.message = before
            raise

    def _report(self, state: TaskSession, record: TaskRecord, status: str,
                by: str) -> dict[str, Any]:
        task_id = record.task_id
        if status == "completed":
            config = state.info.config
            if record.type == "build" and config.get("require_approval"):
                if record.status != TaskStatus.IN_PROGRESS:
                    raise ToolError("invalid_transition", f"task {task_id}: cannot go "
                                    f"{record.status} -> completed", task_id=task_id,
                                    status=record.status)
                return self.approvals.request(state, record, by)
            return self.finish_completed(state, record, by)
        if status == "failed":
            if record.retries_used < record.max_retries and record.status == "in_progress":
                return self._requeue(state, record, by)
            return self.finish_failed(state, record, record.message, by=by)
        if status == "blocked":
            blocked = self.transition(state, task_id, "block")
            self.emit_event(TaskBlocked(session_id=state.info.session_id, task_id=task_id,
                                        by=by, reason=record.message))
            self.announce_blocked(state, blocked, task_id)
            notified = self.notify(record.delegated_by, "task_update", {
                "session_id": state.info.session_id, "event": "task_blocked",
                "task_id": task_id, "message": record.message, "by": by})
            return ok(task_id=task_id, status=record.status, notified_agents=notified,
                      unblocked_tasks=[], blocked_tasks=blocked, requeued=False)
        # cancelled
        blocked = self.transition(state, task_id, "cancel")
        state.awaiting.discard(task_id)
        record.approval_requested_at = None
        self.deadlines.cancel(state.info.session_id, task_id)
        self.approvals.cancel(state.info.session_id, task_id)
        self.release_claim(state, record)
        self.emit_event(TaskCancelled(session_id=state.info.session_id, task_id=task_id,
                                      by=by, reason=record.message))
        self.announce_blocked(state, blocked, task_id)
        notified = self._send_result(state, record, by, [], blocked)
        return ok(task_id=task_id, status=record.status, notified_agents=notified,
                  unblocked_tasks=[], blocked_tasks=blocked, requeued=False)

    def _send_result(self, state: TaskSession, record: TaskRecord, by: str,
                     unblocked: list[str], blocked: list[str]) -> list[str]:
        # The record's result and artifacts are the queue's own state (task_get_queue,
        # checkpoints, the next attempt's letter): the delegator gets copies, so what it
        # does with its letter changes nothing here. The lists were made for this letter.
        return self.notify(record.delegated_by, "task_result", {
            "session_id": state.info.session_id, "task_id": record.task_id,
            "type": record.type, "status": record.status,
            "result": json_copy(record.result) if record.result else {},
            "artifacts": json_copy(record.artifacts) if record.artifacts else [],
            "message": record.message, "reported_by": by,
            "assigned_to": record.assigned_to, "unblocked_tasks": unblocked,
            "blocked_tasks": blocked})

    def finish_completed(self, state: TaskSession, record: TaskRecord, by: str) -> dict[str, Any]:
        task_id = record.task_id
        unblocked = self.transition(state, task_id, "complete")
        record.completed_at = self.now
        record.approval_requested_at = None
        state.awaiting.discard(task_id)
        who = record.assigned_to
        state.completed_by[who] = state.completed_by.get(who, 0) + 1
        self.deadlines.cancel(state.info.session_id, task_id)
        self.approvals.cancel(state.info.session_id, task_id)
        self.release_claim(state, record)
        self.emit_event(TaskCompleted(
            session_id=state.info.session_id, task_id=task_id, type=record.type, by=by,
            assigned_to=who, unblocked_tasks=unblocked))
        self.announce_unblocked(state, unblocked, task_id, ready_only=True)
        notified = self._send_result(state, record, by, unblocked, [])
        return ok(task_id=task_id, status=record.status, notified_agents=notified,
                  unblocked_tasks=unblocked, blocked_tasks=[], requeued=False)

    def finish_failed(self, state: TaskSession, record: TaskRecord, message: str,
                       *, by: str, blocked: list[str] | None = None) -> dict[str, Any]:
        task_id = record.task_id
        blocked = [*(blocked or ()), *self.transition(state, task_id, "fail")]
        record.message = message
        record.approval_requested_at = None
        state.awaiting.discard(task_id)
        self.deadlines.cancel(state.info.session_id, task_id)
        self.approvals.cancel(state.info.session_id, task_id)
        self.release_claim(state, record)
        self.emit_event(TaskFailed(
            session_id=state.info.session_id, task_id=task_id, type=record.type, by=by,
            message=message, blocked_tasks=blocked))
        self.announce_blocked(state, blocked, task_id)
        notified = self._send_result(state, record, by, [], blocked)
        return ok(task_id=task_id, status=record.status, notified_agents=notified,
                  unblocked_tasks=[], blocked_tasks=blocked, requeued=False)

    def _requeue(self, state: TaskSession, record: TaskRecord, by: str) -> dict[str, Any]:
        task_id = record.task_id
        changed = self.transition(state, task_id, "requeue")
        record.retries_used += 1
        record.accepted_at = None
        self.release_claim(state, record)
        self.emit_event(TaskRequeued(
            session_id=state.info.session_id, task_id=task_id, by=by, reason="retry",
            retries_used=record.retries_used,
            retries_left=record.max_retries - record.retries_used))
        self.announce_unblocked(state, changed, task_id, ready_only=False)
        notified = self.notify(record.delegated_by, "task_update", {
            "session_id": state.info.session_id, "event": "task_requeued",
            "task_id": task_id, "message": record.message,
            "retries_used": record.retries_used})
        return ok(task_id=task_id, status=record.status, notified_agents=notified,
                  unblocked_tasks=[], blocked_tasks=[], requeued=True,
                  retries_used=record.retries_used)

    def announce_unblocked(self, state: TaskSession, task_ids: list[str], after: str,
                            *, ready_only: bool) -> None:
        graph = state.graph
        for task_id in task_ids:
            ready = ready_only or graph.is_ready(task_id)
            self.emit_event(TaskUnblocked(session_id=state.info.session_id,
                                          task_id=task_id, after=after, ready=ready))
            assignee = state.records[task_id].assigned_to
            if ready and assignee != "any":
                # The one member who acts on it hears directly: subscribing every
                # worker to every unblock made the fan-out 93% of all messages
                # with 1,000 agents.
                self.send(assignee, "task_update", {
                    "session_id": state.info.session_id, "event": "task_unblocked",
                    "task_id": task_id, "after": after})

    def announce_blocked(self, state: TaskSession, task_ids: list[str], because: str) -> None:
        for task_id in task_ids:
            self.emit_event(TaskBlocked(session_id=state.info.session_id, task_id=task_id,
                                        because=because))

    # -- approvals --------------------------------------------------------------------

    # -- task_get_queue ---------------------------------------------------------------

    def tool_task_get_queue(self, call: Call) -> dict[str, Any]:
        """Tasks by priority then age, filtered; tasks, total, truncated, summary.

        The default status filter is pending and in_progress; in_progress
        includes tasks awaiting approval. ``assigned_to`` takes "any", an id or
        a member's name. ``tasks`` is cut to fit one reply (``truncated``);
        ``total`` counts every match. ``summary``: pending, in_progress,
        awaiting_approval, completed_today (in the last 86,400 simulated
        seconds), blocked, failed.
        """
        state = self.tasks_of(call.session_id)
        flt = call.args["filter"]
        wanted = flt.get("status")
        statuses = ({"pending", "in_progress"} if wanted is None
                    else _ALL if wanted == "all" else {wanted})
        assignee = flt.get("assigned_to")
        if assignee is not None and assignee != "any":
            assignee = self.member_id(call.session_id, assignee) or assignee
        priority = flt.get("priority")
        chosen = [r for r in state.records.values()
                  if r.status in statuses
                  and (assignee is None or r.assigned_to == assignee)
                  and (priority is None or r.priority == priority)]
        chosen.sort(key=lambda r: r.rank)
        every = [r.to_dict() for r in chosen]
        fit = fit_prefix(every, self.dispatcher.max_content_bytes - REPLY_MARGIN)
        tasks, truncated = every[:fit], fit < len(every)
        counts = state.graph.counts()
        since = self.now - DAY
        completed_today = sum(1 for r in state.records.values()
                              if r.status == "completed" and r.completed_at is not None
                              and r.completed_at >= since)
        summary = {"pending": counts["pending"],
                   "in_progress": counts["in_progress"] - len(state.awaiting),
                   "awaiting_approval": len(state.awaiting),
                   "completed_today": completed_today, "blocked": counts["blocked"],
                   "failed": counts["failed"]}
        return ok(tasks=tasks, total=len(chosen), truncated=truncated, summary=summary)

    # -- internal operations ------------------------------------------------------------

    def op_state(self, content: Mapping[str, Any]) -> dict[str, Any]:
        """Counts per status, tasks completed per agent, and the best pending tasks.

        ``counts`` has every graph status plus ``awaiting_approval`` (counted
        apart from ``in_progress``). ``pending_tasks`` holds at most
        :data:`STATE_PENDING_LIMIT` summaries, best first; ``pending_total``
        is their full number. ``agents`` (agent ids): ``by_agent`` names only them.
        """
        state = self.tasks_of(content["session_id"])
        counts = state.graph.counts()
        counts["in_progress"] -= len(state.awaiting)
        counts[AWAITING_APPROVAL] = len(state.awaiting)
        pending = sorted((r for r in state.records.values() if r.status == "pending"),
                         key=lambda r: r.rank)
        wanted = content.get("agents")  # a page of members: only theirs
        by_agent = (dict(state.completed_by) if wanted is None else
                    {a: state.completed_by[a] for a in wanted if a in state.completed_by})
        return ok(counts=counts, by_agent=by_agent,
                  pending_tasks=[r.summary() for r in pending[:STATE_PENDING_LIMIT]],
                  pending_total=len(pending))

    def resume_serial(self, serials: Mapping[str, int]) -> None:
        self._serial = max(self._serial, serials["tasks"])

    def restore_session(self, image: SessionImage, serials: Mapping[str, int]) -> None:
        """Every task of ``image`` with its record, place in the graph and timers; the
        checkpoints of the session state it had."""
        state = self.by_session[image.session_id]
        self.checkpoints.restore(state, image)

