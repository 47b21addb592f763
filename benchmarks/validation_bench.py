"""Tool-argument validation: the hand-compiled checkers against fastjsonschema and msgspec.

Issue 7 lets ``barnraise.sim.validation.validate`` stay hand-compiled only if the libraries
are slower on the hot path. Each side here does the whole job
``validate`` does for a service: check the arguments against the tool's
schema (types, bounds, enums, required and unknown keys; a bool is never an
integer) and hand back a fresh dict with the defaults filled in, leaving the
caller's dict untouched.

* ``hand``: the hand-compiled checkers (``barnraise.sim.validation.compile_schema``), which
  ``barnraise.sim.validation.validate`` used until this comparison and still uses to word
  the error when an argument is refused.
* ``fastjsonschema``: the same JSON schema compiled by fastjsonschema with
  ``use_default=True``; it fills defaults *into* the dict it checks, so the
  arguments are copied first (nested objects too, where a default could land).
* ``msgspec``: ``barnraise.sim.validation.validate`` as the services call it now: one
  ``msgspec.Struct`` per schema, generated from it (constraints as ``Meta``,
  enums as ``Literal``, absent optional keys as ``UNSET``),
  ``msgspec.convert(args, Struct)`` then ``msgspec.to_builtins`` back to a dict.

The arguments are the hot path's own: a ``builder_place_tiles`` call with a
100-tile row (grid_build's, one per call), a ``region_claim`` and a
``task_report``. Every side's output is checked equal to ``hand``'s before
timing. Rounds are interleaved and figures are medians of nanoseconds per call.
"""

from __future__ import annotations

import copy
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import fastjsonschema

from barnraise.sim.tools import TOOLS, ToolError
from barnraise.sim.validation import compile_schema, validate

SAMPLES: dict[str, dict[str, Any]] = {
    "builder_place_tiles": {
        "session_id": "s-1",
        "region": {"x": 300, "y": 417, "width": 100, "height": 1},
        "tiles": [[(i * 7) % 8 for i in range(100)]],
    },
    "region_claim": {
        "session_id": "s-1",
        "region": {"x": 120, "y": 40, "width": 32, "height": 32},
        "purpose": "build",
    },
    "task_report": {
        "session_id": "s-1", "task_id": "t-17", "status": "completed",
        "result": {"tiles": 1024},
    },
}

# -- fastjsonschema ----------------------------------------------------------------------------


def fastjsonschema_validator(tool: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    schema = TOOLS[tool].input_schema
    compiled = fastjsonschema.compile(dict(schema), use_default=True)
    # keys whose value is an object that may receive defaults: copy those too
    nested = [k for k, sub in schema["properties"].items()
              if sub.get("type") == "object" and "properties" in sub]

    def check(args: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(args)
        for key in nested:
            if key in data and isinstance(data[key], dict):
                data[key] = dict(data[key])
        result: dict[str, Any] = compiled(data)
        return result

    return check


def hand_validator(tool: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    return compile_schema(TOOLS[tool].input_schema)


def msgspec_validator(tool: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    spec = TOOLS[tool]
    return lambda args: validate(spec, args)


def _errors(tool: str) -> dict[str, str]:
    """What each side says about the same bad argument (a negative x)."""
    bad = copy.deepcopy(SAMPLES[tool])
    if "region" in bad:
        bad["region"]["x"] = -1
    else:
        bad["status"] = "done"
    out: dict[str, str] = {}
    for side, make in SIDES.items():
        try:
            make(tool)(bad)
            out[side] = "accepted"
        except (ToolError, fastjsonschema.JsonSchemaValueException) as exc:
            out[side] = str(exc)
    return out


SIDES: dict[str, Callable[[str], Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "hand": hand_validator,
    "fastjsonschema": fastjsonschema_validator,
    "msgspec": msgspec_validator,
}


def _ns_per_call(check: Callable[[Mapping[str, Any]], Any], args: Mapping[str, Any],
                 calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        check(args)
    return (time.perf_counter() - start) / calls * 1e9


def bench_validation(calls: int = 20_000, repeats: int = 7) -> dict[str, Any]:
    out: dict[str, Any] = {"unit": "ns per call (median)", "calls": calls, "tools": {}}
    for tool, args in SAMPLES.items():
        checks = {side: make(tool) for side, make in SIDES.items()}
        expected = checks["hand"](args)
        for side, check in checks.items():
            got = check(args)
            assert got == expected, (tool, side, got, expected)
        runs: dict[str, list[float]] = {side: [] for side in checks}
        for _ in range(repeats):
            for side, check in checks.items():
                gc.collect()
                runs[side].append(_ns_per_call(check, args, calls))
        med = {side: statistics.median(values) for side, values in runs.items()}
        fastest = min(med, key=med.__getitem__)
        out["tools"][tool] = {
            **{side: round(value) for side, value in med.items()},
            "fastest": fastest,
            "ratio_to_hand": {side: round(value / med["hand"], 2) for side, value in med.items()},
            "errors": _errors(tool),
            "runs": {side: [round(v) for v in values] for side, values in runs.items()},
        }
    return out


def run(quick: bool = False) -> dict[str, Any]:
    return bench_validation(calls=500, repeats=1) if quick else bench_validation()


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
