"""The ``barnraise`` command line.

Bad input exits 2 without a traceback: an unknown command or option gets argparse's
usage line and one ``error:`` line; a value the scenario refuses gets one line
naming it. A run exits 0 when its success check held, 1 when it did not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from barnraise.runner import ScenarioError, list_scenarios, run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="barnraise",
                                     description="Multi-agent building simulations.")
    commands = parser.add_subparsers(dest="command", required=True)

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

    serve = commands.add_parser("serve", help="host a live session world on the network "
                                "(A2A, WebSocket /a2a, MCP at /mcp)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default loopback only)")
    serve.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    serve.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="a browser origin allowed to open the WebSocket (repeatable)")
    mcp = commands.add_parser("mcp", help="serve MCP over stdio, on a world of its own")
    for command in (serve, mcp):
        command.add_argument("--scenario", help="run this scenario's crew in the world")
        command.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                             help="a scenario parameter (repeatable)")
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                             help="simulated seconds per wall second (default 1: wall clock)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "scenarios":
        for name, line in list_scenarios():
            print(f"{name:22} {line}")
        return 0
    if args.command == "run":
        return _run(args)
    if args.command in ("serve", "mcp"):
        return _serve(args)
    raise AssertionError(args.command)  # pragma: no cover - argparse requires a command


def _params(items: list[str]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"barnraise: error: --param {item!r}: expected KEY=VALUE", file=sys.stderr)
            return None
        params[key] = value
    return params


def _serve(args: argparse.Namespace) -> int:
    params = _params(args.param)
    if params is None:
        return 2
    if params and not args.scenario:
        print("barnraise: error: --param needs --scenario", file=sys.stderr)
        return 2
    if not args.time_scale > 0:
        print(f"barnraise: error: --time-scale must be > 0, got {args.time_scale}",
              file=sys.stderr)
        return 2
    try:  # the server's packages are an extra: only these commands need them
        from barnraise.gateway.serve import serve_mcp, serve_network
    except ImportError as exc:
        print(f"barnraise: error: `barnraise {args.command}` needs the gateway extra "
              f"(pip install 'barnraise[gateway]'): {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "mcp":
            return serve_mcp(scenario=args.scenario, params=params, seed=args.seed,
                             time_scale=args.time_scale)
        return serve_network(host=args.host, port=args.port, scenario=args.scenario,
                             params=params, seed=args.seed, time_scale=args.time_scale,
                             allowed_origins=args.allow_origin)
    except (ScenarioError, ValueError, OSError) as exc:
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    params = _params(args.param)
    if params is None:
        return 2
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
