"""The ``barnraise`` command line.

Bad input exits 2 without a traceback, before anything runs: an unknown command
or option gets argparse's usage line and one ``error:`` line; a value the
scenario refuses, a bad ``--out`` place, a bad sweep option or a path that is not
a usable store gets one line naming it (and the file is left as it was). A run
exits 0 when its success check held, 1 when it did not; a sweep exits 0 when
every run's check held, 1 when one did not. ``resume`` exits like ``run``, and 1
naming the first differing record when the re-execution does not reproduce the
stored log; ``replay`` exits 0 when the stored run's trace is reproduced, 1
naming the first record that differs. Any command whose stdout is closed early (piped
into ``head``) stops writing and exits 141 (128 + SIGPIPE) without a traceback; ``run``
and ``resume`` still write ``--out``.

An exception that escapes an agent's handler or behaviour is printed on stderr as it
happens (``barnraise: AGENT: WHERE raised ERROR at FILE:LINE`` and its traceback) and
fails the run unless the scenario sets ``EXPECTED_ERRORS = True``; ``run --pdb`` opens
the post-mortem debugger at the first one.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import math
import os
import pathlib
import pdb
import re
import socket
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from barnraise.loading import UnverifiedScript, describe, list_scenarios, load
from barnraise.outdir import check_run_out, run_identity
from barnraise.outputs import RunResult, check_out_dir
from barnraise.runner import (
    ReporterError,
    Request,
    ResumeDivergence,
    ScenarioError,
    StoreError,
    check_request,
    open_run,
    open_store,
    replay,
    resume_request,
    run_request,
)
from barnraise.sim.clock import check_time_scale
from barnraise.sim.dispatch.routing import ERRORS_LOGGER
from barnraise.sim.failures import Failure, portable_path
from barnraise.sim.store import SNAPSHOT_EVERY

#: Frame side (cells) of the canvas animation ``--out`` writes.
OUT_FRAME_SIZE = 96
#: Bounds of ``--interval`` (simulated seconds).
MAX_INTERVAL = 1e6
#: The largest port a ``--port`` takes (0 picks a free one).
MAX_PORT = 65535
#: Where a run-local view (``run --view``, ``view STORE``) listens: this machine only.
VIEW_HOST = "127.0.0.1"
#: ``run --view --wait``: its default and largest value (wall seconds for a first viewer).
VIEW_WAIT = 30.0
MAX_VIEW_WAIT = 86_400.0
#: ``serve --agent-ttl``: its default (``barnraise.gateway.hub.AGENT_TTL``, not imported:
#: the CLI loads the gateway only for its commands) and bounds, in wall seconds.
AGENT_TTL = 60.0
MIN_AGENT_TTL = 1.0
MAX_AGENT_TTL = 86_400.0
#: ``serve --max-connections``: its largest value.
MAX_CONNECTIONS = 1_000_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="barnraise",
                                     description="Multi-agent building simulations.")
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser(
        "scenarios", help="list the scenarios, or describe one (its docstring and parameters)")
    listing.add_argument("name", nargs="?", help="a scenario name or .py file to describe")

    run = commands.add_parser("run", help="run a scenario by name or path")
    run.add_argument("scenario", help="a name from `barnraise scenarios`, or a .py file")
    run.add_argument("--seed", type=_ascii_int, default=0)
    run.add_argument("--mode", choices=("deterministic", "realtime"), default="deterministic")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     help="set a scenario parameter (repeatable)")
    run.add_argument("--time-scale", type=float, default=None, metavar="X",
                     help="realtime mode: simulated seconds per wall second (default 50); "
                     "lower it for big crews, whose calls take longer in wall time")
    run.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                     help="simulated seconds between metric samples (default 1)")
    run.add_argument("--faults", default=None, metavar="SPEC",
                     help="inject seeded faults, e.g. drop=0.05,duplicate=0.02,delay=0.5,"
                          "reorder=0.01,crash=0.001 (docs/reliability.md)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--out", metavar="DIR",
                     help="write summary.json, trace.jsonl, timeseries.csv, agents.csv, "
                     "events.csv and the run's plots there (a folder holding another "
                     "run's files is refused)")
    run.add_argument("--overwrite-out", action="store_true",
                     help="with --out: replace another run's files there")
    run.add_argument("--view", action="store_true",
                     help="watch the run in the browser: serve a live page (its URL is "
                     "printed) that stays up after the run until Ctrl-C; needs the "
                     "gateway extra")
    run.add_argument("--port", type=_ascii_int, default=8765,
                     help="--view: the page's port on 127.0.0.1 (0 picks a free one)")
    run.add_argument("--paused", action="store_true",
                     help="--view, deterministic mode: wait for Start on the page")
    run.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                     help=f"--view: wait up to this many wall seconds for the first page "
                     f"to connect before the run starts (default {VIEW_WAIT:g}; 0: start "
                     "at once)")
    run.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="--view: a Host header to answer besides 127.0.0.1, e.g. a "
                     "proxy's name; HOST or HOST:PORT (repeatable)")
    run.add_argument("--store", metavar="PATH",
                     help="keep the run durable in a SQLite store there (see docs/store.md)")
    run.add_argument("--pdb", action="store_true",
                     help="open the post-mortem debugger (pdb) at the first exception that "
                     "escapes an agent's handler or behaviour; c or q goes on with the run")
    run.add_argument("--overwrite", action="store_true",
                     help="with --store: replace a store that already holds a run")
    run.add_argument("--snapshot-every", type=_positive_int, metavar="N",
                     help="with --store: a snapshot of the world every N records "
                     f"(default {SNAPSHOT_EVERY:,})")

    again = commands.add_parser(
        "resume", help="continue an interrupted run kept with --store (deterministic: "
        "re-executed and checked against its log; realtime: from the world folded from "
        "its log)")
    again.add_argument("store", metavar="PATH", help="the store of the interrupted run")
    again.add_argument("--json", action="store_true", help="print one JSON object")
    again.add_argument("--out", metavar="DIR", help="write the run's files there (as run)")
    again.add_argument("--overwrite-out", action="store_true",
                       help="with --out: replace another run's files there (as run)")
    again.add_argument("--snapshot-every", type=_positive_int, metavar="N",
                       help="a snapshot of the world every N records the resumed run "
                       f"writes (default {SNAPSHOT_EVERY:,})")

    check = commands.add_parser(
        "replay", help="re-execute a stored deterministic run and compare its trace")
    check.add_argument("store", metavar="PATH", help="a store written with --store")
    check.add_argument("--json", action="store_true", help="print one JSON object")

    scrub = commands.add_parser(
        "view", help="scrub a stored run in the browser (a time slider over its snapshots)")
    scrub.add_argument("store", metavar="PATH", help="a store written with run --store")
    scrub.add_argument("--port", type=_ascii_int, default=8765, help="0 picks a free port")
    scrub.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="a Host header to answer besides 127.0.0.1, e.g. a proxy's "
                       "name; HOST or HOST:PORT (repeatable)")

    sweep = commands.add_parser(
        "sweep", help="run a scenario over parameter values and seeds, one row per run")
    sweep.add_argument("scenario", help="a name from `barnraise scenarios`, or a .py file")
    sweep.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="values of a parameter (repeatable; a list or dict parameter "
                       "takes a JSON array of values)")
    sweep.add_argument("--seeds", default="0", metavar="SPEC",
                       help="seeds: S (one seed), A-B (inclusive) or A,B,C (default 0)")
    sweep.add_argument("--workers", type=_ascii_int, default=None, metavar="N",
                       help="worker processes (default: 1 without --dask; the CPU count "
                       "with --dask local)")
    sweep.add_argument("--dask", metavar="local|ADDRESS",
                       help="run on Dask: a LocalCluster started for the sweep, or the "
                       "scheduler at ADDRESS (tcp://host:port)")
    sweep.add_argument("--plot", metavar="FIGURE", default=None,
                       help="the figure sweep.png shows against the first parameter "
                       "(default virtual_time)")
    sweep.add_argument("--timeseries", action="store_true",
                       help="also record every run and write its per-step rows (interval "
                       "and final samples, led by the parameters and the seed) to "
                       "DIR/timeseries.csv (needs --out)")
    sweep.add_argument("--max-time", type=float, default=None, metavar="SECONDS",
                       help="stop each run at this simulated time")
    sweep.add_argument("--json", action="store_true", help="print one JSON object")
    sweep.add_argument("--out", metavar="DIR",
                       help="save each run as it finishes (a rerun computes only missing "
                       "runs) and write results.csv, results.parquet and sweep.png")
    for stored in (again, check, scrub):  # the commands that run a store's scenario again
        _script_flag(stored)

    serve = commands.add_parser("serve", help="host a live session world on the network "
                                "(A2A, WebSocket /a2a, MCP at /mcp)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default loopback only)")
    serve.add_argument("--port", type=_ascii_int, default=8765, help="0 picks a free port")
    serve.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="a browser origin allowed to open the WebSocket (repeatable)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="a Host header to answer besides the bound address, e.g. a "
                       "proxy's name; HOST or HOST:PORT (repeatable)")
    serve.add_argument("--store", metavar="PATH",
                       help="keep the served run in a SQLite store there (docs/store.md)")
    serve.add_argument("--overwrite", action="store_true",
                       help="with --store: replace a store that holds a run")
    serve.add_argument("--agent-ttl", type=float, default=AGENT_TTL, metavar="SECONDS",
                       help="a remote agent not heard from for this many wall seconds "
                       f"leaves its session ({MIN_AGENT_TTL:g}..{MAX_AGENT_TTL:g}; "
                       f"default {AGENT_TTL:g})")
    serve.add_argument("--max-connections", type=_ascii_int, default=None, metavar="N",
                       help="open connections (HTTP and WebSocket) past which a request "
                       "answers 503 (1..1000000; default 1000, or a quarter of the "
                       "open-file limit if less)")
    serve.add_argument("--disable-skill", action="append", default=[], metavar="ID",
                       help="take a skill group of the agent card (its id: session, "
                       "region, build, ...) off the card and refuse its tools on every "
                       "surface (repeatable)")
    mcp = commands.add_parser("mcp", help="serve MCP over stdio, on a world of its own")
    for command in (serve, mcp):
        command.add_argument("--scenario", help="run this scenario's crew in the world")
        command.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                             help="a scenario parameter (repeatable)")
        command.add_argument("--seed", type=_ascii_int, default=0)
        command.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                             help="simulated seconds per wall second, 0.001 to 1e6 "
                             "(default 1: wall clock)")
    return parser


def _script_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--script", metavar="PATH", default=None,
                         help="the scenario file a store made from a file was run from: "
                         "it runs again only when named here and its sha256 is the one "
                         "the store keeps (a store never chooses code; docs/store.md)")


_ASCII_INT = re.compile(r"-?[0-9]+")


def _ascii_int(text: str) -> int:
    """An integer flag's value: ASCII digits only (``int()`` takes full-width and other
    Unicode digits, which a shell user did not mean to type)."""
    if not _ASCII_INT.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer in ASCII digits, got {text!r}")
    return int(text)


def _positive_int(text: str) -> int:
    """A count flag's value: an integer of at least 1, in ASCII digits."""
    value = _ascii_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 1, got {text!r}")
    return value


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    print(f"barnraise: warning: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _script_warnings() -> Iterator[None]:
    """A scenario file run unverified (:class:`UnverifiedScript`) is one line on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", UnverifiedScript)
        warnings.showwarning = _show_warning
        yield


@contextlib.contextmanager
def _errors_on_stderr() -> Iterator[None]:
    """While a command runs, the agents' exceptions (``barnraise.errors``) go to stderr,
    each as it happens, whatever the logging configuration (then as it was)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("barnraise: %(message)s"))
    propagate = ERRORS_LOGGER.propagate
    ERRORS_LOGGER.addHandler(handler)
    ERRORS_LOGGER.propagate = False  # printed once, not again by a root handler
    try:
        yield
    finally:
        ERRORS_LOGGER.removeHandler(handler)
        ERRORS_LOGGER.propagate = propagate


