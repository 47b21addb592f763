"""``python -m benchmarks [--quick] [--only SECTION]...``: print one JSON object.

SECTION is runtime, world, scenarios, validation, sweep, faults, store, gateway or
view (repeatable; all by default; gateway needs the gateway extra, view the view
extra and Debian's chromium).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import (
    faults_bench,
    regions_bench,
    runtime,
    scenarios_bench,
    store_bench,
    sweep_bench,
    tasks_bench,
    validation_bench,
)

SECTIONS = ("runtime", "world", "scenarios", "validation", "sweep", "faults", "store",
            "gateway", "view")


def world(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "claims": regions_bench.bench_claims(claims=300, grid=200, repeats=1, decisions=20,
                                                 agents=10),
            "task_dag": tasks_bench.bench_task_dag(tasks=600, repeats=1, pipelines=5),
        }
    return {
        "claims": regions_bench.bench_claims(),
        "task_dag": tasks_bench.bench_task_dag(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", choices=SECTIONS, action="append",
                        help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    sections = args.only or list(SECTIONS)
    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "quick": args.quick,
    }
    if "runtime" in sections:
        result["runtime"] = runtime.run(quick=args.quick)
    if "world" in sections:
        result["world"] = world(args.quick)
    if "scenarios" in sections:
        result["scenarios"] = scenarios_bench.run(quick=args.quick)
    if "validation" in sections:
        result["validation"] = validation_bench.run(quick=args.quick)
    if "sweep" in sections:
        result["sweep"] = sweep_bench.run_section(args.quick)
    if "faults" in sections:
        result["faults"] = faults_bench.run(quick=args.quick)
    if "store" in sections:
        result["store"] = store_bench.run(quick=args.quick)
    if "gateway" in sections:
        from benchmarks import gateway_bench  # needs the gateway extra

        result["gateway"] = gateway_bench.run(quick=args.quick)
    if "view" in sections:
        from benchmarks import view_bench  # needs the view extra and a chromium

        result["view"] = view_bench.run(quick=args.quick)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
