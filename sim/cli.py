"""The ``barnraise`` command line.

Bad input (an unknown command, option or value) prints one line on stderr
naming the problem and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"barnraise: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="barnraise", description="Multi-agent building simulations.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = commands.add_parser("demo", help="a coordinator hands work to a crew of agents")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--mode", choices=("deterministic", "realtime"), default="deterministic")
    demo.add_argument("--workers", type=int, default=6)
    demo.add_argument("--json", action="store_true", help="print one JSON object")

    commands.add_parser("scenarios", help="list the scenarios, one line each")

    run = commands.add_parser("run", help="run a scenario by name or path")
    run.add_argument("scenario", help="a name from `barnraise scenarios`, or a .py file")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--mode", choices=("deterministic", "realtime"), default="deterministic")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     help="set a scenario parameter (repeatable)")
    run.add_argument("--time-scale", type=float, default=None, metavar="X",
                     help="realtime mode: simulated seconds per wall second (default 50); "
                     "lower it for big crews, whose calls take longer in wall time")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--out", metavar="DIR",
                     help="write summary.json, trace.jsonl and canvas.png there")

    bench = commands.add_parser("bench", help="run the benchmarks and print JSON")
    bench.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from sim.demo import run_demo

        if args.workers < 1 or args.seed < 0:
            print("barnraise: error: --workers must be >= 1 and --seed >= 0", file=sys.stderr)
            return 2
        result = run_demo(seed=args.seed, mode=args.mode, workers=args.workers)
        if args.json:
            print(json.dumps(result.summary(), sort_keys=True))
        else:
            print(f"demo ({result.mode}, seed {result.seed}): {result.workers} workers finished "
                  f"{result.tasks_done} tasks in {result.virtual_time:g} simulated seconds "
                  f"({result.wall_seconds:g} s wall)")
            print(f"  run ended {result.reason}; {result.delivered} messages delivered, "
                  f"dead letters {result.dead_letters or 'none'}")
            print(f"  trace digest {result.trace_digest}")
        return 0 if result.success else 1
    if args.command == "scenarios":
        from sim.runner import list_scenarios

        for name, line in list_scenarios():
            print(f"{name:22} {line}")
        return 0
    if args.command == "run":
        return _run(args)
    if args.command == "bench":
        from benchmarks.__main__ import main as bench_main

        return bench_main(["--quick"] if args.quick else [])
    raise AssertionError(args.command)  # pragma: no cover - argparse requires a command


def _run(args: argparse.Namespace) -> int:
    from sim.runner import ScenarioError, run

    params: dict[str, str] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"barnraise: error: --param {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        params[key] = value
    progress = _progress_bar() if sys.stderr.isatty() else None
    try:
        result = run(args.scenario, seed=args.seed, mode=args.mode, progress=progress,
                     time_scale=args.time_scale, **params)
    except ScenarioError as exc:
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            print(file=sys.stderr)
    if args.out:
        result.write(args.out)
    summary = result.summary
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        verdict = "succeeded" if result.success else "FAILED its success check"
        print(f"{summary['scenario']} ({summary['mode']}, seed {summary['seed']}) {verdict}")
        print(f"  {summary['agents']} agents, {summary['virtual_time']:g} simulated seconds "
              f"({summary['wall_seconds']:g} s wall), {summary['messages_delivered']} messages")
        print(f"  {summary['tiles_placed']} tiles placed, {summary['completion_percent']:g}% "
              f"complete, {summary['conflicts']} conflicts, {summary['tasks_completed']} tasks "
              f"completed, {summary['tasks_failed']} failed")
        shown = {k: v for k, v in summary["metrics"].items() if not isinstance(v, (list, dict))}
        print("  " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        print(f"  trace digest {summary['trace_digest']}")
    return 0 if result.success else 1


def _progress_bar() -> Callable[[float], None]:
    def show(fraction: float) -> None:
        width = 30
        filled = round(fraction * width)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%}")
        sys.stderr.flush()

    return show


if __name__ == "__main__":
    sys.exit(main())
