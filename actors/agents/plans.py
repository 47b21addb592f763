"""Named plans: steps delegated along their dependencies, with approval gates and progress.

A plan is a YAML file (or a dict) of steps::

    name: kernel
    steps:
      - {id: boot, role: builder, task_type: build, region: {x: 0, y: 0, width: 24, height: 4}}
      - {id: test, role: tester, task_type: test, depends_on: [boot]}
      - {id: drivers, agent: builder-2, task_type: build, depends_on: [test],
         approval: true, approval_timeout: 30}

Step fields: ``id`` (unique), ``role`` or ``agent`` (who does it: a member by
id or name, else the least-loaded member of the role), ``task_type`` (a
``task_delegate`` type), optional ``region``, ``depends_on`` (step ids),
``approval`` (bool, default false), ``approval_timeout`` (seconds, or "30s",
"5m", "1h"; default 300), ``description``, ``payload``, ``priority``.
:func:`load_plan` / :func:`parse_plan` validate a plan and raise
:class:`PlanError`, whose ``field`` names the culprit (``steps[2].depends_on[0]``
for an unknown step id, ``steps[1].role`` for a step nobody can do,
``steps[3].depends_on`` for a cycle, ``steps[0].aproval`` for a typo).

:func:`run_plan` (the :func:`plan_runner` behaviour, for an architect) starts
each step once its dependencies have completed, delegating it with
``task_delegate`` (a test or review step gets its region in the payload, a
build step as the task's region, which the assignee claims). Session events,
on ``session:<id>:events``: ``plan.started``, ``plan.step.started``,
``plan.step.completed`` (``skipped`` true for a skipped step),
``plan.step.failed`` (``reason``; ``blocked_by`` for a step whose dependency
failed, which never starts), ``plan.completed`` (``status`` completed or
failed). Every payload has ``plan`` (the name) and ``plan_id``.

Approval gates are the runner's, per step (the task queue's ``require_approval``
gates every build task of a session, after the work). A step with ``approval``
pauses before it is delegated: the runner publishes ``hitl.approval.requested``
(``step_id``, ``question``, ``options``, ``timeout``, ``reply_to``) and waits for
a ``hitl.approval.response`` message from any member, agent or client, sent
with ``a2a_send_message`` (see :func:`approval_response` and :func:`respond`).
approve: the step runs; reject: it fails "Rejected"; skip: it completes
without running (``skipped``), so its dependents go on; no answer within the
step's ``approval_timeout``: it fails "Approval timed out" and the runner
raises a warning alert. The first answer counts; ``hitl.approval.resolved``
records it. :func:`approver` is a member that answers requests.

Progress subscribers that want at most one update per interval use a
:class:`Debouncer`; :func:`progress_watcher` is such a subscriber (default
interval 2 simulated seconds; a held update is sent when the interval ends,
so the last state is never lost).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from actors.agents.alerts import alert, events_topic
from actors.agents.delegation import DelegationError, DelegationLedger
from actors.agents.participant import Participant
from actors.base import Agent, WaitTimeout
from sim.messages import Message
from sim.tools import TOOLS

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

PLAN_STARTED: Final = "plan.started"
STEP_STARTED: Final = "plan.step.started"
STEP_COMPLETED: Final = "plan.step.completed"
STEP_FAILED: Final = "plan.step.failed"
PLAN_COMPLETED: Final = "plan.completed"
APPROVAL_REQUESTED: Final = "hitl.approval.requested"
APPROVAL_RESPONSE: Final = "hitl.approval.response"
APPROVAL_RESOLVED: Final = "hitl.approval.resolved"
PLAN_EVENTS: Final = (PLAN_STARTED, STEP_STARTED, STEP_COMPLETED, STEP_FAILED, PLAN_COMPLETED,
                      APPROVAL_REQUESTED, APPROVAL_RESOLVED)
DECISIONS: Final = ("approve", "reject", "skip")
DEFAULT_APPROVAL_TIMEOUT: Final = 300.0

TASK_TYPES: Final = tuple(TOOLS["task_delegate"].input_schema["properties"]["task_type"]["enum"])
PRIORITIES: Final = ("low", "medium", "high", "critical")
#: Roles whose members may accept tasks under the default policy.
WORKING_ROLES: Final = ("architect", "builder", "tester")
#: Step types whose region goes in the payload (the assignee reads it, claims nothing).
_READ_ONLY_TYPES: Final = frozenset({"test", "review"})
_PLAN_FIELDS: Final = ("name", "description", "steps")
_STEP_FIELDS: Final = ("id", "role", "agent", "task_type", "region", "depends_on", "approval",
                       "approval_timeout", "description", "payload", "priority")
_REGION_FIELDS: Final = ("x", "y", "width", "height")
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|m|h)?\s*$")
_EPSILON: Final = 1e-9


# -- plans and their validation ---------------------------------------------------------------

class PlanError(ValueError):
    """A plan is malformed. ``field`` names the culprit (``steps[2].depends_on[0]``)."""

    def __init__(self, field: str, problem: str, source: str = "") -> None:
        self.field = field
        self.problem = problem
        self.source = source
        super().__init__(f"{source + ': ' if source else ''}{field}: {problem}")


@dataclass
class Step:
    """One step of a plan (validated)."""

    id: str
    task_type: str
    role: str | None = None
    agent: str | None = None
    region: dict[str, int] | None = None
    depends_on: tuple[str, ...] = ()
    approval: bool = False
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT
    description: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    priority: str = "medium"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "task_type": self.task_type,
                               "depends_on": list(self.depends_on), "approval": self.approval,
                               "approval_timeout": self.approval_timeout,
                               "priority": self.priority}
        for key in ("role", "agent", "region", "description", "payload"):
            value = getattr(self, key)
            if value:
                out[key] = value
        return out


@dataclass
class Plan:
    """A validated plan: its steps in file order, dependencies known and acyclic."""

    name: str
    steps: tuple[Step, ...]
    description: str = ""

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.steps]

    def order(self) -> list[str]:
        """A dependency order: each step after its dependencies, file order otherwise."""
        done: set[str] = set()
        out: list[str] = []
        while len(out) < len(self.steps):
            for step in self.steps:
                if step.id not in done and all(d in done for d in step.depends_on):
                    done.add(step.id)
                    out.append(step.id)
                    break
            else:
                raise PlanError("steps", "no dependency order: the steps depend on each "
                                "other in a cycle")
        return out

    def dependents(self, step_id: str) -> list[str]:
        """Every step that depends on ``step_id``, directly or not, in file order."""
        found = {step_id}
        changed = True
        while changed:
            changed = False
            for step in self.steps:
                if step.id not in found and any(d in found for d in step.depends_on):
                    found.add(step.id)
                    changed = True
        return [s.id for s in self.steps if s.id in found and s.id != step_id]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "steps": [s.to_dict() for s in self.steps]}


def _duration(value: Any, where: str, source: str) -> float:
    if isinstance(value, bool):
        raise PlanError(where, f"must be a number of seconds, got {value!r}", source)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    else:
        raise PlanError(where, f"must be seconds (a number, or like '30s', '5m', '1h'), "
                        f"got {value!r}", source)
    if not seconds > 0:
        raise PlanError(where, f"must be more than 0 seconds, got {value!r}", source)
    return seconds


def _region(value: Any, where: str, source: str, grid_size: int | None) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise PlanError(where, f"must be a mapping with x, y, width, height, got {value!r}",
                        source)
    for key in value:
        if key not in _REGION_FIELDS:
            raise PlanError(f"{where}.{key}", "unknown field (a region has x, y, width, "
                            "height)", source)
    out: dict[str, int] = {}
    for key in _REGION_FIELDS:
        if key not in value:
            raise PlanError(f"{where}.{key}", "required", source)
        v = value[key]
        least = 1 if key in ("width", "height") else 0
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise PlanError(f"{where}.{key}", f"must be an integer >= {least}, got {v!r}",
                            source)
        out[key] = v
    if grid_size is not None and (out["x"] + out["width"] > grid_size
                                  or out["y"] + out["height"] > grid_size):
        raise PlanError(where, f"{out} does not fit the {grid_size}x{grid_size} grid", source)
    return out


def _text(raw: Mapping[str, Any], key: str, where: str, source: str, *,
          required: bool = False) -> str | None:
    if key not in raw or raw[key] is None:
        if required:
            raise PlanError(f"{where}.{key}" if where else key, "required", source)
        return None
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{where}.{key}" if where else key,
                        f"must be a non-empty string, got {value!r}", source)
    return value


def _step(raw: Any, i: int, source: str, grid_size: int | None) -> Step:
    where = f"steps[{i}]"
    if not isinstance(raw, Mapping):
        raise PlanError(where, f"a step is a mapping (id, role or agent, task_type, ...), "
                        f"got {raw!r}", source)
    for key in raw:
        if key not in _STEP_FIELDS:
            raise PlanError(f"{where}.{key}", f"unknown field (step fields: "
                            f"{', '.join(_STEP_FIELDS)})", source)
    step_id = _text(raw, "id", where, source, required=True)
    assert step_id is not None
    role = _text(raw, "role", where, source)
    agent = _text(raw, "agent", where, source)
    if role is None and agent is None:
        raise PlanError(f"{where}.role", f"missing role: step {step_id!r} needs a role or an "
                        "agent to do it", source)
    if role is not None and role not in WORKING_ROLES:
        raise PlanError(f"{where}.role", f"step {step_id!r}: role must be one of "
                        f"{', '.join(WORKING_ROLES)} (a member who may accept tasks), "
                        f"got {role!r}", source)
    task_type = _text(raw, "task_type", where, source, required=True)
    if task_type not in TASK_TYPES:
        raise PlanError(f"{where}.task_type", f"step {step_id!r}: must be one of "
                        f"{', '.join(TASK_TYPES)}, got {task_type!r}", source)
    region = None
    if raw.get("region") is not None:
        region = _region(raw["region"], f"{where}.region", source, grid_size)
    depends = raw.get("depends_on") or []
    if isinstance(depends, str):
        depends = [depends]
    if not isinstance(depends, Sequence):
        raise PlanError(f"{where}.depends_on", f"must be a list of step ids, got {depends!r}",
                        source)
    for k, dep in enumerate(depends):
        if not isinstance(dep, str) or not dep:
            raise PlanError(f"{where}.depends_on[{k}]", f"must be a step id, got {dep!r}",
                            source)
    approval = raw.get("approval", False)
    if not isinstance(approval, bool):
        raise PlanError(f"{where}.approval", f"must be true or false, got {approval!r}", source)
    timeout = DEFAULT_APPROVAL_TIMEOUT
    if raw.get("approval_timeout") is not None:
        timeout = _duration(raw["approval_timeout"], f"{where}.approval_timeout", source)
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise PlanError(f"{where}.description", f"must be a string, got {description!r}",
                        source)
    payload = raw.get("payload") or {}
    if not isinstance(payload, Mapping):
        raise PlanError(f"{where}.payload", f"must be a mapping, got {payload!r}", source)
    priority = raw.get("priority", "medium")
    if priority not in PRIORITIES:
        raise PlanError(f"{where}.priority", f"must be one of {', '.join(PRIORITIES)}, "
                        f"got {priority!r}", source)
    return Step(step_id, str(task_type), role, agent, region, tuple(dict.fromkeys(depends)),
                approval, timeout, description, dict(payload), str(priority))


def _check_graph(steps: Sequence[Step], source: str) -> None:
    index = {s.id: i for i, s in enumerate(steps)}
    for i, step in enumerate(steps):
        for k, dep in enumerate(step.depends_on):
            if dep not in index:
                raise PlanError(f"steps[{i}].depends_on[{k}]", f"step {step.id!r} depends on "
                                f"unknown step {dep!r} (steps: {', '.join(index)})", source)
    # Depth-first search; a grey node reached again closes a cycle.
    colour: dict[str, int] = {}
    path: list[str] = []

    def visit(step_id: str) -> None:
        colour[step_id] = 1
        path.append(step_id)
        for dep in steps[index[step_id]].depends_on:
            if colour.get(dep) == 1:
                cycle = [*path[path.index(dep):], dep]
                raise PlanError(f"steps[{index[dep]}].depends_on",
                                f"cycle: {' -> '.join(cycle)} (each step waits for the next)",
                                source)
            if dep not in colour:
                visit(dep)
        path.pop()
        colour[step_id] = 2

    for step in steps:
        if step.id not in colour:
            visit(step.id)


def parse_plan(data: Any, *, source: str = "", grid_size: int | None = None) -> Plan:
    """Validate a plan given as a mapping; PlanError names the first bad field."""
    if not isinstance(data, Mapping):
        raise PlanError("plan", f"a plan is a mapping with name and steps, got "
                        f"{type(data).__name__}", source)
    for key in data:
        if key not in _PLAN_FIELDS:
            raise PlanError(str(key), f"unknown field (plan fields: {', '.join(_PLAN_FIELDS)})",
                            source)
    name = _text(data, "name", "", source, required=True)
    assert name is not None
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise PlanError("description", f"must be a string, got {description!r}", source)
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, Sequence) or isinstance(raw_steps, str) or not raw_steps:
        raise PlanError("steps", f"must be a non-empty list of steps, got {raw_steps!r}", source)
    steps: list[Step] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_steps):
        step = _step(raw, i, source, grid_size)
        if step.id in seen:
            raise PlanError(f"steps[{i}].id", f"duplicate step id {step.id!r} (also "
                            f"steps[{seen[step.id]}])", source)
        seen[step.id] = i
        steps.append(step)
    _check_graph(steps, source)
    return Plan(name, tuple(steps), description)


def load_plan(source: Plan | Mapping[str, Any] | str | pathlib.Path, *,
              directory: str | pathlib.Path | None = None,
              grid_size: int | None = None) -> Plan:
    """A plan from a Plan, a mapping, a YAML file path, or a name in ``directory``.

    A name (no suffix, not a file) is looked up as ``directory/<name>.yaml``
    (or ``.yml``). Raises PlanError: no such file, invalid YAML, invalid plan.
    """
    if isinstance(source, Plan):
        return parse_plan(source.to_dict(), source=source.name, grid_size=grid_size)
    if isinstance(source, Mapping):
        return parse_plan(source, grid_size=grid_size)
    path = pathlib.Path(source)
    if not path.is_file() and directory is not None and not path.suffix:
        for suffix in (".yaml", ".yml"):
            candidate = pathlib.Path(directory) / f"{source}{suffix}"
            if candidate.is_file():
                path = candidate
                break
    if not path.is_file():
        where = f" (nor in {directory})" if directory is not None else ""
        raise PlanError("plan", f"no plan file {str(source)!r}{where}")
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PlanError("plan", f"not valid YAML: {exc}", str(path)) from None
    return parse_plan(data, source=str(path), grid_size=grid_size)


# -- approvals --------------------------------------------------------------------------------

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
    seconds; default [0.5, 2]). Outcome: ``requests``, ``answered`` ([step id,
    decision] pairs), ``ignored``.
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
    seen: set[tuple[str, str]] = set()
    while True:
        if backlog:
            request = backlog.pop(0)
        else:
            message = await agent.receive(
                lambda m: m.content.get("event") == APPROVAL_REQUESTED, daemon=True,
                description="an approval request")
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


def _open_requests(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Approval requests among ``events`` that no ``hitl.approval.resolved`` answers."""
    resolved = {(e.get("plan_id"), e.get("step_id")) for e in events
                if e.get("event") == APPROVAL_RESOLVED}
    return [dict(e) for e in events if e.get("event") == APPROVAL_REQUESTED
            and (e.get("plan_id"), e.get("step_id")) not in resolved]


