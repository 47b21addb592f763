"""The tool table: every tool, once, with its JSON input schema, owner and result keys.

Every surface is generated from :data:`TOOLS`: the Python clients' typed methods, one
per tool, and ``call`` (:mod:`barnraise.sim.tool_methods`, written by ``python -m
barnraise.sim.tool_codegen`` from the schemas and :data:`RESULT_KEYS`), the WebSocket endpoint,
the agent card and the MCP server. A tool is served by the actor that owns the state
it touches (``Tool.service``); that actor checks the arguments against the tool's
schema (:func:`barnraise.sim.validation.validate`) and enforces the policy, so no surface can go
around either. How a caller's session fills in ``session_id`` is
:mod:`barnraise.sim.binding`.

Results are JSON-able dicts with ``success``. A failure is
``{"success": False, "error": CODE, "message": ...}`` and never an exception in the
caller; :data:`ERROR_CODES` lists the codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

__all__ = [
    "ERROR_CODES",
    "FAILURE_KEYS",
    "MAX_CAPABILITIES",
    "MAX_NAME",
    "MAX_SECONDS",
    "MAX_WAIT",
    "READ_ONLY_TOOLS",
    "RESULT_KEYS",
    "SERVICES",
    "STATE_PAGE_DEFAULT",
    "STATE_PAGE_MAX",
    "TOOLS",
    "Tool",
    "ToolError",
    "WorldLimits",
    "fail",
    "ok",
]

SERVICES: Final = ("coordinator", "regions", "tasks", "coordination")

ERROR_CODES: Final = frozenset({
    "invalid_argument", "unknown_tool", "permission_denied", "session_not_found",
    "session_full", "name_taken", "invalid_token", "not_a_member", "region_conflict",
    "out_of_bounds", "claim_not_found", "not_owner", "write_refused", "task_not_found",
    "dependency_cycle", "unknown_dependency", "invalid_transition", "checkpoint_not_found",
    "no_blueprint", "lock_not_held", "timeout", "no_reply", "internal_error",
    "limit_exceeded",
})


class ToolError(Exception):
    """Raised inside a service to turn into a failure result."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.extra = extra

    def result(self) -> dict[str, Any]:
        return fail(self.code, str(self), **self.extra)


def ok(**fields: Any) -> dict[str, Any]:
    return {"success": True, **fields}


def fail(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"success": False, "error": code, "message": message, **extra}


@dataclass(frozen=True)
class Tool:
    """One tool: what it is called, who serves it, what it takes."""

    name: str
    service: str
    description: str
    input_schema: Mapping[str, Any]
    #: False only for tools a caller uses before it is a member (create, join).
    member_only: bool = True
    #: The keys a success carries besides ``success``, each with its JSON type (a
    #: tuple: any of them). Declared in :data:`RESULT_KEYS`; the typed client methods
    #: (:mod:`barnraise.sim.tool_methods`) are generated from them.
    result: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "inputSchema": dict(self.input_schema)}


# -- schema pieces ------------------------------------------------------------------------

def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


_SESSION = {"type": "string", "description": "Session id; a client bound to a session may omit it"}
#: The largest span of simulated time any argument may name (about 31 years): every
#: duration, deadline and lease is finite, so no timer is set at infinity and no
#: arithmetic on it overflows.
MAX_SECONDS: Final = 1e9
#: The longest a caller may be kept waiting (a lock's wait, a barrier's or an
#: approval's timeout): one simulated day. A wait keeps a run alive, so a
#: deterministic run steps every heartbeat until it ends; leases and deadlines,
#: which keep nothing alive, may go up to MAX_SECONDS.
MAX_WAIT: Final = 86_400.0
#: The largest coordinate or side (the largest grid is 10,000 cells a side).
MAX_CELLS: Final = 10_000
#: The largest count (agents, expected arrivals, defects, retries).
MAX_COUNT: Final = 1_000_000
#: The longest agent name or capability, and the most capabilities one member lists:
#: with them every member's entry fits one reply, so a2a_discover pages past anyone.
MAX_NAME: Final = 256
MAX_CAPABILITIES: Final = 64
#: The longest body of an alert (characters).
MAX_ALERT_BODY: Final = 4_000
#: session_get_state's page of agents and of regions: its default length and its
#: longest (a page is cut shorter still to fit one reply; next_cursor goes on).
STATE_PAGE_DEFAULT: Final = 500
STATE_PAGE_MAX: Final = 5_000


