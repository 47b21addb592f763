"""The engine: messages, clocks, the two dispatchers, the trace, and the world's pure parts.

Nothing here imports ``actors``, ``scenarios`` or ``barnraise``: the layers above
build on these names. Everything not listed in ``__all__`` may change.
"""

from barnraise.sim.clock import VirtualClock, WallClock
from barnraise.sim.dispatch import (
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
from barnraise.sim.messages import Message, MessageError, Metadata, Priority, Region
from barnraise.sim.trace import Trace, TraceRecord

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