def _debugger() -> Callable[[Failure, BaseException], None]:
    """``run --pdb``: the post-mortem debugger on the first reported exception, on the
    thread that caught it (deterministic mode: the run waits; realtime: that actor)."""
    entered = False

    def post_mortem(failure: Failure, exc: BaseException) -> None:
        nonlocal entered
        if entered:
            return
        entered = True
        print(f"barnraise: --pdb: {failure.headline()}; the post-mortem debugger "
              "(c or q: go on with the run)", file=sys.stderr, flush=True)
        debugger = _AtOwnFrame()
        debugger.reset()
        debugger.interaction(None, exc.__traceback__)

    return post_mortem


class _AtOwnFrame(pdb.Pdb):
    """The post-mortem debugger, starting in the innermost frame of the run's own code
    (the line the error names) rather than inside Python's library (``up`` and ``down``
    go on from there)."""

    def setup(self, f: Any, tb: Any) -> Any:
        stop = super().setup(f, tb)
        own = [i for i, (frame, _) in enumerate(self.stack)
               if portable_path(frame.f_code.co_filename)[1]]
        if own and own[-1] != self.curindex:
            self.curindex = own[-1]
            self.curframe = self.stack[self.curindex][0]
            self.curframe_locals = self.curframe.f_locals
        return stop


