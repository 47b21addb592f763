"""barnraise actors: the pykka actor base, the registry, and (later) the agents."""

from barnraise.actors.base import (
    DEFAULT_TIMEOUT,
    A2AActor,
    Agent,
    Behaviour,
    DeliveryError,
    RequestError,
    WaitTimeout,
)
from barnraise.actors.registry import Registry

__all__ = [
    "DEFAULT_TIMEOUT",
    "A2AActor",
    "Agent",
    "Behaviour",
    "DeliveryError",
    "Registry",
    "RequestError",
    "WaitTimeout",
]
