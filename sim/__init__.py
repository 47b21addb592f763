"""barnraise: an actor-model simulation of many agents building one thing together.

The public API of the engine. Everything not listed in ``__all__`` may change.
"""

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
    "DeterministicDispatcher",
    "Dispatcher",
    "Message",
    "MessageError",
    "Metadata",
    "Priority",
    "RealtimeDispatcher",
    "Region",
    "RunReport",
    "SendReport",
    "Statistics",
    "SubscriptionFilter",
    "Trace",
    "TraceRecord",
    "VirtualClock",
    "Waiter",
    "WallClock",
    "make_dispatcher",
]