# The exit status when whoever reads stdout stopped reading (``barnraise run --json | head``):
# 128 + SIGPIPE, what a shell reports for a command that SIGPIPE ended, as it ends cat or
# yes. A script under ``set -o pipefail`` then sees a closed pipe, not a failed run (1) or a
# bad request (2), and an ordinary pipeline goes by head's status.
EXIT_BROKEN_PIPE: Final = 141


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with _errors_on_stderr():
            code = _main(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    return code


def _stdout_to_devnull() -> None:
    """After stdout's reader went away: what is still buffered for it, or written later,
    goes to /dev/null, so the interpreter's last flush raises nothing."""
    with contextlib.suppress(OSError, ValueError):  # and a stdout with no descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _main(args: argparse.Namespace) -> int:
    try:
        _check_flags(args)  # before anything is printed, opened or started
        if args.command == "scenarios":
            return _scenarios(args)
        if args.command == "run":
            return _run(args)
        if args.command == "resume":
            return _resume(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "view":
            return _view_stored(args)
        if args.command in ("serve", "mcp"):
            return _serve(args)
    except (ScenarioError, StoreError) as exc:
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2
    except ResumeDivergence as exc:
        print(f"barnraise: {exc}", file=sys.stderr)
        return 1
    except ReporterError as exc:  # its traceback was printed as it happened
        print(f"barnraise: the run failed: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(args.command)  # pragma: no cover - argparse requires a command


def _check_flags(args: argparse.Namespace) -> None:
    """What the flags of serve, mcp, run and view must hold, checked before anything
    starts: ScenarioError (exit 2, one line) naming the flag."""
    port = getattr(args, "port", None)
    if port is not None and not 0 <= port <= MAX_PORT:
        raise ScenarioError(f"--port must be from 0 to {MAX_PORT}, got {port}")
    if args.command in ("serve", "mcp"):
        try:
            check_time_scale(args.time_scale, "--time-scale")
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None


def _check_port_free(host: str, port: int) -> None:
    """ScenarioError (exit 2, one line) when ``host:port`` cannot be listened on: a port
    in use, an address not of this machine (port 0 checks the address alone)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            probe.bind((host, port))
    except OSError as exc:
        raise ScenarioError(_cannot_listen(host, port, exc)) from None


def _cannot_listen(host: str, port: int, exc: OSError) -> str:
    return f"--port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"


def exposure_warning(host: str) -> str | None:
    """The one line ``serve`` prints when ``host`` is not loopback: what other hosts reach."""
    from barnraise.gateway.operator import is_loopback

    if is_loopback(host):
        return None
    return (f"barnraise serve: warning: --host {host} is not loopback: other hosts can reach "
            "the A2A, WebSocket and MCP surfaces (joining as guests), the page and /stats "
            "counts; watching the view from there and every control need the operator token")


def _scenarios(args: argparse.Namespace) -> int:
    if args.name is None:
        for name, line in list_scenarios():
            print(f"{name:22} {line}")
        return 0
    info = describe(load(args.name))
    print(info["name"] if info["file"] is None else f"{info['name']} (from {info['file']})")
    print()
    print(info["doc"])
    print()
    print("Parameters (barnraise run NAME --param KEY=VALUE):")
    width = max((len(k) for k in info["params"]), default=0)
    for key, spec in info["params"].items():
        bound = f"  ({spec['bound']})" if "bound" in spec else ""
        print(f"  {key:{width}}  {spec['type']:6} default {json.dumps(spec['default'])}{bound}")
    if not info["params"]:
        print("  none")
    return 0


def _params(items: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ScenarioError(f"--param {item!r}: expected KEY=VALUE")
        if key in params:
            raise ScenarioError(f"--param {key} is given twice")
        params[key] = value
    return params


def _serve(args: argparse.Namespace) -> int:
    params: dict[str, Any] = dict(_params(args.param))
    if params and not args.scenario:
        print("barnraise: error: --param needs --scenario", file=sys.stderr)
        return 2
    ttl = getattr(args, "agent_ttl", AGENT_TTL)
    if not MIN_AGENT_TTL <= ttl <= MAX_AGENT_TTL:  # NaN fails both
        print(f"barnraise: error: --agent-ttl must be {MIN_AGENT_TTL:g}..{MAX_AGENT_TTL:g} "
              f"wall seconds, got {ttl:g}", file=sys.stderr)
        return 2
    connections = getattr(args, "max_connections", None)
    if connections is not None and not 1 <= connections <= MAX_CONNECTIONS:
        print(f"barnraise: error: --max-connections must be 1..{MAX_CONNECTIONS}, "
              f"got {connections}", file=sys.stderr)
        return 2
    try:  # the server's packages are an extra: only these commands need them
        from barnraise.gateway.card import disabled_tools
        from barnraise.gateway.operator import operator_token
        from barnraise.gateway.serve import serve_mcp, serve_network
        from barnraise.gateway.server import check_hosts
    except ImportError as exc:
        print(f"barnraise: error: `barnraise {args.command}` needs the gateway extra "
              f"(pip install 'barnraise[gateway]'): {exc}", file=sys.stderr)
        return 2
    if args.command == "mcp":
        try:
            return serve_mcp(scenario=args.scenario, params=params, seed=args.seed,
                             time_scale=args.time_scale)
        except (ScenarioError, StoreError, ValueError, OSError) as exc:
            print(f"barnraise: error: {exc}", file=sys.stderr)
            return 2
    try:
        token = operator_token()
        check_hosts(args.allow_host)  # again in serve_network; here before anything prints
        disabled_tools(args.disable_skill)  # likewise
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    _check_port_free(args.host, args.port)
    warning = exposure_warning(args.host)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    try:
        return serve_network(host=args.host, port=args.port, scenario=args.scenario,
                             params=params, seed=args.seed, time_scale=args.time_scale,
                             allowed_origins=args.allow_origin,
                             allowed_hosts=args.allow_host, store=args.store,
                             overwrite=args.overwrite, operator_token=token, agent_ttl=ttl,
                             max_connections=connections,
                             disabled_skills=args.disable_skill)
    except (ScenarioError, StoreError, ValueError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
            print(f"barnraise: error: {_cannot_listen(args.host, args.port, exc)}",
                  file=sys.stderr)  # taken since the check above
            return 2
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    params: dict[str, Any] = dict(_params(args.param))
    if not math.isfinite(args.interval) or not 0 < args.interval <= MAX_INTERVAL:
        raise ScenarioError(f"--interval must be a number of seconds > 0 and at most "
                            f"{MAX_INTERVAL:g}, got {args.interval:g}")
    request = check_request(args.scenario, seed=args.seed, mode=args.mode,
                            time_scale=args.time_scale, faults=args.faults, **params)
    if args.out:
        check_out_dir(args.out)  # before the run: a bad place must not cost a run
        _check_out(args, request)
    elif args.overwrite_out:
        raise ScenarioError("--overwrite-out applies with --out only")
    if (args.overwrite or args.snapshot_every is not None) and not args.store:
        raise ScenarioError("--overwrite and --snapshot-every apply with --store only")
    if (args.port != 8765 or args.paused or args.allow_host or args.wait is not None) \
            and not args.view:
        raise ScenarioError("--port, --paused, --wait and --allow-host go with --view")
    if args.wait is not None and not 0 <= args.wait <= MAX_VIEW_WAIT:  # NaN fails too
        raise ScenarioError(f"--wait must be 0..{MAX_VIEW_WAIT:g} wall seconds, "
                            f"got {args.wait:g}")
    if args.view:
        _check_port_free(VIEW_HOST, args.port)
    viewer = _viewer(args) if args.view else None
    if args.view and viewer is None:
        return 2
    store = open_store(request, args.store, args.overwrite,
                       snapshot_every=args.snapshot_every or SNAPSHOT_EVERY) \
        if args.store else None
    bar = _progress_bar() if sys.stderr.isatty() and not args.json else None
    try:
        result = run_request(request, progress=bar[0] if bar else None,
                             interval=args.interval,
                             frame_size=OUT_FRAME_SIZE if args.out else 0, store=store,
                             watch=None if viewer is None else _watch_after_a_viewer(
                                 viewer, VIEW_WAIT if args.wait is None else args.wait,
                                 args.paused),
                             on_error=_debugger() if args.pdb else None)
    except KeyboardInterrupt:
        if viewer is None:
            raise
        viewer.close()  # Ctrl-C on a watched run (held, say): stop serving, say so
        print("barnraise: interrupted before the run ended", file=sys.stderr)
        return 130
    except OSError as exc:
        if viewer is None or viewer.url is not None:
            raise
        viewer.close()  # its port was taken since the check: nothing ran
        print(f"barnraise: error: {_cannot_listen(VIEW_HOST, args.port, exc)}",
              file=sys.stderr)
        return 2
    except BaseException:
        if viewer is not None:
            viewer.close()
        raise
    finally:
        if bar is not None:
            bar[1]()
    code = _report(result, request.module, args)
    if viewer is not None:
        from barnraise.view.live import wait_for_signal

        try:
            wait_for_signal(ready=lambda: print(
                f"the run has ended; its page stays up at {viewer.url}/ until Ctrl-C",
                file=sys.stderr, flush=True))
        finally:
            viewer.close()
    return code


def _check_out(args: argparse.Namespace, request: Request) -> None:
    """``--out``'s folder holds no sweep's files, nor another run's unless
    ``--overwrite-out`` (barnraise/outdir.py): ScenarioError before the run."""
    check_run_out(args.out, run_identity(
        getattr(request.module, "NAME", pathlib.Path(request.scenario).stem),
        request.seed, request.mode, request.params), overwrite=args.overwrite_out)


def _resume(args: argparse.Namespace) -> int:
    if args.out:
        check_out_dir(args.out)
    elif args.overwrite_out:
        raise ScenarioError("--overwrite-out applies with --out only")
    with _script_warnings():
        result, request = resume_request(
            args.store, script=args.script,
            snapshot_every=args.snapshot_every or SNAPSHOT_EVERY,
            check=(lambda request: _check_out(args, request)) if args.out else None)
    code = _report(result, request.module, args)
    if not args.json and result.live_after is not None:
        print(f"  resumed from {result.resumed_records:,} stored records: live after "
              f"{result.live_after:.2f} s")
    return code


def _replay(args: argparse.Namespace) -> int:
    with _script_warnings():
        digest, divergence = replay(args.store, script=args.script)
    if args.json:
        print(json.dumps({"store": args.store, "matches": divergence is None,
                          "trace_digest": digest,
                          "first_difference": None if divergence is None else
                          divergence.describe()}, sort_keys=True))
    elif divergence is None:
        print(f"{args.store}: the re-execution reproduces the stored run (trace digest "
              f"{digest})")
    else:
        print(f"{args.store}: the re-execution differs: {divergence.describe()}")
    return 0 if divergence is None else 1


def _report(result: RunResult, module: Any, args: argparse.Namespace) -> int:
    summary = result.summary
    closed: BrokenPipeError | None = None
    try:
        if args.json:
            print(json.dumps(summary, sort_keys=True))
        else:
            for line in summary_lines(summary, module):
                print(line)
        sys.stdout.flush()
    except BrokenPipeError as exc:  # stdout's reader left: --out is written all the same
        closed = exc
        _stdout_to_devnull()
    code = 0 if result.success else 1
    if args.out:
        try:
            result.write(args.out)
        except OSError as exc:
            print(f"barnraise: error: writing {args.out}: {exc}", file=sys.stderr)
            code = 2
    if closed is not None:
        raise closed
    return code


def _view_stored(args: argparse.Namespace) -> int:
    """``barnraise view PATH``: serve the page over a stored run until Ctrl-C."""
    _check_port_free(VIEW_HOST, args.port)
    run = open_run(args.store)  # StoreError (exit 2) when it is not a store
    try:
        from barnraise.gateway.server import check_hosts
        from barnraise.view.stored import serve_stored
    except ImportError as exc:
        print(f"barnraise: error: `barnraise view` needs the gateway extra "
              f"(pip install 'barnraise[gateway]'): {exc}", file=sys.stderr)
        return 2
    try:
        allowed_hosts = check_hosts(args.allow_host)
    except ValueError as exc:
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return 2
    try:
        with _script_warnings():
            return serve_stored(run, host=VIEW_HOST, port=args.port, script=args.script,
                                allowed_hosts=allowed_hosts)
    except (ValueError, StoreError) as exc:
        print(f"barnraise: error: {args.store}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # taken since the check above
        print(f"barnraise: error: {_cannot_listen(VIEW_HOST, args.port, exc)}",
              file=sys.stderr)
        return 2


def _watch_after_a_viewer(viewer: Any, wait: float, paused: bool) -> Callable[[Any], Any]:
    """The runner's watch hook for ``run --view``: serve the page, then hold the run's
    start until a page watches or ``wait`` wall seconds pass, saying so on stderr (a
    paused run waits for Start on the page instead)."""

    def watch(simu: Any) -> Any:
        ended = viewer.watch(simu)
        if wait > 0 and not paused:
            print(f"barnraise: waiting up to {wait:g} s for a viewer at {viewer.url}/ "
                  "before the run starts (--wait 0: start at once)", file=sys.stderr,
                  flush=True)
            came = viewer.wait_for_viewer(wait)
            print("barnraise: a viewer is watching: the run starts" if came else
                  f"barnraise: no viewer after {wait:g} s: the run starts anyway",
                  file=sys.stderr, flush=True)
        return ended

    return watch


def _viewer(args: argparse.Namespace) -> Any:
    """The LiveView for ``run --view`` (None, said why, without the gateway extra)."""
    try:
        from barnraise.view.live import LiveView
    except ImportError as exc:
        print(f"barnraise: error: --view needs the gateway extra "
              f"(pip install 'barnraise[gateway]'): {exc}", file=sys.stderr)
        return None
    try:
        return LiveView(host=VIEW_HOST, port=args.port, paused=args.paused,
                        scenario=args.scenario, announce=lambda url: print(url, flush=True),
                        allowed_hosts=args.allow_host)
    except ValueError as exc:  # a malformed --allow-host: before the run starts
        print(f"barnraise: error: {exc}", file=sys.stderr)
        return None


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def summary_lines(summary: Mapping[str, Any], module: Any = None) -> list[str]:
    """The text summary of a run: what each count means, only figures that apply,
    and the scenario's own lines (its ``describe(summary)``, if it has one)."""
    errors = summary["behaviour_errors"]
    verdict = "succeeded" if summary["success"] else (
        f"FAILED ({_count(errors, 'behaviour error')}, below)" if errors
        else "FAILED its success check")
    lines = [f"{summary['scenario']} ({summary['mode']}, seed {summary['seed']}) {verdict}"]
    dropped = summary["messages_dropped"]
    lines.append(
        f"  {_count(summary['agents'], 'agent')}, {summary['virtual_time']:g} simulated "
        f"seconds ({summary['wall_seconds']:g} s wall), "
        f"{_count(summary['messages_delivered'], 'message')} delivered"
        + (f", {dropped} dead letters {_reasons(summary['dead_letters'])}" if dropped else
           ", no dead letters")
        # (a fault plan's injected drops are its own line, below)
    )
    world = []
    if summary["tiles_placed"]:
        world.append(f"{_count(summary['tiles_placed'], 'tile')} placed")
    if summary.get("has_blueprint") and summary.get("completion_percent") is not None:
        world.append(f"{summary['completion_percent']:g}% of the blueprint built")
    if summary["conflicts"]:
        world.append(f"{_count(summary['conflicts'], 'claim')} refused for overlapping "
                     "another's (conflicts)")
    if summary.get("lost_work"):
        world.append(f"{_count(summary['lost_work'], 'cell')} overwritten by another agent "
                     "(lost work)")
    if world:
        lines.append("  " + ", ".join(world))
    tasks = summary.get("tasks") or {}
    if tasks:
        lines.append("  tasks at the end: " + ", ".join(
            f"{n} {status.replace('_', ' ')}" for status, n in sorted(tasks.items())))
    own = getattr(module, "describe", None) if module is not None else None
    if callable(own):
        lines.extend("  " + line for line in own(summary))
    shown = {k: v for k, v in summary["metrics"].items()
             if v is not None and not isinstance(v, (list, dict))}
    if shown:
        lines.append("  metrics: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    if summary.get("resumed_metrics_only"):
        lines.append("  a resumed realtime run: the counts above are the whole run's, the "
                     "scenario's own figures (metrics, and its lines) the resumed part's only")
    faults = summary.get("faults")
    if faults:
        lines.append(f"  faults ({faults['plan']}): " + ", ".join(
            f"{n} {word}" for word, n in faults.items() if word != "plan"))
    if errors:
        expected = module is not None and getattr(module, "EXPECTED_ERRORS", False) is True
        lines.append(f"  {_count(errors, 'behaviour error')} ("
                     + ("the scenario expects them: EXPECTED_ERRORS" if expected else
                        "each fails the run; a scenario that raises on purpose sets "
                        "EXPECTED_ERRORS = True")
                     + "; tracebacks in summary['errors'] and the trace's error records):")
        kept = summary.get("errors") or []
        lines.extend(f"    {_error_line(e)}" for e in kept[:5])
        if errors > len(kept[:5]):
            lines.append(f"    ... and {errors - len(kept[:5])} more")
    details = summary.get("dead_letter_details") or {}
    for detail, n in sorted(details.items(), key=lambda item: -item[1])[:_DETAILS_SHOWN]:
        lines.append(f"  dead letter{'s' if n != 1 else ''}: {detail}"
                     + (f" (x{n})" if n != 1 else ""))
    if len(details) > _DETAILS_SHOWN:
        lines.append(f"  ... and {len(details) - _DETAILS_SHOWN} more reasons for dead "
                     "letters (the summary's dead_letter_details)")
    if summary["run_end"] != "quiescent":
        lines.append(f"  the run ended in {summary['run_end']}: "
                     + "; ".join(summary["waiting"][:5]))
    lines.append(f"  trace digest {summary['trace_digest']}")
    return lines


def _error_line(error: Mapping[str, Any]) -> str:
    """One kept error (``summary["errors"]``) in a line: who, where, what, the line."""
    at = f" at {error['file']}:{error['line']}" if error.get("file") else ""
    detail = f": {error['detail']}" if error.get("detail") else ""
    return f"{error['agent']}: {error['where']} raised {error['error']}{detail}{at}"


#: How many dead-letter reasons in words a run's text summary shows.
_DETAILS_SHOWN: Final = 5


def _reasons(dead: dict[str, int]) -> str:
    return "(" + ", ".join(f"{n} {reason}" for reason, n in sorted(dead.items())) + ")"


def _progress_bar() -> tuple[Callable[[float], None], Callable[[], None]]:
    """A tqdm bar over 0..100% with elapsed and remaining time: (update, close)."""
    from tqdm import tqdm

    bar = tqdm(total=100, file=sys.stderr, dynamic_ncols=True,
               bar_format="{l_bar}{bar}| [{elapsed} elapsed, {remaining} left]")

    def show(fraction: float) -> None:
        bar.update(round(fraction * 100) - bar.n)

    return show, bar.close


# -- sweep -------------------------------------------------------------------------------------

# ASCII digits only: \d and str.isdigit take full-width and other scripts' digits too.
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")
_SEED = re.compile(r"[0-9]+")


def parse_seeds(spec: str) -> list[int]:
    """``S`` (that one seed), ``A-B`` (A to B inclusive) or ``A,B,C``."""
    from barnraise.sweeps import MAX_RUNS

    text = spec.strip()
    match = _RANGE.fullmatch(text)
    if match:
        first, last = int(match.group(1)), int(match.group(2))
        if last < first:
            raise ScenarioError(f"--seeds {spec!r}: the range ends before it starts")
        if last - first + 1 > MAX_RUNS:
            raise ScenarioError(f"--seeds {spec!r}: at most {MAX_RUNS} seeds")
        return list(range(first, last + 1))
    if _SEED.fullmatch(text):
        return [int(text)]
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 1 and all(_SEED.fullmatch(p) for p in parts):
        return [int(p) for p in parts]
    raise ScenarioError(f"--seeds {spec!r}: expected S, A-B or A,B,C (non-negative integers "
                        "in ASCII digits)")


def _values(module: Any, key: str, text: str) -> list[Any]:
    default = module.PARAMS.get(key)
    if isinstance(default, (list, dict)):
        try:
            values = json.loads(text)
        except ValueError:
            values = None
        if not isinstance(values, list):
            raise ScenarioError(f"--param {key}: a {type(default).__name__} parameter takes a "
                                f"JSON array of values, got {text!r}")
        return values
    values = [v.strip() for v in text.split(",")]
    if any(v == "" for v in values):
        raise ScenarioError(f"--param {key}={text!r}: an empty value")
    return values


def _sweep(args: argparse.Namespace) -> int:
    from barnraise.sweeps import _check_engine, check_plot_column, plan, sweep

    module = load(args.scenario)
    texts = _params(args.param)
    params = {key: _values(module, key, text) for key, text in texts.items()}
    seeds = parse_seeds(args.seeds)
    if args.dask is None:
        engine, address = ("serial" if args.workers in (None, 1) else "processes"), None
    else:
        engine, address = "dask", None if args.dask == "local" else args.dask
    workers = args.workers
    _check_engine(engine, workers, address)
    if args.timeseries and not args.out:
        raise ScenarioError("--timeseries writes DIR/timeseries.csv: give --out DIR")
    specs = plan(args.scenario, params, seeds, max_time=args.max_time)
    x = next(iter(params), None)
    hue = next((k for k in list(params)[1:] if len(params[k]) > 1), None)
    y = args.plot or "virtual_time"
    if args.plot is not None and not re.match(r"^[\w.\-]+$", args.plot):
        raise ScenarioError(f"--plot {args.plot!r}: expected a column name")
    if args.plot is not None:
        check_plot_column(module, params, args.plot)  # before any run
    if args.out:
        check_out_dir(args.out)
    show = sys.stderr.isatty() and not args.json
    finished = 0

    def count(_row: Mapping[str, Any]) -> None:
        nonlocal finished
        finished += 1

    try:
        table = sweep(args.scenario, params, seeds, workers=workers, engine=engine,
                      dask_address=address, out=args.out, progress=show, on_result=count,
                      collect="timeseries" if args.timeseries else "runs",
                      max_time=args.max_time)
    except KeyboardInterrupt:
        print(_interrupted(specs, finished, args.out), file=sys.stderr, flush=True)
        return 130
    if args.timeseries:
        steps, table = table, table.attrs["runs"]
    failed = int((~table["success"].astype(bool)).sum())
    plotted = None
    if args.out and x is not None:
        plotted = _sweep_plot(table, x, y, hue, args.out, str(table["scenario"].iloc[0]))
    if args.json:
        print(json.dumps({"runs": len(specs), "computed": table.attrs["computed"],
                          "reused": table.attrs["reused"], "failed": failed,
                          "out": args.out, "plot": plotted,
                          "steps": len(steps) if args.timeseries else None,
                          "wall_seconds": table.attrs["wall_seconds"]}, sort_keys=True))
    else:
        print(f"{table['scenario'].iloc[0]}: {len(specs)} runs ({table.attrs['computed']} "
              f"computed, {table.attrs['reused']} reused from {args.out}) on {engine}"
              if args.out else
              f"{table['scenario'].iloc[0]}: {len(specs)} runs on {engine}")
        print(f"  {len(specs) - failed} passed their success check, {failed} did not")
        if args.out:
            print(f"  results in {args.out}/results.csv" + (f", plot {plotted}" if plotted
                                                             else ""))
        if args.timeseries:
            print(f"  {len(steps)} per-step rows in {args.out}/timeseries.csv")
    return 0 if failed == 0 else 1


def _interrupted(specs: Sequence[Any], finished: int, out: str | None) -> str:
    """What a sweep stopped by Ctrl-C leaves: the runs saved in ``out`` (the ones found
    there before it started too), or that none are kept without ``--out``."""
    if out is None:
        return (f"barnraise: sweep interrupted after {finished} of {len(specs)} runs; none "
                "saved (with --out DIR each finished run is kept, and the same command "
                "again computes only the rest)")
    runs = pathlib.Path(out) / "runs"
    saved = sum((runs / f"{spec.key}.json").is_file() for spec in specs)
    return (f"barnraise: sweep interrupted: {saved} of {len(specs)} runs saved in {out} "
            f"({finished} finished now); the same command again computes only the other "
            f"{len(specs) - saved}")


def _sweep_plot(table: Any, x: str, y: str, hue: str | None, out: str,
                scenario: str) -> str | None:
    from barnraise.plots import sweep_figure

    if y not in table.columns:
        print(f"barnraise: note: no column {y!r} to plot; columns: "
              f"{', '.join(map(str, table.columns))}", file=sys.stderr)
        return None
    try:
        figure = sweep_figure(table, x=x, y=y, hue=hue, title=f"{scenario}: {y} against {x}")
    except (TypeError, ValueError) as exc:
        print(f"barnraise: note: {y} against {x} cannot be plotted ({exc})", file=sys.stderr)
        return None
    path = f"{out}/sweep.png"
    figure.savefig(path)
    return path


if __name__ == "__main__":
    sys.exit(main())
