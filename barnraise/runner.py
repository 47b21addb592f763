"""Running scenarios: find one, check its parameters, run it, summarise it.

A scenario is a Python module (in ``scenarios/``, or any file given by path) with:

* a docstring: its first line is the one-line description ``barnraise scenarios``
  shows; the rest says what it shows, its parameters and its success check;
* ``PARAMS``: a dict of parameter defaults, whose types are the parameters' types;
* ``run(simu, **params) -> dict``: drives a :class:`~actors.world.Simulation`
  and returns the scenario's own figures (its ``metrics``); a ``session_id`` key
  names the session whose world figures go into the summary (else the first);
* ``check(summary) -> bool``: the success check, over the whole summary;
* optionally ``SIMULATION``: keyword arguments for the Simulation (a bigger
  message limit for large blueprints, say).

:func:`run` returns a :class:`RunResult`; its ``summary`` is what ``barnraise run
--json`` prints. Problems with the request itself (unknown scenario, unknown or
ill-typed parameter, missing file) raise :class:`ScenarioError` before anything runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import pkgutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec
import numpy as np

import scenarios
from actors.world import Simulation
from scenarios import ParamError, ScenarioError
from sim.plots import save_canvas_png
from sim.trace import Trace

__all__ = [
    "ParamError", "RunResult", "ScenarioError", "coerce_params", "list_scenarios", "load", "run",
]


@dataclass
class RunResult:
    """What a scenario run produced."""

    summary: dict[str, Any]
    trace: Trace
    canvas: np.ndarray[Any, Any] | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return bool(self.summary["success"])

    @property
    def trace_digest(self) -> str:
        return str(self.summary["trace_digest"])

    def write(self, directory: str | pathlib.Path) -> list[pathlib.Path]:
        """Write summary.json, trace.jsonl and (with a canvas) canvas.png there."""
        out = pathlib.Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "summary.json", out / "trace.jsonl"]
        written[0].write_text(json.dumps(self.summary, indent=2, sort_keys=True) + "\n")
        with written[1].open("wb") as handle:
            for line in self.trace.to_jsonl():
                handle.write(line)
        if self.canvas is not None:
            png = out / "canvas.png"
            save_canvas_png(png, self.canvas, self.claims, title=self.summary["scenario"])
            written.append(png)
        return written


def list_scenarios() -> list[tuple[str, str]]:
    """(name, one-line description) of every scenario shipped in ``scenarios/``."""
    found = []
    for info in sorted(pkgutil.iter_modules(scenarios.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"scenarios.{info.name}")
        if hasattr(module, "run") and hasattr(module, "PARAMS"):
            found.append((info.name, _first_line(module)))
    return found


def _first_line(module: ModuleType) -> str:
    doc = (module.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def load(name_or_path: str) -> ModuleType:
    """The scenario module for a shipped name or a path to a ``.py`` file."""
    path = pathlib.Path(name_or_path)
    if name_or_path.endswith(".py") or path.parent != pathlib.Path("."):
        if not path.is_file():
            raise ScenarioError(f"no scenario file {name_or_path!r}")
        spec = importlib.util.spec_from_file_location(f"user_scenario_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ScenarioError(f"cannot load {name_or_path!r} as a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ScenarioError(f"{name_or_path}: failed to import: {exc}") from None
    else:
        known = dict(list_scenarios())
        if name_or_path not in known:
            raise ScenarioError(f"unknown scenario {name_or_path!r}; known: "
                                f"{', '.join(sorted(known))}")
        module = importlib.import_module(f"scenarios.{name_or_path}")
    for needed in ("PARAMS", "run", "check"):
        if not hasattr(module, needed):
            raise ScenarioError(f"{name_or_path}: a scenario needs {needed} "
                                "(see barnraise/runner.py)")
    return module


def coerce_params(module: ModuleType, given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with ``given``, each converted to its default's type.

    A string for a parameter of another type (as the CLI gives every value) is
    read leniently: ``"4"`` for an int, ``"0.5"`` for a float, ``true`` /
    ``false`` / ``1`` / ``0`` for a bool, JSON for a list or a dict. Any other
    value must already have the type (an int passes for a float; a bool does
    not pass for an int). A parameter whose default is None takes any value.
    ScenarioError names the parameter for an unknown one or a value that does
    not convert.
    """
    defaults: dict[str, Any] = dict(module.PARAMS)
    params = dict(defaults)
    for key, value in given.items():
        if key not in defaults:
            raise ScenarioError(f"unknown parameter {key!r}; parameters: "
                                f"{', '.join(sorted(defaults)) or 'none'}")
        params[key] = _convert(key, value, defaults[key])
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


