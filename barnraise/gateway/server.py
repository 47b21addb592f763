"""The gateway server: one Starlette app on uvicorn for every surface, on one hub.

=============================== ==========================================================
``GET /.well-known/agent-card.json``  the A2A agent card (also ``/.well-known/agent.json``)
``POST /a2a/jsonrpc``            the A2A JSON-RPC binding (:mod:`.a2a_binding`)
``WS /a2a``                      JSON-RPC 2.0 over WebSocket, one method per tool (:mod:`.ws`)
``/mcp``                         MCP over streamable HTTP (:mod:`.mcp_surface`)
``GET /stats``                   counters and counts; sessions with the operator's token
``GET /metrics``                 the counts of /stats and per-tool latency, for Prometheus
``GET /healthz``                 ``{"ok": true}`` while serving
=============================== ==========================================================

One rule guards every route, stated once in :class:`EdgeMiddleware` (the
idea of Starlette's ``TrustedHostMiddleware`` plus an Origin check): a
request or WebSocket upgrade whose ``Host`` is not this server's answers 421
(DNS rebinding), one whose ``Origin`` is a foreign page's answers 403, and a
``POST`` whose body is not ``Content-Type: application/json`` answers 415 (a
form or ``text/plain`` is what a page may send cross-site without asking).
Each refusal is counted (``foreign_host``, ``foreign_origin``,
``unsupported_media_type``).

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
import math
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from barnraise.gateway import jsonrpc
from barnraise.gateway.a2a_binding import A2ABinding, TaskWatch
from barnraise.gateway.card import (
    CARD_PATHS,
    RPC_PATH,
    WS_PATH,
    agent_card,
    disabled_tools,
    served_tools,
)
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import AGENT_TTL, Counters, Hub, Limits
from barnraise.gateway.jsonrpc import dumps
from barnraise.gateway.mcp_surface import McpSurface
from barnraise.gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from barnraise.gateway.metrics import exposition
from barnraise.gateway.operator import LOCAL as LOCAL_OPERATOR
from barnraise.gateway.operator import Operator
from barnraise.gateway.ws import WebSocketSession
from barnraise.runner import package_version

__all__ = ["MCP_PATH", "EdgeMiddleware", "Gateway", "GatewayServer", "check_hosts", "version"]

MCP_PATH = "/mcp"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: The names a browser uses for this machine, as they appear in a Host header.
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_WILDCARD = frozenset({"0.0.0.0", "::", ""})
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_:[]")


def _host_name(host: str) -> str:
    """``host`` without its port: ``a.example:80`` -> ``a.example``, ``[::1]:80`` -> ``[::1]``."""
    if host.startswith("["):
        return host[:host.find("]") + 1] if "]" in host else host
    return host.partition(":")[0]


def check_hosts(hosts: Sequence[str]) -> list[str]:
    """The ``--allow-host`` values, lower-cased: ``NAME`` (any port) or ``NAME:PORT``.

    :class:`ValueError` naming the value for anything else (a URL, a wildcard,
    an empty name, a port that is not 0..65535).
    """
    checked: list[str] = []
    for value in hosts:
        host = value.strip().lower()
        name = _host_name(host)
        rest = host[len(name):]
        port = rest[1:]
        bracketed = name.startswith("[") and name.endswith("]")
        if (not name or not set(host) <= _HOST_CHARS
                or (not bracketed and any(c in name for c in ":[]"))
                or (rest and not (rest.startswith(":") and port.isascii() and port.isdigit()
                                  and int(port) <= 65535))):
            raise ValueError(f"--allow-host {value!r}: expected a host name or address, "
                             "optionally with :PORT (e.g. barn.example or "
                             "barn.example:8765; an IPv6 address in brackets)")
        checked.append(host)
    return checked


#: The version the card and the MCP server announce: the installed barnraise's.
version = package_version


#: Default wall seconds for a request's headers to arrive (GatewayServer).
HEADER_TIMEOUT: Final = 10.0
#: Default wall seconds an idle keep-alive connection stays open (uvicorn's default).
KEEP_ALIVE_TIMEOUT: Final = 5.0
#: Default wall seconds for a request's body to arrive, from the end of its headers.
BODY_TIMEOUT: Final = 30.0
#: Default wall seconds a WebSocket may stay open without an agent (``session_join``,
#: ``session_create`` or ``barnraise.auth``; on the view's socket, a page not watching).
AUTH_TIMEOUT: Final = 10.0


def _default_max_connections() -> int:
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 1000
    if soft == resource.RLIM_INFINITY:
        return 1000
    return max(16, min(1000, soft // 4))


#: Default bound on open connections (uvicorn's ``limit_concurrency``): past it a request
#: or an upgrade answers 503; at twice it a new socket is closed unanswered. 1,000, or a
#: quarter of the process's open-file limit if that is less (1,024 -> 256), so that twice
#: the bound leaves file descriptors for the store, the log and the threads.
MAX_CONNECTIONS: Final = _default_max_connections()


def _check_seconds(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")


class Gateway:
    """The ASGI app of every surface over one hosted world (see the module doc)."""

    def __init__(self, world: HostedWorld, *, limits: Limits | None = None,
                 allowed_origins: Sequence[str] = (), allowed_hosts: Sequence[str] = (),
                 agents: bool = True, agent_ttl: float | None = AGENT_TTL,
                 auth_timeout: float = AUTH_TIMEOUT,
                 disabled_skills: Sequence[str] = ()) -> None:
        """``agents=False``: serve the routes, but refuse every join (``no_agents``):
        for a view of a deterministic run, which one thread drives.
        ``allowed_hosts``: more ``Host`` values to serve (see :meth:`host_allowed`).
        ``agent_ttl``: wall seconds a remote agent may go unheard from before it
        expires (hub.py). ``auth_timeout``: wall seconds a WebSocket may stay open
        without an agent (on ``/a2a``) or without watching (the view's socket) before
        it is closed, counted ``auth_timeout``. ``disabled_skills``: skill ids of the
        card (``serve --disable-skill``) taken off it, their tools refused on every
        surface; :class:`ValueError` naming the known ids for one that is not."""
        _check_seconds("auth_timeout", auth_timeout)
        disabled = disabled_tools(disabled_skills)
        self.auth_timeout = auth_timeout
        self.world = world
        self.hub = Hub(world.simulation, limits=limits, agents=agents, agent_ttl=agent_ttl,
                       disabled=disabled)
        self.counters = self.hub.counters
        self.watch = TaskWatch(self.hub)
        self.a2a = A2ABinding(self.hub, self.watch, offered=self.offered_session)
        self.mcp = McpSurface(self.hub, version=version(), operator=lambda peer, auth:
                              self.operator.may_see_details(peer, auth))
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self.allowed_hosts = check_hosts(allowed_hosts)
        self.port: int | None = None
        self._hosts: frozenset[str] = frozenset()  # exact Host values (see bind)
        self._any_port = frozenset(h for h in self.allowed_hosts if _host_name(h) == h)
        # Host and Origin are checked for /mcp as for every route, by EdgeMiddleware;
        # the SDK's own check (loopback names only) would refuse an --allow-host.
        self._mcp_manager = StreamableHTTPSessionManager(
            self.mcp.server, stateless=False,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=self.hub.limits.max_frame)
        self.routes: list[BaseRoute] = [
            *(Route(path, self._card, methods=["GET"]) for path in CARD_PATHS),
            Route(RPC_PATH, self.a2a.endpoint, methods=["POST"]),
            # the binding at the base URL too, where generic A2A clients post; a GET of
            # / is the live view's page when a view is added (docs/gateway.md)
            Route("/", self.a2a.endpoint, methods=["POST"]),
            WebSocketRoute(WS_PATH, self._websocket),
            Route(MCP_PATH, McpFrameLimits(StreamableHTTPASGIApp(self._mcp_manager),
                                           self.hub.limits.max_frame, self.counters)),
            Route("/stats", self._stats, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/healthz", self._health, methods=["GET"]),
        ]
        self._app: Starlette | None = None
        self._cards: dict[str, bytes] = {}

    def add_route(self, route: BaseRoute) -> None:
        """Serve one more route (a view's files, a WebSocket of events); before ``app``."""
        if self._app is not None:
            raise RuntimeError("add routes before the app is built")
        self.routes.append(route)

    def bind(self, host: str, port: int) -> None:
        """The address the server listens on: it decides the ``Host`` values served."""
        self.port = port
        names: set[str] = set()
        if host in _LOOPBACK or host in _WILDCARD:  # a wildcard is reachable as loopback
            names.update(_LOOPBACK_HOSTS)
        if host not in _LOOPBACK and host not in _WILDCARD:
            names.add(f"[{host.lower()}]" if ":" in host else host.lower())
        hosts = {f"{name}:{port}" for name in names}
        if port == 80:  # a browser leaves the default port out
            hosts.update(names)
        hosts.update(h for h in self.allowed_hosts if h not in self._any_port)
        self._hosts = frozenset(hosts)

    def host_allowed(self, host: str | None) -> bool:
        """A ``Host`` this server answers to: on loopback, ``127.0.0.1``, ``localhost``
        or ``[::1]`` with the bound port; on another address, that address with the
        port; on a wildcard (``0.0.0.0``), the loopback names; and every
        ``allowed_hosts`` value (a bare name with any port). Nothing before :meth:`bind`."""
        if host is None:
            return False
        host = host.lower()
        return host in self._hosts or (bool(self._any_port)
                                       and _host_name(host) in self._any_port)

    @property
    def app(self) -> Starlette:
        if self._app is None:
            self._app = Starlette(routes=self.routes, lifespan=self._lifespan,
                                  middleware=[Middleware(EdgeMiddleware, gateway=self)])
        return self._app

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.hub.bind(asyncio.get_running_loop())
        async with self._mcp_manager.run():
            try:
                yield
            finally:
                self.mcp.close()
                self.hub.close()

    # -- endpoints ------------------------------------------------------------------------

    async def _card(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        body = self._cards.get(base)
        if body is None:
            body = self._cards[base] = dumps(agent_card(
                base, version=version(), tools=served_tools(self.hub.disabled)))
        return Response(body, media_type="application/json",
                        headers={"cache-control": "public, max-age=60"})

    async def _websocket(self, websocket: WebSocket) -> None:
        await WebSocketSession(self.hub, websocket, self.origin_allowed,
                               auth_timeout=self.auth_timeout).run()

    def origin_allowed(self, origin: str | None, host: str | None = None) -> bool:
        """No Origin (not a browser), a listed one, a page of this very server on
        loopback, or a page of the ``host`` the request was sent to (same origin)."""
        if origin is None:
            return True
        if origin.rstrip("/") in self.allowed_origins:
            return True
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https"):
            return False
        if host is not None and parts.netloc.lower() == host.lower():
            return True
        return parts.hostname in _LOOPBACK and port is not None and port == self.port

    #: Who may see /stats in full (and drive the view): ``barnraise serve`` sets its operator
    #: token here; without one, a loopback peer is the operator (:mod:`.operator`).
    operator: Operator = LOCAL_OPERATOR

    async def _stats(self, request: Request) -> Response:
        peer = request.client.host if request.client is not None else None
        if self.operator.may_see_details(peer, request.headers.get("authorization")):
            return JSONResponse(self.stats())
        return JSONResponse(self.counts())

    #: Wall seconds a rendered /metrics page is served again: a scrape costs about 7 ms
    #: of the loop's CPU, and anyone past the edge may ask, so at most one render a second.
    METRICS_EVERY: Final = 1.0
    _metrics_page: tuple[float, bytes] | None = None
    _metrics_lock: asyncio.Lock | None = None

    async def _metrics(self, request: Request) -> Response:
        # Only what /stats shows everyone (counts, no ids or names): the same rules as
        # that view of it, which are the edge's (EdgeMiddleware), with no token asked.
        # Rendered at most once a METRICS_EVERY (concurrent scrapes wait for one render);
        # the world's session list is asked off the loop (an ask may wait on the world).
        if self._metrics_lock is None:
            self._metrics_lock = asyncio.Lock()
        async with self._metrics_lock:
            now = asyncio.get_running_loop().time()
            page = self._metrics_page
            if page is None or now - page[0] >= self.METRICS_EVERY:
                sessions = await asyncio.to_thread(self.world.simulation.sessions)
                counts = self.counts(sessions)
                page = self._metrics_page = (
                    now, exposition(lambda: counts, self.hub.latency))
        return Response(page[1], media_type=METRICS_CONTENT_TYPE)

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    def offered_session(self, sessions: Sequence[str] | None = None) -> str | None:
        """The one session an outsider is offered to join: the world's default, or its
        only one (of ``sessions`` when given, else asked of the world)."""
        offered = self.world.default_session
        if offered is None:
            if sessions is None:
                sessions = self.world.simulation.sessions()
            if len(sessions) == 1:
                offered = sessions[0]
        return offered

    def counts(self, sessions: Sequence[str] | None = None) -> dict[str, Any]:
        """What /stats shows without the operator token: counts, and the one session an
        outsider is offered to join (the world's default, or its only one); no other
        session's id, no names, no members. ``sessions``: the world's open sessions, when
        the caller asked for them already (off the loop: the ask may wait)."""
        slots = self.hub.slots
        if sessions is None:
            sessions = self.world.simulation.sessions()
        return {
            "counters": self.counters.snapshot(),
            "agents": len(slots),
            "unacknowledged": sum(len(s.outbox) for s in slots.values()),
            "sessions": len(sessions),
            "default_session": self.offered_session(sessions),
            "now": self.world.simulation.now,
            "details": "send Authorization: Bearer OPERATOR_TOKEN for sessions and members",
        }

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


class EdgeMiddleware:
    """Every route's one rule against other sites' pages (see the module doc).

    Pure ASGI (a header scan, no body read): 421 for a ``Host`` the gateway does
    not answer to, 403 for a foreign ``Origin`` (:meth:`Gateway.origin_allowed`),
    415 for a ``POST`` that is not ``application/json``; for a WebSocket upgrade
    the same status is the upgrade's answer.
    """

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine of its own: it hands back the app's (or the refusal's), so
        # that a WebSocket's every frame is not resumed through one more frame here.
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            return self.app(scope, receive, send)
        host = origin = content_type = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
            elif name == b"content-type":
                content_type = value.decode("latin-1")
        gateway = self.gateway
        refusal: Response | None = None
        if not gateway.host_allowed(host):
            gateway.counters.add("foreign_host")
            refusal = PlainTextResponse(f"misdirected request: this server does not answer "
                                        f"to Host {host!r} (see --allow-host)", 421)
        elif not gateway.origin_allowed(origin, host):
            gateway.counters.add("foreign_origin")
            refusal = PlainTextResponse(f"forbidden: requests from pages of {origin!r} are "
                                        "refused (see --allow-origin)", 403)
        elif kind == "http" and scope["method"] == "POST" and not (
                content_type is not None
                and content_type.partition(";")[0].strip().lower() == "application/json"):
            gateway.counters.add("unsupported_media_type")
            refusal = PlainTextResponse(f"unsupported media type {content_type!r}: the body "
                                        "must be Content-Type: application/json", 415)
        if refusal is None:
            return self.app(scope, receive, send)
        return refusal(scope, receive, send)


class McpFrameLimits:
    """``POST /mcp``'s body under the limits before the MCP SDK parses it: over
    ``limit`` bytes -> HTTP 413, nested deeper than :data:`jsonrpc.MAX_DEPTH` ->
    -32600 (HTTP 400), as on the other surfaces; then the body goes on to ``app``."""

    def __init__(self, app: ASGIApp, limit: int, counters: Counters) -> None:
        self.app = app
        self.limit = limit
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        too_large = Response(jsonrpc.too_large(self.limit), 413, media_type="application/json")
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                self.counters.add("body_too_large")  # refused before a byte is read
                await too_large(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                self.counters.add("body_too_large")
                await too_large(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            jsonrpc.check_depth(body)
        except jsonrpc.RpcError as exc:
            self.counters.add(jsonrpc.COUNTER[exc.code])
            await Response(jsonrpc.error(None, exc.code, exc.message), 400,
                           media_type="application/json")(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class _BoundedHttp(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools), plus bounds on slow clients and on
    open connections.

    uvicorn closes a keep-alive connection left idle (``timeout_keep_alive``),
    but once a byte of a request has come, it waits for the rest of its headers
    for ever, and then for its body for ever: a client that opens sockets and
    sends a partial request line, or a POST's headers and half its body, holds
    each one open. Here a connection whose request headers are not complete
    ``header_timeout`` wall seconds after it opened (or after its last answer)
    is closed (counted ``header_timeout``), and so is one whose request body is
    not complete ``body_timeout`` wall seconds after its headers
    (``body_timeout``). A request whose body is in is not timed by either: an
    answer may take as long as it takes, a stream as long as it lasts.

    No timer per request: each connection keeps the loop time it must have moved
    on by (its deadline, a float), and one sweep every :attr:`sweep` seconds
    (a second at most) closes those past theirs, so a bound is kept to within
    that much. A timer per request (``call_later`` and ``cancel``) cost about 3 us
    of CPU, and a body's timer beside the headers' made it two a request (measured
    in docs/gateway.md, "Limits, refusals, counters").

    ``max_connections`` is uvicorn's ``limit_concurrency``, which answers a
    request 503 when that many connections (HTTP and WebSocket) are open; uvicorn
    lets a WebSocket upgrade through that check, so here an upgrade over it gets
    the same 503. A socket that arrives when twice that many are open is closed
    at once, unanswered (``connection_refused``): so open sockets, and the
    process's file descriptors, stay bounded even when clients send nothing.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000
    counters: Counters | None = None
    #: Seconds between sweeps (set per server, with the bounds).
    sweep: float = 1.0
    #: The server's one sweep timer, and the loop it is on (set on the server's subclass).
    _sweeper: asyncio.TimerHandle | None = None
    _sweeper_loop: asyncio.AbstractEventLoop | None = None

    _deadline: float = math.inf
    _late: str = "header_timeout"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > 2 * self.max_connections:
            self._count("connection_refused")
            transport.abort()
            return
        self._deadline, self._late = self.loop.time() + self.header_timeout, "header_timeout"
        cls = type(self)
        if cls._sweeper is None or cls._sweeper_loop is not self.loop:
            cls._sweeper_loop = self.loop
            cls._sweeper = self.loop.call_later(self.sweep, self._sweep)

    def _count(self, name: str) -> None:
        if self.counters is not None:
            self.counters.add(name)

    def _sweep(self) -> None:
        """Close the connections past their deadlines; again in a sweep while any is open."""
        cls = type(self)
        now = self.loop.time()
        for connection in list(self.connections):
            if isinstance(connection, _BoundedHttp) and connection._deadline <= now:
                connection._deadline = math.inf
                if not connection.transport.is_closing():
                    connection._count(connection._late)
                    connection.transport.close()
        if self.connections:
            cls._sweeper = self.loop.call_later(self.sweep, self._sweep)
        else:
            cls._sweeper = None  # the next connection starts it again

    def on_headers_complete(self) -> None:
        self._deadline, self._late = self.loop.time() + self.body_timeout, "body_timeout"
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._deadline = math.inf
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._deadline = math.inf  # the WebSocket's own bounds take over (ws.py)
        if len(self.connections) >= self.max_connections:
            self._count("over_capacity")
            body = b"Service Unavailable"
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\n"
                                 b"content-type: text/plain; charset=utf-8\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                                 % (len(body), body))
            self.transport.close()
            return
        super().handle_websocket_upgrade()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn armed its keep-alive timer: no pipelined request is waiting, and
        # the next one's headers are timed from here.
        if self.timeout_keep_alive_task is not None:
            self._deadline, self._late = self.loop.time() + self.header_timeout, \
                "header_timeout"

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = math.inf
        super().connection_lost(exc)


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

    ``header_timeout``: wall seconds a connection may take to send a request's
    headers (from its opening or its last answer) before it is closed, counted
    ``header_timeout``; ``body_timeout``: wall seconds from a request's headers
    to the end of its body (``body_timeout``); ``keep_alive_timeout``: wall
    seconds an idle keep-alive connection is kept open (uvicorn's
    ``timeout_keep_alive``); ``max_connections``: open connections, HTTP and
    WebSocket together, past which a request or an upgrade answers 503 (uvicorn's
    ``limit_concurrency``; at twice it a new socket is closed unanswered). The
    WebSocket's bound on a connection without an agent is the gateway's
    (:attr:`Gateway.auth_timeout`). Each is checked here: a :class:`ValueError`
    names a bound that is not a positive finite number (or, for
    ``max_connections``, a positive int).
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 8765, *,
                 freeze_heap: bool = False, header_timeout: float = HEADER_TIMEOUT,
                 keep_alive_timeout: float = KEEP_ALIVE_TIMEOUT,
                 body_timeout: float = BODY_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        for name, value in (("header_timeout", header_timeout),
                            ("keep_alive_timeout", keep_alive_timeout),
                            ("body_timeout", body_timeout)):
            _check_seconds(name, value)
        if type(max_connections) is not int or max_connections < 1:
            raise ValueError(f"max_connections must be a positive int, got {max_connections!r}")
        self.gateway = gateway
        self.freeze_heap = freeze_heap
        self._frozen = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except BaseException:  # a port in use: no socket left behind
            self._socket.close()
            raise
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        gateway.bind(host, self.port)
        limits = gateway.hub.limits
        protocol = type("BoundedHttp", (_BoundedHttp,),
                        {"header_timeout": header_timeout, "body_timeout": body_timeout,
                         "max_connections": max_connections, "counters": gateway.counters,
                         "sweep": min(1.0, header_timeout / 4, body_timeout / 4)})
        config = uvicorn.Config(
            gateway.app, log_level="warning", lifespan="on", ws="websockets-sansio",
            ws_max_size=4 * limits.max_frame, ws_per_message_deflate=False,
            timeout_graceful_shutdown=3, http=protocol,
            timeout_keep_alive=keep_alive_timeout,  # type: ignore[arg-type]
            limit_concurrency=max_connections)
        self._server = _Uvicorn(config)
        self._thread: threading.Thread | None = None

    @property
    def connections(self) -> int:
        """Connections open now, HTTP and WebSocket (what ``max_connections`` bounds)."""
        return len(self._server.server_state.connections)

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
