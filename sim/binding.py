"""A caller's session binding: the one rule for when a tool call's ``session_id`` may be
left out.

A caller (a Client, an Agent) is bound to the session it created or joined and may then
leave ``session_id`` out. :func:`prepare_call` fills it in (and copies the arguments, so
nothing the caller keeps is shared with a service), :func:`bound_session_after` says what
the binding is once a call answered, and :data:`TAKES_SESSION` and :data:`BINDING_TOOLS`
say which tools either concerns. Every caller follows the rule through these, so all
follow it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from barnraise.sim.tools import TOOLS, Tool, fail

__all__ = ["BINDING_TOOLS", "TAKES_SESSION", "bound_session_after", "prepare_call"]

#: Tools whose schema takes a session_id: the ones a binding fills in.
TAKES_SESSION: Final = frozenset(
    name for name, tool in TOOLS.items() if "session_id" in tool.input_schema["properties"])


_copy_builtins: Final = msgspec.to_builtins


def prepare_call(name: str, args: Mapping[str, Any],
                 bound_session: str | None) -> tuple[Tool, dict[str, Any]] | dict[str, Any]:
    """The tool called ``name`` and the arguments to send it, or a failure result.

    The arguments are a copy of ``args`` (no list or dict in it is shared with
    the caller) plus ``session_id=bound_session`` when the tool
    takes a session id, the caller is bound and ``args`` names none. An unknown
    ``name`` gives ``unknown_tool`` listing the known tools, arguments that are
    not JSON data (a numpy number, an object) ``invalid_argument``. Nothing else
    is validated here: the service does that.
    """
    tool = TOOLS.get(name)
    if tool is None:
        return fail("unknown_tool", f"no tool {name!r}; known tools: {', '.join(sorted(TOOLS))}")
    # The arguments cross into a service as a copy of their own (every list and
    # dict new, in C): a caller that changes its dict, or a list in it, after the
    # call changes nothing in the world; what is not JSON data is refused here.
    try:
        fresh: dict[str, Any] = _copy_builtins(args)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        return fail("invalid_argument", "arguments must be JSON data (objects with string "
                    f"keys, lists, strings, numbers, true/false, null): {exc}")
    if bound_session is not None and name in TAKES_SESSION and "session_id" not in fresh:
        fresh["session_id"] = bound_session
    return tool, fresh


#: The tools after which :func:`bound_session_after` may change a binding; after any
#: other a caller's binding is what it was, and a caller need not ask.
BINDING_TOOLS: Final = frozenset({"session_create", "session_join", "session_leave"})


def bound_session_after(tool_name: str, result: Mapping[str, Any],
                        bound_session: str | None) -> str | None:
    """The caller's session once ``tool_name`` answered ``result``.

    A successful ``session_join`` binds to the joined session; a successful
    ``session_create`` binds only a caller bound to none (a host creating
    sessions for others stays where it is); a successful ``session_leave``
    unbinds. Anything else, failures included, leaves the binding as it was.
    """
    if not result.get("success"):
        return bound_session
    if tool_name == "session_join" or (tool_name == "session_create" and bound_session is None):
        return str(result["session_id"])
    if tool_name == "session_leave":
        return None
    return bound_session
