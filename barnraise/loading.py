"""Scenario loading: find a scenario (a shipped name or a ``.py`` file), check its
parameters against its defaults and bounds, and describe it.

A scenario is a Python module (in ``scenarios/``, or any file given by path) with:

* a docstring: its first line is the one-line description ``barnraise scenarios``
  shows; the rest says what it shows, its parameters and its success check;
* ``PARAMS``: a dict of parameter defaults, whose types are the parameters' types;
* ``run(simu, **params) -> dict``: drives a :class:`~barnraise.actors.world.Simulation`
  and returns the scenario's own figures (its ``metrics``); a ``session_id`` key
  names the session whose world figures go into the summary (else the first);
* ``check(summary) -> bool``: the success check, over the whole summary;
* optionally ``SIMULATION``: keyword arguments for the Simulation (a bigger
  message limit for large blueprints, say);
* optionally ``describe(summary) -> list[str]``: the scenario's own lines for the
  text summary (what its counts mean, a comparison table).
* optionally ``REPORTERS`` and ``AGENT_REPORTERS``: ``{name: fn}``, columns of the
  scenario's own in the run's time series (``fn`` gets a session's ``WorldView`` or an
  ``AgentView`` and returns a number or a string; :mod:`barnraise.sim.reporters`),
  checked here when the module is loaded.

Running one is :mod:`barnraise.runner`'s; what a run gives back and writes,
:mod:`barnraise.outputs`'.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import pathlib
import pkgutil
import textwrap
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from barnraise import scenarios
from barnraise.scenarios import ANY_NUMBER, Bound, ScenarioError
from barnraise.sim.reporters import check_reporters
from barnraise.sim.store import StoreError

if TYPE_CHECKING:
    pass

__all__ = [
    "UnverifiedScript",
    "coerce_params",
    "describe",
    "is_script",
    "list_scenarios",
    "load",
    "load_with_sha256",
    "metric_names",
]


def list_scenarios() -> list[tuple[str, str]]:
    """(name, one-line description) of every scenario shipped in ``scenarios/``."""
    found = []
    for info in sorted(pkgutil.iter_modules(scenarios.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"barnraise.scenarios.{info.name}")
        if hasattr(module, "run") and hasattr(module, "PARAMS"):
            found.append((info.name, _first_line(module)))
    return found


def _first_line(module: ModuleType) -> str:
    doc = (module.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


class UnverifiedScript(UserWarning):
    """A scenario file named to run a store again whose store keeps no SHA-256 of the file
    it was made from (a store from before schema 4): it runs, unverified."""


# The module name a scenario file is loaded under: this prefix and the file's stem.
_USER_PREFIX = "user_scenario_"


def is_script(name: str) -> bool:
    """Does ``name`` name a scenario file (a ``.py`` path) rather than a shipped scenario?"""
    return name.endswith(".py") or pathlib.Path(name).parent != pathlib.Path(".")


def load(name_or_path: str) -> ModuleType:
    """The scenario module for a shipped name or a path to a ``.py`` file."""
    return _load(name_or_path)[0]


def load_with_sha256(name_or_path: str) -> tuple[ModuleType, str | None]:
    """:func:`load`, and the SHA-256 of the bytes run for a scenario file (None for a
    shipped name): what a store made from it keeps, so only that file runs it again."""
    return _load(name_or_path)


def _load(name_or_path: str, expect_sha256: str | None = None, *, file: bool | None = None
          ) -> tuple[ModuleType, str | None]:
    """:func:`load`, and the SHA-256 of the file's bytes for a scenario file (None for a
    shipped name). The bytes hashed are the bytes run: read once, hashed, then compiled.
    ``expect_sha256``: refuse (StoreError), before running anything, a file whose hash
    differs. ``file``: take ``name_or_path`` as a file's path (default: when it looks like
    one, :func:`is_script`)."""
    path = pathlib.Path(name_or_path)
    sha: str | None = None
    if is_script(name_or_path) if file is None else file:
        if not path.is_file():
            raise ScenarioError(f"no scenario file {name_or_path!r}")
        try:
            source = path.read_bytes()
        except OSError as exc:
            raise ScenarioError(f"scenario file {name_or_path!r}: cannot read it "
                                f"({exc.strerror or exc})") from None
        sha = hashlib.sha256(source).hexdigest()
        if expect_sha256 is not None and sha != expect_sha256:
            raise StoreError(f"scenario file {name_or_path!r} is not the file the store was "
                             f"made from (its sha256 is {sha[:16]}..., the store keeps "
                             f"{expect_sha256[:16]}...): nothing run")
        spec = importlib.util.spec_from_file_location(f"{_USER_PREFIX}{path.stem}", path)
        if spec is None:
            raise ScenarioError(f"cannot load {name_or_path!r} as a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception as exc:
            raise ScenarioError(f"{name_or_path}: failed to import: {exc}") from None
    else:
        known = dict(list_scenarios())
        if name_or_path not in known:
            raise ScenarioError(f"unknown scenario {name_or_path!r}; known: "
                                f"{', '.join(sorted(known))}")
        module = importlib.import_module(f"barnraise.scenarios.{name_or_path}")
    for needed in ("PARAMS", "run", "check"):
        if not hasattr(module, needed):
            raise ScenarioError(f"{name_or_path}: a scenario needs {needed} "
                                "(see barnraise/loading.py)")
    try:
        check_reporters(None, None, module=module)
    except ValueError as exc:
        raise ScenarioError(f"{name_or_path}: {exc}") from None
    return module, sha


def coerce_params(module: ModuleType, given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``given``, each converted to its default's type.

    A string for a parameter of another type (as the CLI gives every value) is
    read leniently: ``"4"`` for an int, ``"0.5"`` for a float, ``true`` /
    ``false`` / ``1`` / ``0`` for a bool, JSON for a list or a dict. Any other
    value must already have the type (an int passes for a float; a bool does
    not pass for an int). A parameter whose default is None takes any value.
    ScenarioError names the parameter for an unknown one, a value that does
    not convert, or one outside the scenario's ``BOUNDS`` (any number must be
    finite and within +-1e9).
    """
    defaults: dict[str, Any] = dict(module.PARAMS)
    bounds: Mapping[str, Bound] = getattr(module, "BOUNDS", {})
    params = dict(defaults)
    for key, value in given.items():
        if key not in defaults:
            raise ScenarioError(f"unknown parameter {key!r}; parameters: "
                                f"{', '.join(sorted(defaults)) or 'none'}")
        params[key] = converted = _convert(key, value, defaults[key])
        # A number with no bound of its own must still be finite and not absurd:
        # NaN, infinity or 1e300 once reached a scenario and hung it or raised.
        bounds.get(key, ANY_NUMBER).check(key, converted)
    return params


