"""Scrubbing a stored run: the live view's page over a durable store (``barnraise view PATH``).

:class:`StoredSource` answers the page as a :class:`~barnraise.view.watch.Watcher`
does (``frame``, ``subscribe``, ``control``), from a store opened read-only with
:func:`barnraise.open_run`: a frame shows the world of the store's last snapshot
taken at or before the chosen simulated time (canvas, claims, members, task
statuses) and the domain events logged up to that time. The page's time slider
sends ``{"action": "seek", "value": T}``; the answer makes the server send a fresh
frame. What it shows is as fine as the store's snapshots (every 10,000 records in
deterministic mode, and the end of a finished run): the frame says which snapshot
(``scrub.shown``) it is.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.plots import STATUS_COLOURS, TILE_COLOURS, TILE_NAMES
from sim.store import StoredRun

__all__ = ["StoredServer", "StoredSource", "serve_stored"]

#: Events sent with a frame (the last ones up to the chosen time).
LOG_SIZE = 2000
#: Outlines for claims: a stored snapshot keeps no member colours, so members are
#: coloured by their place in the snapshot (not the run's own colours).
_OUTLINES = ("#E53935", "#1E88E5", "#43A047", "#FB8C00", "#8E24AA", "#00ACC1", "#6D4C41",
             "#FDD835")


class StoredSource:
    """What the view's page shows of a stored run at a chosen simulated time."""

    mode = "stored"

    def __init__(self, run: StoredRun) -> None:
        self.run = run
        self.snapshots = run.snapshots()
        if not self.snapshots:
            raise ValueError("the store holds no snapshot of the world: nothing to show")
        self.events = run.events()
        self.end = max([t for _, t in self.snapshots]
                       + [float(e["time"]) for e in self.events] + [0.0])
        self.at = self.end
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """A stored run sends no deltas: a page gets frames only."""
        return lambda: None

    def control(self, action: str, value: Any = None) -> dict[str, Any]:
        """``seek`` to simulated time ``value`` (the page then gets a fresh frame)."""
        if action != "seek":
            return {"success": False, "error": "unknown_action",
                    "message": f"a stored run answers seek only, not {action!r}"}
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            return {"success": False, "error": "invalid_value",
                    "message": f"seek needs a simulated time, got {value!r}"}
        with self._lock:
            self.at = min(max(0.0, float(value)), self.end)
        return {"success": True, "frame": True, "resync": True, "at": self.at}

    def frame(self) -> dict[str, Any]:
        """The whole picture at the chosen time."""
        with self._lock:
            at = self.at
        world = self.run.snapshot(at=at) or {}
        shown = max([t for _, t in self.snapshots if t <= at], default=None)
        summary = self.run.summary or {}
        sid = summary.get("session_id")
        if sid not in world:
            sid = next(iter(world), None)
        part = world.get(sid) if sid is not None else None
        canvas_parts: list[dict[str, Any]] = []
        grid = None
        claims: list[dict[str, Any]] = []
        agents: list[dict[str, Any]] = []
        board = None
        if part is not None:
            colour = {m[0]: _OUTLINES[i % len(_OUTLINES)]
                      for i, m in enumerate(part.get("members", []))}
            agents = [{"id": m[0], "name": m[1], "role": m[2], "color": colour[m[0]],
                       "status": "stored", "task": None, "mailbox": None}
                      for m in part.get("members", [])]
            tasks = part.get("tasks", {})
            working = {v[1]: k for k, v in tasks.items() if v[0] == "in_progress"}
            for agent in agents:
                agent["task"] = working.get(agent["id"])
            claims = [{"id": c[0], "agent": c[1], "color": colour.get(c[1], "#FF0000"),
                       "x": c[2]["x"], "y": c[2]["y"], "w": c[2]["width"],
                       "h": c[2]["height"], "exclusive": True} for c in part.get("claims", [])]
            counts: dict[str, int] = {}
            for status, _ in tasks.values():
                counts[status] = counts.get(status, 0) + 1
            board = {"counts": counts, "total": len(tasks), "frontier": [],
                     "frontier_size": 0}
            if part.get("canvas") is not None:
                tiles = np.frombuffer(part["canvas"], dtype=np.uint8).reshape(part["shape"])
                grid = [int(tiles.shape[0]), int(tiles.shape[1])]
                from barnraise.view.watch import _rect_payload

                canvas_parts = [_rect_payload(tiles, (0, 0, grid[1], grid[0]))]
        events = [{"n": i + 1, "t": float(e["time"]), "type": e["type"], "from": e["sender"],
                   "body": e["content"]} for i, e in enumerate(self.events)
                  if float(e["time"]) <= at][-LOG_SIZE:]
        return {
            "seq": next(self._seq), "t": at, "session_id": sid, "grid": grid,
            "canvas": canvas_parts, "claims": claims, "agents": agents, "board": board,
            "progress": None, "events": events, "series": [],
            "palette": list(TILE_COLOURS), "tile_names": list(TILE_NAMES),
            "status_colours": STATUS_COLOURS, "rate": 0, "state": "stored",
            "mode": "stored", "speed": None, "controls": False, "steps": False,
            "events_seen": len(self.events),
            "scrub": {"start": 0.0, "end": self.end, "at": at, "shown": shown,
                      "snapshots": [t for _, t in self.snapshots]},
        }


class StoredServer:
    """A stored run's page on a gateway server (an empty world: it takes no agents)."""

    def __init__(self, run: StoredRun, *, host: str = "127.0.0.1", port: int = 8765) -> None:
        from actors.world import Simulation
        from barnraise.gateway.hosting import HostedWorld
        from barnraise.gateway.server import Gateway, GatewayServer
        from barnraise.view.server import ViewSurface

        self.source = StoredSource(run)
        self._simulation = Simulation(seed=0)
        try:
            gateway = Gateway(HostedWorld(simulation=self._simulation), agents=False)
            ViewSurface(self.source, gateway)
            self.server = GatewayServer(gateway, host, port)
        except BaseException:
            self._simulation.close()
            raise

    def close(self) -> None:
        self.server.stop()
        self._simulation.close()


def serve_stored(run: StoredRun, *, host: str = "127.0.0.1", port: int = 8765) -> int:
    """Serve the page of a stored run until SIGINT/SIGTERM; print its URL once; exit 0."""
    served = StoredServer(run, host=host, port=port)
    try:
        served.server.run(on_ready=lambda url: print(f"{url}/", flush=True))
    finally:
        served._simulation.close()
    return 0
