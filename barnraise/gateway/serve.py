"""What ``barnraise serve`` and ``barnraise mcp`` run (the CLI imports this lazily)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence

import anyio
from mcp.server.stdio import stdio_server

from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import AGENT_TTL, Hub
from barnraise.gateway.mcp_surface import McpSurface
from barnraise.gateway.server import Gateway, GatewayServer, version

__all__ = ["serve_mcp", "serve_network"]


def serve_network(*, host: str = "127.0.0.1", port: int = 8765, scenario: str | None = None,
                  params: Mapping[str, str] | None = None, seed: int = 0,
                  time_scale: float = 1.0, allowed_origins: Sequence[str] = (),
                  store: str | None = None, overwrite: bool = False,
                  agent_ttl: float = AGENT_TTL) -> int:
    """Host a world and serve it until SIGINT/SIGTERM; print the base URL once; exit 0.

    With ``store``, the served run is kept in that SQLite file as it goes (the
    log of every call and event) and marked finished when the server stops.
    A remote agent not heard from for ``agent_ttl`` wall seconds expires (hub.py).
    """
    from barnraise.view.server import ViewSurface  # the live page at / (barnraise.view)
    from barnraise.view.watch import Watcher

    world = HostedWorld(scenario=scenario, params=params, seed=seed, time_scale=time_scale,
                        store=store, overwrite=overwrite)
    for role, token in world.role_tokens.items():  # for the operator, not on stdout
        print(f"barnraise serve: join as {role} with role_token={token}", file=sys.stderr,
              flush=True)
    watcher = Watcher(world.simulation, lazy=True)
    try:
        gateway = Gateway(world, allowed_origins=allowed_origins, agent_ttl=agent_ttl)
        ViewSurface(watcher, gateway)
        # One gateway for the process's life: the heap built so far is frozen (see
        # GatewayServer), so full collections walk only what serving adds.
        server = GatewayServer(gateway, host, port, freeze_heap=True)
        server.run(on_ready=lambda url: print(url, flush=True))
    finally:
        watcher.close()
        world.close()
    return 0


def serve_mcp(*, scenario: str | None = None, params: Mapping[str, str] | None = None,
              seed: int = 0, time_scale: float = 1.0) -> int:
    """Serve MCP on stdin/stdout for one client (its agent), on a world of its own."""
    # The one client is the world's only outside agent: every role is open to it.
    world = HostedWorld(scenario=scenario, params=params, seed=seed, time_scale=time_scale,
                        granted_roles=())
    # Its one agent is its client for the process's life: it never expires.
    hub = Hub(world.simulation, agent_ttl=None)
    surface = McpSurface(hub, version=version(), single_agent=True)

    async def main() -> None:
        hub.bind(asyncio.get_running_loop())
        async with stdio_server() as (read_stream, write_stream):
            await surface.server.run(read_stream, write_stream,
                                     surface.server.create_initialization_options())

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    finally:
        hub.close()
        world.close()
        sys.stderr.flush()
    return 0
