"""The gateway server: one Starlette app on uvicorn for every surface, on one hub.

=============================== ==========================================================
``GET /.well-known/agent-card.json``  the A2A agent card (also ``/.well-known/agent.json``)
``POST /a2a/jsonrpc``            the A2A JSON-RPC binding (:mod:`.a2a_binding`)
``WS /a2a``                      JSON-RPC 2.0 over WebSocket, one method per tool (:mod:`.ws`)
``/mcp``                         MCP over streamable HTTP (:mod:`.mcp_surface`)
``GET /stats``                   refusal and traffic counters, sessions, agents (JSON)
``GET /healthz``                 ``{"ok": true}`` while serving
=============================== ==========================================================

:class:`Gateway` holds the route list; more routes (a browser view's static
files and its WebSocket) are added with :meth:`Gateway.add_route` before the
app is built. :class:`GatewayServer` binds a socket (port 0 picks a free one),
serves on uvicorn, and stops cleanly: from a signal (SIGINT/SIGTERM, main
thread) or :meth:`GatewayServer.stop`; then connections are closed, the hub
lets go of its Clients, and the caller closes the world.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from barnraise.gateway.a2a_binding import A2ABinding, TaskWatch
from barnraise.gateway.card import CARD_PATHS, RPC_PATH, WS_PATH, agent_card
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import AGENT_TTL, Hub, Limits
from barnraise.gateway.jsonrpc import dumps
from barnraise.gateway.mcp_surface import McpSurface
from barnraise.gateway.ws import WebSocketSession
from barnraise.runner import package_version

__all__ = ["MCP_PATH", "Gateway", "GatewayServer", "version"]

MCP_PATH = "/mcp"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


#: The version the card and the MCP server announce: the installed barnraise's.
version = package_version


class Gateway:
    """The ASGI app of every surface over one hosted world (see the module doc)."""

    def __init__(self, world: HostedWorld, *, limits: Limits | None = None,
                 allowed_origins: Sequence[str] = (), agents: bool = True,
                 agent_ttl: float | None = AGENT_TTL) -> None:
        """``agents=False``: serve the routes, but refuse every join (``no_agents``):
        for a view of a deterministic run, which one thread drives. ``agent_ttl``:
        wall seconds a remote agent may go unheard from before it expires (hub.py)."""
        self.world = world
        self.hub = Hub(world.simulation, limits=limits, agents=agents, agent_ttl=agent_ttl)
        self.counters = self.hub.counters
        self.watch = TaskWatch(self.hub)
        self.a2a = A2ABinding(self.hub, self.watch)
        self.mcp = McpSurface(self.hub, version=version())
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self.port: int | None = None
        self._mcp_manager = StreamableHTTPSessionManager(
            self.mcp.server, stateless=False,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*",
                                 "http://[::1]:*", *self.allowed_origins]),
            max_request_body_size=self.hub.limits.max_frame)
        self.routes: list[BaseRoute] = [
            *(Route(path, self._card, methods=["GET"]) for path in CARD_PATHS),
            Route(RPC_PATH, self.a2a.endpoint, methods=["POST"]),
            WebSocketRoute(WS_PATH, self._websocket),
            Route(MCP_PATH, StreamableHTTPASGIApp(self._mcp_manager)),
            Route("/stats", self._stats, methods=["GET"]),
            Route("/healthz", self._health, methods=["GET"]),
        ]
        self._app: Starlette | None = None
        self._cards: dict[str, bytes] = {}

    def add_route(self, route: BaseRoute) -> None:
        """Serve one more route (a view's files, a WebSocket of events); before ``app``."""
        if self._app is not None:
            raise RuntimeError("add routes before the app is built")
        self.routes.append(route)

    @property
    def app(self) -> Starlette:
        if self._app is None:
            self._app = Starlette(routes=self.routes, lifespan=self._lifespan)
        return self._app

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.hub.bind(asyncio.get_running_loop())
        async with self._mcp_manager.run():
            try:
                yield
            finally:
                self.hub.close()

    # -- endpoints ------------------------------------------------------------------------

    async def _card(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        body = self._cards.get(base)
        if body is None:
            body = self._cards[base] = dumps(agent_card(base, version=version()))
        return Response(body, media_type="application/json",
                        headers={"cache-control": "public, max-age=60"})

    async def _websocket(self, websocket: WebSocket) -> None:
        await WebSocketSession(self.hub, websocket, self.origin_allowed).run()

    def origin_allowed(self, origin: str | None) -> bool:
        """No Origin (not a browser), a listed one, or a page of this very server on loopback."""
        if origin is None:
            return True
        if origin.rstrip("/") in self.allowed_origins:
            return True
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        return (parts.scheme in ("http", "https") and parts.hostname in _LOOPBACK
                and port is not None and port == self.port)

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(self.stats())

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    def stats(self) -> dict[str, Any]:
        """Counters (refusals by reason, traffic totals), sessions, agents, outboxes."""
        slots = self.hub.slots
        return {
            "counters": self.counters.snapshot(),
            "agents": len(slots),
            "unacknowledged": sum(len(s.outbox) for s in slots.values()),
            "sessions": self.world.sessions(),
            "default_session": self.world.default_session,
            "scenario": self.world.scenario,
            "scenario_error": self.world.scenario_error,
            "now": self.world.simulation.now,
        }


class _Uvicorn(uvicorn.Server):
    """uvicorn, minus its habit of re-raising a caught signal after a clean shutdown, and
    with a calmer main loop.

    uvicorn's own loop wakes ten times a second to look at ``should_exit`` and
    refresh its Date header. A thread that wakes takes the interpreter's lock from
    whatever runs, and in the live view's benchmark an idle server alone cost a
    CPU-bound run several per cent (docs/benchmarks.md, view). Here the loop wakes
    once a second (the Date header's own granularity), and :meth:`wake` (called by
    :meth:`GatewayServer.stop`) ends the wait at once.
    """

    TICK: Final = 1.0

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._tick_loop: asyncio.AbstractEventLoop | None = None
        self._tick_event: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._tick_loop = asyncio.get_running_loop()
        self._tick_event = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            # on_tick refreshes the Date header when counter % 10 == 0: every tick here
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick_event.wait(), self.TICK)

    def wake(self) -> None:
        """From any thread: end the main loop's wait (after ``should_exit`` is set)."""
        loop, event = self._tick_loop, self._tick_event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(event.set)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def stop(_sig: int, _frame: Any) -> None:
            self.should_exit = True
            self.wake()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class GatewayServer:
    """A :class:`Gateway` on uvicorn at ``host:port`` (port 0: a free one).

    ``freeze_heap``: as it starts serving, collect, then move every object that
    exists to the collector's permanent generation (``gc.freeze``); :meth:`stop`
    gives them back. The modules, the hosted world and the app live as long as
    the server, and a full collection stops every thread while it walks them:
    120,000-odd objects, 80-140 ms a pause under load on this machine, two or three
    times a benchmark run, which was the WebSocket p99 (docs/benchmarks.md,
    gateway). For a process that serves one gateway for its life (``barnraise
    serve`` sets it); off by default, since anything frozen that later becomes a
    garbage cycle is not freed until :meth:`stop`.
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 8765, *,
                 freeze_heap: bool = False) -> None:
        self.gateway = gateway
        self.freeze_heap = freeze_heap
        self._frozen = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        gateway.port = self.port
        limits = gateway.hub.limits
        config = uvicorn.Config(
            gateway.app, log_level="warning", lifespan="on", ws="websockets-sansio",
            ws_max_size=4 * limits.max_frame, ws_per_message_deflate=False,
            timeout_graceful_shutdown=3)
        self._server = _Uvicorn(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def run(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve on this thread until a signal or :meth:`stop`."""
        if on_ready is not None:
            self._on_ready(on_ready)
        self._freeze()
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._unfreeze()

    def _freeze(self) -> None:
        if self.freeze_heap and not self._frozen:
            gc.collect()
            gc.freeze()
            self._frozen = True

    def _unfreeze(self) -> None:
        if self._frozen:
            self._frozen = False
            gc.unfreeze()

    def _on_ready(self, on_ready: Callable[[str], None]) -> None:
        server = self._server
        startup = server.startup

        async def started(sockets: list[socket.socket] | None = None) -> None:
            await startup(sockets=sockets)
            if server.started:
                on_ready(self.url)

        server.startup = started  # type: ignore[method-assign]

    def start(self, timeout: float = 10.0) -> str:
        """Serve on a background thread; return the base URL once it accepts connections."""
        ready = threading.Event()
        self._on_ready(lambda _url: ready.set())
        self._freeze()
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._socket]},
                                        name="barnraise-gateway", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            self.stop()
            raise RuntimeError(f"the gateway did not start within {timeout:g} s")
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down (connections closed) and wait for the serving thread."""
        self._server.should_exit = True
        self._server.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._socket.close()
        self._unfreeze()
