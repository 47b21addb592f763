"""Writes :mod:`barnraise.sim.tool_methods` from the tool table (:data:`barnraise.sim.tools.TOOLS`).

Run ``python -m barnraise.sim.tool_codegen`` after changing a tool's schema or declared result
(``--check`` exits 1 when the file on disk is not what the table makes, and writes
nothing). The generated module holds, for a type checker and a reader:

* ``ToolName``: a ``Literal`` of every tool's name;
* per tool, ``<Tool>Args`` (its arguments, from its JSON input schema; required
  ones ``Required``, ``session_id`` never, since a bound caller leaves it out) and
  ``<Tool>Result`` (``success``, what any failure may carry, and the tool's declared
  result keys, :data:`barnraise.sim.tools.RESULT_KEYS`);
* one class per family of tools (:data:`FAMILIES`: ``SessionTools``, ``RegionTools``,
  ``BuilderTools``, ``TaskTools``, ``CheckpointTools``, ``A2aTools``, ``AlertTools``,
  ``PlanTools``), each with one method per tool of its family, and ``TypedCall``,
  ``call`` with one overload per tool; all of them thin calls of ``call_any(name,
  args)`` (declared by ``ToolCaller``, their common base), which a client defines;
* :class:`~barnraise.sim.tool_methods.ToolMethods`, which is all of them together: the base of
  ``Client`` and ``RemoteClient``.

A tool whose name no family claims is an error of :func:`render` naming it (a new
tool is given a family here, or a new family).

The rendering is deterministic (the table's order, no timestamps), so a test can
render it in memory and compare it with the file (tests/test_typed_surface.py).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

from barnraise.sim.tools import FAILURE_KEYS, TOOLS, Tool

__all__ = ["FAMILIES", "TARGET", "main", "render"]

#: The file this module writes.
TARGET = pathlib.Path(__file__).with_name("tool_methods.py")

#: The families of tools, one generated class each: (its name, its docstring, the
#: prefixes or whole names of its tools). Every tool is in exactly one.
FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("SessionTools", "Sessions: create, join, grant, leave, read the state.", ("session_",)),
    ("RegionTools", "Regions: claim, release, query.", ("region_",)),
    ("BuilderTools", "Building: tiles, shaders, cartridges, the blueprint and its test.",
     ("builder_", "blueprint_set", "build_test")),
    ("TaskTools", "Tasks: delegate, depend, accept, report, read the queue; approvals.",
     ("task_", "approval_")),
    ("CheckpointTools", "A session's checkpoints: take one, roll back to one.",
     ("build_checkpoint", "build_rollback")),
    ("A2aTools", "Agent to agent: messages, broadcasts, subscriptions, discovery, locks "
     "and barriers.", ("a2a_",)),
    ("AlertTools", "Alerts: tell whoever watches the session that something needs "
     "attention.", ("alert_",)),
    ("PlanTools", "Plans: start a plan's run, its steps delegated along their "
     "dependencies.", ("plan_",)),
)

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
            "null": "None"}
#: A result's JSON types as Python types (results are plain data: lists and dicts).
_RESULT_TYPES = {**_SCALARS, "array": "list[Any]", "object": "dict[str, Any]"}


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


class _Writer:
    """Collects the TypedDicts an argument schema needs, each once (a region is one)."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._names: dict[str, str] = {}  # the schema's repr -> its TypedDict's name
        self._taken: set[str] = set()

    def annotation(self, schema: Mapping[str, Any], owner: str, key: str) -> str:
        if "enum" in schema:
            return "Literal[" + ", ".join(json.dumps(value) for value in schema["enum"]) + "]"
        kinds = schema.get("type")
        if isinstance(kinds, list):
            return " | ".join(self.annotation({**schema, "type": kind}, owner, key)
                              for kind in kinds)
        if kinds == "object":
            if "properties" not in schema:
                return "Mapping[str, Any]"
            return self.typed_dict(schema, owner, key)
        if kinds == "array":
            items = schema.get("items")
            inner = self.annotation(items, owner, key) if items else "Any"
            return f"Sequence[{inner}]"
        if isinstance(kinds, str):
            return _SCALARS[kinds]
        return "Any"

    def typed_dict(self, schema: Mapping[str, Any], owner: str, key: str) -> str:
        """The name of a nested object's TypedDict: ``RegionArg``, or the tool's name
        before it when another schema took that name first."""
        shape = repr(sorted(schema.items(), key=lambda item: item[0]))
        known = self._names.get(shape)
        if known is not None:
            return known
        name = f"{_camel(key)}Arg"
        if name in self._taken:
            name = f"{_camel(owner)}{name}"
        self._taken.add(name)
        self._names[shape] = name
        self.blocks.append(self._fields(name, schema, owner, optional_session=False,
                                        doc=f"The ``{key}`` object of ``{owner}`` (and of any "
                                        "tool whose schema has the same shape)."))
        return name

    def _fields(self, name: str, schema: Mapping[str, Any], owner: str, *,
                optional_session: bool, doc: str) -> str:
        required = set(schema.get("required", ()))
        if optional_session:
            required.discard("session_id")
        props: Mapping[str, Any] = schema["properties"]
        total = all(key in required for key in props)
        lines = [f"class {name}(TypedDict{'' if total else ', total=False'}):",
                 *_docstring(doc, "    "), ""]
        for key, sub in props.items():
            kind = self.annotation(sub, owner, key)
            if not total and key in required:
                kind = f"Required[{kind}]"
            lines.append(f"    {key}: {kind}")
        return "\n".join(lines)

    def args(self, tool: Tool) -> str:
        name = f"{_camel(tool.name)}Args"
        block = self._fields(name, tool.input_schema, tool.name, optional_session=True,
                             doc=f"The arguments of ``{tool.name}``.")
        self.blocks.append(block)
        return name


