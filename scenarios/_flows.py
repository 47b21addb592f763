"""Helpers the coordination-flow scenarios share: timelines, trace queries, rectangles.

Everything here reads what a run recorded (agents' outcomes, the trace) or does
small arithmetic on rectangles and intervals; none of it changes the simulation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from actors.agents.participant import Participant
from actors.world import Simulation

#: Seconds a barrier or a lock wait is allowed in the flow scenarios: far longer
#: than any of them needs, so a timeout means something is wrong.
PATIENCE = 600.0


def box(x: int, y: int, width: int, height: int) -> dict[str, int]:
    """A region dict as the tools take it."""
    return {"x": int(x), "y": int(y), "width": int(width), "height": int(height)}


def overlaps(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """True if the rectangles ``a`` and ``b`` share at least one cell."""
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def mark(agent: Participant, what: str, **details: Any) -> None:
    """Append ``{"t", "what", ...}`` to the agent's ``outcome["timeline"]``."""
    agent.outcome.setdefault("timeline", []).append(
        {"t": round(agent.now, 6), "what": what, **details})


def seeded_tiles(rng: np.random.Generator, height: int, width: int,
                 empty: float = 0.0) -> np.ndarray[Any, Any]:
    """A ``height`` x ``width`` block of tile codes 1..7, a share ``empty`` of them 0."""
    tiles = rng.integers(1, 8, size=(height, width)).astype(np.uint8)
    if empty > 0:
        tiles[rng.random((height, width)) < empty] = 0
    return tiles


def max_concurrent(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals ``[start, end]`` open at one instant.

    An interval ending at the instant another starts does not overlap it (the
    lock passed from one holder to the next at that instant).
    """
    points: list[tuple[float, int]] = []
    for start, end in intervals:
        points += [(start, 1), (end, -1)]
    points.sort()  # at equal times -1 (an end) sorts before +1 (a start)
    best = current = 0
    for _, step in points:
        current += step
        best = max(best, current)
    return best


def session_events(simu: Simulation, session_id: str, *types: str) -> list[dict[str, Any]]:
    """The session's domain events from the trace, in order.

    Each is the event's payload (``event`` names its type) plus ``seq`` and ``t``.
    """
    topic = f"session:{session_id}:events"
    out = []
    for record in simu.dispatcher.trace.records("event"):
        if record.recipient == topic and (not types or record.type in types):
            out.append({**record.content_obj(), "seq": record.seq, "t": record.t})
    return out


def deliveries(simu: Simulation, recipient: str, message_type: str) -> list[dict[str, Any]]:
    """Messages of ``message_type`` delivered to ``recipient``: seq, t, from and content."""
    out = []
    for record in simu.dispatcher.trace.records("deliver"):
        if record.recipient == recipient and record.type == message_type:
            out.append({"seq": record.seq, "t": record.t, "from": record.sender,
                        "content": record.content_obj()})
    return out


def canvas_of(simu: Simulation, session_id: str) -> np.ndarray[Any, Any]:
    """A copy of the session's tile layer (read once the run is idle)."""
    regions = simu.dispatcher.actor("regions")
    world = regions.worlds[session_id]  # type: ignore[attr-defined]
    tiles: np.ndarray[Any, Any] = world.canvas.tiles.copy()
    return tiles


def settle(simu: Simulation) -> None:
    """Run until nothing more happens (both modes): joins done, waits standing."""
    simu.run()
