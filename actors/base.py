"""The actor base, by its parts (kept importable as one module).

The pieces live in their own modules: ``barnraise.actors.errors`` (the errors a wait
raises), ``barnraise.actors.effects`` (what behaviours await), ``barnraise.actors.actor``
(:class:`A2AActor`) and ``barnraise.actors.agent`` (:class:`Agent`).
"""

from barnraise.actors.actor import A2AActor
from barnraise.actors.agent import Agent
from barnraise.actors.effects import DEFAULT_TIMEOUT, Behaviour
from barnraise.actors.errors import DeliveryError, RequestError, WaitTimeout

__all__ = [
    "DEFAULT_TIMEOUT",
    "A2AActor",
    "Agent",
    "Behaviour",
    "DeliveryError",
    "RequestError",
    "WaitTimeout",
]
