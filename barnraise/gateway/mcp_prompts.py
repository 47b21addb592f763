"""MCP prompts: a short brief a role (builder, tester, architect), and one a tool.

Each brief says how to join and how to work in that role, naming tools of
:data:`barnraise.sim.tools.TOOLS` only (a test holds them to it). ``tool`` explains
one tool: its description and its input schema.
"""

from __future__ import annotations

import json
from typing import Final

import mcp_types as types

from barnraise.sim.tools import TOOLS

__all__ = ["BRIEFS", "get_prompt", "list_prompts"]

_JOIN: Final = ("Join first: session_join(session_id=..., agent_name=..., role={role!r}); its "
                "answer carries your token (send it as Authorization: Bearer TOKEN from "
                "then on) and the session's state. Every tool answers a dict with "
                "'success'; on failure, 'error' names what was wrong. Read the session with "
                "session_get_state, or the resources barnraise://session/ID/state, "
                "/events and /canvas.png. Leave with session_leave.")

#: The work of each role, after joining.
BRIEFS: Final = {
    "builder": (
        "You build tiles on the canvas. Take work: task_get_queue, then task_accept a "
        "task. Claim the area before writing: region_claim(region={x, y, width, "
        "height}); region_renew keeps a long claim. Write with builder_place_tiles "
        "(a rectangle of one tile kind) or builder_place_tile; builder_load_shader and "
        "builder_assemble_cartridge make artifacts. Say what you did with "
        "task_report, then region_release. To work beside others use "
        "a2a_lock_acquire/a2a_lock_release around shared work and a2a_barrier_enter "
        "to wait for the crew; talk with a2a_send_message."),
    "tester": (
        "You check what builders made. Watch for finished work: a2a_subscribe to the "
        "session's events, or task_get_queue. Look at an area with region_query; run "
        "build_test on it and task_report the result. A failure goes back to its "
        "builder with a2a_send_message; build_checkpoint before risky changes lets "
        "build_rollback undo them."),
    "architect": (
        "You plan the build. Set the target with blueprint_set; split the work with "
        "task_delegate (one task an area and role) and order it with "
        "task_add_dependencies. Answer builders' finished work with approval_respond. "
        "Let others in with session_grant; coordinate with a2a_broadcast, "
        "a2a_discover and a2a_barrier_enter; keep progress safe with "
        "build_checkpoint."),
}

_SESSION_ARG: Final = types.PromptArgument(
    name="session_id", description="The session to join (completion lists those you "
    "may see)", required=False)


def list_prompts() -> list[types.Prompt]:
    prompts = [types.Prompt(name=role, title=f"Work as a {role}",
                            description=f"How to join a barnraise session and work as a "
                                        f"{role}", arguments=[_SESSION_ARG])
               for role in BRIEFS]
    prompts.append(types.Prompt(
        name="tool", title="One tool", description="What one tool does and takes",
        arguments=[types.PromptArgument(name="name", description="The tool's name",
                                        required=True)]))
    return prompts


def get_prompt(name: str, arguments: dict[str, str]) -> types.GetPromptResult:
    """The prompt ``name`` with ``arguments``; ValueError naming what is wrong."""
    if name == "tool":
        tool_name = arguments.get("name")
        tool = TOOLS.get(tool_name or "")
        if tool is None:
            raise ValueError(f"prompt 'tool': argument 'name' must be a tool's name, got "
                             f"{tool_name!r} (completion/complete lists them)")
        text = (f"{tool.name}: {tool.description}\nArguments (JSON schema):\n"
                f"{json.dumps(tool.input_schema, indent=1, sort_keys=True)}")
        return _result(f"The tool {tool.name}", text)
    brief = BRIEFS.get(name)
    if brief is None:
        raise ValueError(f"unknown prompt {name!r}: the prompts are "
                         f"{', '.join([*BRIEFS, 'tool'])}")
    join = _JOIN.format(role=name)
    session_id = arguments.get("session_id")
    if session_id:
        join = join.replace("session_id=...", f"session_id={session_id!r}")
    return _result(f"Work as a {name}", f"{join}\n\n{brief}")


def _result(description: str, text: str) -> types.GetPromptResult:
    return types.GetPromptResult(description=description, messages=[types.PromptMessage(
        role="user", content=types.TextContent(type="text", text=text))])