def run(
    scenario: str,
    seed: int = 0,
    mode: str = "deterministic",
    *,
    progress: Callable[[float], None] | None = None,
    time_scale: float | None = None,
    **params: Any,
) -> RunResult:
    """Run ``scenario`` (a shipped name or a file path) and summarise it.

    ``time_scale`` (realtime mode only, default 50) is how many simulated seconds
    pass per wall second. Simulated timeouts shrink with it in wall terms, so a
    crew of hundreds of agents on two cores wants a smaller one.
    """
    if mode not in ("deterministic", "realtime"):
        raise ScenarioError(f"mode must be deterministic or realtime, got {mode!r}")
    if time_scale is not None:
        if mode != "realtime":
            raise ScenarioError("time_scale applies to realtime mode only")
        if type(time_scale) not in (int, float) or not time_scale > 0:
            raise ScenarioError(f"time_scale must be a number > 0, got {time_scale!r}")
    if type(seed) is not int or seed < 0:
        raise ScenarioError(f"seed must be a non-negative integer, got {seed!r}")
    module = load(scenario)
    values = coerce_params(module, params)
    options: dict[str, Any] = dict(getattr(module, "SIMULATION", {}))
    if mode == "realtime":
        options.setdefault("time_scale", 50.0)
        if time_scale is not None:
            options["time_scale"] = float(time_scale)
    started = time.perf_counter()
    with Simulation(seed=seed, mode=mode, **options) as simu:
        simu.progress = progress
        metrics = dict(module.run(simu, **values))
        ending = simu.dispatcher.run()  # let what the scenario set going finish
        world = _world(simu, metrics.pop("session_id", None))
        stats = simu.dispatcher.statistics()
        wall = time.perf_counter() - started
        summary: dict[str, Any] = {
            "scenario": getattr(module, "NAME", pathlib.Path(scenario).stem),
            "seed": seed, "mode": mode, "params": values,
            "time_scale": options.get("time_scale") if mode == "realtime" else None,
            "trace_digest": simu.dispatcher.trace_digest,
            "virtual_time": round(simu.now, 6), "wall_seconds": round(wall, 3),
            "messages_delivered": stats.delivered,
            "messages_dropped": sum(stats.dead_letters.values()),
            "dead_letters": dict(stats.dead_letters),
            "agents": world["agents"], "tiles_placed": world["tiles_placed"],
            "completion_percent": world["completion_percent"],
            "conflicts": world["conflicts"], "tasks_completed": world["tasks_completed"],
            "tasks_failed": world["tasks_failed"], "behaviour_errors": stats.behaviour_errors,
            "run_end": ending.reason, "waiting": [str(w) for w in ending.waiters],
            "metrics": metrics,
        }
        summary["success"] = bool(module.check(summary))
        return RunResult(summary, simu.dispatcher.trace, world["canvas"], world["claims"])


def _world(simu: Simulation, session_id: str | None) -> dict[str, Any]:
    """World figures of one session (default: the oldest), from its frozen view."""
    sessions = simu.sessions()
    sid = session_id or (sessions[0] if sessions else None)
    if sid is None:
        return {"agents": 0, "tiles_placed": 0, "completion_percent": 0.0, "conflicts": 0,
                "tasks_completed": 0, "tasks_failed": 0, "canvas": None, "claims": []}
    view = simu.view(sid, completion=True)
    counts = view.task_counts()
    colours = {m.agent_id: m.color for m in view.members}
    claims = [{"bounds": c.region.to_dict(), "color": colours.get(c.agent_id, "#FF0000")}
              for c in view.claims]
    return {
        "agents": len(view.members),
        "tiles_placed": view.progress.tiles_placed,
        "completion_percent": view.progress.completion_percent,
        "conflicts": view.progress.conflicts,
        "tasks_completed": counts.get("completed", 0),
        "tasks_failed": counts.get("failed", 0),
        "canvas": view.canvas,
        "claims": claims,
    }
