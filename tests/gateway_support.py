"""Shared pieces of the gateway tests: a served world on a free port, and a cuttable TCP proxy."""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.hub import AGENT_TTL, Limits
from barnraise.gateway.operator import Operator
from barnraise.gateway.server import Gateway, GatewayServer
from barnraise.view.server import ViewSurface
from barnraise.view.watch import Watcher


@contextlib.contextmanager
def served(*, time_scale: float = 20.0, limits: Limits | None = None,
           freeze_heap: bool = False, allowed_hosts: tuple[str, ...] = (),
           agent_ttl: float | None = AGENT_TTL, operator: str | Operator | None = None,
           view: bool = False, auth_timeout: float | None = None,
           server_options: dict[str, Any] | None = None,
           gateway_options: dict[str, Any] | None = None,
           **world: Any) -> Iterator[GatewayServer]:
    """A hosted world behind a gateway on 127.0.0.1 and a free port; all stopped after.

    ``agent_ttl``: wall seconds a remote agent may go unheard from (None: never
    expires); ``operator``: the operator's token, as ``barnraise serve`` sets it (or an
    Operator of the test's own); ``view``: serve the page and its socket ``/view/ws`` too
    (what ``serve`` does); ``auth_timeout`` and ``server_options`` (the server's
    timeouts and bounds) as the Gateway's and GatewayServer's defaults unless given;
    ``gateway_options``: more of the Gateway's (``disabled_skills``)."""
    hosted = HostedWorld(time_scale=time_scale, **world)
    watcher = Watcher(hosted.simulation, lazy=True) if view else None
    try:
        gateway = Gateway(hosted, limits=limits, allowed_hosts=allowed_hosts,
                          agent_ttl=agent_ttl, **(gateway_options or {}),
                          **({} if auth_timeout is None else {"auth_timeout": auth_timeout}))
        if operator is not None:
            gateway.operator = operator if isinstance(operator, Operator) else Operator(operator)
        if watcher is not None:
            ViewSurface(watcher, gateway)
        server = GatewayServer(gateway, "127.0.0.1", 0, freeze_heap=freeze_heap,
                               **(server_options or {}))
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        if watcher is not None:
            watcher.close()
        hosted.close()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def counters(server: GatewayServer) -> dict[str, int]:
    return dict(get_json(server.url + "/stats")["counters"])


class CuttableProxy:
    """A TCP relay to a server whose open connections a test can cut at any moment.

    Cutting closes both sockets of every open pair, as a network fault would;
    new connections are relayed as before.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._cut = False
        self._cut_done: list[threading.Event] = []
        self._one_cut = threading.Lock()
        self._stop = False
        self.cuts = 0
        self._thread = threading.Thread(target=self._loop, name="cuttable-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self, timeout: float = 5.0) -> bool:
        """Cut every open connection; True once the relay has done it."""
        with self._one_cut:  # two cuts asked at once are two cuts, one after the other
            done = threading.Event()
            with self._lock:
                self._cut = True
                self._cut_done.append(done)
            return done.wait(timeout)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        for sock in list(self._pairs):
            sock.close()
        self._listener.close()
        self._selector.close()

    def _drop_all(self) -> None:
        for sock in list(self._pairs):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
        self._pairs.clear()
        self.cuts += 1

    def _loop(self) -> None:
        while not self._stop:
            with self._lock:
                if self._cut:
                    self._cut = False
                    self._drop_all()
                    for done in self._cut_done:
                        done.set()
                    self._cut_done.clear()
            for key, _ in self._selector.select(timeout=0.02):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    client, _ = self._listener.accept()
                    try:
                        upstream = socket.create_connection(self.target, timeout=5)
                    except OSError:
                        client.close()
                        continue
                    for s in (client, upstream):
                        s.setblocking(False)
                    self._pairs[client], self._pairs[upstream] = upstream, client
                    self._selector.register(client, selectors.EVENT_READ, None)
                    self._selector.register(upstream, selectors.EVENT_READ, None)
                    continue
                peer = self._pairs.get(sock)
                if peer is None:
                    continue
                try:
                    data = sock.recv(65536)
                    if data:
                        peer.setblocking(True)
                        peer.sendall(data)
                        peer.setblocking(False)
                        continue
                except OSError:
                    pass
                for s in (sock, peer):
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(s)
                    s.close()
                    self._pairs.pop(s, None)