def _docstring(text: str, indent: str) -> list[str]:
    """``text`` as a docstring's lines, wrapped to the project's 100 columns."""
    lines = textwrap.wrap(f'"""{text}"""', 100 - len(indent))
    return [indent + line for line in lines]


def _wrapped(items: list[str], opening: str, closing: str) -> str:
    """``opening`` + the items, comma-separated, wrapped at 100 columns + ``closing``."""
    lines = textwrap.wrap(", ".join(items) + closing, 96)
    return opening + "\n" + "\n".join(f"    {line}" for line in lines)


def _result_type(kinds: str | tuple[str, ...]) -> str:
    names = (kinds,) if isinstance(kinds, str) else kinds
    return " | ".join(_RESULT_TYPES[kind] for kind in names)


def _merged(first: str | tuple[str, ...], second: str | tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for kinds in (first, second):
        for kind in (kinds,) if isinstance(kinds, str) else kinds:
            if kind not in out:
                out.append(kind)
    return tuple(out)


def _families(tools: Mapping[str, Tool]) -> list[tuple[str, str, list[Tool]]]:
    """:data:`FAMILIES` with their tools, in the table's order; ValueError naming a tool
    that no family claims, or that two do."""
    out: list[tuple[str, str, list[Tool]]] = [(name, doc, []) for name, doc, _ in FAMILIES]
    for tool in tools.values():
        homes = [i for i, (_, _, prefixes) in enumerate(FAMILIES)
                 if tool.name.startswith(prefixes)]
        if len(homes) != 1:
            owners = [FAMILIES[i][0] for i in homes]
            raise ValueError(f"tool {tool.name!r} must be in exactly one family of "
                             f"barnraise.sim.tool_codegen.FAMILIES, is in {owners or 'none'}")
        out[homes[0]][2].append(tool)
    return [family for family in out if family[2]]


def _result(tool: Tool) -> tuple[str, str]:
    name = f"{_camel(tool.name)}Result"
    keys: dict[str, str | tuple[str, ...]] = dict(FAILURE_KEYS)
    for key, kinds in tool.result.items():
        keys[key] = _merged(keys[key], kinds) if key in keys else kinds
    lines = [f"class {name}(TypedDict, total=False):",
             f'    """What ``{tool.name}`` answers: on success ``success`` and its own keys;',
             '    on a failure ``error``, ``message`` and what the refusal names."""', ""]
    for key, kinds in keys.items():
        kind = _result_type(kinds)
        lines.append(f"    {key}: {'Required[bool]' if key == 'success' else kind}")
    return name, "\n".join(lines)


_HEADER = '''"""Typed methods for every tool: the one base class of ``Client`` and ``RemoteClient``.

GENERATED by ``python -m barnraise.sim.tool_codegen`` from the tool table (sim/tools.py): do not
edit by hand. tests/test_typed_surface.py fails when this file is not what the table
makes.

Each method and each overload of ``call`` is one call of ``call_any(name, args)``,
which a client class defines; a type checker reads the arguments (``<Tool>Args``)
and the result (``<Tool>Result``) of every tool from here.
"""

# No ``from __future__ import annotations``: the TypedDicts' ``Required`` is read when
# the class is made (``__required_keys__``), which a string annotation hides.

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Required, TypedDict, Unpack, overload

__all__ = [
{exports}
]
'''


def render() -> str:
    """The text of :mod:`barnraise.sim.tool_methods` for today's table."""
    writer = _Writer()
    results: list[str] = []
    pairs: list[tuple[Tool, str, str]] = []
    for tool in TOOLS.values():
        args = writer.args(tool)
        result, block = _result(tool)
        results.append(block)
        pairs.append((tool, args, result))
    classes = [block.split("(", 1)[0].removeprefix("class ") for block in writer.blocks + results]
    # in ruff's order for __all__ (RUF022): constants, then classes, each sorted
    exports = ["TOOL_NAMES", *sorted([*classes, "ToolCaller", "ToolMethods", "ToolName",
                                     "TypedCall", *(name for name, _, _ in FAMILIES)])]
    names = [f'"{tool.name}"' for tool in TOOLS.values()]
    parts = [_HEADER.replace("{exports}", "\n".join(f'    "{name}",' for name in exports)),
             "#: Every tool's name, in the table's order.\n"
             + _wrapped(names, "ToolName = Literal[", "]") + "\n"
             + _wrapped(names, "TOOL_NAMES: tuple[ToolName, ...] = (", ",)"),
             *writer.blocks, *results]
    families = _families(TOOLS)
    parts.append("\n".join([
        "class ToolCaller:",
        '    """What every generated method calls: ``call_any``, which a client defines."""',
        "",
        "    __slots__ = ()",
        "",
        "    def call_any(self, name: str, args: Mapping[str, Any], /) -> dict[str, Any]:",
        '        """Call tool ``name`` with ``args`` (any name: the untyped way in, for code',
        "        that has the name as data); its result dict. Never raises for a refusal:",
        '        an unknown name answers ``unknown_tool``."""',
        "        raise NotImplementedError",
    ]))
    body = [
        "class TypedCall(ToolCaller):",
        '    """``call(name, **args)``, typed per tool: one overload per tool."""',
        "",
        "    __slots__ = ()",
        "",
    ]
    for tool, args, result in pairs:
        body += [
            "    @overload",
            f'    def call(self, name: Literal["{tool.name}"], /,',
            f"             **args: Unpack[{args}]) -> {result}: ...",
            "",
        ]
    body += [
        "    def call(self, name: str, /, **args: Any) -> Any:",
        '        """Call tool ``name`` with these arguments; wait for and return its result."""',
        "        return self.call_any(name, args)",
    ]
    parts.append("\n".join(body))
    typed = {tool.name: (args, result) for tool, args, result in pairs}
    for family, doc, tools in families:
        body = [f"class {family}(ToolCaller):", *_docstring(doc, "    "), "", "    __slots__ = ()"]
        for tool in tools:
            args, result = typed[tool.name]
            signature = f"    def {tool.name}(self, /, **args: Unpack[{args}]) -> {result}:"
            if len(signature) > 100:
                signature = (f"    def {tool.name}(\n            self, /, **args: Unpack[{args}],"
                             f"\n    ) -> {result}:")
            body += [
                "",
                signature,
                *_docstring(tool.description, "        "),
                f'        return self.call_any("{tool.name}", args)  # type: ignore[return-value]',
            ]
        parts.append("\n".join(body))
    bases = ", ".join(["TypedCall", *(family for family, _, _ in families)])
    body = [f"class ToolMethods({bases}):" if len(bases) < 80 else
            "class ToolMethods(\n" + _wrapped(bases.split(", "), "", ",")[1:] + "\n):",
            '    """A method per tool (one base class per family of tools) and a typed',
            '    ``call``; a subclass defines ``call_any``."""',
            "",
            "    __slots__ = ()"]
    parts.append("\n".join(body))
    return "\n\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m barnraise.sim.tool_codegen", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file is not current; write nothing")
    options = parser.parse_args(argv)
    text = render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if options.check:
        if current != text:
            print(
                f"{TARGET} is not current: run python -m barnraise.sim.tool_codegen",
                file=sys.stderr,
            )
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
