"""The ``barnraise`` command line.

Bad input (an unknown command, option or value) prints one line on stderr
naming the problem and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
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
    if args.command == "bench":
        from benchmarks.__main__ import main as bench_main

        return bench_main(["--quick"] if args.quick else [])
    raise AssertionError(args.command)  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
