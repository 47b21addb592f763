"""Simulation clocks: one interface, virtual or wall time.

Everything in barnraise reads time from a clock it was given; nothing calls
``time.time()``. Simulation time is measured in seconds from the start of a run.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "VirtualClock", "WallClock"]


class Clock(Protocol):
    """What actors and services may ask of time."""

    @property
    def now(self) -> float: ...

    def to_wall(self, sim_seconds: float) -> float:
        """How many wall seconds ``sim_seconds`` of simulation time take."""
        ...


class VirtualClock:
    """Time that moves only when the deterministic dispatcher moves it."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def to_wall(self, sim_seconds: float) -> float:
        return 0.0


class WallClock:
    """Wall time scaled by ``time_scale``: 10.0 runs simulated durations 10x faster."""

    __slots__ = ("_origin", "time_scale")

    def __init__(self, time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be positive, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self._origin = time.monotonic()

    @property
    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.time_scale

    def to_wall(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds) / self.time_scale
