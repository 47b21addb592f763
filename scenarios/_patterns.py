"""Helpers the orchestration-pattern scenarios share: reading session events back."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from actors.world import Simulation


def session_events(simu: Simulation, session_id: str, prefix: str = "") -> list[dict[str, Any]]:
    """Every event published on the session's event topic, in order: ``{"t", "event", ...}``.

    Read from the run's trace (each published event is a trace record of kind
    ``event``), so it sees everything, whoever subscribed.
    """
    topic = f"session:{session_id}:events"
    out = []
    for record in simu.dispatcher.trace.records("event"):
        if record.recipient != topic or not record.type.startswith(prefix):
            continue
        content = record.content_obj()
        out.append({"t": record.t, **content})
    return out


def count(events: Iterable[Mapping[str, Any]], event: str) -> int:
    return sum(1 for e in events if e.get("event") == event)


def min_gap(times: list[float]) -> float | None:
    """The smallest gap between consecutive times (None for fewer than two)."""
    if len(times) < 2:
        return None
    return round(min(b - a for a, b in itertools.pairwise(times)), 6)