def _convert(key: str, value: Any, default: Any) -> Any:
    if default is None:
        return value
    kind = type(default)
    try:
        if isinstance(value, str) and kind is not str:
            if kind in (list, dict):
                return msgspec.json.decode(value, type=kind)
            return msgspec.convert(value, kind, strict=False)
        return msgspec.convert(value, kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        # msgspec's own words add something for JSON text (where it broke, what
        # it found) and for an item deep inside; for a lone scalar they repeat
        # what the first half says.
        detail = str(exc)
        useful = (isinstance(value, str) and kind in (list, dict)) or "at `$" in detail
        raise ScenarioError(f"parameter {key}: expected {kind.__name__}, got {value!r}"
                            + (f" ({detail})" if useful else "")) from None


def describe(module: ModuleType) -> dict[str, Any]:
    """A scenario's name, docstring and parameters (name -> default, type name and,
    where the scenario declares one, its bound in words). A scenario file's name is its
    ``NAME`` or, as a run's summary names it, the file's stem; ``file`` is then the
    file's path (None for a shipped scenario)."""
    bounds: Mapping[str, Bound] = getattr(module, "BOUNDS", {})
    params = {name: {"default": value, "type": "any" if value is None else type(value).__name__,
                     **({"bound": bounds[name].describe()} if name in bounds else {})}
              for name, value in module.PARAMS.items()}
    file = getattr(module, "__file__", None) if module.__name__.startswith(_USER_PREFIX) else None
    default = pathlib.Path(file).stem if file else module.__name__.rsplit(".", 1)[-1]
    return {"name": getattr(module, "NAME", default), "file": file,
            "doc": inspect.cleandoc(module.__doc__ or ""), "params": params}


def metric_names(module: ModuleType) -> frozenset[str] | None:
    """The metric names a scenario's ``run`` returns, read from its source without
    running it: the string keys of the dict displays it returns. None when that is not
    all it returns (a variable, a ``**`` expansion, no source): then they are known
    only once a run has returned them. A sweep checks ``--plot`` against these."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(module.run)))
    except (AttributeError, OSError, TypeError, SyntaxError):
        return None
    names: set[str] = set()
    for node in _returns(tree.body[0]):
        if not isinstance(node.value, ast.Dict):
            return None
        for key in node.value.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return None
            names.add(key.value)
    return frozenset(names)


def _returns(node: ast.AST) -> Iterator[ast.Return]:
    """The return statements of a function, not of the functions nested in it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                              ast.ClassDef)):
            continue
        if isinstance(child, ast.Return):
            yield child
        yield from _returns(child)
