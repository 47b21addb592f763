"""A tool's arguments checked against its JSON schema (:data:`barnraise.sim.tools.TOOLS`).

:func:`validate` (and :func:`validator`, the same as a function of the arguments
alone) returns the arguments with their defaults filled in, or raises
:class:`barnraise.sim.tools.ToolError` with code ``invalid_argument`` naming the field. Two
checkers are compiled from each schema, once: a msgspec Struct, the fast path every
call takes, and a hand-compiled checker (:func:`compile_schema`) that runs only
when msgspec refuses, to word the error (and to accept what msgspec is stricter
about: ``None`` for "absent").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal

import msgspec

from barnraise.sim.tools import TOOLS, Tool, ToolError

__all__ = ["compile_schema", "validate", "validator"]

# -- validation ---------------------------------------------------------------------------
#
# Each schema is compiled once into a checker function: a closure per node that
# knows its own type test, bounds and children, so a call pays only for what its
# schema asks (no dict look-ups for keys a node lacks). A checker takes the value and
# its path (for messages) and returns the value with defaults filled in, or raises
# ToolError(invalid_argument) naming the field.

_JSON_TYPES: Final = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list, tuple), "null": (type(None),),
}

Checker = Callable[[Any, str], Any]


def _shown(value: Any) -> str:
    """A value for an error message, cut short (an integer of 400 digits, say)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _type_test(names: str | list[str]) -> Callable[[Any], bool]:
    """A predicate for one JSON type or a union; bool is never an integer or number."""
    wanted = [names] if isinstance(names, str) else list(names)
    classes = tuple(t for name in wanted for t in _JSON_TYPES[name])
    exact = frozenset(classes)
    allows_bool = "boolean" in wanted

    def test(value: Any) -> bool:
        kind = type(value)
        if kind is bool:
            return allows_bool
        # subclasses (an IntEnum, an OrderedDict) pass as their JSON type would
        return kind in exact or isinstance(value, classes)

    return test


def _compile(schema: Mapping[str, Any]) -> Checker:
    steps: list[Checker] = []
    expected = schema.get("type")
    if expected is not None:
        test = _type_test(expected)
        shown = expected if isinstance(expected, str) else " or ".join(expected)

        def check_type(value: Any, path: str) -> Any:
            if not test(value):
                raise ToolError("invalid_argument", f"{path}: expected {shown}, got {value!r}",
                                field=path)
            return value

        steps.append(check_type)
    if "enum" in schema:
        allowed = list(schema["enum"])

        def check_enum(value: Any, path: str) -> Any:
            if value not in allowed:
                raise ToolError("invalid_argument",
                                f"{path}: must be one of {allowed}, got {value!r}", field=path)
            return value

        steps.append(check_enum)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None or high is not None:
        def check_bounds(value: Any, path: str) -> Any:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # Written so that NaN fails both (every comparison with it is False).
                if low is not None and not value >= low:
                    raise ToolError("invalid_argument",
                                    f"{path}: must be at least {low}, got {_shown(value)}",
                                    field=path)
                if high is not None and not value <= high:
                    raise ToolError("invalid_argument",
                                    f"{path}: must be at most {high}, got {_shown(value)}",
                                    field=path)
            return value

        steps.append(check_bounds)
    min_length, max_length = schema.get("minLength", 0), schema.get("maxLength")
    if min_length or max_length is not None:
        def check_length(value: Any, path: str) -> Any:
            if isinstance(value, str):
                if len(value) < min_length:
                    raise ToolError("invalid_argument", f"{path}: must not be empty",
                                    field=path)
                if max_length is not None and len(value) > max_length:
                    raise ToolError("invalid_argument", f"{path}: at most {max_length} "
                                    f"characters, got {len(value)}", field=path)
            return value

        steps.append(check_length)
    max_items = schema.get("maxItems")
    if max_items is not None:
        def check_count(value: Any, path: str) -> Any:
            if isinstance(value, (list, tuple)) and len(value) > max_items:
                raise ToolError("invalid_argument", f"{path}: at most {max_items} items, "
                                f"got {len(value)}", field=path)
            return value

        steps.append(check_count)
    if "properties" in schema:
        check_object = _compile_object(schema)

        def check_nested(value: Any, path: str) -> Any:
            return check_object(value, path) if isinstance(value, dict) else value

        steps.append(check_nested)
    if "items" in schema:
        check_item = _compile(schema["items"])

        def check_items(value: Any, path: str) -> Any:
            if isinstance(value, (list, tuple)):
                return [check_item(item, f"{path}[{i}]") for i, item in enumerate(value)]
            return value

        steps.append(check_items)
    if not steps:
        return lambda value, path: value
    if len(steps) == 1:
        return steps[0]

    def check_all(value: Any, path: str) -> Any:
        for step in steps:
            value = step(value, path)
        return value

    return check_all


