"""Simulation clocks: one interface, virtual or wall time.

Everything in barnraise reads time from a clock it was given; nothing calls
``time.time()``. Simulation time is measured in seconds from the start of a run.
"""

from __future__ import annotations

import math
import time
from typing import Final, Protocol

__all__ = ["MAX_TIME_SCALE", "MIN_TIME_SCALE", "Clock", "VirtualClock", "WallClock",
           "check_time_scale"]

#: The slowest and fastest a wall clock may run (simulated seconds per wall second), for
#: every way of setting it: ``run --time-scale``, ``serve``/``mcp --time-scale``, the live
#: view's speed control, a hosted world, :class:`WallClock` itself. Slower than a
#: thousandth of the wall clock, a run of a few simulated seconds takes hours (1e-9 never
#: ended); past a million, ``now`` loses its meaning (1e308 made it ``inf``).
MIN_TIME_SCALE: Final = 1e-3
MAX_TIME_SCALE: Final = 1e6


def check_time_scale(value: object, what: str = "time_scale") -> float:
    """``value`` as a float when it is a number from :data:`MIN_TIME_SCALE` to
    :data:`MAX_TIME_SCALE`; otherwise ValueError naming ``what`` and the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not MIN_TIME_SCALE <= value <= MAX_TIME_SCALE:
        raise ValueError(f"{what} must be a number from {MIN_TIME_SCALE:g} to "
                         f"{MAX_TIME_SCALE:g} (simulated seconds per wall second), "
                         f"got {value!r}")
    return float(value)


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

    def jump_to(self, at: float) -> None:
        """Go on from simulated time ``at``; never backwards."""
        if not at >= 0 or at == float("inf"):
            raise ValueError(f"at must be a finite time >= 0, got {at!r}")
        self.now = max(self.now, at)

    def to_wall(self, sim_seconds: float) -> float:
        return 0.0


class WallClock:
    """Wall time scaled by ``time_scale``: 10.0 runs simulated durations 10x faster.

    :meth:`freeze` stops it (``now`` stays where it was) and :meth:`thaw` lets it go
    on from there; :meth:`set_scale` changes the scale without a jump in ``now``.
    The scale is always within :data:`MIN_TIME_SCALE` .. :data:`MAX_TIME_SCALE`
    (ValueError otherwise), so ``now`` stays finite.
    """

    __slots__ = ("_frozen", "_origin", "time_scale")

    def __init__(self, time_scale: float = 1.0) -> None:
        self.time_scale = check_time_scale(time_scale)
        self._origin = time.monotonic()
        self._frozen: float | None = None

    @property
    def now(self) -> float:
        frozen = self._frozen
        if frozen is not None:
            return frozen
        return (time.monotonic() - self._origin) * self.time_scale

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    def freeze(self) -> None:
        """Stop the clock at the current time (again: nothing)."""
        if self._frozen is None:
            self._frozen = self.now

    def thaw(self) -> None:
        """Let a frozen clock go on from where it stopped (not frozen: nothing)."""
        frozen = self._frozen
        if frozen is not None:
            self._origin = time.monotonic() - frozen / self.time_scale
            self._frozen = None

    def set_scale(self, time_scale: float) -> None:
        """Run at ``time_scale`` from now on; ``now`` does not jump."""
        scale = check_time_scale(time_scale)
        at = self.now
        self.time_scale = scale
        if self._frozen is None:
            self._origin = time.monotonic() - at / self.time_scale

    def jump_to(self, at: float) -> None:
        """Go on from simulated time ``at`` (a resumed run continues the clock of the run
        it resumes); never backwards."""
        if not at >= 0 or at == float("inf"):
            raise ValueError(f"at must be a finite time >= 0, got {at!r}")
        if self._frozen is not None:
            self._frozen = max(self._frozen, at)
        elif at > self.now:
            self._origin = time.monotonic() - at / self.time_scale

    def to_wall(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds) / self.time_scale
