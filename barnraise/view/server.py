"""The live view on the gateway: the page's files and its WebSocket, on the gateway's server.

=========================== ===========================================================
``GET /``                   the page (``static/index.html``)
``GET /view/static/...``    its CSS and JavaScript modules (no build step, no framework)
``WS /view/ws``             frames, deltas and controls (JSON-RPC 2.0, see below)
=========================== ===========================================================

Frames from the server are UTF-8 JSON in binary WebSocket messages (encoded once,
sent as they are); answers to a page's requests are text. On connecting, a page
gets one ``view.frame`` notification (the whole picture:
canvas, claims, agents, task board, the event backlog, the time series), then a
``view.delta`` notification per read of the world (:mod:`barnraise.view.watch`):
changed canvas rectangles, claims added and removed, changed agent rows, the
board when a task moved, the new events, one point of the series. Each delta is
encoded once and queued to every connection; a connection's queue holds
:data:`QUEUE` deltas, and one that falls behind has its queue emptied and gets a
fresh frame instead (so memory stays bounded and nothing is lost on the page). A
delta arrives at most ``rate`` times a second (the watcher's reads).

The page drives the run with requests ``{"jsonrpc": "2.0", "id": N, "method":
"view.control", "params": {"action": A, "value": V}}`` (actions in
:meth:`barnraise.view.watch.Watcher.control`); the result is the control's result
dict; the action ``frame`` asks for the whole picture again (a page that
lost track of its deltas). A frame that is not such a request gets a JSON-RPC error and the
connection goes on. Browser connections from a foreign ``Origin`` are refused as
on ``/a2a``.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from barnraise.gateway import jsonrpc
from barnraise.gateway.server import Gateway
from barnraise.view.watch import Watcher

__all__ = ["QUEUE", "STATIC", "WS_PATH", "ViewSurface"]

STATIC: Final = pathlib.Path(__file__).with_name("static")
WS_PATH: Final = "/view/ws"
#: Deltas one connection may have waiting; past that it gets a fresh frame instead.
QUEUE: Final = 16
#: The largest control frame read (bytes).
MAX_CONTROL: Final = 4096
_RESYNC: Final = b""
_encoder: Final = msgspec.json.Encoder(enc_hook=str)


def _notification(method: str, params: dict[str, Any]) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "method": method, "params": params})


class _Connection:
    __slots__ = ("peer", "queue", "resyncs", "watching")

    def __init__(self, peer: str | None = "127.0.0.1") -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=QUEUE + 1)
        self.resyncs = 0
        #: The page's address (who it is, for the operator's rules).
        self.peer = peer
        #: Frames and deltas go to it (a loopback page at once; another host's after
        #: ``view.auth`` with the operator's token).
        self.watching = False

    def resync(self) -> None:
        """Drop what waits and send the whole picture next (on the loop)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.resyncs += 1
        self.queue.put_nowait(_RESYNC)

    def offer(self, frame: bytes) -> None:
        """Queue a delta; when full, drop the backlog for one fresh frame (on the loop)."""
        if self.queue.qsize() >= QUEUE:
            self.resync()
            return
        self.queue.put_nowait(frame)


class Source(Protocol):
    """What the page is served from: a live run's :class:`Watcher`, or a stored run's
    :class:`~barnraise.view.stored.StoredSource`."""

    def frame(self) -> dict[str, Any]: ...

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]: ...

    def control(self, action: str, value: Any = None) -> dict[str, Any]: ...