def _compile_object(schema: Mapping[str, Any]) -> Checker:
    properties: Mapping[str, Any] = schema["properties"]
    closed = schema.get("additionalProperties") is False
    required = set(schema.get("required", ()))
    # (key, checker, required, default maker or None)
    fields: list[tuple[str, Checker, bool, Callable[[str], Any] | None]] = []
    for key, sub in properties.items():
        make: Callable[[str], Any] | None = None
        if key in required:
            pass
        elif "default" in sub:
            default = sub["default"]
            if isinstance(default, list):
                make = lambda _p, d=default: list(d)  # noqa: E731  (a fresh copy per call)
            elif isinstance(default, dict):
                make = lambda _p, d=default: dict(d)  # noqa: E731
            else:
                make = lambda _p, d=default: d  # noqa: E731
        elif sub.get("type") == "object" and "properties" in sub and not sub.get("required"):
            # an options object (config, filter): present with its defaults filled in
            options = _compile_object(sub)
            make = lambda p, o=options: o({}, p)  # noqa: E731
        fields.append((key, _compile(sub), key in required, make))

    def check_object(value: Mapping[str, Any], path: str) -> dict[str, Any]:
        prefix = f"{path}." if path else ""
        if closed:
            for key in value:
                if key not in properties:
                    raise ToolError("invalid_argument", f"{prefix}{key}: unknown argument",
                                    field=f"{prefix}{key}")
        out: dict[str, Any] = {}
        for key, check, is_required, make in fields:
            item = value.get(key)
            if item is not None:
                out[key] = check(item, prefix + key)
            elif is_required:
                raise ToolError("invalid_argument", f"{prefix}{key}: required",
                                field=f"{prefix}{key}")
            elif make is not None:
                out[key] = make(prefix + key)
        return out

    return check_object


