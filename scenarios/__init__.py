"""Scenario scripts: one module per scenario, and the helpers they share.

A scenario is a module with a docstring, ``PARAMS`` (defaults), ``run(simu, **params)``
and ``check(summary)``, and optionally ``BOUNDS`` (a :class:`Bound` per parameter);
``barnraise.loading`` finds and checks them, ``barnraise.runner`` runs them and
``barnraise.outputs`` holds what a run gives back. The two errors here are
how a scenario (or the runner, for it) refuses a request before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["ANY_NUMBER", "COUNT", "FRACTION", "GRID", "RATE", "WAIT", "Bound", "ParamError",
           "ScenarioError"]


class ScenarioError(ValueError):
    """The run request is wrong (which scenario, which parameters); nothing ran."""


class ParamError(ScenarioError):
    """A scenario's parameters do not fit together or name something missing.

    Scenarios raise it from ``run`` before they start anything, naming the
    parameter; the CLI prints it as one line and exits 2, like any bad request.
    """


@dataclass(frozen=True, slots=True)
class Bound:
    """What one scenario parameter may be, checked before the run starts.

    ``low`` and ``high`` are inclusive, ``above`` an exclusive lower bound (a
    rate must be more than 0); ``choices`` the values allowed (for a list
    parameter: of each item). Any number must also be finite.
    """

    low: float | None = None
    high: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None

    def check(self, name: str, value: Any) -> None:
        """ParamError naming ``name`` unless ``value`` is allowed."""
        items = value if isinstance(value, list) else [value]
        for item in items:
            if self.choices is not None and item not in self.choices:
                allowed = ", ".join(map(str, self.choices))
                raise ParamError(f"parameter {name}: {item!r} is not one of {allowed}")
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                self._number(name, item)

    def _number(self, name: str, value: float) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ParamError(f"parameter {name}: must be a finite number, got {value!r}")
        if self.low is not None and value < self.low:
            raise ParamError(f"parameter {name}: must be at least {self.low:g}, got {value!r}")
        if self.above is not None and value <= self.above:
            raise ParamError(f"parameter {name}: must be more than {self.above:g}, "
                             f"got {value!r}")
        if self.high is not None and value > self.high:
            raise ParamError(f"parameter {name}: must be at most {self.high:g}, got {value!r}")

    def describe(self) -> str:
        """The bound in words, for ``barnraise scenarios NAME``."""
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        low = (f"> {self.above:g}" if self.above is not None
               else f">= {self.low:g}" if self.low is not None else "")
        high = f"<= {self.high:g}" if self.high is not None else ""
        return " and ".join(part for part in (low, high) if part)


#: A crew size or a number of things (at least 1).
COUNT = Bound(low=1, high=100_000)
#: A canvas side (the default host allows 4,096).
GRID = Bound(low=1, high=4096)
#: A work rate (tiles per simulated second): more than a trickle, so a run ends.
RATE = Bound(low=0.01, high=1e7)
#: A duration an agent waits, holds or thinks (simulated seconds, at most a day).
WAIT = Bound(low=0, high=86_400)
#: A probability or a share.
FRACTION = Bound(low=0, high=1)
#: Any other number: finite, and not absurd.
ANY_NUMBER = Bound(low=-1e9, high=1e9)
