"""``GET /metrics``: what ``/stats`` counts, and each tool's call latency, for Prometheus.

Nothing is counted twice and nothing is kept in a global registry: the gateway's
:class:`~barnraise.gateway.slots.Counters`, its agents and sessions are read when
Prometheus scrapes (a collector, :class:`GatewayCollector`, over a registry of the
gateway's own), and the one thing only this module keeps is :class:`ToolLatency`:
per tool of the table, a count per bucket and a sum.

Exposed in Prometheus's text format (``prometheus_client.exposition``):

=========================================== ===============================================
``barnraise_gateway_events_total{counter}`` every /stats counter, by its name
``barnraise_gateway_agents``                remote agents held by the hub
``barnraise_gateway_unacknowledged``        mail kept for agents, not yet acknowledged
``barnraise_gateway_sessions``              open sessions
``barnraise_world_time_seconds``            the world's simulated clock
``barnraise_tool_call_seconds{tool}``       wall seconds from a call's start to its answer
=========================================== ===============================================

The ``tool`` label is bounded: the names of the tool table, and ``other`` for any
name outside it, so no caller can grow the series. Only counts, as ``/stats``
shows everyone: no session id, agent or name.

Threading: :meth:`ToolLatency.observe` and the scrape both run on the hub's loop
(the hub records an answer where it resolves it), so no lock is taken per call.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["BUCKETS", "CONTENT_TYPE", "OTHER", "GatewayCollector", "ToolLatency", "exposition"]

#: Upper bounds of the latency buckets, in wall seconds: a call served from the
#: world's mailbox takes tens of microseconds, a barrier or a lock may wait a minute.
BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                  0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The label of a call whose tool is not in the table.
OTHER: Final = "other"
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


class ToolLatency:
    """Per tool of ``names`` (and :data:`OTHER`): calls per bucket, their count and sum."""

    def __init__(self, names: Iterable[str]) -> None:
        self._series: dict[str, list[float]] = {}
        for name in (*names, OTHER):
            # len(BUCKETS) + 1 counts (the last: past every bound), then the sum
            self._series[name] = [0.0] * (len(BUCKETS) + 2)

    def observe(self, tool: str, seconds: float) -> None:
        series = self._series.get(tool)
        if series is None:
            series = self._series[OTHER]
        series[bisect.bisect_left(BUCKETS, seconds)] += 1
        series[-1] += seconds

    def count(self, tool: str) -> int:
        """Calls of ``tool`` observed (of :data:`OTHER` for a name outside the table)."""
        series = self._series.get(tool, self._series[OTHER])
        return int(sum(series[:-1]))

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "barnraise_tool_call_seconds",
            "Wall seconds from a tool call's start to its answer, by tool "
            f"(names outside the tool table: {OTHER!r})", labels=["tool"])
        for name, series in self._series.items():
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, n in zip((*map(repr, BUCKETS), "+Inf"), series[:-1], strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            family.add_metric([name], buckets, sum_value=series[-1])
        return family


class GatewayCollector:
    """A prometheus_client collector that reads the gateway's counts when scraped.

    ``counts`` is the gateway's ``/stats`` view for everyone (:meth:`Gateway.counts`).
    """

    def __init__(self, counts: Callable[[], Mapping[str, Any]], latency: ToolLatency) -> None:
        self._counts = counts
        self._latency = latency

    def collect(self) -> Iterable[Metric]:
        counts = self._counts()
        events = CounterMetricFamily(
            "barnraise_gateway_events", "The gateway's counters (refusals by reason, "
            "traffic totals), as GET /stats shows them", labels=["counter"])
        for name, value in counts["counters"].items():
            events.add_metric([name], value)
        yield events
        for key, text in (("agents", "Remote agents the hub holds"),
                          ("unacknowledged", "Mail kept for agents, not yet acknowledged"),
                          ("sessions", "Open sessions")):
            yield GaugeMetricFamily(f"barnraise_gateway_{key}", text, value=counts[key])
        yield GaugeMetricFamily("barnraise_world_time_seconds",
                                "The world's simulated clock", value=counts["now"])
        yield self._latency.family()


def exposition(counts: Callable[[], Mapping[str, Any]], latency: ToolLatency) -> bytes:
    """The text a scrape answers with, read now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(counts, latency))
    return generate_latest(registry)
