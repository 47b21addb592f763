"""Serving a run's live view: a Watcher, the gateway with the view's routes, on uvicorn.

:class:`LiveView` puts one Simulation on a gateway server with the page at ``/``
(the whole gateway comes along: outside agents may join the run's sessions).
``barnraise run NAME --view`` uses :meth:`LiveView.watch` as the runner's
``watch`` hook: the server starts before the scenario does, and the last read is
taken when the run ends; the page stays up until :meth:`close`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from barnraise.actors.world import Simulation
from barnraise.gateway.hosting import HostedWorld
from barnraise.gateway.operator import Operator
from barnraise.gateway.server import Gateway, GatewayServer, check_hosts
from barnraise.view.server import ViewSurface
from barnraise.view.watch import Watcher

__all__ = ["LiveView", "wait_for_signal"]


class LiveView:
    """A live view of a Simulation on ``host:port`` (port 0: a free one).

    ``paused``, ``speed`` and ``rate`` go to the :class:`Watcher`; ``announce``
    is called with the page's URL once the server accepts connections.
    ``allowed_hosts``: ``Host`` values served besides the bound address
    (``--allow-host``; :class:`ValueError` for a malformed one, at once).
    ``operator``: who may drive the run (default: a run-local view, whose loopback
    pages drive it; :func:`barnraise.show` gives one with a token).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 8765, paused: bool = False,
                 speed: float | None = None, rate: float = 10.0, scenario: str | None = None,
                 announce: Callable[[str], None] | None = None,
                 allowed_hosts: Sequence[str] = (),
                 operator: Operator | None = None) -> None:
        self.host = host
        self.operator = operator
        self.allowed_hosts = check_hosts(allowed_hosts)
        self.port = port
        self.paused = paused
        self.speed = speed
        self.rate = rate
        self.scenario = scenario
        self.announce = announce
        self.watcher: Watcher | None = None
        self.surface: ViewSurface | None = None
        self.server: GatewayServer | None = None
        self.url: str | None = None

    def start(self, simu: Simulation) -> str:
        """Watch ``simu`` and serve its page; the base URL (the page is at ``/``)."""
        if self.watcher is not None:
            raise RuntimeError("this LiveView already watches a run")
        self.watcher = Watcher(simu, rate=self.rate, paused=self.paused, speed=self.speed)
        try:
            # Agents join realtime worlds only: a deterministic run has one driving thread.
            gateway = Gateway(HostedWorld(simulation=simu, scenario=self.scenario),
                              agents=simu.mode == "realtime",
                              allowed_hosts=self.allowed_hosts)
            if self.operator is not None:
                gateway.operator = self.operator
            self.surface = ViewSurface(self.watcher, gateway)
            self.server = GatewayServer(gateway, self.host, self.port)
            self.url = self.server.start()
        except BaseException:
            self.close()
            raise
        if self.announce is not None:
            self.announce(f"{self.url}/")
        return self.url

    def watch(self, simu: Simulation) -> Callable[[], None]:
        """The runner's ``watch`` hook: start serving; the returned function ends the watch."""
        self.start(simu)
        watcher = self.watcher
        assert watcher is not None
        return watcher.ended

    def wait_for_viewer(self, timeout: float) -> bool:
        """Block until a page watches (True) or ``timeout`` wall seconds pass (False).

        ``barnraise run --view`` waits so before the scenario starts: a default
        kernel_build ends in a tenth of a second, before a browser opened on the
        printed URL has connected.
        """
        if self.surface is None:
            raise RuntimeError("this LiveView is not serving yet: start() it first")
        return self.surface.viewer_came.wait(timeout)

    def close(self) -> None:
        """Stop the server (pages disconnected) and the watcher."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.watcher is not None:
            self.watcher.close()

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for_signal(timeout: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
    """Block (main thread) until SIGINT or SIGTERM, or ``timeout`` wall seconds;
    ``ready`` is called once the signals are caught (say so then, not before)."""
    done = threading.Event()

    def stop(_sig: int, _frame: Any) -> None:
        done.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready is not None:
            ready()
        done.wait(timeout)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