def compile_schema(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The hand-compiled checker of an object schema: ``check(args)`` returns the
    arguments with defaults filled in or raises :class:`ToolError` naming the field.

    :func:`validate` runs msgspec first and this one only when msgspec refuses,
    for the error message (and for what msgspec is stricter about: a ``None``
    here means "absent").
    """
    check = _compile_object(schema)

    def checked(args: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = check(args, "")
        return result

    return checked


# -- the fast path: one msgspec Struct per schema ------------------------------------------
#
# benchmarks/validation_bench.py compares, on the hot path's own arguments (a
# builder_place_tiles row of 100 tiles, a region_claim, a task_report), the
# hand-compiled checkers above, fastjsonschema and msgspec: msgspec.convert into
# a Struct generated from the schema, then to_builtins back to a dict, was the
# fastest on the two calls with a region (2.7x and 4.7x faster than the hand
# checkers) and about even with fastjsonschema on task_report (docs/benchmarks.md).

_SCALARS: Final[dict[str, Any]] = {
    "string": str, "integer": int, "number": int | float, "boolean": bool,
}


def _struct_type(name: str, schema: Mapping[str, Any]) -> Any:
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    kinds = schema.get("type")
    if isinstance(kinds, list):
        union: Any = None
        for kind in kinds:  # each member keeps what applies to it (an array its items)
            member = _struct_type(name, {**schema, "type": kind})
            union = member if union is None else union | member
        return union
    if kinds == "object":
        return _struct(name, schema) if "properties" in schema else dict[str, Any]
    if kinds == "array":
        items = schema.get("items")
        listed: Any = list[  # type: ignore[misc]
            _struct_type(f"{name}_item", items) if items else Any]
        if "maxItems" in schema:
            return Annotated[listed, msgspec.Meta(max_length=schema["maxItems"])]
        return listed
    base = _SCALARS.get(kinds, Any) if isinstance(kinds, str) else Any
    meta: dict[str, Any] = {}
    if "minimum" in schema:
        meta["ge"] = schema["minimum"]
    if "maximum" in schema:
        meta["le"] = schema["maximum"]
    if schema.get("minLength"):
        meta["min_length"] = schema["minLength"]
    if "maxLength" in schema:
        meta["max_length"] = schema["maxLength"]
    if not meta:
        return base
    if base is _SCALARS["number"]:
        # msgspec wants an int's bounds as ints (a float bound made every call of such a
        # tool fall back to the slow checker): the same bounds, rounded inwards.
        int_meta = {key: (math.ceil(value) if key == "ge" else math.floor(value))
                    if key in ("ge", "le") else value for key, value in meta.items()}
        return (Annotated[int, msgspec.Meta(**int_meta)]
                | Annotated[float, msgspec.Meta(**meta)])
    return Annotated[base, msgspec.Meta(**meta)]


def _struct(name: str, schema: Mapping[str, Any]) -> type[msgspec.Struct]:
    """A Struct that accepts what the schema accepts and fills the same defaults."""
    required = set(schema.get("required", ()))
    fields: list[tuple[Any, ...]] = []
    optional: list[tuple[Any, ...]] = []
    for key, sub in schema["properties"].items():
        kind = _struct_type(f"{name}_{key}", sub)
        if key in required:
            fields.append((key, kind))
        elif "default" in sub:
            default = sub["default"]
            if isinstance(default, (list, dict)):  # a fresh copy per call
                # (the list's or dict's own copy: simpler than copy.copy through a partial;
                # no faster that a run shows)
                optional.append((key, kind, msgspec.field(default_factory=default.copy)))
            else:
                optional.append((key, kind, default))
        elif sub.get("type") == "object" and "properties" in sub and not sub.get("required"):
            optional.append((key, kind, msgspec.field(default_factory=kind)))
        else:  # absent stays absent: to_builtins leaves UNSET fields out
            optional.append((key, kind | msgspec.UnsetType, msgspec.UNSET))
    return msgspec.defstruct(name, fields + optional,
                             forbid_unknown_fields=schema.get("additionalProperties") is False)


_Validator = Callable[[Mapping[str, Any]], dict[str, Any]]


def _to_dict(schema: Mapping[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """A Struct of ``schema`` back to a dict: shallow, so values the schema leaves
    opaque (a blueprint's rows, a payload) are handed on as they came, not copied
    (``msgspec.to_builtins`` would copy a 1,000 x 1,000 blueprint cell by cell)."""
    asdict, unset = msgspec.structs.asdict, msgspec.UNSET
    required = set(schema.get("required", ()))
    absent = [key for key, sub in schema["properties"].items()
              if key not in required and "default" not in sub
              and not (sub.get("type") == "object" and "properties" in sub
                       and not sub.get("required"))]
    nested = [(key, _to_dict(sub)) for key, sub in schema["properties"].items()
              if sub.get("type") == "object" and "properties" in sub]

    if not absent and not nested:  # a region, say: the Struct's fields are the dict
        return asdict
    if not nested and len(absent) == 1:  # task_accept, task_get_queue...: one key to drop
        (only,) = absent

        def drop_one(obj: Any) -> dict[str, Any]:
            out: dict[str, Any] = asdict(obj)
            if out[only] is unset:
                del out[only]
            return out

        return drop_one

    def to_dict(obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = asdict(obj)
        for key in absent:
            if out[key] is unset:
                del out[key]
        for key, inner in nested:
            value = out.get(key)
            if value is not None:
                out[key] = inner(value)
        return out

    return to_dict


def _validator(schema: Mapping[str, Any]) -> _Validator:
    struct = _struct("Args", schema)
    to_dict = _to_dict(schema)
    slow = compile_schema(schema)
    convert, error = msgspec.convert, msgspec.ValidationError

    def check(args: Mapping[str, Any]) -> dict[str, Any]:
        if type(args) is not dict and not isinstance(args, Mapping):  # (an ABC check is slow)
            raise ToolError("invalid_argument", f"arguments must be an object, got {args!r}",
                            field="")
        try:
            return to_dict(convert(args, struct))
        except (error, TypeError):
            # Refused (or not plain data): the hand checker says why, naming
            # the field, or accepts what msgspec is stricter about (None).
            return slow(args)

    return check


_VALIDATORS: dict[str, _Validator] = {}


def validator(tool: Tool) -> _Validator:
    """:func:`validate` for one tool, as a function of the arguments alone: a service
    looks it up once per tool it serves, not once per call. Made once per tool of
    :data:`TOOLS`; a tool made outside the table gets a new one each time."""
    check = _VALIDATORS.get(tool.name)
    if check is None or TOOLS.get(tool.name) is not tool:
        check = _validator(tool.input_schema)
        if TOOLS.get(tool.name) is tool:
            _VALIDATORS[tool.name] = check
    return check


def validate(tool: Tool, args: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``args`` against the tool's schema; return them with defaults filled in.

    The result is a fresh dict (the caller's is left alone). Raises
    :class:`ToolError` with code ``invalid_argument`` and ``field`` set to the
    dotted path of the offending argument (``region.x``, ``include[0]``).
    """
    return validator(tool)(args)
