"""The two dispatchers: who runs actor handlers, when, and on which thread.

Both route A2A messages the same way (direct, broadcast, topic, type), keep
the same trace and dead-letter counts, and deliver through one step,
:meth:`Dispatcher.deliver`; they differ only in how a routed message reaches
it. As SimPy splits its core from its realtime loop, the modules split by
concern:

* ``barnraise.sim.dispatch.values``: the value types and the :class:`Endpoint` contract;
* ``barnraise.sim.dispatch.core``: :class:`Dispatcher`, routing, dead letters,
  subscriptions, timers and the delivery step, shared by both modes;
* ``barnraise.sim.dispatch.deterministic``: :class:`DeterministicDispatcher`, one heap
  ordered by ``(time, -priority, seq)``, handlers called in turn on the
  thread that runs it, virtual time; same seed, same trace digest;
* ``barnraise.sim.dispatch.faults``: :class:`Faults`, a seeded fault plan, and the
  injector that a dispatcher given one routes every agent's letters through;
* ``barnraise.sim.dispatch.realtime``: :class:`RealtimeDispatcher`, every actor a pykka
  ``ThreadingActor``, one timer thread, wall time times ``time_scale``;
* ``barnraise.sim.dispatch.gate``: :class:`Gate`, which a viewer puts in front of the
  deterministic loop to pause, step and pace it.

A run ends in one of the reasons of :class:`RunReport`. When nothing is left to
do but some behaviour still waits for something that no pending work can
produce, the reason is ``"deadlock"`` and the report names every waiter.
"""

from typing import Any, Final, Literal, Unpack, overload

from barnraise.sim.dispatch.core import Dispatcher, DispatcherOptions
from barnraise.sim.dispatch.deterministic import DeterministicDispatcher, DeterministicOptions
from barnraise.sim.dispatch.faults import FAULT_KINDS, Faults, FaultsError
from barnraise.sim.dispatch.gate import Gate, GateAborted, GateClosed
from barnraise.sim.dispatch.realtime import RealtimeDispatcher, RealtimeOptions
from barnraise.sim.dispatch.values import (
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
from barnraise.sim.seeds import seed_for

__all__ = [
    "DELIVERED",
    "DROPPED",
    "FAULT_KINDS",
    "OFFLINE",
    "AnyDispatcherOptions",
    "DeterministicDispatcher",
    "DeterministicOptions",
    "Dispatcher",
    "DispatcherOptions",
    "Endpoint",
    "Faults",
    "FaultsError",
    "Gate",
    "GateAborted",
    "GateClosed",
    "RealtimeDispatcher",
    "RealtimeOptions",
    "RunReport",
    "SendReport",
    "Statistics",
    "SubscriptionFilter",
    "Timer",
    "Waiter",
    "make_dispatcher",
    "seed_for",
]


class AnyDispatcherOptions(DeterministicOptions, RealtimeOptions, total=False):
    """Every option of either mode, for a ``mode`` known only at run time."""


#: The options each mode takes (make_dispatcher refuses the others by name).
_OPTIONS: Final = {
    "deterministic": frozenset(DeterministicOptions.__annotations__),
    "realtime": frozenset(RealtimeOptions.__annotations__),
}


@overload
def make_dispatcher(mode: Literal["deterministic"] = ..., seed: int = ...,
                    **options: Unpack[DeterministicOptions]) -> DeterministicDispatcher: ...
@overload
def make_dispatcher(mode: Literal["realtime"], seed: int = ...,
                    **options: Unpack[RealtimeOptions]) -> RealtimeDispatcher: ...
@overload
def make_dispatcher(mode: str, seed: int = ...,
                    **options: Unpack[AnyDispatcherOptions]) -> Dispatcher: ...
def make_dispatcher(mode: str = "deterministic", seed: int = 0, **options: Any) -> Dispatcher:
    """``mode`` is ``"deterministic"`` or ``"realtime"``; options go to that class.

    The options are typed per mode (:class:`DeterministicOptions`,
    :class:`RealtimeOptions`); one the mode does not take is a TypeError naming it.
    """
    known = _OPTIONS.get(mode)
    if known is None:
        raise ValueError(f"mode must be 'deterministic' or 'realtime', got {mode!r}")
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"make_dispatcher: {mode} mode takes no option "
                        f"{', '.join(map(repr, unknown))} (it takes {', '.join(sorted(known))})")
    if mode == "deterministic":
        return DeterministicDispatcher(seed, **options)
    return RealtimeDispatcher(seed, **options)
