"""The WebSocket tool call's server path without sockets, for instruction counts.

``python -m benchmarks.ws_inprocess CLIENTS CALLS``: ``CLIENTS`` fake WebSocket
connections to the gateway's ASGI app (``EdgeMiddleware``, ``ws.py``, the hub, the
world), each joining one session, claiming a block and making ``CALLS`` tool calls
(``builder_place_tiles`` / ``region_query`` alternating, the frames of
``benchmarks.gateway_load``), all on one loop in this process. Prints the calls and
the CPU time a call (all threads; the fake client's share is small and the same in
every tree).

Runs against the old tree (05d16a9) too, so the two can be counted side by side:

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python -m benchmarks.ws_inprocess 20 300     # minus the same with 100 calls

(each tree on PYTHONPATH; the difference over 4,000 calls is the instructions a call,
imports and setup subtracted; docs/benchmarks.md, "The rest, counted in instructions").
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from typing import Any

from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.server import Gateway

PORT = 8765  # never bound: only the Host header names it


class _Connection:
    """One WebSocket as the ASGI app sees it: frames in and out through two queues."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.incoming: asyncio.Queue[str | None] = asyncio.Queue()
        self.outgoing: asyncio.Queue[str] = asyncio.Queue()
        self.connected = False

    async def receive(self) -> dict[str, Any]:
        if not self.connected:
            self.connected = True
            return {"type": "websocket.connect"}
        frame = await self.incoming.get()
        if frame is None:
            return {"type": "websocket.disconnect", "code": 1000}
        return {"type": "websocket.receive", "text": frame}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            self.outgoing.put_nowait(message.get("text") or message["bytes"].decode())

    def open(self) -> asyncio.Future[Any]:
        scope = {"type": "websocket", "path": "/a2a", "raw_path": b"/a2a",
                 "headers": [(b"host", f"127.0.0.1:{PORT}".encode())], "query_string": b"",
                 "scheme": "ws", "server": ("127.0.0.1", PORT), "client": ("127.0.0.1", 40000),
                 "root_path": "", "subprotocols": [], "asgi": {"version": "3.0"}}
        return asyncio.ensure_future(self.app(scope, self.receive, self.send))

    async def ask(self, request: dict[str, Any] | str) -> str:
        self.incoming.put_nowait(request if isinstance(request, str) else json.dumps(request))
        while True:
            answer = await asyncio.wait_for(self.outgoing.get(), 60)
            if '"method"' not in answer[:40]:  # not a notification
                return answer


async def drive(clients: int, calls: int) -> dict[str, Any]:
    world = HostedWorld(time_scale=1.0, max_agents=10_000)
    gateway = Gateway(world)
    if hasattr(gateway, "bind"):
        gateway.bind("127.0.0.1", PORT)
    else:  # the old tree: no Host check, the port for the Origin check
        gateway.port = PORT
    gateway.hub.bind(asyncio.get_running_loop())
    connections = [_Connection(gateway.app) for _ in range(clients)]
    served = [c.open() for c in connections]
    try:
        made = json.loads(await connections[0].ask({
            "jsonrpc": "2.0", "id": 0, "method": "session_create",
            "params": {"session_name": "in-process", "max_agents": max(1, clients)}}))
        session = made["result"]["session_id"]
        frames = []
        for i, connection in enumerate(connections):
            x, y = (i % 50) * 20, (i // 50) * 20
            region = {"x": x, "y": y, "width": 8, "height": 8}
            for n, (method, params) in enumerate([
                    ("session_join", {"session_id": session, "agent_name": f"in-{i}"}),
                    ("region_claim", {"region": region, "timeout": 1e6})]):
                answer = json.loads(await connection.ask(
                    {"jsonrpc": "2.0", "id": n + 1, "method": method, "params": params}))
                assert answer["result"]["success"], answer
            frames.append((
                json.dumps({"jsonrpc": "2.0", "id": 3, "method": "builder_place_tiles",
                            "params": {"region": region, "tiles": "code"}}),
                json.dumps({"jsonrpc": "2.0", "id": 4, "method": "region_query", "params": {
                    "region": {"x": x, "y": y, "width": 16, "height": 16}}})))
        failures = 0

        async def one(connection: _Connection, pair: tuple[str, str]) -> None:
            nonlocal failures
            for n in range(calls):
                if '"success":true' not in await connection.ask(pair[n & 1]):
                    failures += 1

        gc.collect()
        gc.freeze()  # as barnraise serve leaves the heap (GatewayServer(freeze_heap=True))
        cpu = time.process_time()
        await asyncio.gather(*(one(c, p) for c, p in zip(connections, frames, strict=True)))
        cpu = time.process_time() - cpu
    finally:
        for connection in connections:
            connection.incoming.put_nowait(None)
        await asyncio.wait(served, timeout=10)
        gateway.hub.close()
        world.close()
        gc.unfreeze()
    n = clients * calls
    return {"clients": clients, "calls": n, "failures": failures,
            "cpu_us_per_call": round(1e6 * cpu / max(1, n), 1)}


def main(argv: list[str]) -> int:
    clients, calls = (int(argv[0]), int(argv[1])) if len(argv) == 2 else (20, 100)
    try:  # the loop uvicorn runs the server on, when installed
        import uvloop

        result = uvloop.run(drive(clients, calls))
    except ImportError:
        result = asyncio.run(drive(clients, calls))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