class ViewSurface:
    """The view's routes on a :class:`~barnraise.gateway.server.Gateway` (see the module doc)."""

    def __init__(self, watcher: Watcher | Source, gateway: Gateway) -> None:
        self.watcher = watcher
        self.gateway = gateway
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.frames_sent = 0
        self.deltas_sent = 0
        #: Set when the first page starts watching (``run --view --wait`` waits on it).
        self.viewer_came = threading.Event()
        # One whole picture built at a time, one control run at a time (both off the loop).
        self._building = asyncio.Lock()
        self._controlling = asyncio.Lock()
        for route in (Route("/", self._index, methods=["GET"]),
                      Route("/favicon.ico", self._no_icon, methods=["GET"]),
                      Mount("/view/static", app=StaticFiles(directory=STATIC)),
                      WebSocketRoute(WS_PATH, self._websocket)):
            gateway.add_route(route)

    async def _index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html",
                            headers={"cache-control": "no-cache"})

    async def _no_icon(self, request: Request) -> Response:
        return Response(status_code=204)

    # -- fan-out ---------------------------------------------------------------------------

    def _on_delta(self, delta: dict[str, Any]) -> None:
        # On the watcher's pump thread: encode once, hand to the loop.
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        frame = _notification("view.delta", delta)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._fan_out, frame)

    def _fan_out(self, frame: bytes) -> None:
        for connection in list(self._connections):
            connection.offer(frame)

    def _frame(self) -> bytes:
        return _notification("view.frame", self.watcher.frame())

    # -- one page --------------------------------------------------------------------------

    async def _websocket(self, websocket: WebSocket) -> None:
        headers = websocket.headers
        if not self.gateway.origin_allowed(headers.get("origin"), headers.get("host")):
            self.gateway.counters.add("foreign_origin")
            await websocket.close(code=1008)
            return
        await websocket.accept()
        self._loop = asyncio.get_running_loop()
        peer = websocket.client.host if websocket.client is not None else None
        connection = _Connection(peer)
        sender: asyncio.Task[None] | None = None
        try:
            # Anyone on loopback watches at once; another host, after a good view.auth.
            if self.gateway.operator.may_watch(peer):
                sender = self._watch(websocket, connection)
            # A page that is not watching (another host, no view.auth yet) gets
            # auth_timeout wall seconds to become one; then it is closed.
            deadline = self._loop.time() + self.gateway.auth_timeout
            while True:
                try:
                    if sender is None:
                        text = await asyncio.wait_for(websocket.receive_text(),
                                                      max(0.0, deadline - self._loop.time()))
                    else:
                        text = await websocket.receive_text()
                except TimeoutError:
                    self.gateway.counters.add("auth_timeout")
                    with contextlib.suppress(Exception):
                        await websocket.close(code=1008, reason="not watching: send view.auth "
                                              "with the operator token first")
                    return
                except (WebSocketDisconnect, RuntimeError, KeyError):
                    return
                watching = sender is not None
                reply = await self._answer_async(text, connection, watching)
                if not watching and connection.watching:
                    sender = self._watch(websocket, connection)
                with contextlib.suppress(Exception):
                    await websocket.send_text(reply.decode("utf-8"))
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sender
            self._connections.discard(connection)
            if not self._connections and self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None

    def _watch(self, websocket: WebSocket, connection: _Connection) -> asyncio.Task[None]:
        """Start sending this page frames and deltas (on the loop)."""
        connection.watching = True
        connection.queue.put_nowait(_RESYNC)  # the first thing a page gets: the whole picture
        self._connections.add(connection)
        self.viewer_came.set()
        if self._unsubscribe is None:
            self._unsubscribe = self.watcher.subscribe(self._on_delta)
        return asyncio.create_task(self._send(websocket, connection))

    async def _send(self, websocket: WebSocket, connection: _Connection) -> None:
        try:
            while True:
                frame = await connection.queue.get()
                if frame is _RESYNC or not frame:
                    # The whole picture (a stored run's fold or re-execution may take
                    # seconds) is built on a worker thread, one at a time per view: the
                    # loop goes on answering everyone meanwhile.
                    async with self._building:
                        frame = await asyncio.to_thread(self._frame)
                    self.frames_sent += 1
                else:
                    self.deltas_sent += 1
                await websocket.send_bytes(frame)  # UTF-8 JSON as it was encoded: no copy
        except (WebSocketDisconnect, RuntimeError, OSError):
            with contextlib.suppress(Exception):
                await websocket.close()

    async def _answer_async(self, text: str, connection: _Connection,
                            watching: bool = True) -> bytes:
        """The answer to one frame; a control runs on a worker thread (a stored run's
        seek may wait for a fold under way), one at a time per view."""
        checked = self._check(text, connection, watching)
        if isinstance(checked, bytes):
            return checked
        rid, action, value = checked
        async with self._controlling:
            result = await asyncio.to_thread(self.watcher.control, action, value)
        return self._result(rid, result, connection)

    def _result(self, rid: Any, result: dict[str, Any], connection: _Connection | None) -> bytes:
        if result.pop("resync", False) and connection is not None:
            connection.resync()  # a stored run moved in time: the whole picture again
        return _encoder.encode({"jsonrpc": "2.0", "id": rid, "result": result})

    def _check(self, text: str, connection: _Connection,
               watching: bool) -> bytes | tuple[Any, str, Any]:
        """A frame's answer when it is not a control to run (bad, refused, ``frame``,
        ``view.auth``), else the control's ``(id, action, value)``."""
        if len(text) > MAX_CONTROL:
            return _encoder.encode({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": f"frame over {MAX_CONTROL} bytes"}})
        try:  # the gateway's one decoder: depth and UTF-8 checked before the parser runs
            request = jsonrpc.loads(text)
        except jsonrpc.RpcError as exc:
            return _encoder.encode({"jsonrpc": "2.0", "id": None, "error": {
                "code": exc.code, "message": exc.message}})
        rid = request.get("id") if isinstance(request, dict) else None
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0":
            return _encoder.encode({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "not a JSON-RPC 2.0 request object"}})
        method = request.get("method")
        params = request.get("params")
        operator = self.gateway.operator
        if method == "view.auth":
            token = params.get("token") if isinstance(params, dict) else None
            if not operator.may_watch(connection.peer, token):
                self.gateway.counters.add("view_forbidden")
                return _forbidden(rid, "watching from another host needs the operator's "
                                       "token: open the URL barnraise serve printed "
                                       "(#operator=...)")
            connection.watching = True
            return _encoder.encode({"jsonrpc": "2.0", "id": rid, "result": {"success": True}})
        if method != "view.control":
            return _encoder.encode({"jsonrpc": "2.0", "id": rid, "error": {
                "code": -32601, "message": f"unknown method {method!r}; "
                                           "the view answers view.control and view.auth"}})
        if not isinstance(params, dict) or not isinstance(params.get("action"), str):
            return _encoder.encode({"jsonrpc": "2.0", "id": rid, "error": {
                "code": -32602, "message": "params must be {\"action\": NAME, \"value\": V, "
                                           "\"token\": OPERATOR_TOKEN}"}})
        if not watching:
            self.gateway.counters.add("view_forbidden")
            return _forbidden(rid, "watching from another host needs the operator's token "
                                   "(view.auth)")
        if params["action"] == "frame":  # this page wants the whole picture again
            connection.resync()
            return _encoder.encode({"jsonrpc": "2.0", "id": rid,
                                    "result": {"success": True, "frame": True}})
        if not operator.may_control(connection.peer, params.get("token")):
            self.gateway.counters.add("view_forbidden")
            return _forbidden(rid, "view.control needs the operator's token in params.token "
                                   "(barnraise serve prints it as operator_token=...)")
        return rid, params["action"], params.get("value")


def _forbidden(rid: Any, message: str) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": rid, "result": {
        "success": False, "error": "forbidden", "message": message}})
