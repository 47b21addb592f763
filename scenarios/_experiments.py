"""Helpers the experiment scenarios share: seeded plans, figures and reading the world."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from actors.world import Client, Simulation
from sim.geometry import Rect

__all__ = ["create_session", "full_plan", "mean", "overlapping_pairs", "percentile",
           "regions_state"]


def create_session(host: Client, **create: Any) -> str:
    """Create a session from ``host`` (which does not join it); its id.

    ``scenarios._common.host_session`` makes a client called "host" each time, so
    it serves one session per simulation; these scenarios make several.
    """
    created = host.call("session_create", **create)
    if not created.get("success"):
        raise RuntimeError(f"session_create failed: {created}")
    return str(created["session_id"])


def full_plan(height: int, width: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """A seeded plan with no empty cell (tile codes 1..7): completion 100% means equal."""
    plan: np.ndarray[Any, Any] = rng.integers(1, 8, size=(height, width), dtype=np.uint8)
    return plan


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile by the nearest-rank method (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def regions_state(simu: Simulation, session_id: str) -> dict[str, Any]:
    """The regions actor's view of a session: claims, progress, conflicts, lost_work.

    Read directly from the actor once the run is idle, as ``barnraise.runner`` does.
    """
    regions = simu.dispatcher.actor("regions")
    state: dict[str, Any] = regions.op_state({"session_id": session_id})  # type: ignore[attr-defined]
    return state


def overlapping_pairs(bounds: Sequence[dict[str, int]]) -> list[tuple[int, int]]:
    """Index pairs of rectangles (region dicts) that share at least one cell."""
    rects = [Rect.parse(b, "bounds") for b in bounds]
    return [(i, j) for i in range(len(rects)) for j in range(i + 1, len(rects))
            if rects[i].intersection(rects[j]) is not None]