@dataclass(frozen=True, slots=True)
class WorldLimits:
    """What one world lets its sessions cost, set by whoever hosts it
    (``Simulation(limits=WorldLimits(...))``); a session_create past one is
    refused with ``invalid_argument`` naming the argument, before anything exists.

    A canvas cell costs about seven bytes (tiles, owner, blueprint and the
    scratch of a write), so the defaults let one session have 4,096 x 4,096
    cells (about 120 MB) and all open sessions together 64 M (about 450 MB).
    """

    max_grid_size: int = 4096
    max_total_cells: int = 1 << 26
    max_sessions: int = 10_000
    #: The shortest automatic checkpoint interval (simulated seconds; 0 turns it off).
    min_checkpoint_interval: float = 1.0
    #: Event subscriptions one agent may hold (an identical one is not a second).
    max_subscriptions: int = 100

    def __post_init__(self) -> None:
        for name in ("max_grid_size", "max_total_cells", "max_sessions", "max_subscriptions"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"WorldLimits.{name} must be a positive int, got {value!r}")
        if not 0 < self.min_checkpoint_interval <= MAX_SECONDS:
            raise ValueError("WorldLimits.min_checkpoint_interval must be in (0, "
                             f"{MAX_SECONDS:g}], got {self.min_checkpoint_interval!r}")


def _seconds(default: float | None = None, *, maximum: float = MAX_SECONDS,
             **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": maximum, **extra}
    if default is not None:
        schema["default"] = default
    return schema


def _count(minimum: int, default: int | None = None, maximum: int = MAX_COUNT) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum, "maximum": maximum}
    if default is not None:
        schema["default"] = default
    return schema


_REGION = _obj({
    "x": _count(0, maximum=MAX_CELLS), "y": _count(0, maximum=MAX_CELLS),
    "width": _count(1, maximum=MAX_CELLS), "height": _count(1, maximum=MAX_CELLS),
}, ("x", "y", "width", "height"))
_TILE = {"type": ["string", "integer"], "description": "A tile type name (system, code, data, "
         "shader, cartridge, network, storage, empty) or its number"}
#: One row of tiles: names or codes (never true/false: the schema says so, so msgspec
#: refuses a bool in C while it validates, instead of a scan of every cell in Python).
_ROW = {"type": "array", "items": {"type": ["string", "integer"]}}
_PRIORITY = {"type": "string", "enum": ["low", "medium", "high", "critical"], "default": "medium"}
_ROLES = ["architect", "builder", "tester", "observer"]
#: Roles a session grants rather than opens, unless session_create says otherwise.
_GRANTED_BY_DEFAULT: Final = ("architect",)


def _tool(name: str, service: str, description: str, properties: dict[str, Any],
          required: tuple[str, ...] = (), *, member_only: bool = True,
          session: bool = True) -> Tool:
    props = {"session_id": _SESSION, **properties} if session else properties
    return Tool(name, service, description, _obj(props, required), member_only)


