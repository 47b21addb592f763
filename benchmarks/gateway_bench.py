"""The gateway's figures: WebSocket tool calls and A2A round trips, each against a baseline.

* ``ws_calls``: 100 WebSocket clients make tool calls (``builder_place_tiles`` on
  their own claimed block and ``region_query``, alternating) against ``barnraise
  serve``'s world; the baseline is a bare ``websockets`` echo server answering
  the same frames from the same clients: the most a Python WebSocket server on
  this machine can do with no work behind it. ``ratio`` = barnraise / echo.
  ``world_only``: the same mix through in-process Clients on 100 threads, the
  world's own cost; ``server_cpu_us_per_call`` splits the server's CPU (all its
  threads) by call, so gateway cost = barnraise's figure - world_only's.
* ``flood``: one agent pipelines ``a2a_barrier_enter`` calls over one WebSocket
  (each would wait an hour) as fast as it can send them; the server's resident
  memory (this process's RSS) and the hub's own counts (``Hub.held``) before,
  once the answers stop, and after the socket closed. The bounds
  (``Limits.waits`` and the rest) answer all but the first 64 at once; before
  them 200,000 such calls took the server from 348 to 942 MB, kept after close.
* ``a2a_send_message``: A2A ``SendMessage`` round trips (a ``region_query``
  data part) against barnraise's binding, and against the a2a-sdk's own
  reference server (its ``DefaultRequestHandler`` and JSON-RPC routes on the
  same Starlette and uvicorn) answering a text part with a trivial echo agent.
  ``ratio`` = barnraise / sdk (above 1: barnraise is faster).

Servers run on threads of this process; the load generator
(:mod:`benchmarks.gateway_load`) runs as a separate process, so its framing
and JSON do not share a GIL with the server. Medians of ``repeats`` runs.
barnraise's server runs as ``barnraise serve`` runs it, its heap frozen as it
starts (``GatewayServer(freeze_heap=True)``); the echo server and ``world_only``
run with the heap frozen the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(*args: str) -> dict[str, Any]:
    # The server runs in this process and the load in another, so this process's CPU
    # time over the run is the server's: all its threads (loop, actors, timers).
    cpu = time.process_time()
    done = subprocess.run([sys.executable, "-m", "benchmarks.gateway_load", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
    cpu = time.process_time() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    # per call, setup (joins, claims) included: an upper bound, close for long runs
    result["server_cpu_us_per_call"] = round(1e6 * cpu / max(1, result["calls"]), 1)
    return result


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """The heap as ``GatewayServer(freeze_heap=True)`` (barnraise serve) leaves it, for the
    baselines: what exists is out of the collector's full walks while they run."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def bench_world_only(clients: int = 100, calls: int = 200) -> dict[str, Any]:
    """The same call mix through in-process Clients on threads: the world's own cost."""
    from barnraise.actors.world import Simulation

    with Simulation(seed=1, mode="realtime", time_scale=1.0, trace=False) as simu:
        host = simu.client("host")
        made = host.call("session_create", session_name="world only", max_agents=clients)
        session = made["session_id"]
        agents = []
        for i in range(clients):
            client = simu.client(f"w{i}")
            client.call("session_join", session_id=session, agent_name=f"W{i}")
            region = {"x": (i % 50) * 20, "y": (i // 50) * 20, "width": 8, "height": 8}
            client.call("region_claim", region=region, timeout=1e6)
            agents.append((client, region))
        latencies: list[float] = []
        lock = threading.Lock()

        def work(client: Any, region: dict[str, int]) -> None:
            wide = {**region, "width": 16, "height": 16}
            mine = []
            for n in range(calls):
                started = time.perf_counter()
                if n & 1:
                    client.call("region_query", region=wide)
                else:
                    client.call("builder_place_tiles", region=region, tiles="code")
                mine.append(time.perf_counter() - started)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=work, args=a) for a in agents]
        with _frozen_heap():
            cpu, wall = time.process_time(), time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(600)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    ordered = sorted(latencies)
    return {"calls": len(ordered), "calls_per_s": round(len(ordered) / wall, 1),
            "p50_ms": round(1000 * ordered[len(ordered) // 2], 3),
            "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 3),
            "cpu_us_per_call": round(1e6 * cpu / len(ordered), 1)}


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r["calls_per_s"])
    middle = dict(ordered[len(ordered) // 2])
    middle["calls_per_s_runs"] = [r["calls_per_s"] for r in runs]
    return middle


@contextlib.contextmanager
def _barnraise(time_scale: float = 1.0) -> Iterator[Any]:
    from barnraise.gateway.hosting import HostedWorld
    from barnraise.gateway.server import Gateway, GatewayServer

    world = HostedWorld(time_scale=time_scale, max_agents=10_000)
    # As barnraise serve runs it: the heap frozen as it starts (GatewayServer's freeze_heap).
    server = GatewayServer(Gateway(world), "127.0.0.1", 0, freeze_heap=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        world.close()


@contextlib.contextmanager
def _echo_server() -> Iterator[int]:
    from websockets.asyncio.server import ServerConnection, serve

    ready = threading.Event()
    port: list[int] = []
    stop: list[asyncio.Future[None]] = []

    async def echo(ws: ServerConnection) -> None:
        async for frame in ws:
            await ws.send(frame)

    async def main() -> None:
        async with serve(echo, "127.0.0.1", 0, compression=None, max_size=None,
                         ping_interval=None) as server:
            port.append(next(iter(server.sockets)).getsockname()[1])
            stop.append(asyncio.get_running_loop().create_future())
            ready.set()
            await stop[0]

    loop = _new_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        with _frozen_heap():
            yield port[0]
    finally:
        loop.call_soon_threadsafe(stop[0].set_result, None)
        thread.join(10)
        loop.close()


def _new_loop() -> asyncio.AbstractEventLoop:
    # The same loop uvicorn picks (uvloop when installed), so the baselines match.
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def bench_ws_calls(clients: int = 100, calls: int = 200, repeats: int = 3) -> dict[str, Any]:
    barnraise_runs, echo_runs = [], []
    with _barnraise() as server:
        url = f"ws://127.0.0.1:{server.port}/a2a"
        for run in range(repeats):
            barnraise_runs.append(_load("ws", url, "--clients", str(clients), "--calls",
                                        str(calls), "--run", str(run)))
        stats = server.gateway.stats()["counters"]
    with _echo_server() as port:
        for _ in range(repeats):
            echo_runs.append(_load("ws", f"ws://127.0.0.1:{port}/", "--clients", str(clients),
                                   "--calls", str(calls), "--echo"))
    ours, echo = _median_run(barnraise_runs), _median_run(echo_runs)
    return {
        "clients": clients, "calls_per_client": calls, "repeats": repeats,
        "barnraise": ours, "echo": echo,
        "world_only": bench_world_only(clients, calls),
        "ratio": round(ours["calls_per_s"] / echo["calls_per_s"], 3),
        "targets": {"calls_per_s": 5000, "p99_ms": 50,
                    "met": ours["calls_per_s"] >= 5000 and ours["p99_ms"] <= 50},
        "refusals": {k: v for k, v in stats.items() if k not in ("ws_connections",)},
        "load_generator": "separate process; servers on threads of the benchmark process",
    }


def _rss_mb() -> float:
    """This process's resident memory in MB (Linux /proc; elsewhere the peak so far)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def bench_flood(calls: int = 50_000) -> dict[str, Any]:
    """What one agent's pipelined flood leaves in the server, before and after it closes."""
    with _barnraise() as server:
        hub = server.gateway.hub
        url = f"ws://127.0.0.1:{server.port}/a2a"
        gc.collect()
        before = {"rss_mb": _rss_mb(), "held": hub.held()}
        with subprocess.Popen(
                [sys.executable, "-m", "benchmarks.gateway_load", "flood", url, "--calls",
                 str(calls), "--session", server.gateway.world.default_session],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT) as flood:
            try:
                assert flood.stdout is not None and flood.stdin is not None
                seen = json.loads(flood.stdout.readline() or "{}")
                gc.collect()
                during = {"rss_mb": _rss_mb(), "held": hub.held()}
                flood.stdin.write("\n")
                flood.stdin.flush()
                flood.wait(60)
            finally:
                if flood.poll() is None:
                    flood.kill()
                    flood.wait(10)
        deadline = time.monotonic() + 10
        while hub.held()["connection_load"] and time.monotonic() < deadline:
            time.sleep(0.05)  # the server notices the close on its own loop
        gc.collect()
        after = {"rss_mb": _rss_mb(), "held": hub.held()}
        counts = server.gateway.stats()["counters"]
    return {"calls": calls, "client": seen, "before": before, "flooded": during,
            "closed": after, "limit_exceeded": counts.get("limit_exceeded", 0),
            "calls_abandoned": counts.get("calls_abandoned", 0)}


def _sdk_echo_app() -> Any:
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCard, Message, Part, Role
    from google.protobuf.json_format import ParseDict
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            text = context.get_user_input()
            await event_queue.enqueue_event(Message(
                message_id=f"echo-{context.message.message_id}", role=Role.ROLE_AGENT,
                parts=[Part(text=text)], context_id=context.context_id))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            return None

    card = ParseDict({"name": "echo", "description": "echoes", "version": "1",
                      "supportedInterfaces": [{"url": "http://127.0.0.1/", "protocolBinding":
                                               "JSONRPC", "protocolVersion": "1.0"}],
                      "capabilities": {}, "defaultInputModes": ["text/plain"],
                      "defaultOutputModes": ["text/plain"],
                      "skills": [{"id": "echo", "name": "echo", "description": "echoes text",
                                  "tags": ["echo"]}]}, AgentCard())
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(),
                                    agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card),
                             *create_jsonrpc_routes(handler, "/")])


@contextlib.contextmanager
def _uvicorn(app: Any) -> Iterator[int]:
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def bench_a2a(clients: int = 10, calls: int = 300, repeats: int = 3) -> dict[str, Any]:
    ours_runs, sdk_runs = [], []
    with _barnraise() as server:
        for run in range(repeats):
            ours_runs.append(_load("http", server.url, "--clients", str(clients), "--calls",
                                   str(calls), "--path", "/a2a/jsonrpc", "--barnraise",
                                   "--run", str(run)))
    with _uvicorn(_sdk_echo_app()) as port:
        for _ in range(repeats):
            sdk_runs.append(_load("http", f"http://127.0.0.1:{port}", "--clients",
                                  str(clients), "--calls", str(calls), "--path", "/"))
    ours, sdk = _median_run(ours_runs), _median_run(sdk_runs)
    return {
        "clients": clients, "calls_per_client": calls, "repeats": repeats,
        "barnraise": ours, "sdk_echo": sdk,
        "ratio": round(ours["calls_per_s"] / sdk["calls_per_s"], 3),
        "target_met": ours["calls_per_s"] >= sdk["calls_per_s"],
        "note": "barnraise answers region_query from the world (a round trip through the "
                "regions actor); the SDK's agent echoes the text",
    }


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        return {"ws_calls": bench_ws_calls(clients=10, calls=20, repeats=1),
                "a2a_send_message": bench_a2a(clients=2, calls=20, repeats=1),
                "flood": bench_flood(calls=2_000)}
    return {"ws_calls": bench_ws_calls(), "a2a_send_message": bench_a2a(),
            "flood": bench_flood()}

