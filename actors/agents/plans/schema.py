"""Plan files: the schema of a plan and its steps, validation and loading.

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
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from barnraise.sim.tools import TOOLS

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "PRIORITIES",
    "TASK_TYPES",
    "TIME_TOLERANCE",
    "WORKING_ROLES",
    "Plan",
    "PlanError",
    "Step",
    "load_plan",
    "parse_plan",
]

DEFAULT_APPROVAL_TIMEOUT: Final = 300.0
TASK_TYPES: Final = tuple(TOOLS["task_delegate"].input_schema["properties"]["task_type"]["enum"])
PRIORITIES: Final = ("low", "medium", "high", "critical")
#: Roles whose members may accept tasks under the default policy.
WORKING_ROLES: Final = ("architect", "builder", "tester")
#: Simulated seconds within which a plan's timings count as equal: sums of
#: float seconds drift, and a deadline a hair early must not wait a round more.
TIME_TOLERANCE: Final = 1e-9
_PLAN_FIELDS: Final = ("name", "description", "steps")
_STEP_FIELDS: Final = ("id", "role", "agent", "task_type", "region", "depends_on", "approval",
                       "approval_timeout", "description", "payload", "priority")
_REGION_FIELDS: Final = ("x", "y", "width", "height")
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|m|h)?\s*$")


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
    # Depth-first search, iterative (a chain of thousands of steps must not exhaust
    # Python's stack); a grey node reached again closes a cycle.
    colour: dict[str, int] = {}
    for root in steps:
        if root.id in colour:
            continue
        colour[root.id] = 1
        path = [root.id]
        pending = [iter(root.depends_on)]
        while pending:
            child = next(pending[-1], None)
            if child is None:
                colour[path.pop()] = 2
                pending.pop()
            elif colour.get(child) == 1:
                cycle = [*path[path.index(child):], child]
                raise PlanError(f"steps[{index[child]}].depends_on",
                                f"cycle: {' -> '.join(cycle)} (each step waits for the next)",
                                source)
            elif child not in colour:
                colour[child] = 1
                path.append(child)
                pending.append(iter(steps[index[child]].depends_on))


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
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PlanError("plan", f"not valid YAML: {exc}", str(path)) from None
    except UnicodeDecodeError:
        raise PlanError("plan", "not a text file (a plan is UTF-8 YAML)", str(path)) from None
    except OSError as exc:
        raise PlanError("plan", f"cannot be read: {exc.strerror or exc}", str(path)) from None
    return parse_plan(data, source=str(path), grid_size=grid_size)