_TOOL_LIST: Final = [
    # -- sessions ------------------------------------------------------------------
    _tool("session_create", "coordinator", "Create a collaborative build session.", {
        "session_name": {"type": "string", "minLength": 1},
        "max_agents": _count(1, 10, maximum=100_000),
        "grid_size": _count(1, 1000, maximum=MAX_CELLS),
        "coordination_mode": {"type": "string", "enum": ["free", "coordinated", "sequential"],
                              "default": "coordinated"},
        "blueprint": {"type": "array", "items": _ROW,
                      "description": "Target tiles: rows of tile types"},
        "granted_roles": {"type": "array", "items": {"type": "string", "enum": _ROLES},
                          "default": list(_GRANTED_BY_DEFAULT),
                          "description": "Roles that take the owner's grant (session_grant) "
                          "to join as; the others are open in a public session"},
        "config": _obj({
            "auto_assign_regions": {"type": "boolean", "default": False},
            "auto_region_size": _count(1, 100, maximum=MAX_CELLS),
            "require_approval": {"type": "boolean", "default": False},
            "approval_timeout": _seconds(300, maximum=MAX_WAIT),
            "checkpoint_interval": _seconds(0, description="Simulated seconds between "
                                           "automatic checkpoints (0: none)"),
            "private": {"type": "boolean", "default": False},
        }),
    }, ("session_name",), member_only=False, session=False),
    _tool("session_join", "coordinator", "Join a session as an agent.", {
        "agent_name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
        "role": {"type": "string", "enum": _ROLES, "default": "builder"},
        # bounded so that every member's entry fits one page of a2a_discover
        "capabilities": {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME},
                         "maxItems": MAX_CAPABILITIES, "default": []},
        "invite_token": {"type": "string"},
        "role_token": {"type": "string", "description": "From session_grant: lets its "
                       "holder join in a granted role (and into a private session)"},
    }, ("session_id", "agent_name"), member_only=False),
    _tool("session_grant", "coordinator", "The session's owner (its creator) grants a role: "
          "to one agent, or as a role token that whoever holds it can join with.", {
              "role": {"type": "string", "enum": _ROLES},
              "agent_id": {"type": "string", "minLength": 1},
          }, ("session_id", "role"), member_only=False),
    _tool("session_leave", "coordinator", "Leave a session, releasing or handing over claims.", {
        "handoff_to": {"type": "string"},
    }),
    _tool("session_get_state", "coordinator", "Agents, regions, tasks and progress; the "
          "agents and regions lists a page at a time (next_cursor, when there is more).", {
        "include": {"type": "array", "items": {"type": "string", "enum": [
            "agents", "regions", "tasks", "progress", "events", "all"]}, "default": ["all"]},
        "limit": _count(1, STATE_PAGE_DEFAULT, maximum=STATE_PAGE_MAX),
        "cursor": {"type": "string", "description": "A previous answer's next_cursor: the "
                   "page after it"},
    }),
    # -- regions and building -----------------------------------------------------------
    _tool("region_claim", "regions", "Claim a region of the canvas (a lease).", {
        "region": _REGION,
        "purpose": {"type": "string", "default": ""},
        "exclusive": {"type": "boolean", "default": True},
        "timeout": _seconds(300),
    }, ("region",)),
    _tool("region_release", "regions", "Release a claim, or transfer it to another agent.", {
        "claim_id": {"type": "string"}, "transfer_to": {"type": "string"},
    }, ("claim_id",)),
    _tool("region_renew", "regions", "Renew your claim's lease: a new term from now.", {
        "claim_id": {"type": "string"},
        "timeout": _seconds(description="The new term in seconds, > 0 (default: the "
                            "claim's own, 300 for a claim with no lease; a live holder's "
                            "lease is renewed each term anyway)"),
    }, ("claim_id",)),
    _tool("region_query", "regions", "Claims over a region, and its free part.", {
        "region": _REGION,
    }, ("region",)),
    _tool("builder_place_tile", "regions", "Place one tile.", {
        "tile_type": _TILE, "x": _count(0, maximum=MAX_CELLS),
        "y": _count(0, maximum=MAX_CELLS),
    }, ("tile_type", "x", "y")),
    _tool("builder_place_tiles", "regions", "Place a block of tiles: a 2-D array or a fill.", {
        "region": _REGION,
        "tiles": {"type": ["array", "string", "integer"], "items": _ROW,
                  "description": "Rows of tile types, or one tile type to fill with"},
    }, ("region", "tiles")),
    _tool("builder_load_shader", "regions", "Load a shader into a region.", {
        "region": _REGION, "shader_name": {"type": "string", "minLength": 1},
    }, ("region", "shader_name")),
    _tool("builder_assemble_cartridge", "regions", "Assemble a cartridge from a region.", {
        "region": _REGION, "name": {"type": "string", "minLength": 1},
    }, ("region", "name")),
    _tool("blueprint_set", "regions", "Set the session's target tiles.", {
        "blueprint": {"type": "array", "items": _ROW, "description": "Rows of tile types"},
    }, ("blueprint",)),
    _tool("build_test", "regions", "Compare a region with the blueprint.", {
        "region": _REGION,
        "max_defects": _count(0, 50),
    }, ("region",)),
    # -- tasks -----------------------------------------------------------------------
    _tool("task_delegate", "tasks", "Create a task for an agent, or for any.", {
        "target_agent_id": {"type": "string", "default": "any"},
        "task_type": {"type": "string", "enum": [
            "build", "test", "review", "evolve", "assemble", "migrate"]},
        "region": _REGION,
        "description": {"type": "string", "default": ""},
        "priority": _PRIORITY,
        "dependencies": {"type": "array", "items": {"type": "string"}, "default": []},
        "deadline": _seconds(),
        "max_retries": _count(0, 0, maximum=1000),
        "payload": {"type": "object", "default": {},
                    "description": "Inputs for the assignee (the A2A task's params)"},
    }, ("task_type",)),
    _tool("task_add_dependencies", "tasks",
          "Make a task not yet started wait for more tasks (re-planning).", {
              "task_id": {"type": "string"},
              "dependencies": {"type": "array", "items": {"type": "string"}},
          }, ("task_id", "dependencies")),
    _tool("task_accept", "tasks", "Accept a task (claims its region).", {
        "task_id": {"type": "string"},
    }, ("task_id",)),
    _tool("task_report", "tasks", "Report a task completed, failed, blocked or cancelled.", {
        "task_id": {"type": "string"},
        "status": {"type": "string", "enum": ["completed", "failed", "blocked", "cancelled"]},
        "result": {"type": "object", "default": {}},
        "artifacts": {"type": "array", "items": {"type": "object"}, "default": []},
        "message": {"type": "string", "default": ""},
    }, ("task_id", "status")),
    _tool("task_get_queue", "tasks", "Tasks by priority, then age.", {
        "filter": _obj({
            "assigned_to": {"type": "string"},
            "status": {"type": "string", "enum": [
                "pending", "in_progress", "completed", "failed", "blocked", "cancelled", "all"]},
            "priority": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
        }),
    }),
    _tool("approval_respond", "tasks", "Answer an approval request.", {
        "task_id": {"type": "string"},
        "decision": {"type": "string", "enum": ["approve", "reject", "skip"]},
        "comment": {"type": "string", "default": ""},
    }, ("task_id", "decision")),
    # -- checkpoints -----------------------------------------------------------------
    _tool("build_checkpoint", "coordinator", "Save tiles, artifacts and session state.", {
        "checkpoint_name": {"type": "string", "default": ""},
        "description": {"type": "string", "default": ""},
        "include": {"type": "array", "items": {"type": "string", "enum": [
            "tiles", "shaders", "cartridges", "session_state"]},
            "default": ["tiles", "shaders", "cartridges", "session_state"]},
    }),
    _tool("build_rollback", "coordinator", "Restore a checkpoint.", {
        "checkpoint_id": {"type": "string"},
        "notify_agents": {"type": "boolean", "default": True},
    }, ("checkpoint_id",)),
    # -- A2A -------------------------------------------------------------------------
    _tool("a2a_send_message", "coordinator", "Send an A2A message to an agent, or one to "
          "each agent of a list.", {
        "to_agent": {"type": ["string", "array"], "items": {"type": "string"}},
        "message_type": {"type": "string", "default": "status_update"},
        "content": {"type": "object", "default": {}},
        "priority": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
        "expires_in": _seconds(),
    }, ("to_agent",)),
    _tool("a2a_broadcast", "coordinator", "Send to every session agent (or one type).", {
        "agent_type": {"type": "string", "enum": _ROLES},
        "message_type": {"type": "string", "default": "status_update"},
        "content": {"type": "object", "default": {}},
        "exclude_self": {"type": "boolean", "default": True},
    }),
    _tool("a2a_subscribe", "coordinator", "Subscribe to session events or a topic.", {
        "event_type": {"type": "string"}, "topic": {"type": "string"},
        "filter": {"type": "object"},
    }),
    _tool("a2a_discover", "coordinator", "Find session agents by type, capability, region; "
          "a page at a time (next_cursor, when there is more).", {
        "agent_type": {"type": "string", "enum": _ROLES}, "capability": {"type": "string"},
        "region_overlaps": _REGION,
        # No schema default: a default is filled into every call's arguments, and the
        # calls that never page would change their recorded form (and the digests).
        "limit": {**_count(1, maximum=STATE_PAGE_MAX), "description": "The most agents "
                  f"in one answer (default {STATE_PAGE_DEFAULT})"},
        "cursor": {"type": "string", "description": "A previous answer's next_cursor: the "
                   "page after it"},
    }),
    _tool("a2a_lock_acquire", "coordination", "Take a named lock (a lease), waiting if asked.", {
        "lock_id": {"type": "string", "minLength": 1},
        "wait": _seconds(0, maximum=MAX_WAIT,
                         description="Seconds to wait for the lock; 0 answers at once"),
        "lease": _seconds(60),
    }, ("lock_id",)),
    _tool("a2a_lock_renew", "coordination", "Renew your lock's lease: a new term from now.", {
        "lock_id": {"type": "string", "minLength": 1},
        "lease": _seconds(description="The new term in seconds (default: the lock's "
                          "own; 0: held until released)"),
    }, ("lock_id",)),
    _tool("a2a_lock_release", "coordination", "Release a named lock.", {
        "lock_id": {"type": "string", "minLength": 1},
    }, ("lock_id",)),
    _tool("a2a_barrier_enter", "coordination", "Wait at a barrier until all arrive.", {
        "barrier_id": {"type": "string", "minLength": 1},
        "expected_count": _count(1, maximum=100_000),
        "expected_agents": {"type": "array", "items": {"type": "string"}},
        "timeout": _seconds(300, maximum=MAX_WAIT),
    }, ("barrier_id",)),
    # -- alerts and plans (seed 004) ---------------------------------------------------
    _tool("alert_raise", "coordinator", "Raise an alert: an agent.alert event on the "
          "session's event topic, for whoever watches it.", {
              "severity": {"type": "string", "enum": ["info", "warning", "critical"]},
              "title": {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
              "body": {"type": "string", "maxLength": MAX_ALERT_BODY, "default": ""},
              "details": {"type": "object", "default": {},
                          "description": "More keys of the event (plan_id, step_id...), "
                          "none of its own fields' names"},
          }, ("severity", "title")),
    _tool("plan_start", "coordinator", "Start a plan's run: its steps delegated along "
          "their dependencies by a runner agent started for it; plan.* events follow.", {
              "plan": {"type": "object", "description": "The plan, in the plan file's "
                       "form: name, description, steps (id, role or agent, task_type, "
                       "region, depends_on, approval, approval_timeout, description, "
                       "payload, priority)"},
          }, ("plan",)),
]

