"""What ``barnraise serve`` and ``barnraise mcp`` run (the CLI imports this lazily)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

import anyio

from barnraise.gateway.card import disabled_tools
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import AGENT_TTL, Hub
from barnraise.gateway.mcp_surface import McpSurface, serve_stdio
from barnraise.gateway.operator import Operator
from barnraise.gateway.operator import operator_token as make_operator_token
from barnraise.gateway.server import (
    MAX_CONNECTIONS,
    Gateway,
    GatewayServer,
    check_hosts,
    version,
)

__all__ = ["serve_mcp", "serve_network"]


def serve_network(*, host: str = "127.0.0.1", port: int = 8765, scenario: str | None = None,
                  params: Mapping[str, str] | None = None, seed: int = 0,
                  time_scale: float = 1.0, allowed_origins: Sequence[str] = (),
                  allowed_hosts: Sequence[str] = (), store: str | None = None,
                  overwrite: bool = False, operator_token: str | None = None,
                  agent_ttl: float = AGENT_TTL, max_connections: int | None = None,
                  disabled_skills: Sequence[str] = ()) -> int:
    """Host a world and serve it until SIGINT/SIGTERM; print the base URL once; exit 0.

    With ``store``, the served run is kept in that SQLite file as it goes (the
    log of every call and event) and marked finished when the server stops.
    ``allowed_hosts``: ``Host`` values served besides the bound address
    (``--allow-host``); a malformed one is a :class:`ValueError` before anything starts.
    ``operator_token`` (default: :func:`~barnraise.gateway.operator.operator_token`) is
    what the view's controls, ``/stats`` in full and watching from another host
    ask for; it is printed on stderr with the role tokens, and the operator's page
    (the URL with ``#operator=TOKEN``) once the server listens.
    A remote agent not heard from for ``agent_ttl`` wall seconds expires (hub.py).
    ``max_connections``: the server's bound on open connections (None: its default,
    :data:`~barnraise.gateway.server.MAX_CONNECTIONS`).
    ``disabled_skills``: skill ids taken off the card, their tools refused
    (``--disable-skill``); an unknown one is a :class:`ValueError` naming the known
    ones, before anything starts.
    """
    from barnraise.view.server import ViewSurface  # the live page at / (barnraise.view)
    from barnraise.view.watch import Watcher

    allowed_hosts = check_hosts(allowed_hosts)
    disabled_tools(disabled_skills)  # before the world starts: Gateway uses them
    token = make_operator_token() if operator_token is None else operator_token
    world = HostedWorld(scenario=scenario, params=params, seed=seed, time_scale=time_scale,
                        store=store, overwrite=overwrite)
    for role, role_token in world.role_tokens.items():  # for the operator, not on stdout
        print(f"barnraise serve: join as {role} with role_token={role_token}",
              file=sys.stderr, flush=True)
    print(f"barnraise serve: operator_token={token}", file=sys.stderr, flush=True)

    def ready(url: str) -> None:
        print(url, flush=True)
        print(f"barnraise serve: the operator's page (controls): {url}/#operator={token}",
              file=sys.stderr, flush=True)

    watcher = Watcher(world.simulation, lazy=True)
    try:
        gateway = Gateway(world, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts,
                          agent_ttl=agent_ttl, disabled_skills=disabled_skills)
        gateway.operator = Operator(token)
        ViewSurface(watcher, gateway)
        # One gateway for the process's life: the heap built so far is frozen (see
        # GatewayServer), so full collections walk only what serving adds.
        server = GatewayServer(gateway, host, port, freeze_heap=True,
                               max_connections=MAX_CONNECTIONS if max_connections is None
                               else max_connections)
        server.run(on_ready=ready)
    finally:
        watcher.close()
        world.close()
    return 0


def serve_mcp(*, scenario: str | None = None, params: Mapping[str, str] | None = None,
              seed: int = 0, time_scale: float = 1.0) -> int:
    """Serve MCP on stdin/stdout for one client (its agent), on a world of its own.

    While serving, the wire is a private copy of stdout and fd 1 points at
    stderr, so nothing printed by the world can tear a frame.
    """
    # The one client is the world's only outside agent: every role is open to it.
    world = HostedWorld(scenario=scenario, params=params, seed=seed, time_scale=time_scale,
                        granted_roles=())
    # Its one agent is its client for the process's life: it never expires.
    hub = Hub(world.simulation, agent_ttl=None)
    surface = McpSurface(hub, version=version(), single_agent=True)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    async def main(wire: int) -> None:
        hub.bind(asyncio.get_running_loop())
        await serve_stdio(surface, sys.stdin.fileno(), wire, limit=hub.limits.max_frame,
                          log=log)

    sys.stdout.flush()
    wire = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        anyio.run(main, wire)
    except KeyboardInterrupt:
        pass
    finally:
        os.dup2(wire, sys.stdout.fileno())
        os.close(wire)
        surface.close()
        hub.close()
        world.close()
        sys.stderr.flush()
    return 0
