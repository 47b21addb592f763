"""barnraise: an actor-model simulation of many agents building one thing together.

The public API of the engine. Everything not listed in ``__all__`` may change.
"""

from typing import Any

from sim.clock import VirtualClock, WallClock
from sim.dispatch import (
    DeterministicDispatcher,
    Dispatcher,
    RealtimeDispatcher,
    RunReport,
    SendReport,
    Statistics,
    SubscriptionFilter,
    Waiter,
    make_dispatcher,
)
from sim.messages import Message, MessageError, Metadata, Priority, Region
from sim.trace import Trace, TraceRecord

__all__ = [
    "Client",
    "DeterministicDispatcher",
    "Dispatcher",
    "Message",
    "MessageError",
    "Metadata",
    "Priority",
    "RealtimeDispatcher",
    "Region",
    "RunReport",
    "RunResult",
    "SendReport",
    "Simulation",
    "Statistics",
    "SubscriptionFilter",
    "Trace",
    "TraceRecord",
    "VirtualClock",
    "Waiter",
    "WallClock",
    "make_dispatcher",
    "run",
]

# The application layer (sim.simulation) builds actors, and actors import the
# engine: importing it lazily keeps `import actors` from re-entering itself.
_LAZY = {"Simulation": "sim.simulation", "Client": "sim.simulation", "run": "sim.runner",
         "RunResult": "sim.runner"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