#: What each tool's success carries besides ``success`` (JSON types; a tuple is any
#: of them). A result cut to fit (``truncated``, :data:`READ_ONLY_TOOLS`) may lack
#: some. tests/test_typed_surface.py checks that every key a service answers with
#: is declared here.
RESULT_KEYS: Final[Mapping[str, Mapping[str, str | tuple[str, ...]]]] = {
    # session_create and session_join through the gateway also carry the caller's
    # credentials and the server's clock (barnraise.gateway.hub).
    "session_create": {"coordination_mode": "string", "created_at": "number",
                       "grid_size": "integer", "invite_token": "string",
                       "session_id": "string", "session_name": "string", "state": "object",
                       "agent_id": "string", "token": "string", "signing_key": "string",
                       "now": "number", "time_scale": "number"},
    "session_join": {"agent_id": "string", "assigned_color": "string",
                     "assigned_region": ("object", "null"), "name": "string", "role": "string",
                     "session_id": "string", "session_state": "object", "token": "string",
                     "signing_key": "string", "now": "number", "time_scale": "number"},
    "session_grant": {"agent_id": "string", "role": "string", "role_token": "string"},
    "session_leave": {"released_regions": "array", "requeued_tasks": "array",
                      "transferred_to": ("string", "null")},
    "session_get_state": {"next_cursor": "string", "now": "number", "session_id": "string",
                          "session_name": "string", "state": "object"},
    "region_claim": {"agent_id": "string", "claim_id": "string", "conflicts": "array",
                     "exclusive": "boolean", "expires_at": ("number", "null"),
                     "purpose": "string", "region": "object"},
    "region_release": {"claim_id": "string", "released": "boolean",
                       "transferred_to": ("string", "null")},
    "region_renew": {"claim_id": "string", "expires_at": "number", "timeout": "number"},
    "region_query": {"claims": "array", "free_subregions": "array", "is_free": "boolean"},
    "builder_place_tile": {"lost_work": "integer", "region": "object",
                           "tiles_placed": "integer"},
    "builder_place_tiles": {"lost_work": "integer", "region": "object",
                            "tiles_placed": "integer"},
    "builder_load_shader": {"region": "object", "shader_id": "string"},
    "builder_assemble_cartridge": {"cartridge_id": "string", "region": "object",
                                   "tiles": "integer"},
    "blueprint_set": {"cells": "integer", "nonempty": "integer"},
    "build_test": {"defect_count": "integer", "defects": "array", "matching": "integer",
                   "passed": "boolean", "region": "object", "score": "number",
                   "total": "integer"},
    "task_delegate": {"assigned_to": "string", "position_in_queue": ("integer", "null"),
                      "status": "string", "task_id": "string"},
    "task_add_dependencies": {"blocked": "array", "dependencies": "array", "status": "string",
                              "task_id": "string"},
    "task_accept": {"assigned_to": "string", "claim": ("object", "null"),
                    "claimed_region": ("string", "null"), "status": "string",
                    "task_id": "string"},
    "task_report": {"blocked_tasks": "array", "notified_agents": "array",
                    "requeued": "boolean", "retries_used": "integer", "status": "string",
                    "task_id": "string", "unblocked_tasks": "array"},
    "task_get_queue": {"summary": "object", "tasks": "array", "total": "integer"},
    "approval_respond": {"blocked_tasks": "array", "decision": "string",
                         "notified_agents": "array", "requeued": "boolean",
                         "status": "string", "task_id": "string", "unblocked_tasks": "array"},
    "build_checkpoint": {"checkpoint_id": "string", "checkpoint_name": "string",
                         "contents": "object", "created_at": "number", "description": "string",
                         "include": "array", "size_kb": "number"},
    "build_rollback": {"lost": "object", "restored": "object", "rolled_back_at": "number",
                       "rolled_back_to": "string"},
    "a2a_send_message": {"message_id": "string", "message_ids": "array", "status": "string",
                         "statuses": "object", "to_agent": ("string", "array")},
    "a2a_broadcast": {"delivered": "array", "recipients": "array", "statuses": "object"},
    "a2a_subscribe": {"subscription_id": "string", "topic": "string"},
    "a2a_discover": {"agents": "array", "count": "integer", "next_cursor": "string"},
    "a2a_lock_acquire": {"expires_at": ("number", "null"), "granted": "boolean",
                         "holder": "string", "lock_id": "string", "reason": "string",
                         "renewed": "boolean", "waited": "number"},
    "a2a_lock_renew": {"expires_at": ("number", "null"), "holder": "string",
                       "lease": "number", "lock_id": "string"},
    "a2a_lock_release": {"lock_id": "string", "next_holder": ("string", "null"),
                         "released": "boolean"},
    "alert_raise": {"delivered": "boolean", "severity": "string", "title": "string",
                    "topic": "string"},
    "plan_start": {"plan": "string", "plan_id": "string", "runner": "string",
                   "steps": "array"},
    "a2a_barrier_enter": {"arrived": "array", "arrived_count": "integer",
                          "barrier_id": "string", "expected_count": "integer",
                          "generation": "integer", "missing": "array",
                          "missing_count": "integer", "reason": "string",
                          "released": "boolean", "waited": "number"},
}