# -- running a plan ---------------------------------------------------------------------------

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

    def emit(self, event: str, **payload: Any) -> None:
        sid = self.agent.session_id
        if sid is not None:
            self.agent.emit(events_topic(sid), event, {
                "session_id": sid, "plan": self.plan.name, "plan_id": self.plan_id, **payload})
        self.events.append([self.agent.now, event, payload.get("step_id")])

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
        self.emit(STEP_FAILED, step_id=step_id, reason=reason, **info)

    async def start(self, step: Step) -> None:
        """The step's dependencies are done: announce it, then gate or delegate it."""
        target = await self.pick(step)
        if target is None:
            self.fail(step.id, f"no {step.role} in the session to do it")
            return
        self.targets[step.id] = target
        self.load[target] = self.load.get(target, 0) + 1
        self.set(step.id, "started", agent=target, started_at=self.agent.now)
        self.emit(STEP_STARTED, step_id=step.id, agent=target, task_type=step.task_type,
                  approval=step.approval)
        if not step.approval:
            await self.delegate(step)
            return
        self.set(step.id, "awaiting_approval")
        self.deadlines[step.id] = self.agent.now + step.approval_timeout
        self.emit(APPROVAL_REQUESTED, step_id=step.id, agent=target, task_type=step.task_type,
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
        self.ledger.take([record.delegation_id])
        step_id = self.running.pop(record.delegation_id)
        self.load[self.targets[step_id]] -= 1
        if record.status == "completed":
            self.set(step_id, "completed", finished_at=self.agent.now)
            self.emit(STEP_COMPLETED, step_id=step_id, agent=record.delegate,
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
            self.emit(STEP_COMPLETED, step_id=step_id, agent=self.targets[step_id],
                      task_id=None, skipped=True, result={"skipped": True})

    def resolve(self, step_id: str, decision: str, by: str, comment: str = "") -> None:
        self.steps[step_id]["decision"] = decision
        self.approvals.append({"step_id": step_id, "decision": decision, "by": by,
                               "t": self.agent.now})
        self.emit(APPROVAL_RESOLVED, step_id=step_id, decision=decision, by=by,
                  comment=comment)

    def time_out(self) -> None:
        now = self.agent.now
        for step_id, due in sorted(self.deadlines.items(), key=lambda kv: (kv[1], kv[0])):
            if due > now + _EPSILON:
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
                   outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``plan`` from ``agent`` (who may delegate: an architect); its outcome.

    Outcome: ``plan``, ``plan_id``, ``status`` (completed | failed), ``steps``
    (per step: status, agent, task_id, started_at, finished_at, message,
    decision), ``events`` ([t, event, step id], in publication order),
    ``approvals``, ``alerts``, ``duration``. ``outcome`` is updated as the run goes.
    """
    if plan_id is None:
        plan_id = f"{plan.name}-{agent.name}-{agent.next_serial('plan-run')}"
    run = _Run(agent, plan, plan_id, outcome if outcome is not None else {})
    started = agent.now
    run.emit(PLAN_STARTED, steps=plan.ids, runner=agent.name)
    await run.advance()
    while run.running or run.deadlines:
        timeout = None
        if run.deadlines:
            timeout = max(0.0, min(run.deadlines.values()) - agent.now)
        try:
            message = await agent.receive(
                lambda m: run.ledger.wants(m) or run.is_response(m) or run.is_blocked(m),
                timeout=timeout, description=f"a step result or an approval for plan {plan_id}")
        except WaitTimeout:
            run.time_out()
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
    run.emit(PLAN_COMPLETED, status=status,
             completed=[s for s, v in run.status.items() if v == "completed"],
             skipped=[s for s, v in run.status.items() if v == "skipped"], failed=failed)
    if failed:
        run.alert("warning", f"Plan {plan.name} failed",
                  f"steps not done: {', '.join(failed)}", failed=failed)
    return run.outcome


async def plan_runner(agent: Participant) -> None:
    """Run ``params["plan"]`` (a Plan, a mapping, a path or a name in ``params["plans_dir"]``).

    The outcome is :func:`run_plan`'s; a plan that does not validate ends the
    behaviour with ``status`` "invalid" and ``error``.
    """
    params = agent.params
    try:
        plan = load_plan(params["plan"], directory=params.get("plans_dir"),
                         grid_size=params.get("grid_size"))
    except PlanError as exc:
        agent.outcome.update(status="invalid", error=str(exc), field=exc.field)
        return
    await run_plan(agent, plan, outcome=agent.outcome)


# -- progress, debounced ----------------------------------------------------------------------

T = TypeVar("T")


class Debouncer(Generic[T]):
    """At most one update per ``interval``; the ones in between are coalesced.

    :meth:`offer` returns the update to send now, or None when it is held
    (sent less than ``interval`` ago). The latest held update is due at
    :meth:`due`; :meth:`flush` returns it once that time has come. Updates
    sent are therefore at least ``interval`` apart, and the last one is never
    lost, only late.
    """

    def __init__(self, interval: float = 2.0) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self.interval = float(interval)
        self.last_sent: float | None = None
        self._held: T | None = None
        self._holding = False
        self.coalesced = 0

    def offer(self, now: float, update: T) -> T | None:
        if self.last_sent is None or now - self.last_sent >= self.interval - _EPSILON:
            self.last_sent = now
            if self._holding:
                self.coalesced += 1
            self._held, self._holding = None, False
            return update
        if self._holding:
            self.coalesced += 1
        self._held, self._holding = update, True
        return None

    def due(self) -> float | None:
        """When the held update may go (None if nothing is held)."""
        if not self._holding or self.last_sent is None:
            return None
        return self.last_sent + self.interval

    def flush(self, now: float) -> T | None:
        """The held update if its time has come (it counts as sent), else None."""
        due = self.due()
        if due is None or now < due - _EPSILON:
            return None
        update = self._held
        self.last_sent = now
        self._held, self._holding = None, False
        return update


async def progress_watcher(agent: Participant) -> None:
    """Follow every plan in the session; record progress, debounced.

    Inputs: ``interval`` (simulated seconds between updates, default 2).
    Outcome: ``events`` (plan events seen), ``updates`` ([t, snapshot]: plan,
    plan_id, done, failed, total, status, last event), ``coalesced``.
    """
    debounce: Debouncer[dict[str, Any]] = Debouncer(float(agent.params.get("interval", 2.0)))
    updates: list[list[Any]] = []
    agent.outcome.update(events=0, updates=updates, coalesced=0)
    plans: dict[str, dict[str, Any]] = {}
    await agent.call("a2a_subscribe")
    while True:
        due = debounce.due()
        timeout = None if due is None else max(0.0, due - agent.now)
        try:
            message = await agent.receive(
                lambda m: str(m.content.get("event", "")).startswith("plan."),
                timeout=timeout, daemon=timeout is None, description="plan progress")
        except WaitTimeout:
            held = debounce.flush(agent.now)
            if held is not None:
                updates.append([agent.now, held])
            continue
        content = message.content
        agent.outcome["events"] += 1
        view = plans.setdefault(str(content.get("plan_id")), {
            "plan": content.get("plan"), "plan_id": content.get("plan_id"), "steps": {},
            "total": 0, "status": "running"})
        event = str(content["event"])
        if event == PLAN_STARTED:
            view["total"] = len(content.get("steps", []))
        elif event == STEP_COMPLETED:
            view["steps"][content["step_id"]] = "skipped" if content.get("skipped") else "done"
        elif event == STEP_FAILED:
            view["steps"][content["step_id"]] = "failed"
        elif event == STEP_STARTED:
            view["steps"].setdefault(content["step_id"], "running")
        elif event == PLAN_COMPLETED:
            view["status"] = content.get("status")
        states = list(view["steps"].values())
        snapshot = {"plan": view["plan"], "plan_id": view["plan_id"],
                    "done": sum(1 for s in states if s in ("done", "skipped")),
                    "failed": states.count("failed"), "total": view["total"],
                    "status": view["status"], "last_event": event}
        sent = debounce.offer(agent.now, snapshot)
        if sent is not None:
            updates.append([agent.now, sent])
        agent.outcome["coalesced"] = debounce.coalesced
