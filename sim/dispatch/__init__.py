"""The two dispatchers: who runs actor handlers, when, and on which thread.

Both route A2A messages the same way (direct, broadcast, topic, type), keep
the same trace and dead-letter counts, and deliver through one step,
:meth:`Dispatcher.deliver`; they differ only in how a routed message reaches
it. As SimPy splits its core from its realtime loop, the modules split by
concern:

* ``sim.dispatch.values``: the value types and the :class:`Endpoint` contract;
* ``sim.dispatch.core``: :class:`Dispatcher`, routing, dead letters,
  subscriptions, timers and the delivery step, shared by both modes;
* ``sim.dispatch.deterministic``: :class:`DeterministicDispatcher`, one heap
  ordered by ``(time, -priority, seq)``, handlers called in turn on the
  thread that runs it, virtual time; same seed, same trace digest;
* ``sim.dispatch.faults``: :class:`Faults`, a seeded fault plan, and the
  injector that a dispatcher given one routes every agent's letters through;
* ``sim.dispatch.realtime``: :class:`RealtimeDispatcher`, every actor a pykka
  ``ThreadingActor``, one timer thread, wall time times ``time_scale``;
* ``sim.dispatch.gate``: :class:`Gate`, which a viewer puts in front of the
  deterministic loop to pause, step and pace it.

A run ends in one of the reasons of :class:`RunReport`. When nothing is left to
do but some behaviour still waits for something that no pending work can
produce, the reason is ``"deadlock"`` and the report names every waiter.
"""

from typing import Any

from sim.dispatch.core import Dispatcher
from sim.dispatch.deterministic import DeterministicDispatcher
from sim.dispatch.faults import FAULT_KINDS, Faults, FaultsError
from sim.dispatch.gate import Gate, GateAborted, GateClosed
from sim.dispatch.realtime import RealtimeDispatcher
from sim.dispatch.values import (
    DELIVERED,
    DROPPED,
    OFFLINE,
    Endpoint,
    RunReport,
    SendReport,
    Statistics,
    SubscriptionFilter,
    Timer,
    Waiter,
)
from sim.seeds import seed_for

__all__ = [
    "DELIVERED",
    "DROPPED",
    "FAULT_KINDS",
    "OFFLINE",
    "DeterministicDispatcher",
    "Dispatcher",
    "Endpoint",
    "Faults",
    "FaultsError",
    "Gate",
    "GateAborted",
    "GateClosed",
    "RealtimeDispatcher",
    "RunReport",
    "SendReport",
    "Statistics",
    "SubscriptionFilter",
    "Timer",
    "Waiter",
    "make_dispatcher",
    "seed_for",
]


def make_dispatcher(mode: str = "deterministic", seed: int = 0, **options: Any) -> Dispatcher:
    """``mode`` is ``"deterministic"`` or ``"realtime"``; options go to that class."""
    if mode == "deterministic":
        return DeterministicDispatcher(seed, **options)
    if mode == "realtime":
        return RealtimeDispatcher(seed, **options)
    raise ValueError(f"mode must be 'deterministic' or 'realtime', got {mode!r}")