#: The keys any result may carry: ``success``; on a failure ``error`` (one of
#: :data:`ERROR_CODES`), ``message`` and what the refusal names (``field`` for an
#: argument, ``holder`` for a lock, ...); ``truncated`` on a result cut to fit.
FAILURE_KEYS: Final[Mapping[str, str | tuple[str, ...]]] = {
    "success": "boolean", "error": "string", "message": "string", "truncated": "boolean",
    "field": "string", "tool": "string", "limit": "string", "reason": "string",
    "retry_after": "number", "suggestion": "string", "suggestion_region": ("object", "null"),
    "cells_outside": "integer", "conflicting_agents": "array", "cycle": "array",
    "dependency": "string", "waiting_on": "array", "holder": ("string", "null"),
    "holder_name": "string", "owner": "string", "role": "string", "status": "string",
    "task_id": "string", "lock_id": "string", "region": "object",
    "expected_count": "integer", "assigned_to": "string", "grid_size": "integer",
}

assert {tool.name for tool in _TOOL_LIST} == set(RESULT_KEYS), "every tool declares its result"
TOOLS: Final[Mapping[str, Tool]] = {
    tool.name: replace(tool, result=RESULT_KEYS[tool.name]) for tool in _TOOL_LIST}

#: The tools that only read the world. A result too large to send is a failure for
#: these (nothing changed); any other tool's is cut to fit and stays a success
#: (``barnraise.actors.service.shrink_to_fit``): a call that answers failure changed nothing.
READ_ONLY_TOOLS: Final = frozenset({"session_get_state", "region_query", "build_test",
                                    "task_get_queue", "a2a_discover"})
