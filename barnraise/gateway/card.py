"""The A2A agent card, generated from the tool table.

Nothing here is written by hand per tool: every skill is one *group* of tools
from :data:`barnraise.sim.tools.TOOLS` (the first word of a tool's name, with a few words
folded together: ``builder_*``, ``blueprint_set`` and ``build_*`` are one
group), and its tags and description are read off the tools in it. Add a tool
to the table and it appears on the card.

The card is the A2A 1.0 shape (``supportedInterfaces``, ``capabilities``,
``securitySchemes``...), as JSON with camelCase names, the form
``a2a.types.AgentCard`` parses. This module imports nothing outside the
standard library and the tool table, so the card can be checked without the
server installed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from barnraise.sim.tools import TOOLS, Tool

__all__ = ["A2A_PROTOCOL_VERSION", "CARD_PATHS", "RPC_PATH", "WS_PATH", "agent_card",
           "disabled_tools", "served_tools", "tool_groups"]

A2A_PROTOCOL_VERSION: Final = "1.0"
#: Where the card is served: the A2A 1.0 name, and the name the design notes use.
CARD_PATHS: Final = ("/.well-known/agent-card.json", "/.well-known/agent.json")
#: The A2A JSON-RPC binding (HTTP POST, SSE for the streaming methods).
RPC_PATH: Final = "/a2a/jsonrpc"
#: What a message may carry and an answer carries: a text part and a data part.
MODES: Final = ("text/plain", "application/json")
#: The WebSocket endpoint: JSON-RPC 2.0 frames, one method per tool.
WS_PATH: Final = "/a2a"

# Words of tool names that belong to one group, and what each group is for.
_FOLD: Final = {"builder": "build", "blueprint": "build", "approval": "task"}
_GROUP_TEXT: Final = {
    "session": ("Sessions", "Create, join and leave build sessions; read their state."),
    "region": ("Regions", "Claim, release and query leases on regions of the shared canvas."),
    "build": ("Building", "Place tiles, load shaders, assemble cartridges, test regions "
              "against the blueprint, checkpoint and roll back."),
    "task": ("Tasks", "Delegate tasks along a dependency graph, accept them, report "
             "results, answer approvals. task_delegate answers with an A2A Task."),
    "a2a": ("Agent to agent", "Message, broadcast to, discover and subscribe to other "
            "agents; named locks and barriers."),
    "alert": ("Alerts", "Tell whoever watches the session that something needs "
              "attention: an agent.alert event on its topic."),
    "plan": ("Plans", "Start a plan's run: its steps delegated along their dependencies, "
             "with approval gates; plan.* events on the session's topic."),
}


def _group_of(name: str) -> str:
    word = name.split("_", 1)[0]
    return _FOLD.get(word, word)


def tool_groups(tools: Mapping[str, Tool] = TOOLS) -> dict[str, list[Tool]]:
    """The tools by group, groups and tools in table order."""
    groups: dict[str, list[Tool]] = {}
    for tool in tools.values():
        groups.setdefault(_group_of(tool.name), []).append(tool)
    return groups


def disabled_tools(skills: Sequence[str],
                   tools: Mapping[str, Tool] = TOOLS) -> dict[str, str]:
    """The tools of the skill groups ``skills`` (``serve --disable-skill``), each with its
    group's id. :class:`ValueError` naming the known ids for an id that is not one."""
    groups = tool_groups(tools)
    disabled: dict[str, str] = {}
    for skill in skills:
        if skill not in groups:
            raise ValueError(f"--disable-skill {skill!r}: no such skill; the card's skills "
                             f"are {', '.join(groups)}")
        disabled.update((tool.name, skill) for tool in groups[skill])
    return disabled


def served_tools(disabled: Collection[str], tools: Mapping[str, Tool] = TOOLS
                 ) -> dict[str, Tool]:
    """``tools`` less the ``disabled`` ones, in table order."""
    return {name: tool for name, tool in tools.items() if name not in disabled}


def _skill(group: str, members: list[Tool]) -> dict[str, Any]:
    title, text = _GROUP_TEXT.get(group, (group.replace("_", " ").capitalize(),
                                          f"The {group} tools."))
    listing = "; ".join(f"{t.name}: {t.description}" for t in members)
    first = members[0]
    required = ", ".join(f'"{key}": ...' for key in first.input_schema.get("required", []))
    example = f'{{"tool": "{first.name}", "arguments": {{{required}}}}}'
    services = sorted({t.service for t in members})
    return {
        "id": group,
        "name": title,
        "description": f"{text} Send a text part TOOL key=value ... (or help), or a data "
                       f"part {{\"tool\": NAME, \"arguments\": {{...}}}}; the answer's data "
                       f"part is the tool's result, its text part says it briefly. Tools: "
                       f"{listing}",
        "tags": [group, *services, *(t.name for t in members)],
        "examples": [example],
        "inputModes": list(MODES),
        "outputModes": list(MODES),
    }


def agent_card(base_url: str, *, version: str, tools: Mapping[str, Tool] = TOOLS,
               name: str = "barnraise") -> dict[str, Any]:
    """The card for a server at ``base_url`` (``http://host:port``, no trailing slash)."""
    base = base_url.rstrip("/")
    ws_base = "ws" + base[len("http"):] if base.startswith("http") else base
    return {
        "name": name,
        "description": (
            "A barnraise session world: many agents build one thing together on a shared "
            "tile canvas. Join with session_join (no token needed); its result carries a "
            "bearer token for every later call. Every tool of the table is a skill "
            "group below; a call is a message with a text part TOOL key=value ... "
            "(send help for the list) or a data part {\"tool\": NAME, \"arguments\": {...}}."),
        "version": version,
        "supportedInterfaces": [
            {"url": base + RPC_PATH, "protocolBinding": "JSONRPC",
             "protocolVersion": A2A_PROTOCOL_VERSION},
            # Not an A2A binding: barnraise's own JSON-RPC over WebSocket, one
            # method per tool. A2A clients skip bindings they do not know.
            {"url": ws_base + WS_PATH, "protocolBinding": "BARNRAISE-WEBSOCKET",
             "protocolVersion": A2A_PROTOCOL_VERSION},
        ],
        "capabilities": {"streaming": True, "pushNotifications": False},
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "Bearer", "bearerFormat": "opaque",
                "description": "The token in the result of session_join (or "
                               "session_create); it names the agent that calls."}},
        },
        "defaultInputModes": list(MODES),
        "defaultOutputModes": list(MODES),
        "skills": [_skill(group, members) for group, members in tool_groups(tools).items()],
    }
