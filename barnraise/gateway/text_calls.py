"""Tool calls written as text, and answers read as text (the A2A binding's text parts).

A person or a language model writes a call one of two ways:

* ``TOOL key=value ...``: the tool's name, then its arguments, each value JSON
  (``region={"x": 0, "y": 0, "width": 8, "height": 8}``, ``count=3``,
  ``"two words"``) or a bare word, taken as a string (``role=builder``);
* the data part's shape as JSON text: ``{"tool": NAME, "arguments": {...}}``.

:func:`read_call` gives the call, or None for ``help`` and for anything it cannot
read (an unknown tool, a word without ``=``, a key twice, JSON that does not
parse or nests deeper than :data:`~barnraise.gateway.jsonrpc.MAX_DEPTH`): the
binding answers those with :func:`usage`, as a success. It never raises.
:func:`render` is the short text an answer carries beside its data part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from barnraise.gateway import jsonrpc
from barnraise.gateway.jsonrpc import RpcError

__all__ = ["MAX_RENDER", "read_call", "render", "usage"]

#: The longest :func:`render` answer, in characters.
MAX_RENDER: Final = 400

_HELP: Final = frozenset({"help", "/help", "?", "usage"})
_KEY: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_SPACE: Final = re.compile(r"\s+")
_WORD: Final = re.compile(r"\S*")
# inside a JSON value, only these characters change what the scan is in
_STRUCTURE: Final = re.compile(r'["\\\[\]{}]')
_LITERAL: Final = re.compile(r"-?\d[\d.eE+-]*|true|false|null")


def read_call(text: str, tools: Iterable[str]) -> tuple[str, dict[str, Any]] | None:
    """The call ``text`` writes, as ``(tool, arguments)``; None for help or unreadable."""
    try:
        return _read(text.strip(), frozenset(tools))
    except Exception:  # a text is never a fault: what cannot be read is answered with help
        return None


def _read(text: str, tools: frozenset[str]) -> tuple[str, dict[str, Any]] | None:
    if not text or text.lower() in _HELP:
        return None
    if text[0] == "{":
        call = _json(text)
        if not isinstance(call, dict) or set(call) - {"tool", "arguments"}:
            return None
        named, given = call.get("tool"), call.get("arguments", {})
        if named not in tools or not isinstance(given, dict):
            return None
        return str(named), given
    name = _WORD.match(text)
    assert name is not None  # \S* matches the empty string at worst
    tool = name.group()
    if tool not in tools:
        return None
    arguments: dict[str, Any] = {}
    at = name.end()
    while True:
        space = _SPACE.match(text, at)
        at = space.end() if space else at
        if at == len(text):
            return tool, arguments
        key = _KEY.match(text, at)
        if key is None or key.group(1) in arguments:
            return None
        at = key.end()
        if at < len(text) and text[at] in '{["':
            end = _json_end(text, at)
            if end is None:
                return None
            value = _json(text[at:end])
            if value is _UNREADABLE:
                return None
        else:
            word = _WORD.match(text, at)
            assert word is not None
            end = word.end()
            value = word.group()
            if _LITERAL.fullmatch(value):
                parsed = _json(value)
                value = value if parsed is _UNREADABLE else parsed
        if end < len(text) and not text[end].isspace():
            return None  # "x=[1]y": a value runs into the next word
        arguments[key.group(1)] = value
        at = end


_UNREADABLE: Final = object()


def _json(text: str) -> Any:
    try:
        return jsonrpc.loads(text)  # bounded in depth, as a frame is
    except RpcError:
        return _UNREADABLE


def _json_end(text: str, start: int) -> int | None:
    """Where the JSON value (object, array or string) at ``start`` ends, or None."""
    depth = 0
    in_string = False
    escaped_at = -1
    for found in _STRUCTURE.finditer(text, start):
        char, at = found.group(), found.start()
        if in_string:
            if char == "\\" and escaped_at != at:
                escaped_at = at + 1  # the next character is escaped
            elif char == '"' and escaped_at != at:
                in_string = False
                if depth == 0:
                    return at + 1
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return at + 1
            if depth < 0:
                return None
    return None


def usage(tools: Iterable[str], session_id: str | None = None) -> str:
    """What ``help`` answers: how to write a call, and the tools."""
    join = (f"session_join session_id={session_id} agent_name=NAME" if session_id
            else "session_join session_id=SESSION agent_name=NAME")
    return ("Write a tool call as text: TOOL key=value ... (each value JSON or a bare "
            'word), e.g. region_query region={"x": 0, "y": 0, "width": 8, "height": 8}; '
            'or as JSON: {"tool": NAME, "arguments": {...}}. Start with '
            f"{join}; its token goes in the Authorization header of every later "
            "call. The agent card's skills describe each tool. Tools: "
            + ", ".join(tools) + ".")


def render(tool: str | None, result: dict[str, Any]) -> str:
    """A short line saying what ``result`` (a tool's result dict) holds."""
    if tool is None:
        return str(result.get("usage", ""))
    if not result.get("success"):
        text = f"{tool} failed: {result.get('error', 'error')}: {result.get('message', '')}"
    else:
        shown = [f"{key}={_brief(value)}" for key, value in result.items()
                 if key != "success"]
        text = f"{tool} ok" + (": " + ", ".join(shown) if shown else "")
    return text if len(text) <= MAX_RENDER else text[:MAX_RENDER - 3] + "..."


def _brief(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)} items]"
    if isinstance(value, dict):
        return f"{{{len(value)} keys}}"
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:57] + "..."
    return repr(value) if isinstance(value, float) else str(value)
